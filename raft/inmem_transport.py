"""An in-memory network of members, with the faults a simulation needs.

Every call goes through `Network.deliver`, which asks the network's `faults`
(a callable the test supplies, usually driven by a seeded random) what happens
to it: delivered after a delay, lost on the way there, lost on the way back,
or delivered twice. Partitions cut links in both directions until healed.
Lost calls cost the caller its `rpc_timeout_s`, as on a real network.

Pushes go on streams (`InMemoryStream`), as on the real peer port: in order,
each delayed message holding up the ones behind it, answers in the same order.
A lost message or answer, or a member gone, resets the stream; a cut link
stalls it until the oldest answer is overdue. Either way every push on it
fails at once, as when a real connection dies.

As on a real network, a message crosses the wire as bytes: the `wire` hook
(kind, message) -> message is where a test encodes and decodes it (`raft`
cannot import the codec, which lives in `api`). A receiver's handler runs as
a server's would: a caller that times out or goes away does not stop it, only
the receiver's own crash (`unregister`) does.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

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
from raftlog.raft.transport import PeerHandler, PeerUnavailable, fail_push

log = logging.getLogger("raftlog.raft.inmem_transport")


@dataclass(frozen=True, slots=True)
class Fate:
    delay_s: float = 0.0
    lose_request: bool = False
    lose_response: bool = False
    duplicate: bool = False


DELIVER = Fate()

FaultPlan = Callable[[str, str, str], Fate]  # (source, target, kind) -> fate
Wire = Callable[[str, Any], Any]  # (kind, message) -> the message as the other side decodes it


def _as_sent(kind: str, message: Any) -> Any:
    return message


class Network:
    def __init__(self, rpc_timeout_s: float = 1.0, faults: FaultPlan | None = None,
                 wire: Wire | None = None) -> None:
        self.rpc_timeout_s = rpc_timeout_s
        self.faults = faults or (lambda source, target, kind: DELIVER)
        self.wire = wire or _as_sent
        self._handlers: dict[str, PeerHandler] = {}
        self._cut: set[tuple[str, str]] = set()
        self._serving: dict[str, set[asyncio.Future[Any]]] = {}  # handlers running on each member

    def register(self, node_id: str, handler: PeerHandler) -> None:
        self._handlers[node_id] = handler

    def unregister(self, node_id: str) -> None:
        """The member is gone: so are the handlers it was running."""
        self._handlers.pop(node_id, None)
        for task in self._serving.pop(node_id, set()):
            task.cancel()

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

    async def deliver(self, source: str, target: str, kind: str, request: Any,
                      timeout_s: float | None = None) -> Any:
        """One call; `timeout_s` (default `rpc_timeout_s`) is how long the caller waits."""
        timeout_s = self.rpc_timeout_s if timeout_s is None else timeout_s
        fate = self.faults(source, target, kind)
        handler = self._handlers.get(target)
        if handler is None:
            raise PeerUnavailable(f"{target} is down")
        if fate.delay_s:
            await asyncio.sleep(fate.delay_s)
        if fate.lose_request or not self.linked(source, target):
            await asyncio.sleep(timeout_s)
            raise PeerUnavailable(f"{kind} {source}->{target} timed out")
        handle: Callable[[Any], Awaitable[Any]] = getattr(handler, f"handle_{kind}")
        if fate.duplicate:  # the copy's answer goes nowhere
            self._serve(target, kind, handle(self.wire(kind, request)))
        task = self._serve(target, kind, handle(self.wire(kind, request)))
        await asyncio.wait({task}, timeout=timeout_s)  # the caller gives up; the handler runs on
        if not task.done():
            raise PeerUnavailable(f"{kind} {source}->{target} timed out")
        if task.cancelled():
            raise PeerUnavailable(f"{kind} {source}->{target}: {target} went down")
        response = task.result()
        if fate.lose_response or not self.linked(target, source) or target not in self._handlers:
            raise PeerUnavailable(f"{kind} {source}->{target}: the answer was lost")
        return self.wire(kind, response)

    def _serve(self, target: str, kind: str, call: Awaitable[Any]) -> asyncio.Future[Any]:
        """Run a handler on `target` as its server would: to the end, whoever waits for it."""
        task: asyncio.Future[Any] = asyncio.ensure_future(call)
        serving = self._serving.setdefault(target, set())
        serving.add(task)

        def done(finished: asyncio.Future[Any]) -> None:
            serving.discard(finished)
            if not finished.cancelled() and finished.exception() is not None:  # a server logs its 500s
                log.error("%s handler on %s failed", kind, target, exc_info=finished.exception())

        task.add_done_callback(done)
        return task


class InMemoryStream:
    """One replication stream from `source` to `target` (raft.transport.PushStream)."""

    def __init__(self, network: Network, source: str, target: str) -> None:
        self.network = network
        self.source, self.target = source, target
        self._outbox: deque[tuple[Any, asyncio.Future[Any], float]] = deque()  # (request, answer, deadline)
        self._inflight: deque[tuple[asyncio.Future[Any], asyncio.Future[Any], float, Fate]] = deque()
        self._sent = asyncio.Event()
        self._handled = asyncio.Event()
        self._broken = False
        self._tasks = [asyncio.ensure_future(self._carry()), asyncio.ensure_future(self._answer())]

    @property
    def broken(self) -> bool:
        return self._broken

    def send(self, request: PushRequest) -> asyncio.Future[PushResponse]:
        answer: asyncio.Future[PushResponse] = asyncio.get_running_loop().create_future()
        if self._broken:
            fail_push(answer, f"the stream {self.source}->{self.target} is closed")
        else:
            deadline = asyncio.get_running_loop().time() + self.network.rpc_timeout_s
            try:
                sent = self.network.wire("push", request)  # copied now
            except PeerUnavailable:  # the wire lost it: the stream stalls there
                sent = None
            self._outbox.append((sent, answer, deadline))
            self._sent.set()
        return answer

    def close(self, reason: str = "closed") -> None:
        if self._broken:
            return
        self._broken = True
        for task in self._tasks:
            task.cancel()
        for _request, answer, _deadline in self._outbox:
            fail_push(answer, f"the stream {self.source}->{self.target} {reason}")
        for _task, answer, _deadline, _fate in self._inflight:
            fail_push(answer, f"the stream {self.source}->{self.target} {reason}")
        self._outbox.clear()
        self._inflight.clear()

    async def _carry(self) -> None:
        """Deliver the pushes in order: a delay holds up those behind it; a loss stalls the stream."""
        network = self.network
        while True:
            await self._sent.wait()
            self._sent.clear()
            while self._outbox:
                request, answer, deadline = self._outbox[0]
                fate = network.faults(self.source, self.target, "push")
                if fate.delay_s:
                    await asyncio.sleep(fate.delay_s)
                handler = network._handlers.get(self.target)
                if handler is None or fate.lose_request:  # the connection was reset, or the member is gone
                    self.close("was reset")
                    return
                if request is None or not network.linked(self.source, self.target):
                    await self._break_at(deadline, "lost a push")
                    return
                self._outbox.popleft()
                if fate.duplicate:  # a copy, as a re-sent push on a new stream may arrive after the first
                    network._serve(self.target, "push", handler.take_push(request))
                task = network._serve(self.target, "push", handler.take_push(request))
                self._inflight.append((task, answer, deadline, fate))
                self._handled.set()

    async def _answer(self) -> None:
        """Answer the pushes in the order they were sent; an answer overdue breaks the stream."""
        network = self.network
        while True:
            await self._handled.wait()
            self._handled.clear()
            while self._inflight:
                task, answer, deadline, fate = self._inflight[0]
                await asyncio.wait({task}, timeout=max(0.0, deadline - asyncio.get_running_loop().time()))
                if not task.done() or not network.linked(self.target, self.source):
                    await self._break_at(deadline, "lost an answer")
                    return
                if (task.cancelled() or task.exception() is not None or fate.lose_response
                        or self.target not in network._handlers):
                    self.close("was reset")
                    return
                self._inflight.popleft()
                if not answer.done():
                    answer.set_result(network.wire("push", task.result()))

    async def _break_at(self, deadline: float, reason: str) -> None:
        """The stream stalls: the sender finds out when the oldest answer is overdue."""
        oldest = min((*(waiting[2] for waiting in self._inflight), *(waiting[2] for waiting in self._outbox)),
                     default=deadline)
        await asyncio.sleep(max(0.0, oldest - asyncio.get_running_loop().time()))
        self.close(reason)


class InMemoryTransport:
    def __init__(self, network: Network, node_id: str) -> None:
        self.network = network
        self.node_id = node_id

    def open_stream(self, peer_id: str) -> InMemoryStream:
        return InMemoryStream(self.network, self.node_id, peer_id)

    async def vote(self, peer_id: str, request: VoteRequest) -> VoteResponse:
        response: VoteResponse = await self.network.deliver(self.node_id, peer_id, "vote", request)
        return response

    async def heartbeat(self, peer_id: str, request: HeartbeatRequest) -> HeartbeatResponse:
        response: HeartbeatResponse = await self.network.deliver(self.node_id, peer_id, "heartbeat", request)
        return response

    async def transfer(self, peer_id: str, request: TransferRequest) -> TransferResponse:
        response: TransferResponse = await self.network.deliver(self.node_id, peer_id, "transfer", request)
        return response

    async def fetch(self, peer_id: str, request: FetchRequest) -> bytes:
        copy: bytes = await self.network.deliver(self.node_id, peer_id, "fetch", request)
        return copy
