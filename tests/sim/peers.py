"""The public API between simulated members: what `api.peer_server` serves and
`api.peer_client.PeerClient` calls, over the simulated network.

With these, each member runs the real `api.service.LogService`: a client's
append to a follower is forwarded to the leader (and followed once more when
that member names another leader), and a linearizable read on a follower asks
the leader for its read index, with the network's faults on the way.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from raftlog.api.answers import AppendAnswer, ConsumerAnswer, ProducerAnswer
from raftlog.api.consumers import ConsumerCommits
from raftlog.api.errors import ApiError
from raftlog.api.service import LogService
from raftlog.raft.consumers import ConsumerAsk
from raftlog.raft.inmem_transport import Network
from raftlog.raft.messages import (
    Code,
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
from raftlog.raft.node import RaftNode
from raftlog.raft.producers import Sequenced
from raftlog.raft.transport import PeerUnavailable


class Endpoint:
    """A member's peer port: raft's calls, and the public API's calls from other members.
    An ApiError is an answer (the route's 409 body), returned rather than raised."""

    def __init__(self, node: RaftNode, service: LogService, consumers: ConsumerCommits) -> None:
        self.node = node
        self.service = service
        self.consumers = consumers

    async def handle_vote(self, request: VoteRequest) -> VoteResponse:
        return await self.node.handle_vote(request)

    async def handle_heartbeat(self, request: HeartbeatRequest) -> HeartbeatResponse:
        return await self.node.handle_heartbeat(request)

    def take_push(self, request: PushRequest) -> asyncio.Future[PushResponse]:
        return self.node.take_push(request)

    async def handle_transfer(self, request: TransferRequest) -> TransferResponse:
        return await self.node.handle_transfer(request)

    async def handle_fetch(self, request: FetchRequest) -> bytes:
        return await self.node.handle_fetch(request)

    async def handle_append(self, request: tuple[list[bytes], Sequenced | None, str]) -> AppendAnswer | ApiError:
        try:
            return await self.service.append_forwarded(*request)
        except ApiError as exc:
            return exc

    async def handle_change_session(self, request: tuple[int, str, bool]) -> ProducerAnswer | ApiError:
        if not self.node.state.is_leader:  # never forwarded twice
            return ApiError(Code.NOT_LEADER, "this member is not the leader", self.node.leader_id)
        try:
            return await self.service.change_session(*request)
        except ApiError as exc:
            return exc

    async def handle_commit_consumer(self, request: ConsumerAsk) -> ConsumerAnswer | ApiError:
        if not self.node.state.is_leader:  # never forwarded twice
            return ApiError(Code.NOT_LEADER, "this member is not the leader", self.node.leader_id)
        try:
            return await self.consumers.write(request)
        except ApiError as exc:
            return exc

    async def handle_read_index(self, _: None) -> int | ApiError:
        if not self.node.state.is_leader:  # never forwarded twice
            return ApiError(Code.NOT_LEADER, "this member is not the leader", self.node.leader_id)
        try:
            return await self.service.read_index()
        except ApiError as exc:
            return exc


class SimPeers:
    """PeerClient's calls for the public API, over the network: no answer is NETWORK_ERROR."""

    def __init__(self, network: Network, self_id: str, wait_timeout_s: float) -> None:
        self.network = network
        self.self_id = self_id
        self.wait_timeout_s = wait_timeout_s  # as PeerClient: the leader may wait for a quorum

    async def forward_append(self, leader_id: str, bodies: Sequence[bytes],
                             producer: Sequenced | None = None, caller: str = "") -> AppendAnswer:
        return await self._call(leader_id, "append", (list(bodies), producer, caller))

    async def change_session(self, leader_id: str, producer_id: int, caller: str, close: bool) -> ProducerAnswer:
        return await self._call(leader_id, "change_session", (producer_id, caller, close))

    async def read_index(self, leader_id: str) -> int:
        return await self._call(leader_id, "read_index", None)

    async def commit_consumer(self, leader_id: str, ask: ConsumerAsk) -> ConsumerAnswer:
        return await self._call(leader_id, "commit_consumer", ask)

    async def _call(self, peer_id: str, kind: str, request: Any) -> Any:
        try:
            answer = await self.network.deliver(self.self_id, peer_id, kind, request, self.wait_timeout_s)
        except PeerUnavailable as exc:
            raise ApiError(Code.NETWORK_ERROR, f"no answer from {peer_id}: {exc}") from None
        if isinstance(answer, ApiError):
            raise answer
        return answer
