"""Topics and queue offsets on the simulated group: the catalog and each queue's offsets are the same on every
member for the same log, offsets are contiguous from 0 and come from the leader's tail, and a truncation
takes back only offsets no answer named."""

from __future__ import annotations

import asyncio

import pytest

from raftlog.raft.errors import (
    ConsumerConflictError,
    ConsumerPositionError,
    NotProducerOwnerError,
    OutOfOrderSequenceError,
    TopicError,
)
from raftlog.raft.group_offsets import GroupAsk, QueueAsk
from raftlog.raft.messages import Code
from raftlog.raft.node import RaftNode
from raftlog.raft.producers import Sequenced
from raftlog.raft.queues import QueueOffsets
from raftlog.raft.topic_appends import MessageBatch
from raftlog.storage.codec import Magic
from raftlog.storage.message import Meta, decode_message, key_queue
from tests.raft.test_node import simulate, stable
from tests.sim.cluster import SimCluster, run_until


def batch(topic: str, bodies: list[bytes], key: str | None = None, queue: int | None = None) -> MessageBatch:
    return MessageBatch(topic, bodies, [Meta.of([key] if key else [], ["t"]) for _ in bodies], queue)


def messages_of(node: RaftNode) -> list[tuple[int, int, int, bytes]]:
    """(topic_id, queue, queue_offset, body) of every message in the node's log, in log order."""
    found = []
    for index in node.store.indices_of(frozenset((Magic.MESSAGE,)), 0):
        message = decode_message(node.store.get(index).body)
        found.append((message.topic_id, message.queue, message.queue_offset, bytes(message.body)))
    return found


@simulate
async def test_messages_take_contiguous_offsets_per_queue_the_same_on_every_member() -> None:
    cluster = SimCluster(seed=3)
    try:
        leader = await stable(cluster)
        topic = await leader.topic_appends.change_topic("create", "orders", {"queues": 4})
        assert topic is not None and topic.queues == 4 and topic.id > 0
        appends = leader.topic_appends
        answers = await asyncio.gather(*(appends.append_messages(batch("orders", [f"{key}-{i}".encode()], key=key))
                                         for i in range(5) for key in ("c1", "c2", "c3")))
        for key in ("c1", "c2", "c3"):
            mine = [a for a in answers if a.queue == key_queue(key, 4)]
            assert sorted(a.first_offset for a in mine) == list(range(len(mine)))  # contiguous from 0
        round_robin = [await leader.topic_appends.append_messages(batch("orders", [b"x", b"y"])) for _ in range(4)]
        assert sorted(a.queue for a in round_robin) == [0, 1, 2, 3]  # the member's turn, queue after queue
        assert await run_until(cluster, cluster.converged, 5.0)
        logs = [messages_of(node) for node in cluster.running]
        assert all(log == logs[0] for log in logs) and len(logs[0]) == 15 + 8
        for answer in answers:  # each message is where its answer says
            message = decode_message(leader.store.get(answer.entries.first_index).body)
            assert (message.topic_id, message.queue, message.queue_offset) == (topic.id, answer.queue,
                                                                                answer.first_offset)
        tables = [node.queue_offsets.next for node in cluster.running]
        assert all(table == tables[0] for table in tables)
        assert not cluster.violations
    finally:
        await cluster.stop()


@simulate
async def test_the_catalog_refuses_what_it_cannot_take_and_a_topic_created_again_is_another() -> None:
    cluster = SimCluster(seed=5)
    try:
        leader = await stable(cluster)
        first = await leader.topic_appends.change_topic("create", "audit", {"queues": 2, "description": "who did what"})
        assert first is not None
        refusals = [
            (("create", "audit", {"queues": 2}), Code.TOPIC_EXISTS),
            (("change", "audit", {"queues": 1}), Code.INVALID_TOPIC),  # a queue count never shrinks
            (("create", "bad name", {"queues": 1}), Code.INVALID_TOPIC),
            (("create", "none", {}), Code.INVALID_TOPIC),
            (("change", "nowhere", {"queues": 3}), Code.TOPIC_NOT_FOUND),
        ]
        for (op, name, fields), code in refusals:
            with pytest.raises(TopicError) as refused:
                await leader.topic_appends.change_topic(op, name, fields)
            assert refused.value.code is code
        await leader.topic_appends.append_messages(batch("audit", [b"old"], queue=1))
        changed = await leader.topic_appends.change_topic("change", "audit", {"queues": 3, "writable": False})
        assert changed is not None and (changed.queues, changed.perm) == (3, "r-")
        with pytest.raises(TopicError) as refused:
            await leader.topic_appends.append_messages(batch("audit", [b"drained"]))
        assert refused.value.code is Code.TOPIC_NOT_WRITABLE
        assert await leader.topic_appends.change_topic("delete", "audit", {}) is None
        again = await leader.topic_appends.change_topic("create", "audit", {"queues": 2})
        assert again is not None and again.id != first.id
        answer = await leader.topic_appends.append_messages(batch("audit", [b"new"], queue=1))
        assert answer.first_offset == 0  # another topic: its queues start again
        assert await run_until(cluster, cluster.converged, 5.0)
        catalogs = [node.topics.current for node in cluster.running]
        assert all(catalog == catalogs[0] for catalog in catalogs) and catalogs[0]["audit"].id == again.id
        follower = next(node for node in cluster.running if node is not leader)
        await cluster.crash(follower.config.self_id)
        cluster.start(follower.config.self_id)  # its catalog from the checkpoint and the log after it
        assert await run_until(cluster, cluster.converged, 10.0)
        restarted = cluster.members[follower.config.self_id].node
        assert restarted is not None and restarted.topics.current == catalogs[0]
    finally:
        await cluster.stop()


@simulate
async def test_keys_in_several_queues_are_refused_unless_split() -> None:
    cluster = SimCluster(seed=7)
    try:
        leader = await stable(cluster)
        await leader.topic_appends.change_topic("create", "orders", {"queues": 8})
        keys = [f"customer-{i}" for i in range(20)]
        assert len({key_queue(k, 8) for k in keys}) > 1
        mixed = MessageBatch("orders", [b"m"] * len(keys), [Meta.of([k]) for k in keys])
        with pytest.raises(TopicError) as refused:
            await leader.topic_appends.append_messages(mixed)
        assert refused.value.code is Code.KEYS_IN_SEVERAL_QUEUES
    finally:
        await cluster.stop()


def test_a_truncation_takes_each_queue_back_to_the_first_offset_it_cut() -> None:
    offsets = QueueOffsets("n1")
    offsets.queued((1, 0, 0, 10, 14, -1, 0, 0))  # offsets 0-4 at entries 10-14
    offsets.queued((1, 1, 0, 15, 15, -1, 0, 0))
    offsets.queued((1, 0, 5, 16, 19, -1, 0, 0))  # offsets 5-8 at entries 16-19
    offsets.committed(12)
    assert offsets.committed_offsets() == {(1, 0): 3, (1, 1): 0}
    offsets.truncated(17)  # entries 17 on are cut: offsets 6-8 of queue 0 go back
    assert offsets.next == {(1, 0): 6, (1, 1): 1}
    offsets.truncated(13)
    assert offsets.next == {(1, 0): 3, (1, 1): 0}
    offsets.queued((1, 0, 3, 13, 13, -1, 0, 0))
    assert offsets.next_offset(1, 0) == 4


def test_a_snapshots_offsets_skip_the_messages_pushed_again() -> None:
    leader = QueueOffsets("n1")
    leader.queued((1, 0, 0, 10, 19, -1, 0, 0))
    leader.committed(15)
    follower = QueueOffsets("n2")
    follower.installed(12, leader.encode())  # the leader's offsets as of its commit index, 15
    follower.queued((1, 0, 3, 13, 19, -1, 0, 0))  # pushed again from after the install
    assert follower.next_offset(1, 0) == 10


@simulate
async def test_a_groups_commit_of_many_queues_is_one_entry_and_a_compare_and_set_is_all_or_nothing() -> None:
    cluster = SimCluster(seed=9)
    try:
        leader = await stable(cluster)
        appends = leader.topic_appends
        topic = await appends.change_topic("create", "orders", {"queues": 8})
        assert topic is not None
        for queue in range(8):
            await appends.append_messages(batch("orders", [b"a", b"b", b"c"], queue=queue))
        end = leader.store.end_index
        appended, _ = await appends.commit_group(GroupAsk("billing", [QueueAsk(topic.id, q, 2, -1) for q in range(8)],
                                                          caller="app"))
        assert appended.first_index == appended.last_index == end + 1  # eight queues, one entry
        stale = [QueueAsk(topic.id, q, 3, 2) for q in range(7)] + [QueueAsk(topic.id, 7, 3, 1)]
        with pytest.raises(ConsumerConflictError):  # one queue's expectation fails: none moves
            await appends.commit_group(GroupAsk("billing", stale))
        with pytest.raises(ConsumerPositionError):  # past the queue's end
            await appends.commit_group(GroupAsk("billing", [QueueAsk(topic.id, 0, 4)]))
        await appends.commit_group(GroupAsk("billing", [QueueAsk(topic.id, 0, 3, 2)]))
        assert await run_until(cluster, cluster.converged, 5.0)
        for node in cluster.running:
            group = node.groups.live()["billing"]
            assert group.owner == "app" and group.offsets == {(topic.id, q): 3 if q == 0 else 2 for q in range(8)}
        await appends.commit_group(GroupAsk("billing", [], remove=True))
        assert "billing" not in leader.groups.live()
    finally:
        await cluster.stop()


@simulate
async def test_a_producers_messages_are_taken_once_per_queue_each_queue_counting_its_own_sequence() -> None:
    cluster = SimCluster(seed=13)
    try:
        leader = await stable(cluster)
        appends = leader.topic_appends
        await appends.change_topic("create", "orders", {"queues": 2})
        session = await leader.change_session(77, caller="app")
        first = await appends.append_messages(batch("orders", [b"a", b"b"], queue=0), "app",
                                              Sequenced(77, session.epoch, 0))
        other = await appends.append_messages(batch("orders", [b"c"], queue=1), "app", Sequenced(77, session.epoch, 0))
        retry = await appends.append_messages(batch("orders", [b"a", b"b"], queue=0), "app",
                                              Sequenced(77, session.epoch, 0))
        assert (retry.queue, retry.first_offset, retry.entries.first_index) == (0, first.first_offset,
                                                                                 first.entries.first_index)
        assert retry.entries.duplicate and other.first_offset == 0
        with pytest.raises(OutOfOrderSequenceError):  # queue 0 goes on from sequence 2
            await appends.append_messages(batch("orders", [b"d"], queue=0), "app", Sequenced(77, session.epoch, 5))
        with pytest.raises(NotProducerOwnerError):
            await appends.append_messages(batch("orders", [b"e"], queue=0), "intruder", Sequenced(77, session.epoch, 2))
        assert await run_until(cluster, cluster.converged, 5.0)
        for node in cluster.running:  # every member knows each queue's sequence: a new leader judges alike
            state = node.sessions.table.producers[77]
            topic_id = first.topic.id
            assert [b.last_seq for b in state.queues[(topic_id, 0)]] == [1]
            assert [b.last_seq for b in state.queues[(topic_id, 1)]] == [0]
        assert len(messages_of(leader)) == 3
    finally:
        await cluster.stop()
