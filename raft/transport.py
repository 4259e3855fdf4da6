"""The seam between consensus and the network: how a member reaches its peers.

Replication has the shape of one long-lived stream per follower, as on the
wire (DESIGN.md, Network): the leader sends pushes in order without waiting,
and the follower answers each, in the same order. A stream that breaks (a
lost connection, an answer overdue) fails every push still on it at once; the
dispatcher opens a new one and finds where the follower ends. Everything else
is a call. `api/` implements this over gRPC; `InMemoryTransport` for tests and
the simulation. No answer raises PeerUnavailable: never a crash, only a
failed call to retry.
"""

from __future__ import annotations

import asyncio
from typing import Any, Protocol

from raftlog.raft.messages import (
    FetchRequest,
    HeartbeatRequest,
    HeartbeatResponse,
    PushRequest,
    PushResponse,
    TransferRequest,
    TransferResponse,
    VoteRequest,
    VoteResponse,
)


class PeerUnavailable(Exception):
    """No answer from a peer: refused, lost, timed out, or a protocol error."""


def fail_push(answer: asyncio.Future[Any], message: str) -> None:
    """Settle a push's answer as failed (PeerUnavailable), unless it is settled already; the
    failure counts as seen, so a push whose waiter has gone does not log it."""
    if not answer.done():
        answer.set_exception(PeerUnavailable(message))
        answer.exception()


class PushStream(Protocol):
    """One replication stream to a follower."""

    def send(self, request: PushRequest) -> asyncio.Future[PushResponse]:
        """Put `request` on the stream now, behind every push sent before it; await its answer.

        The request's data is copied before this returns (it may be a view into a mapped file).
        A broken stream answers PeerUnavailable, at once or when it breaks.
        """
        ...

    @property
    def broken(self) -> bool: ...

    def close(self) -> None:
        """Stop the stream: pushes still on it fail with PeerUnavailable."""
        ...


class Transport(Protocol):
    def open_stream(self, peer_id: str) -> PushStream: ...
    async def vote(self, peer_id: str, request: VoteRequest) -> VoteResponse: ...
    async def heartbeat(self, peer_id: str, request: HeartbeatRequest) -> HeartbeatResponse: ...
    async def transfer(self, peer_id: str, request: TransferRequest) -> TransferResponse: ...
    async def fetch(self, peer_id: str, request: FetchRequest) -> bytes: ...


class PeerHandler(Protocol):
    """What a transport delivers incoming calls to: the member's node. Pushes of one stream
    are handed over in the order they came, each as soon as it arrives."""

    async def handle_vote(self, request: VoteRequest) -> VoteResponse: ...
    async def handle_heartbeat(self, request: HeartbeatRequest) -> HeartbeatResponse: ...
    def take_push(self, request: PushRequest) -> asyncio.Future[PushResponse]: ...
    async def handle_transfer(self, request: TransferRequest) -> TransferResponse: ...
    async def handle_fetch(self, request: FetchRequest) -> bytes: ...
