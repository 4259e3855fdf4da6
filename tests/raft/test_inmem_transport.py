"""The in-memory network behaves like one: messages cross a wire hook, and a handler runs to
its end whether or not its caller waits (a server does not stop when a client gives up)."""

from __future__ import annotations

import asyncio
import functools
from typing import Any

import pytest

from raftlog.raft.inmem_transport import Network
from raftlog.raft.messages import Code, HeartbeatRequest, HeartbeatResponse
from raftlog.raft.transport import PeerUnavailable
from tests.sim.vloop import run_virtual


def simulate(test):
    @functools.wraps(test)
    def run(*args, **kwargs):
        return run_virtual(test(*args, **kwargs))
    return run


class SlowMember:
    """Answers a heartbeat after `delay_s`, and notes that it got to the end."""

    def __init__(self, delay_s: float) -> None:
        self.delay_s = delay_s
        self.finished = 0

    async def handle_heartbeat(self, request: HeartbeatRequest) -> HeartbeatResponse:
        await asyncio.sleep(self.delay_s)
        self.finished += 1
        return HeartbeatResponse(Code.SUCCESS, request.term)


BEAT = HeartbeatRequest("default", "n0", 1)


@simulate
async def test_a_caller_that_times_out_does_not_stop_the_handler() -> None:
    network = Network(rpc_timeout_s=0.1)
    member = SlowMember(delay_s=0.5)
    network.register("n1", member)  # type: ignore[arg-type]
    with pytest.raises(PeerUnavailable):
        await network.transport("n0").heartbeat("n1", BEAT)
    assert member.finished == 0
    await asyncio.sleep(0.5)
    assert member.finished == 1


@simulate
async def test_a_member_going_down_ends_the_handlers_it_runs() -> None:
    network = Network(rpc_timeout_s=1.0)
    member = SlowMember(delay_s=0.5)
    network.register("n1", member)  # type: ignore[arg-type]
    call = asyncio.ensure_future(network.transport("n0").heartbeat("n1", BEAT))
    await asyncio.sleep(0.1)
    network.unregister("n1")
    with pytest.raises(PeerUnavailable, match="went down"):
        await call
    await asyncio.sleep(1.0)
    assert member.finished == 0


@simulate
async def test_requests_and_answers_cross_the_wire_hook() -> None:
    crossed: list[tuple[str, Any]] = []

    def wire(kind: str, message: Any) -> Any:
        crossed.append((kind, message))
        return message

    network = Network(wire=wire)
    network.register("n1", SlowMember(delay_s=0.0))  # type: ignore[arg-type]
    answer = await network.transport("n0").heartbeat("n1", BEAT)
    assert crossed == [("heartbeat", BEAT), ("heartbeat", answer)]
