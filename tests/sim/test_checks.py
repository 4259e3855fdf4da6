"""The simulation's client checks, fed made-up histories: each must report what it is for."""

from __future__ import annotations

import asyncio
import functools
import logging

from tests.sim.cluster import Ack, Read, SimCluster, run_until
from tests.sim.vloop import run_virtual


def simulate(test):
    @functools.wraps(test)
    def run(*args, **kwargs):
        return run_virtual(test(*args, **kwargs))
    return run


async def settled(seed: int) -> SimCluster:
    cluster = SimCluster(seed)
    cluster.start_all()
    assert await run_until(cluster, cluster.converged, 10.0)
    return cluster


def reported(cluster: SimCluster, words: str) -> bool:
    return any(words in violation for violation in cluster.violations)


@simulate
async def test_two_acknowledgements_at_one_index() -> None:
    cluster = await settled(41)
    try:
        cluster._acked(Ack(5, b"a", 0.0, 0.1, "n0"))
        cluster._acked(Ack(5, b"b", 0.0, 0.2, "n1"))
        assert reported(cluster, "two acknowledgements at index 5")
    finally:
        await cluster.stop()


@simulate
async def test_an_append_invoked_after_another_was_acknowledged_lands_after_it() -> None:
    cluster = await settled(42)
    try:
        cluster._acked(Ack(7, b"first", 0.0, 0.1, "n0"))
        cluster._acked(Ack(6, b"second", 0.2, 0.3, "n0"))
        assert reported(cluster, "landed before it")
    finally:
        await cluster.stop()


@simulate
async def test_a_read_that_finds_nothing_after_the_acknowledgement_or_an_earlier_read() -> None:
    cluster = await settled(43)
    try:
        cluster._acked(Ack(3, b"x", 0.0, 0.1, "n0"))
        cluster._read(Read(3, None, 0.05, 0.2, "n1"))  # began before the ack: may miss it
        assert cluster.violations == []
        cluster._read(Read(3, None, 0.2, 0.3, "n1"))
        assert reported(cluster, "but it was acknowledged")
        cluster._read(Read(9, b"y", 0.0, 0.4, "n1"))
        cluster._read(Read(9, None, 0.5, 0.6, "n2"))
        assert reported(cluster, "an earlier read (on n1) had returned it")
        cluster._read(Read(3, b"not x", 0.7, 0.8, "n2"))
        assert reported(cluster, "acknowledged was b'x'")
    finally:
        await cluster.stop()


@simulate
async def test_the_final_log_misses_nothing_acknowledged_and_holds_nothing_unsent() -> None:
    cluster = await settled(44)
    try:
        leader = cluster.leader()
        assert leader is not None
        assert await cluster.append(b"kept", leader) is not None
        await leader.append([b"sent by nobody"])
        await leader.append([b"kept"])  # a second copy of a client's body
        assert await run_until(cluster, cluster.converged, 5.0)
        end = leader.store.end_index
        cluster._acked(Ack(end + 1, b"gone", 1.0, 1.1, "n0"))
        cluster.check_final()
        assert reported(cluster, f"acknowledged index {end + 1} (via n0) is past the final log end {end}: lost")
        assert reported(cluster, "was written by no client")
        assert reported(cluster, "b'kept' is in the log twice")
    finally:
        await cluster.stop()


@simulate
async def test_error_records_and_unhandled_exceptions_fail_the_run() -> None:
    cluster = await settled(45)
    try:
        logging.getLogger("raftlog.raft.node").error("something broke")
        assert reported(cluster, "ERROR logged by raftlog.raft.node: something broke")

        async def crash() -> None:
            raise RuntimeError("nobody looks at me")

        cluster.call("n0", crash())
        await asyncio.sleep(0.01)
        assert reported(cluster, "a client call on n0 raised RuntimeError")
        asyncio.get_running_loop().call_exception_handler({"message": "lost", "exception": ValueError("x")})
        assert reported(cluster, "unhandled: lost ValueError")
    finally:
        await cluster.stop()
