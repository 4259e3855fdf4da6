"""A member's services on a simulated cluster: client appends and their errors, learners,
leadership transfer, preferred leader, read index, the apply loop and role callbacks.
Reference: DLEDGER.md (codes, maxLeadershipTransferWaitIndex), JoyQueue's learners."""

from __future__ import annotations

import asyncio
import functools
import gc
from pathlib import Path

import pytest

from raftlog.raft.cluster_version import LEVEL
from raftlog.raft.config import RaftConfig, parse_peers
from raftlog.raft.consumers import ConsumerAsk
from raftlog.raft.errors import (
    AckTimeoutError,
    LeaderTransferringError,
    NotLeaderError,
    PendingFullError,
    TermChangedError,
)
from raftlog.raft.group_offsets import GroupAsk, QueueAsk
from raftlog.raft.inmem_transport import Network
from raftlog.raft.messages import Code, PushRequest, PushType, Role, VoteRequest, VoteResult
from raftlog.raft.node import RaftNode
from raftlog.raft.producers import Sequenced
from raftlog.raft.topic_appends import MessageBatch
from raftlog.storage import CorruptEntryError, Store, StoreConfig
from raftlog.storage.codec import Entry, Magic
from raftlog.storage.memory import MemoryCheckpoint, MemoryStore
from raftlog.storage.message import Meta
from tests.sim.cluster import SimCluster, run_until
from tests.sim.vloop import InlineExecutor, run_virtual

DAMAGE_FOUND = "entry %d is damaged on this member: reads of it fail until it is repaired"


def simulate(test):
    @functools.wraps(test)
    def run(*args, **kwargs):
        return run_virtual(test(*args, **kwargs))
    return run


async def stable(cluster: SimCluster) -> RaftNode:
    cluster.start_all()
    assert await run_until(cluster, cluster.converged, 10.0)
    leader = cluster.leader()
    assert leader is not None
    return leader


@simulate
async def test_appends_commit_on_every_member_in_order() -> None:
    cluster = SimCluster(seed=11)
    try:
        leader = await stable(cluster)
        results = await asyncio.gather(*(leader.append([f"m{i}".encode()]) for i in range(20)))
        indices = [r.first_index for r in results]
        assert indices == sorted(indices) and len(set(indices)) == 20
        assert await run_until(cluster, cluster.converged, 5.0)
        for node in cluster.running:
            assert [bytes(node.store.get(i).body) for i in indices] == [f"m{i}".encode() for i in range(20)]
        assert leader.store.get(0).magic == Magic.NOOP  # the new leader's first entry
        assert not cluster.violations
    finally:
        await cluster.stop()


@simulate
async def test_followers_refuse_client_appends_and_name_the_leader() -> None:
    cluster = SimCluster(seed=12)
    try:
        leader = await stable(cluster)
        follower = next(n for n in cluster.running if n is not leader)
        with pytest.raises(NotLeaderError) as refused:
            await follower.append([b"x"])
        assert refused.value.code is Code.NOT_LEADER
        assert refused.value.leader_id == leader.config.self_id
    finally:
        await cluster.stop()


@simulate
async def test_without_a_quorum_an_append_times_out_and_leadership_is_lost() -> None:
    cluster = SimCluster(seed=13)
    try:
        leader = await stable(cluster)
        me = leader.config.self_id
        cluster.network.partition({me}, set(cluster.members) - {me})
        with pytest.raises((AckTimeoutError, TermChangedError)):
            await leader.append([b"lost?"])  # never acknowledged: no quorum stored it
        # the isolated leader steps down after max_heartbeat_leak intervals without a quorum
        assert await run_until(cluster, lambda: leader.role is not Role.LEADER, 2.0)
    finally:
        await cluster.stop()


@simulate
async def test_too_many_waiting_appends_are_refused() -> None:
    cluster = SimCluster(seed=14, config={"max_pending_requests": 3})
    try:
        leader = await stable(cluster)
        me = leader.config.self_id
        cluster.network.partition({me}, set(cluster.members) - {me})
        waiting = [asyncio.create_task(leader.append([b"w"])) for _ in range(3)]
        await asyncio.sleep(0)
        with pytest.raises(PendingFullError):
            await leader.append([b"one too many"])
        await asyncio.gather(*waiting, return_exceptions=True)
    finally:
        await cluster.stop()


@simulate
async def test_learners_receive_the_log_but_never_vote_or_count() -> None:
    cluster = SimCluster(seed=15, voters=3, learners=2)
    try:
        leader = await stable(cluster)
        learner = cluster.members["n3"].node
        assert learner is not None and not learner.is_voter
        await leader.append([b"to everyone"])
        assert await run_until(cluster, cluster.converged, 5.0)
        assert bytes(learner.store.get(leader.store.end_index).body) == b"to everyone"
        # with two voters gone, the learners' copies do not make a quorum
        others = [m for m in ("n0", "n1", "n2") if m != leader.config.self_id]
        for voter in others:
            await cluster.crash(voter)
        with pytest.raises((AckTimeoutError, TermChangedError)):
            await leader.append([b"no quorum"])
        assert learner.role is Role.FOLLOWER  # never a candidate
        assert learner.elector.elections == 0
        # the leader gone too: the learner stops naming it, and follows the next leader
        await cluster.crash(leader.config.self_id)
        assert await run_until(cluster, lambda: learner.leader_id is None, 5.0)
        assert learner.role is Role.FOLLOWER and learner.elector.elections == 0
        for voter in ("n0", "n1", "n2"):
            cluster.start(voter)
        assert await run_until(cluster, lambda: (new := cluster.leader()) is not None
                               and learner.leader_id == new.config.self_id, 10.0)
    finally:
        await cluster.stop()


@simulate
async def test_leadership_transfer_hands_over_to_a_caught_up_member() -> None:
    cluster = SimCluster(seed=16)
    try:
        leader = await stable(cluster)
        target = next(m for m in cluster.members if m != leader.config.self_id)
        await leader.append([b"before"])
        code = await leader.transfer_leadership(target)
        assert code is Code.SUCCESS
        assert await run_until(cluster, lambda: cluster.leader() is not None
                               and cluster.leader().config.self_id == target, 2.0)
        assert await run_until(cluster, cluster.converged, 5.0)
        assert not cluster.violations
    finally:
        await cluster.stop()


@simulate
async def test_appends_during_a_transfer_are_refused() -> None:
    cluster = SimCluster(seed=17)
    try:
        leader = await stable(cluster)
        target = next(m for m in cluster.members if m != leader.config.self_id)
        cluster.network.partition({target}, set(cluster.members) - {target})  # cannot catch up
        await leader.append([b"x"])
        transfer = asyncio.create_task(leader.transfer_leadership(target))
        await asyncio.sleep(0.01)
        with pytest.raises(LeaderTransferringError):
            await leader.append([b"during"])
        assert await transfer is Code.TIMEOUT
        await leader.append([b"after"])  # appends resume once the transfer gave up
    finally:
        await cluster.stop()


@simulate
async def test_a_preferred_leader_takes_leadership_back() -> None:
    cluster = SimCluster(seed=18, config={"preferred_leader_ids": ("n2",)})
    try:
        cluster.start_all()
        assert await run_until(cluster, lambda: cluster.leader() is not None
                               and cluster.leader().config.self_id == "n2" and cluster.converged(), 10.0)
        await cluster.crash("n2")
        assert await run_until(cluster, lambda: cluster.leader() is not None, 3.0)
        cluster.start("n2")
        assert await run_until(cluster, lambda: cluster.leader() is not None
                               and cluster.leader().config.self_id == "n2", 10.0)
    finally:
        await cluster.stop()


@simulate
async def test_read_index_is_the_confirmed_commit_index() -> None:
    cluster = SimCluster(seed=19)
    try:
        leader = await stable(cluster)
        appended = await leader.append([b"read me"])
        assert await leader.read_index() >= appended.last_index
        me = leader.config.self_id
        cluster.network.partition({me}, set(cluster.members) - {me})
        with pytest.raises(NotLeaderError):  # a deposed leader cannot confirm itself
            await leader.read_index()
    finally:
        await cluster.stop()


class Recorder:
    def __init__(self) -> None:
        self.applied: list[int] = []

    def apply(self, entries: list[Entry]) -> None:
        self.applied += [e.index for e in entries]

    def snapshot_installed(self, index: int, term: int) -> None:
        self.applied.append(-index)


@simulate
async def test_committed_entries_are_applied_in_order_and_checkpointed(tmp_path: Path) -> None:
    cluster = SimCluster(seed=20, tmp=tmp_path / "cluster")
    try:
        leader = await stable(cluster)
        recorders = {}
        roles: list[tuple[int, Role]] = []
        for node in cluster.running:
            recorders[node.config.self_id] = node.applier.state_machine = Recorder()
        leader.state.add_role_listener(lambda term, role: roles.append((term, role)))
        for i in range(5):
            await leader.append([f"a{i}".encode()])
        assert await run_until(cluster, lambda: all(n.applied_index == leader.store.end_index
                                                    for n in cluster.running), 5.0)
        for node in cluster.running:
            applied = recorders[node.config.self_id].applied
            assert applied == list(range(applied[0], node.applied_index + 1))
            cp = cluster.members[node.config.self_id].checkpoint
            assert cp.applied_index == node.applied_index
        me = leader.config.self_id
        cluster.network.partition({me}, set(cluster.members) - {me})
        assert await run_until(cluster, lambda: leader.role is not Role.LEADER, 2.0)
        assert roles and roles[-1][1] is Role.CANDIDATE  # the role callback saw it step down
    finally:
        await cluster.stop()


@simulate
async def test_a_follower_behind_the_leaders_first_entry_gets_a_snapshot_install(tmp_path: Path) -> None:
    """With the producer sessions and a consumer's position of the entries cleaned away: the installed
    member answers a retry, and holds the position."""
    cluster = SimCluster(seed=21, tmp=tmp_path / "cluster")
    try:
        leader = await stable(cluster)
        behind = next(m for m in cluster.members if m != leader.config.self_id)
        assert await run_until(cluster, lambda: leader.version.level == LEVEL, 2.0)  # sessions have owners
        assert (await leader.change_session(7, "app")).epoch == 0
        await cluster.crash(behind)
        for i in range(150):  # several 4 KiB data files
            last = await leader.append([f"entry-{i}".encode() * 8], Sequenced(7, 0, i), "app")
            if i == 10:
                await leader.commit_consumer(ConsumerAsk("billing", last.first_index, "at 10", caller="app",
                                                         floor=True))
                topic = await leader.topic_appends.change_topic("create", "orders", {"queues": 2})
                assert topic is not None
                await leader.topic_appends.append_messages(MessageBatch("orders", [b"m"] * 3, [Meta()] * 3, 1))
                await leader.topic_appends.commit_group(GroupAsk("billing", [QueueAsk(topic.id, 1, 2)], "app"))
        files = leader.store.head_files()
        assert len(files) >= 2
        await leader.store.delete_head_files(len(files))  # cleaned: the follower's next entry is gone
        assert leader.store.begin_index > cluster.members[behind].store.end_index + 1
        cluster.start(behind)
        assert await run_until(cluster, cluster.converged, 10.0)
        follower = cluster.members[behind].store
        assert follower.begin_index == leader.store.begin_index
        end = leader.store.end_index
        assert follower.get(end).chain_crc == leader.store.get(end).chain_crc
        cluster.check_sessions()
        assert not cluster.violations
        installed = cluster.members[behind].node
        assert installed is not None and installed.sessions.table.producers[7].batches[-1].last_seq == 149
        assert installed.consumers.live() == leader.consumers.live()
        # the topics, each queue's offsets and the groups' offsets of the entries cleaned away came with it
        assert installed.topics.current == leader.topics.current
        assert installed.queue_offsets.next == leader.queue_offsets.next == {(topic.id, 1): 3}
        assert installed.groups.live() == leader.groups.live()
        billing = installed.consumers.live()["billing"]
        assert (billing.metadata, billing.owner, billing.floor) == ("at 10", "app", True)  # the snapshot's extras
        await cluster.crash(leader.config.self_id)  # the installed member or the other leads: both know
        assert await run_until(cluster, lambda: cluster.leader() is not None, 5.0)
        new_leader = cluster.leader()
        assert new_leader is not None
        retried = await new_leader.append([b"entry-149" * 8], Sequenced(7, 0, 149), "app")
        assert (retried.first_index, retried.positions, retried.duplicate) == (last.first_index, last.positions, True)
    finally:
        await cluster.stop()


@simulate
async def test_a_vote_is_on_disk_before_it_is_granted() -> None:
    cluster = SimCluster(seed=22)
    try:
        leader = await stable(cluster)
        follower_id = next(m for m in cluster.members if m != leader.config.self_id)
        follower = cluster.members[follower_id]
        candidate = next(m for m in cluster.members if m not in (leader.config.self_id, follower_id))
        term = follower.node.term
        await cluster.crash(leader.config.self_id)
        request = VoteRequest("default", candidate, term + 5, leader.store.end_term,
                              leader.store.end_index + 5)
        # while it still hears from the leader, it ignores the candidate (the disruptive-server rule) ...
        ignored = await follower.node.handle_vote(request)
        assert (ignored.result, follower.node.term) == (VoteResult.REJECT_ALREADY_HAS_LEADER, term)
        assert await run_until(cluster, lambda: not follower.node.elector.hears_leader(), 1.0)
        # ... then it moves to the candidate's term first (TERM_NOT_READY), and grants the vote
        first = await follower.node.handle_vote(request)
        assert first.result is VoteResult.REJECT_TERM_NOT_READY
        assert await run_until(cluster, lambda: follower.node.term == term + 5, 1.0)
        granted = await follower.node.handle_vote(request)
        if granted.result is VoteResult.ACCEPT:
            assert (follower.checkpoint.current_term, follower.checkpoint.voted_for) == (term + 5, candidate)
        else:  # it voted for itself or another candidate in that term first: that vote is on disk
            assert follower.checkpoint.current_term == term + 5
            assert follower.checkpoint.voted_for is not None
    finally:
        await cluster.stop()


def test_the_push_quota_holds_a_far_behind_follower_to_its_rate() -> None:
    from raftlog.raft.dispatcher import Quota
    quota = Quota(per_second=1000)
    assert quota.wait(10.0) == 0.0
    quota.sample(600)
    assert quota.wait(10.2) == 0.0
    quota.sample(600)  # 1200 bytes in this second: over the quota
    assert quota.wait(10.5) == pytest.approx(0.5)
    assert quota.wait(11.0) == 0.0  # a new window


@simulate
async def test_a_late_truncate_never_removes_entries_the_follower_acknowledged() -> None:
    cluster = SimCluster(seed=23, voters=5)
    try:
        leader = await stable(cluster)
        follower = next(n for n in cluster.running if n is not leader)
        pair = {leader.config.self_id, follower.config.self_id}
        cluster.network.partition(pair, set(cluster.members) - pair)  # entries reach it, no quorum
        appends = [asyncio.create_task(leader.append([f"held-{i}".encode()])) for i in range(3)]
        start = leader.store.end_index
        assert await run_until(cluster, lambda: follower.store.end_index == start + 3, 0.2)
        end = follower.store.end_index
        assert follower.committed_index < end - 1  # acknowledged, not committed
        late = PushRequest("default", leader.config.self_id, leader.term, PushType.TRUNCATE,
                           leader.committed_index, pre_log_index=end - 1)
        answer = await follower.take_push(late)  # delayed in the network past its retry
        assert answer.code is Code.INCONSISTENT_STATE
        assert follower.store.end_index == end
        await asyncio.gather(*appends, return_exceptions=True)
    finally:
        await cluster.stop()


@simulate
async def test_async_flush_mode_commits_without_waiting_for_the_disk(tmp_path: Path) -> None:
    config = RaftConfig(self_id="n0", peers=parse_peers("n0-h:1"))
    store = Store.open(tmp_path / "n0", StoreConfig(data_file_size=4096, index_file_size=640,
                                                   flush_mode="async"), executor=InlineExecutor())
    node = RaftNode(config, store, MemoryCheckpoint(), Network().transport("n0"))
    node.start()  # the store's background flush is not running: nothing is durable yet
    try:
        assert await run_until_leader(node)
        appended = await node.append([b"fast"])
        assert node.committed_index >= appended.last_index
        assert store.durable_end_index < appended.last_index
    finally:
        await node.stop()
        await store.close()


async def run_until_leader(node: RaftNode) -> bool:
    for _ in range(500):
        if node.role is Role.LEADER and node.committed_index >= 0:
            return True
        await asyncio.sleep(0.01)
    return False


@simulate
async def test_a_member_that_lost_committed_entries_abstains_until_it_has_them_again() -> None:
    """Its disk lost what it had acknowledged: until it holds what the leader had committed, its vote
    could elect a leader without those entries, so it neither votes nor stands."""
    cluster = SimCluster(seed=21)
    try:
        leader = await stable(cluster)
        for i in range(30):
            await leader.append([f"e{i}".encode()])
        assert await run_until(cluster, cluster.converged, 5.0)  # the third member holds them all too
        victim = next(n for n in cluster.running if n is not leader).config.self_id
        await cluster.crash(victim)
        cluster.members[victim].store = MemoryStore(cluster.members[victim].store.config)  # everything gone
        cluster.start(victim, rejoining=True)
        node = cluster.members[victim].node
        assert node is not None and node.rejoining and node.passive
        ask = VoteRequest("default", leader.config.self_id, leader.term + 5, leader.store.end_term,
                          leader.store.end_index + 100)
        assert (await node.handle_vote(ask)).result is VoteResult.REJECT_REJOINING
        assert await run_until(cluster, lambda: not node.rejoining, 10.0)
        assert node.store.end_index >= 30 and node.elector.elections == 0
        entries = [node.store.get(i) for i in range(node.store.end_index + 1)]
        assert [bytes(e.body) for e in entries if e.magic == Magic.NORMAL] == [f"e{i}".encode() for i in range(30)]
        assert (await node.handle_vote(ask)).result is not VoteResult.REJECT_REJOINING
        assert not cluster.violations
    finally:
        await cluster.stop()


@simulate
async def test_a_member_that_lost_its_tail_catches_up_while_writes_keep_coming() -> None:
    """The leader still counts the entries the member had acknowledged before its disk lost them:
    its pushes start above the member's end and wait there, so a push that times out must make
    the leader compare again rather than re-send from the old watermark."""
    cluster = SimCluster(seed=22)
    try:
        leader = await stable(cluster)
        for i in range(30):
            await leader.append([f"e{i}".encode()])
        assert await run_until(cluster, cluster.converged, 5.0)
        victim = next(n for n in cluster.running if n is not leader).config.self_id
        await cluster.crash(victim)
        await cluster.members[victim].store.truncate(10)  # the disk kept entries up to 9

        async def keep_writing() -> None:
            i = 0
            while True:
                await leader.append([f"more{i}".encode()])
                i += 1

        writer = asyncio.create_task(keep_writing())
        try:
            cluster.start(victim, rejoining=True)
            node = cluster.members[victim].node
            assert node is not None
            assert await run_until(cluster, lambda: not node.rejoining, 10.0)
            entries = [node.store.get(i) for i in range(node.store.end_index + 1)]
            normal = [bytes(e.body) for e in entries if e.magic == Magic.NORMAL]
            assert normal[:30] == [f"e{i}".encode() for i in range(30)]
        finally:
            writer.cancel()
        assert not cluster.violations
    finally:
        await cluster.stop()


@pytest.mark.parametrize("scrub", [False, True], ids=["found by a read", "found by the scrub"])
@simulate
async def test_a_damaged_committed_entry_is_repaired_in_place_from_a_replica(tmp_path: Path, scrub: bool) -> None:
    """Damage in a file that recovery does not rescan: reads refuse the entry (never its bytes) until
    the repairer has rewritten it from another member's copy."""
    cluster = SimCluster(seed=24, tmp=tmp_path, config={"scrub_interval_ms": 3_600_000 if scrub else 0})
    try:
        leader = await stable(cluster)
        for i in range(120):  # some five data files
            await leader.append([f"entry-{i:03}".encode() * 8])
        assert await run_until(cluster, cluster.converged, 5.0)
        victim = next(n for n in cluster.running if n is not leader).config.self_id
        await cluster.crash(victim)
        store = cluster.members[victim].store
        assert isinstance(store, Store) and store.data.find(store.pos_at(5)) is store.data.segments[0]
        pos = store.pos_at(5)
        store.data.find(pos).view[pos + 60] ^= 0x04  # a bit of entry 5's body, in the first data file
        cluster.expected_errors.add(DAMAGE_FOUND)  # the repairer says so, at ERROR
        cluster.start(victim)
        node = cluster.members[victim].node
        assert node is not None
        if not scrub:
            with pytest.raises(CorruptEntryError):
                node.store.get(5)
        assert await run_until(cluster, lambda: node.repairer.repaired == 1 and not node.repairer.damaged, 10.0)
        assert bytes(node.store.get(5).body) == bytes(leader.store.get(5).body)
        assert node.store.verify(0, 1000, None).damaged == []
        assert not cluster.violations
    finally:
        await cluster.stop()


@simulate
async def test_a_leader_entry_damaged_after_its_flush_reaches_no_follower(tmp_path: Path) -> None:
    """The leader pushes the entries it wrote itself without reading them checked, all but the first
    push after a match: a follower refuses a damaged one, and the checked re-read after the leader
    matches it again finds the damage, which is repaired from the member that holds a good copy."""
    cluster = SimCluster(seed=25, tmp=tmp_path, config={"push_entries_max": 4})
    try:
        leader = await stable(cluster)
        late, other = (n for n in cluster.running if n is not leader)
        cluster.network.partition({leader.config.self_id, other.config.self_id}, {late.config.self_id})
        start = leader.store.end_index + 1
        for i in range(12):
            await leader.append([f"entry-{i:02}".encode() * 8])
        assert await run_until(cluster, lambda: leader.store.durable_end_index == leader.store.end_index, 5.0)
        assert isinstance(leader.store, Store)  # the checks above have read every committed entry
        damaged = start + 9  # in the third push after the match
        pos = leader.store.pos_at(damaged)
        leader.store.data.find(pos).view[pos + 60] ^= 0x04
        cluster.expected_errors.add(DAMAGE_FOUND)
        cluster.network.heal()
        assert await run_until(cluster, lambda: late.store.end_index >= leader.store.end_index, 10.0)
        assert leader.repairer.repaired == 1
        assert [bytes(late.store.get(i).body) for i in range(start, start + 12)] == [
            f"entry-{i:02}".encode() * 8 for i in range(12)]
        assert not cluster.violations
    finally:
        await cluster.stop()


@simulate
async def test_a_candidate_stopped_mid_round_leaves_no_vote_call_behind() -> None:
    """Found by the simulation's unhandled-exception check: a candidate stopped while its vote
    requests were on the way left them running, and their failures were never retrieved."""
    cluster = SimCluster(seed=31)
    try:
        cluster.network.partition({"n0"}, {"n1", "n2"})  # n0's requests are lost: they wait out the timeout
        cluster.start_all()
        node = cluster.members["n0"].node
        assert node is not None
        assert await run_until(cluster, lambda: node.state.is_candidate and node.term >= 1, 1.0, step_s=0.001)
        await asyncio.sleep(0.01)  # within a round: votes in flight
        await cluster.crash("n0")
        await asyncio.sleep(1.0)  # past every call's timeout
        gc.collect()  # a failed task nobody looked at is reported when collected
        await asyncio.sleep(0)
        assert not cluster.violations
    finally:
        await cluster.stop()


@simulate
async def test_the_leader_pushes_while_its_own_flush_runs_and_counts_itself_once_flushed() -> None:
    """Raft thesis §10.2.1: the leader's disk and the network in parallel."""
    cluster = SimCluster(seed=31, power_loss=True)
    try:
        leader = await stable(cluster)
        follower, away = (n for n in cluster.running if n is not leader)
        cluster.network.partition({leader.config.self_id, follower.config.self_id}, {away.config.self_id})
        leader.store.fsync_s = 0.5  # type: ignore[attr-defined]  # a slow disk on the leader alone
        index = leader.store.end_index + 1
        append = asyncio.create_task(leader.append([b"both at once"]))
        assert await run_until(cluster, lambda: follower.store.ack_end_index >= index, 0.1)  # durable there
        assert leader.store.durable_end_index < index and leader.committed_index < index  # a quorum needs it
        assert not append.done()
        assert (await append).last_index == index  # once its own flush is done
        assert leader.committed_index >= index and leader.store.durable_end_index >= index
    finally:
        await cluster.stop()


@simulate
async def test_the_checkpoint_notes_a_commit_the_leader_made_before_its_own_flush() -> None:
    """The checkpoint holds at most what is durable on the member; a commit its followers made before
    the leader's flush must still reach it once the flush is done, with no later append to carry it."""
    cluster = SimCluster(seed=32, power_loss=True)
    try:
        leader = await stable(cluster)
        leader.store.fsync_s = 0.5  # type: ignore[attr-defined]  # a slow disk on the leader alone
        index = leader.store.end_index + 1
        await leader.append([b"committed by the followers"])
        assert leader.store.durable_end_index < index  # the leader's flush is still running
        checkpoint = cluster.members[leader.config.self_id].checkpoint
        assert checkpoint.committed_index < index  # not durable here yet
        assert await run_until(cluster, lambda: checkpoint.committed_index >= index, 2.0)
        assert leader.store.durable_end_index >= index
    finally:
        await cluster.stop()
