"""Raft's Figure 8 (Raft paper, section 5.4.2), built step by step on a simulated 5-member group.

A leader may not count replicas to commit an entry of an earlier term: such
an entry, stored on a majority, can still be overwritten by a leader elected
without it. Only entries of the leader's own term are committed by counting,
and the earlier ones with them. The steps (members named by what they do,
since elections pick who wins):

(a) leader L1 writes X at index i, which reaches only F;
(b) L1 crashes; B wins among the other three and writes its NOOP at i, which
    reaches nobody; B crashes;
(c) L1 restarts and L1 or F (W) wins; W's pushes carry X at i to the two
    others, so X is on a majority, but not W's own NOOP at i + 1;
(d) W and the other of L1/F crash, B restarts and wins with the two (its last
    term is newer than theirs) and overwrites X with its NOOP.

With the current-term rule nothing committed X in (c), and (d) is legal. Without
it, W commits X in (c) and (d) loses a committed entry: the checkers say so.
"""

from __future__ import annotations

from typing import Any

from raftlog.raft.messages import PushRequest, PushType, Role
from raftlog.raft.node import RaftNode
from raftlog.raft.transport import PeerUnavailable
from tests.sim.cluster import Faults, SimCluster, run_until
from tests.sim.wire import round_trip


def _node(cluster: SimCluster, node_id: str) -> RaftNode:
    node = cluster.members[node_id].node
    assert node is not None, f"{node_id} is down"
    return node


async def figure8(seed: int = 8) -> tuple[list[str], bool]:
    """Run the steps; returns the violations found and whether the group converged after."""
    cluster = SimCluster(seed, voters=5, config={"push_entries_max": 1})  # one entry per push, to hold back one
    ids = list(cluster.members)
    try:
        cluster.start_all()
        assert await run_until(cluster, cluster.converged, 10.0)
        leader = cluster.leader()
        assert leader is not None
        base = leader.store.end_index
        x = base + 1

        # (a) X reaches F only
        l1 = leader.config.self_id
        f = next(i for i in ids if i != l1)
        rest = [i for i in ids if i not in (l1, f)]
        cluster.network.partition({l1, f}, set(rest))
        cluster.call(l1, cluster.append(b"X", leader))  # never acknowledged: no quorum
        assert await run_until(cluster, lambda: _node(cluster, f).store.end_index >= x, 1.0, step_s=0.001)
        await cluster.crash(l1)

        # (b) B wins among the rest; its NOOP at index x goes nowhere
        quiet = Faults(cluster.faults.rng)
        cluster.network.faults = lambda source, target, kind: (
            quiet(source, target, kind) if kind != "push" or source not in rest else quiet.lost())
        assert await run_until(cluster, lambda: any(_node(cluster, i).role is Role.LEADER
                                                    and _node(cluster, i).store.end_index >= x for i in rest),
                               5.0, step_s=0.001)
        b = next(i for i in rest if _node(cluster, i).store.end_index >= x)
        others = [i for i in rest if i != b]
        await cluster.crash(b)

        # (c) L1 is back; the winner W of L1 and F carries X to the others, but not its own NOOP
        cluster.network.faults = cluster.faults
        cluster.network.heal()

        def hold_back_new_entries(kind: str, message: Any) -> Any:
            if isinstance(message, PushRequest) and message.type is PushType.APPEND and message.last_index > x:
                raise PeerUnavailable("held back")
            return round_trip(kind, message)

        cluster.network.wire = hold_back_new_entries
        cluster.start(l1)

        def x_on_a_majority() -> bool:
            winner = cluster.leader()
            return (winner is not None and winner.store.end_index > x
                    and all(_node(cluster, i).store.end_index >= x for i in others))

        assert await run_until(cluster, x_on_a_majority, 5.0, step_s=0.001)
        await run_until(cluster, lambda: False, 0.3)  # time to commit, if anything would

        # (d) B is back with the two others only, and wins
        for node_id in (l1, f):
            await cluster.crash(node_id)
        cluster.network.wire = round_trip
        cluster.start(b)
        await run_until(cluster, lambda: _node(cluster, b).committed_index > x, 5.0)
        cluster.start(l1)
        cluster.start(f)
        converged = await run_until(cluster, cluster.converged, 10.0)
        cluster.check_committed_kept()
        return cluster.violations, converged
    finally:
        await cluster.stop()
