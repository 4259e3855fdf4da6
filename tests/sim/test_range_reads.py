"""A linearizable range read on a member whose commit index lags the leader's.

Found by the fault suite's checker: a range that started within the member's
own commit index was answered from it, so a short page said the log ended
before entries acknowledged before the read began. The read must first learn
the leader's commit index (read index), as a single get past it does.
"""

from __future__ import annotations

from tests.sim.cluster import SimCluster, run_until
from tests.sim.vloop import run_virtual


async def lagging_member_reads_a_range() -> tuple[int, int, int]:
    """(the follower's stale commit index, the leader's when the read began, the last index returned)."""
    cluster = SimCluster(seed=5)
    try:
        cluster.start_all()
        assert await run_until(cluster, cluster.converged, 5.0)
        leader = cluster.leader()
        assert leader is not None
        follower = next(m for m in cluster.members if m != leader.config.self_id)
        cluster.network.cut(leader.config.self_id, follower)  # it hears no pushes and no commit notices
        for i in range(5):
            assert await cluster.append(f"entry-{i}".encode()) is not None
        stale = cluster.members[follower].node.committed_index  # type: ignore[union-attr]
        cluster.network.heal()
        committed = leader.committed_index
        service = cluster.members[follower].service
        assert service is not None
        entries, _ = await service.read(0, 100, linearizable=True)
        return stale, committed, entries[-1].index
    finally:
        await cluster.stop()


def test_a_range_read_on_a_lagging_member_ends_no_earlier_than_the_leaders_commit_index() -> None:
    stale, committed, last = run_virtual(lagging_member_reads_a_range())
    assert stale < committed, "the follower was meant to lag"
    assert last >= committed
