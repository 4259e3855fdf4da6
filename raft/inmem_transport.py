"""An in-memory network of members, with the faults a simulation needs.

Every call goes through `Network.deliver`, which asks the network's `faults`
(a callable the test supplies, usually driven by a seeded random) what happens
to it: delivered after a delay, lost on the way there, lost on the way back,
or delivered twice. Partitions cut links in both directions until healed.
Lost calls cost the caller its `rpc_timeout_s`, as on a real network.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

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
from raft.transport import PeerHandler, PeerUnavailable


@dataclass(frozen=True, slots=True)
class Fate:
    delay_s: float = 0.0
    lose_request: bool = False
    lose_response: bool = False
    duplicate: bool = False


DELIVER = Fate()

FaultPlan = Callable[[str, str, str], Fate]  # (source, target, kind) -> fate


class Network:
    def __init__(self, rpc_timeout_s: float = 1.0, faults: FaultPlan | None = None) -> None:
        self.rpc_timeout_s = rpc_timeout_s
        self.faults = faults or (lambda source, target, kind: DELIVER)
        self._handlers: dict[str, PeerHandler] = {}
        self._cut: set[tuple[str, str]] = set()
        self._background: set[asyncio.Task[Any]] = set()

    def register(self, node_id: str, handler: PeerHandler) -> None:
        self._handlers[node_id] = handler

    def unregister(self, node_id: str) -> None:
        self._handlers.pop(node_id, None)

    def transport(self, node_id: str) -> InMemoryTransport:
        return InMemoryTransport(self, node_id)

    def partition(self, *groups: set[str]) -> None:
        """Cut every link between members of different groups."""
        for a in groups:
            for b in groups:
                if a is not b:
                    self._cut.update((x, y) for x in a for y in b)

    def cut(self, source: str, target: str) -> None:
        self._cut.add((source, target))

    def heal(self) -> None:
        self._cut.clear()

    def linked(self, source: str, target: str) -> bool:
        return (source, target) not in self._cut

    async def deliver(self, source: str, target: str, kind: str, request: Any) -> Any:
        fate = self.faults(source, target, kind)
        handler = self._handlers.get(target)
        if handler is None:
            raise PeerUnavailable(f"{target} is down")
        if fate.delay_s:
            await asyncio.sleep(fate.delay_s)
        if fate.lose_request or not self.linked(source, target):
            await asyncio.sleep(self.rpc_timeout_s)
            raise PeerUnavailable(f"{kind} {source}->{target} timed out")
        handle: Callable[[Any], Awaitable[Any]] = getattr(handler, f"handle_{kind}")
        if fate.duplicate:  # the copy's answer goes nowhere
            copy = asyncio.create_task(handle(request))
            self._background.add(copy)
            copy.add_done_callback(self._background.discard)
        try:
            async with asyncio.timeout(self.rpc_timeout_s):
                response = await handle(request)
        except TimeoutError:
            raise PeerUnavailable(f"{kind} {source}->{target} timed out") from None
        if fate.lose_response or not self.linked(target, source) or target not in self._handlers:
            raise PeerUnavailable(f"{kind} {source}->{target}: the answer was lost")
        return response


class InMemoryTransport:
    def __init__(self, network: Network, node_id: str) -> None:
        self.network = network
        self.node_id = node_id

    async def vote(self, peer_id: str, request: VoteRequest) -> VoteResponse:
        return await self.network.deliver(self.node_id, peer_id, "vote", request)

    async def heartbeat(self, peer_id: str, request: HeartbeatRequest) -> HeartbeatResponse:
        return await self.network.deliver(self.node_id, peer_id, "heartbeat", request)

    async def push(self, peer_id: str, request: PushRequest) -> PushResponse:
        return await self.network.deliver(self.node_id, peer_id, "push", request)

    async def transfer(self, peer_id: str, request: TransferRequest) -> TransferResponse:
        return await self.network.deliver(self.node_id, peer_id, "transfer", request)

    async def fetch(self, peer_id: str, request: FetchRequest) -> bytes:
        return await self.network.deliver(self.node_id, peer_id, "fetch", request)
