"""The consume queues' dispatcher on a real store: committed messages only, a start that cuts the queues
where the log goes on and gives the queue offsets back, retention moving each queue's first offset, a
deleted topic's queues gone, and a snapshot install restarting every queue at the leader's offsets."""

from __future__ import annotations

from pathlib import Path

from raftlog.raft.consume_dispatch import ConsumeQueueDispatcher
from raftlog.raft.queues import QueueOffsets
from raftlog.raft.tables import Tables
from raftlog.storage import Store, StoreConfig
from raftlog.storage.codec import Magic
from raftlog.storage.consume_queue import UNIT
from raftlog.storage.consume_queues import ConsumeQueues
from raftlog.storage.memory import MemoryCheckpoint
from raftlog.storage.message import Meta, encode_message, queued_run

CONFIG = StoreConfig(data_file_size=4096, index_file_size=64 * 32)
TOPIC = 7


class Member:
    """A store, its consume queues and the two tables made of them, as raft.node lists them."""

    def __init__(self, root: Path) -> None:
        self.store = Store.open(root / "log", CONFIG)
        self.queues = ConsumeQueues(root / "consumequeue")
        self.dispatcher = ConsumeQueueDispatcher("n1", self.store, self.queues)
        self.offsets = QueueOffsets("n1", self.dispatcher)
        self.tables = Tables("n1", self.store, [self.dispatcher, self.offsets])
        self.tables.restore({}, MemoryCheckpoint())

    async def append(self, queue: int, count: int) -> tuple[int, int]:
        """`count` messages in `queue`, as the leader writes them; their first and last index."""
        first_offset = self.offsets.next_offset(TOPIC, queue)
        meta = Meta.of(["k"], ["t"])
        bodies = [encode_message(TOPIC, queue, first_offset + i, meta.encode(), meta.tags_code, b"m" * 40)
                  for i in range(count)]
        appended = await self.store.append_as_leader(bodies, 1, Magic.MESSAGE)
        last = appended.first_index + count - 1
        self.tables.queued((TOPIC, queue, first_offset, appended.first_index, last, -1, 0, 0))
        return appended.first_index, last

    def units(self, queue: int) -> list[tuple[int, int, int]]:
        cq = self.queues.queue(TOPIC, queue)
        raw = cq.units(cq.min_offset, cq.next_offset - cq.min_offset)
        return [UNIT.unpack_from(raw, i) for i in range(0, len(raw), UNIT.size)]

    def derived(self, queue: int, through: int) -> list[tuple[int, int, int]]:
        """The units the log's committed messages of `queue` give."""
        found = []
        for index in self.store.indices_of(frozenset((Magic.MESSAGE,)), self.store.begin_index):
            entry = self.store.get(index)
            run = queued_run(entry)
            if index <= through and run[1] == queue:
                found.append((entry.pos, entry.size, Meta.of(["k"], ["t"]).tags_code))
        return found

    async def close(self) -> None:
        self.queues.close()
        await self.store.close()


async def test_only_committed_messages_are_dispatched_and_a_start_goes_on_from_the_queues(tmp_path: Path) -> None:
    member = Member(tmp_path)
    await member.append(0, 5)
    _first, last = await member.append(1, 3)
    member.tables.committed(last - 2)  # one message of queue 1 committed
    assert member.queues.queue(TOPIC, 1).next_offset == 1 and member.units(0) == member.derived(0, last)
    member.tables.committed(last)
    assert member.units(1) == member.derived(1, last)
    await member.close()

    again = Member(tmp_path)  # a start without the last flush: the queues come back from the log
    assert again.offsets.next == {(TOPIC, 0): 5, (TOPIC, 1): 3}
    again.tables.committed(last)
    assert again.units(0) == again.derived(0, last) and again.units(1) == again.derived(1, last)
    _first, last = await again.append(0, 2)
    again.tables.committed(last)
    assert again.units(0) == again.derived(0, last) and again.queues.queue(TOPIC, 0).next_offset == 7
    await again.close()


async def test_a_truncated_log_cuts_the_queues_at_the_next_start(tmp_path: Path) -> None:
    member = Member(tmp_path)
    await member.append(0, 4)
    _first, last = await member.append(0, 4)
    member.tables.committed(last)
    await member.dispatcher.flush()
    await member.store.truncate(last - 5)  # as a damaged log cut at a start would (the test's doing)
    await member.close()

    again = Member(tmp_path)
    assert again.offsets.next == {(TOPIC, 0): 2}  # entries 2 on are gone: the queue runs on from offset 2
    again.tables.committed(again.store.end_index)  # as raft.node does after a start
    assert again.units(0) == again.derived(0, again.store.end_index)
    await again.close()


async def test_retention_moves_each_queues_first_offset_and_a_deleted_topic_loses_its_queues(tmp_path: Path) -> None:
    member = Member(tmp_path)
    last = -1
    for _ in range(24):
        _first, last = await member.append(0, 4)
    member.tables.committed(last)
    await member.store.delete_head_files(len(member.store.head_files()))
    await member.dispatcher.retained()
    cq = member.queues.queue(TOPIC, 0)
    assert cq.min_offset > 0 and cq.unit(cq.min_offset)[0] >= (member.store.begin_pos or 0)
    assert cq.next_offset == 96
    member.dispatcher.appended(last + 1, Magic.TOPIC, b'{"op":"delete","name":"t","id":7}')
    member.tables.committed(last + 1)
    assert not (tmp_path / "consumequeue" / str(TOPIC)).exists()
    await member.close()


async def test_an_install_restarts_every_queue_at_the_leaders_offsets(tmp_path: Path) -> None:
    leader = Member(tmp_path / "leader")
    for _ in range(24):
        _first, last = await leader.append(1, 4)
    leader.tables.committed(last)
    await leader.store.delete_head_files(len(leader.store.head_files()))
    sent = leader.dispatcher.encode()
    follower = Member(tmp_path / "follower")
    await follower.append(0, 2)
    follower.tables.committed(follower.store.end_index)
    follower.dispatcher.installed(leader.store.before_begin_index, sent)
    cq = follower.queues.queue(TOPIC, 1)
    first_kept = leader.queues.queue(TOPIC, 1).first_at_or_past(leader.store.begin_pos or 0)
    assert (cq.min_offset, cq.next_offset) == (first_kept, first_kept)
    assert not follower.queues.queue(TOPIC, 0).has_files  # not the leader's: gone
    await leader.close()
    await follower.close()
