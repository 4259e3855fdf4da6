"""The seam between consensus and the network: how a member reaches its peers.

`api/` implements it over HTTP/2; `InMemoryTransport` implements it for tests
and the simulation. A call that gets no answer raises PeerUnavailable; it is
never a crash, only a failed RPC to retry.
"""

from __future__ import annotations

from typing import Protocol

from raft.messages import (
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


class Transport(Protocol):
    async def vote(self, peer_id: str, request: VoteRequest) -> VoteResponse: ...
    async def heartbeat(self, peer_id: str, request: HeartbeatRequest) -> HeartbeatResponse: ...
    async def push(self, peer_id: str, request: PushRequest) -> PushResponse: ...
    async def transfer(self, peer_id: str, request: TransferRequest) -> TransferResponse: ...
    async def fetch(self, peer_id: str, request: FetchRequest) -> bytes: ...


class PeerHandler(Protocol):
    """What a transport delivers incoming calls to: the member's node."""

    async def handle_vote(self, request: VoteRequest) -> VoteResponse: ...
    async def handle_heartbeat(self, request: HeartbeatRequest) -> HeartbeatResponse: ...
    async def handle_push(self, request: PushRequest) -> PushResponse: ...
    async def handle_transfer(self, request: TransferRequest) -> TransferResponse: ...
    async def handle_fetch(self, request: FetchRequest) -> bytes: ...
