"""Membership changes on a simulated cluster: a learner added, caught up and promoted; the
refusals; a restarted member's configuration; removed members that must not disturb the group.
Reference: Ongaro's thesis, chapter 4 (single-server changes, the disruptive-server rule)."""

from __future__ import annotations

import asyncio

import pytest

from raftlog.raft.config import Peer
from raftlog.raft.errors import NotLeaderError
from raftlog.raft.membership import MembershipError, Refusal
from raftlog.raft.messages import Role
from raftlog.raft.node import RaftNode
from tests.raft.test_node import simulate, stable
from tests.sim.cluster import SimCluster, run_until


def learner(node_id: str) -> Peer:
    return Peer(node_id, f"sim:{7000 + int(node_id[1:])}", learner=True)


def follower_ids(cluster: SimCluster, leader: RaftNode) -> list[str]:
    return sorted(n.config.self_id for n in cluster.running if n is not leader)


@simulate
async def test_a_learner_is_added_catches_up_and_once_promoted_counts_in_the_quorum() -> None:
    cluster = SimCluster(seed=31)
    try:
        leader = await stable(cluster)
        for i in range(50):
            await leader.append([f"before {i}".encode()])
        added = await leader.change_membership(add=learner("n3"))
        assert added.member("n3") == learner("n3") and added.voters == ("n0", "n1", "n2")
        assert leader.store.get(added.index).magic == 3  # a CONFIG_CHANGE entry
        cluster.add_member("n3", added)  # an empty disk, started with what the group said
        assert await run_until(cluster, cluster.converged, 5.0)
        n3 = cluster.members["n3"].node
        assert n3 is not None and n3.passive and n3.role is Role.FOLLOWER
        assert [bytes(n3.store.get(i).body) for i in range(1, 51)] == [f"before {i}".encode() for i in range(50)]

        assert await heard_from(cluster, leader, "n3")
        promoted = await leader.change_membership(promote="n3")
        assert sorted(promoted.voters) == ["n0", "n1", "n2", "n3"]
        assert await run_until(cluster, lambda: all(sorted(n.voters) == ["n0", "n1", "n2", "n3"]
                                                    for n in cluster.running), 2.0)
        assert not n3.passive
        # four voters: a quorum is three, so with one old follower down the newcomer's copy is needed
        await cluster.crash(follower_ids(cluster, leader)[0])
        appended = await leader.append([b"needs n3"])
        assert n3.store.durable_end_index >= appended.last_index
        assert not cluster.violations
    finally:
        await cluster.stop()


@simulate
async def test_changes_are_refused_with_a_reason_and_nothing_written() -> None:
    cluster = SimCluster(seed=32, config={"max_promote_lag_entries": 0})
    try:
        leader = await stable(cluster)
        f1, f2 = follower_ids(cluster, leader)

        async def refused(reason: Refusal, **change: object) -> None:
            end = leader.store.end_index
            with pytest.raises(MembershipError) as failure:
                await leader.change_membership(**change)  # type: ignore[arg-type]
            assert failure.value.reason is reason
            assert leader.store.end_index == end  # nothing written

        await refused(Refusal.MEMBER_EXISTS, add=Peer("n9", cluster.peers[1].address, learner=True))
        await refused(Refusal.MEMBER_EXISTS, add=learner(f1))
        await refused(Refusal.UNKNOWN_MEMBER, promote="n9")
        await refused(Refusal.UNKNOWN_MEMBER, remove="n9")
        await refused(Refusal.ALREADY_VOTER, promote=f1)
        with pytest.raises(NotLeaderError):  # the leader hands over before its own removal
            await leader.change_membership(remove=leader.config.self_id)
        with pytest.raises(NotLeaderError):
            await cluster.members[f1].node.change_membership(add=learner("n3"))  # type: ignore[union-attr]

        await leader.change_membership(add=learner("n3"))  # added, never started: it lags
        await refused(Refusal.LEARNER_BEHIND, promote="n3")
        await cluster.crash(f1)
        assert await run_until(cluster, lambda: not leader.elector.peer_alive.get(f1, True), 1.0)
        # voters n0-n2 without f2 would be two, with one of them (f1) down: no quorum that answers
        await refused(Refusal.QUORUM_AT_RISK, remove=f2)

        # one change at a time: while one waits for its quorum, the next is refused
        cluster.network.partition({leader.config.self_id}, {f2})
        pending = asyncio.create_task(leader.change_membership(remove="n3"))
        assert await run_until(cluster, lambda: leader.configuration.member("n3") is None, 1.0)
        await refused(Refusal.CHANGE_IN_FLIGHT, add=learner("n4"))
        pending.cancel()
        await asyncio.gather(pending, return_exceptions=True)
        assert not cluster.violations
    finally:
        await cluster.stop()


@simulate
async def test_a_learner_that_never_answered_is_not_promoted_however_short_the_log() -> None:
    """The lag of a learner never heard from is not "end - (-1)": etcd promotes only a learner in sync.
    With a log shorter than max_promote_lag_entries, that made a member at a made-up address a voter."""
    cluster = SimCluster(seed=33)
    try:
        leader = await stable(cluster)
        assert leader.store.end_index < leader.config.max_promote_lag_entries
        await leader.change_membership(add=learner("n3"))  # added, never started
        with pytest.raises(MembershipError) as failure:
            await leader.change_membership(promote="n3")
        assert failure.value.reason is Refusal.LEARNER_BEHIND
        assert "n3" not in leader.voters
    finally:
        await cluster.stop()



async def heard_from(cluster: SimCluster, leader: RaftNode, learner_id: str) -> bool:
    """The leader heard the learner acknowledge its first entry: it may be promoted (LEARNER_BEHIND
    otherwise). A converged log says the learner holds it, not that its answer has arrived."""
    return await run_until(cluster, lambda: leader.watermark(leader.term, learner_id)
                           >= leader.appends.term_first_index, 2.0)

async def test_a_restarted_member_takes_its_configuration_from_its_checkpoint_and_log() -> None:
    cluster = SimCluster(seed=33)
    try:
        leader = await stable(cluster)
        cluster.add_member("n3", await leader.change_membership(add=learner("n3")))
        assert await run_until(cluster, cluster.converged, 5.0)
        assert await heard_from(cluster, leader, "n3")
        promoted = await leader.change_membership(promote="n3")
        victim = follower_ids(cluster, leader)[0]
        assert await run_until(cluster, lambda: cluster.members[victim].checkpoint.config_index == promoted.index, 2.0)
        await cluster.crash(victim)
        cluster.start(victim)  # its `peers` still say n0-n2
        node = cluster.members[victim].node
        assert node is not None
        assert node.configuration == promoted and sorted(node.voters) == ["n0", "n1", "n2", "n3"]
        # an uncommitted change, in its log only, is in force there after a restart too
        # it stands in a larger term first (its first round after a start): it follows the leader after that
        assert await run_until(cluster, lambda: cluster.converged() and node.leader_id is not None, 5.0)
        leader = cluster.leader()
        assert leader is not None and leader.config.self_id != victim
        removed = await leader.change_membership(remove="n3")
        assert await run_until(cluster, lambda: node.configuration.index == removed.index, 2.0)
        await cluster.crash(victim)
        cluster.members[victim].checkpoint.committed_index = promoted.index  # as if written before the commit
        cluster.start(victim)
        restarted = cluster.members[victim].node
        assert restarted is not None and restarted.configuration == removed
        assert await run_until(cluster, cluster.converged, 5.0)
        assert not cluster.violations
    finally:
        await cluster.stop()


@simulate
async def test_a_removed_member_stops_standing_once_it_sees_its_removal() -> None:
    cluster = SimCluster(seed=34)
    try:
        leader = await stable(cluster)
        gone = follower_ids(cluster, leader)[0]
        await leader.change_membership(remove=gone)
        removed = cluster.members[gone].node
        assert removed is not None
        assert await run_until(cluster, lambda: removed.configuration.member(gone) is None, 2.0)
        assert removed.passive
        term = removed.term
        assert not await run_until(cluster, lambda: removed.role is not Role.FOLLOWER or removed.term != term, 3.0)
        assert (leader.role, await leader.append([b"after"]) is not None) == (Role.LEADER, True)
        assert not cluster.violations
    finally:
        await cluster.stop()


@simulate
async def test_a_removed_member_that_missed_its_removal_cannot_depose_the_leader() -> None:
    """Cut off (and restarted), it never learns it was removed and stands in a larger term, again and again; the others
    hear their leader, and ignore its vote requests (the disruptive-server rule). Without the rule, a
    voter asked in a larger term moves to it, and the leader steps down."""
    cluster = SimCluster(seed=35)
    try:
        leader = await stable(cluster)
        gone = follower_ids(cluster, leader)[0]
        me = leader.config.self_id
        cluster.network.partition({gone}, set(cluster.members) - {gone})
        await leader.change_membership(remove=gone)
        await cluster.crash(gone)  # restarted while cut off, it stands in a larger term at once
        cluster.start(gone)
        removed = cluster.members[gone].node
        assert removed is not None and await run_until(cluster, lambda: removed.term > leader.term, 5.0)
        assert removed.configuration.member(gone) is not None  # it does not know
        cluster.network.heal()
        term = leader.term
        asked = removed.term
        assert not await run_until(cluster, lambda: cluster.leader() is not leader or leader.term != term, 3.0)
        assert removed.role is Role.CANDIDATE and removed.term >= asked > term  # it kept asking
        assert (await leader.append([b"undisturbed"])).term == term
        assert me == cluster.leader().config.self_id  # type: ignore[union-attr]
        assert not cluster.violations
    finally:
        await cluster.stop()


@simulate
async def test_a_member_that_cannot_hear_the_leader_cannot_depose_it_while_the_others_do() -> None:
    """The disruptive-server rule on its own: the leader's messages to one follower are lost, and the
    follower, restarted, stands in a larger term with a log as good as anyone's; the others hear their leader
    and ignore it, so the group keeps its leader (without the rule, the third member moves to the
    larger term and the leader steps down at its next heartbeat)."""
    cluster = SimCluster(seed=36)
    try:
        leader = await stable(cluster)
        deaf, other = follower_ids(cluster, leader)
        term = leader.term
        cluster.network.cut(leader.config.self_id, deaf)
        await cluster.crash(deaf)  # restarted, its first round is in a larger term
        cluster.start(deaf)
        node = cluster.members[deaf].node
        assert node is not None and await run_until(cluster, lambda: node.term > term, 3.0)
        assert not await run_until(cluster, lambda: cluster.leader() is not leader or leader.term != term, 3.0)
        assert cluster.members[other].node.term == term  # type: ignore[union-attr]
        assert (await leader.append([b"undisturbed"])).term == term
        assert not cluster.violations
    finally:
        await cluster.stop()


@simulate
async def test_a_follower_that_lost_its_leader_stands_in_the_next_term_though_it_never_voted_in_it() -> None:
    """A leader may change the voters more than once in its term: here the follower that elected it is
    removed, and a learner is added and promoted. The two voters left never voted in the term, so if the
    one that lost the leader asked in its own term first (DLedger's order), they could make a second leader
    in it, whose entries would carry the same index and term as the first one's (seed 42 did)."""
    tried = 0
    for seed in range(40, 60):  # the seeds whose election left one follower with the term from a heartbeat alone
        cluster = SimCluster(seed=seed)
        try:
            leader = await stable(cluster)
            term, leader_id = leader.term, leader.config.self_id
            votes = {n.config.self_id: n.state.voted_for for n in cluster.running if n is not leader}
            heard = [member for member, vote in votes.items() if vote is None]
            elected = [member for member, vote in votes.items() if vote == leader_id]
            if not (heard and elected):
                continue
            tried += 1
            cluster.add_member("n3", await leader.change_membership(add=learner("n3")))
            assert await heard_from(cluster, leader, "n3")
            await leader.change_membership(promote="n3")
            removed = await leader.change_membership(remove=elected[0])
            assert sorted(removed.voters) == sorted([leader_id, heard[0], "n3"]) and leader.term == term
            await cluster.crash(elected[0])
            await cluster.crash(leader_id)
            assert await run_until(cluster, lambda c=cluster: c.leader() is not None, 10.0)
            new_leader = cluster.leader()
            assert new_leader is not None and new_leader.term > term, f"seed {seed}"
            assert not cluster.violations, f"seed {seed}: {cluster.violations}"
        finally:
            await cluster.stop()
    assert tried >= 3, "too few seeds left a follower that knew the term from a heartbeat alone"
