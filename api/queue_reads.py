"""The plan of a read of one topic queue (RocketMQ's pull by queue offset), beside api.read_plan's
read of the log and answering as it does: a Page, a Stream, the records of entries (storage.record).

Queue offset N is one unit of the queue's consume queue (storage.consume_queue), then one entry read
at the position the unit names (Store.get_at), whatever the queue's length. A read starts at an
offset, at a consumer group's committed offset for the queue (`group`: the next offset the group
reads, as a named consumer's read goes on after its position), or at the queue's first kept offset.
A member's consume queue holds its committed messages only, so the queue's next offset is the
readable end: a linearizable read first catches this member up with the leader's confirmed commit
index (the catalog's read does it, LogService.readable_end), which also reads the topic as of then. A
long-poll and a follow stream wake as this member's commit index moves.

A tag filter is applied here, on the member, as RocketMQ's: a unit passes when its tags code holds
every bit of one requested tag's code (storage.message.tag_code), then the message's tags are checked
exactly. Messages filtered out are not sent, but a page's `next` moves past them.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass

from raftlog.api.errors import ApiError, bad_request
from raftlog.api.follow import committed_chunks
from raftlog.api.read_plan import Page, Stream
from raftlog.api.service import LogService, RawRead
from raftlog.api.topics import TopicService
from raftlog.raft.group_offsets import group_problem
from raftlog.raft.messages import Code
from raftlog.raft.topics import Topic
from raftlog.storage.codec import HEADER_SIZE, Entry, Magic, decode_entry
from raftlog.storage.consume_queue import UNIT, ConsumeQueue
from raftlog.storage.errors import ConsumeQueueError
from raftlog.storage.message import MESSAGE_HEADER, decode_message, tag_code
from raftlog.storage.record import Record, Records

SCAN_UNITS_MAX = 16_384  # units one chunk of a filtered read looks at (RocketMQ's maxFilterMessageCount)


@dataclass(frozen=True, slots=True)
class QueueRead:
    """A read of one queue of a topic, as a REST or gRPC request asks for it."""

    topic: str
    queue: int
    offset: int | None = None  # the first queue offset (None: the queue's first kept one)
    group: str | None = None  # or the group's committed offset there (from `offset` without one)
    limit: int = 0  # at most this many offsets looked at (0: a stream's are all readable, or no end when following)
    tags: tuple[str, ...] = ()  # only messages that carry one of these tags (none: every message)
    linearizable: bool = True
    follow: bool = False  # a stream: every message as it commits
    wait_s: float = 0.0  # a long-poll: when the queue has no offset at or past the start yet, wait this long


@dataclass(frozen=True, slots=True)
class QueueState:
    """A queue's offsets, and a consumer group's there when one is asked about."""

    queue: int
    min_offset: int  # the first kept (retention moves it)
    next_offset: int  # one past the last committed message
    group_offset: int | None = None  # the next offset the group reads (None: it committed none here)
    lag: int | None = None  # next_offset - the group's offset (from min_offset when it committed none)


@dataclass(frozen=True, slots=True)
class TopicQueues:
    """Every queue of a topic, with its offsets."""

    topic: str
    topic_id: int
    queues: list[QueueState]


class QueueMessages:
    """One queue's committed messages by queue offset, through a tag filter: what a read plan streams
    (api.follow.Followed) or pages."""

    def __init__(self, reads: QueueReads, topic: Topic, queue: int, tags: Sequence[str] = ()) -> None:
        self.reads = reads
        self.service = reads.service
        self.topic = topic
        self.queue = queue
        self.tags = frozenset(tags)
        self.codes = tuple(map(tag_code, self.tags)) if tags else ()

    def units(self) -> ConsumeQueue:
        """The queue's units; TOPIC_NOT_FOUND once the topic is gone (its queue is dropped)."""
        node = self.service.node
        if node.topics.by_id.get(self.topic.id) is None:
            raise ApiError(Code.TOPIC_NOT_FOUND, f"topic {self.topic.name!r} was deleted", node.leader_id)
        dispatcher = node.consume_queues
        assert dispatcher is not None, "queue reads need the member's consume queues"
        return dispatcher.queues.queue(self.topic.id, self.queue)

    # -- api.follow.Followed -----------------------------------------------------------------

    def last(self) -> int:
        return self.units().next_offset - 1

    async def read(self, at: int, last: int) -> RawRead:
        return self.chunk(at, last, self.service.limits.follow_chunk_bytes)

    async def wait(self, at: int, timeout_s: float | None) -> bool:
        """Until the queue holds offset `at`; on at once when the topic is gone (`last` then says so)."""
        catalog = self.service.node.topics
        return await self.service.await_commit(lambda: self.topic.id not in catalog.by_id or self.last() >= at,
                                               timeout_s)

    # -- reads -----------------------------------------------------------------------------------

    def chunk(self, at: int, last: int, max_bytes: int) -> RawRead:
        """The stored entries of the messages that pass the filter from offset `at` up to `last` (at most
        max_bytes of them but at least one, and SCAN_UNITS_MAX offsets), and the offset after those
        looked at: one read of their units, then one entry read each."""
        units = self.units()
        self.check_kept(units, at)
        count = min(last + 1, units.next_offset, at + SCAN_UNITS_MAX) - at
        views: list[memoryview] = []
        size, offset = 0, at
        if count <= 0:  # nothing there yet
            return RawRead(views, offset, self.service.node.committed_index)
        for pos, length, code in UNIT.iter_unpack(units.units(at, count)):
            if views and size + length > max_bytes:
                break
            offset += 1
            if self.codes and not any(code & wanted == wanted for wanted in self.codes):
                continue
            view = self.view(units, offset - 1, pos)
            if self.tags and self.tags.isdisjoint(decode_message(view[HEADER_SIZE:]).tags):
                continue
            views.append(view)
            size += length
        return RawRead(views, offset, self.service.node.committed_index)

    def one(self, offset: int) -> Entry:
        """The message at `offset` (whatever its tags): one unit read, one entry read."""
        units = self.units()
        self.check_kept(units, offset)
        if offset >= units.next_offset:
            raise ApiError(Code.INDEX_OUT_OF_RANGE, f"queue {self.queue} of topic {self.topic.name!r} has no message "
                           f"at offset {offset} (its next offset is {units.next_offset})", self.service.node.leader_id)
        pos = units.unit(offset)[0]
        entry = self.service.store.get_at(pos)
        if entry is None:
            raise self.missing(units, offset, pos)
        self.check_held(offset, entry.magic, entry.body, entry.index)
        return entry

    def view(self, units: ConsumeQueue, offset: int, pos: int) -> memoryview:
        """The stored bytes of the message at `offset`, whose unit names `pos`."""
        store = self.service.store
        entry = store.get_at(pos)
        if entry is None:
            raise self.missing(units, offset, pos)
        self.check_held(offset, entry.magic, entry.body, entry.index)
        return store.read_range(entry.index, 1, 1).data  # the stored bytes: what a stream sends

    def missing(self, units: ConsumeQueue, offset: int, pos: int) -> Exception:
        """Why no entry starts at `pos`, which the queue's unit at `offset` names."""
        begin = self.service.store.begin_pos
        if begin is None or pos < begin:  # retention took it; the queue's first offset moves next
            return self.reads.taken(self.topic, self.queue, offset, units.first_at_or_past(begin or pos))
        return ConsumeQueueError(f"offset {offset} of queue {self.queue} of topic {self.topic.id} names pos {pos}, "
                                 "where no entry starts")

    def check_held(self, offset: int, magic: int, body: memoryview, index: int) -> None:
        """The entry read is the queue's message at `offset`: the queue is derived from the log, and
        anything else is this member's error, never an answer."""
        held = MESSAGE_HEADER.unpack_from(body)[:3] if magic == Magic.MESSAGE else None
        if held != (self.topic.id, self.queue, offset):
            raise ConsumeQueueError(f"offset {offset} of queue {self.queue} of topic {self.topic.id} names entry "
                                    f"{index}, which is not that message")

    def check_kept(self, units: ConsumeQueue, offset: int) -> None:
        if offset < units.min_offset:
            raise self.reads.taken(self.topic, self.queue, offset, units.min_offset)


class QueueReads:
    """Reads of topic queues on this member, for REST and gRPC alike."""

    def __init__(self, service: LogService, topics: TopicService) -> None:
        self.service = service
        self.topics = topics

    def records(self) -> Records:
        """The decoder of a read's messages, their topics named from the catalog."""
        return Records(self.service.store.get, self.service.node.topics.name_of)

    async def messages(self, read: QueueRead) -> QueueMessages:
        """The queue the read names, its topic read under the read's consistency (linearizable: this
        member caught up with the leader's confirmed commit index first, its queue with it)."""
        if read.queue < 0 or read.limit < 0:
            raise bad_request(f"a queue and a limit are 0 or more, not {read.queue} and {read.limit}")
        topic = await self.topics.get(read.topic, read.linearizable)
        leader = self.service.node.leader_id
        if not topic.readable:
            raise ApiError(Code.TOPIC_NOT_READABLE, f"topic {topic.name!r} is not readable (perm {topic.perm})",
                           leader)
        if read.queue >= topic.queues:
            raise ApiError(Code.TOPIC_NOT_FOUND, f"topic {topic.name!r} has {topic.queues} queues, no queue "
                           f"{read.queue}", leader)
        return QueueMessages(self, topic, read.queue, read.tags)

    def first_offset(self, read: QueueRead, messages: QueueMessages) -> int:
        """Where the read starts: the group's committed offset, else the offset asked, else the queue's first."""
        start = read.offset
        if read.group is not None:
            if (problem := group_problem(read.group)) is not None:
                raise bad_request(problem)
            group = self.service.node.groups.live().get(read.group)
            committed = None if group is None else group.offsets.get((messages.topic.id, messages.queue))
            start = start if committed is None else committed
        if start is None:
            return messages.units().min_offset
        if start < 0:
            raise bad_request(f"a queue offset is 0 or more, not {start}")
        return start

    async def one(self, read: QueueRead) -> Record:
        """The message at the read's first offset."""
        messages = await self.messages(read)
        return self.records()(messages.one(self.first_offset(read, messages)))

    async def page(self, read: QueueRead, size: int) -> Page:
        """The messages that pass the filter among `size` offsets from the start (range_bytes_max of them
        at most), waiting up to read.wait_s for one when there is none yet."""
        messages = await self.messages(read)
        start = self.first_offset(read, messages)
        service = self.service
        deadline = service.node.now() + read.wait_s
        while True:
            raw = messages.chunk(start, start + size - 1, service.limits.range_bytes_max)
            left = deadline - service.node.now()
            if raw.chunks or left <= 0 or not await messages.wait(raw.next, left):
                break
            start, size = raw.next, size - (raw.next - start)  # all filtered out: on from there
            if size <= 0:
                break
        decode = self.records()
        return Page([decode(decode_entry(view)) for view in raw.chunks], raw.next, raw.committed)

    async def stream(self, read: QueueRead, idle_s: float | None = None) -> Stream:
        """The read's messages as a stream (api.follow); its first chunk is read now, before the answer's
        status goes out, so that a start retention took is an error, not a stream cut short. Its `end`
        is the last offset readable when it began."""
        messages = await self.messages(read)
        start = self.first_offset(read, messages)
        requested = start + read.limit - 1 if read.limit else sys.maxsize
        end = messages.last()
        if end < start and read.wait_s and not read.follow and await messages.wait(start, read.wait_s):
            end = messages.last()
        last = min(end, requested)
        first = messages.chunk(start, last, self.service.limits.follow_chunk_bytes) if last >= start else None
        if first is None:
            messages.check_kept(messages.units(), start)
        chunks = committed_chunks(self.service, first, start, requested if read.follow else last,
                                  follow=read.follow, budget=self.service.follow_budget, idle_s=idle_s,
                                  followed=messages)
        return Stream(end, chunks, self.records(), control=False)

    async def queues(self, name: str, group: str | None, linearizable: bool) -> TopicQueues:
        """Each queue of topic `name` with its offsets (and `group`'s there), under the read's consistency."""
        topic = await self.topics.get(name, linearizable)
        if group is not None and (problem := group_problem(group)) is not None:
            raise bad_request(problem)
        node = self.service.node
        found = None if group is None else node.groups.live().get(group)
        held = {} if found is None else found.offsets
        dispatcher = node.consume_queues
        assert dispatcher is not None, "queue reads need the member's consume queues"
        states = []
        for queue in range(topic.queues):  # up to QUEUE_MAX, none opened: an unused queue costs nothing
            first, end = dispatcher.queues.bounds(topic.id, queue)
            offset = held.get((topic.id, queue))
            lag = None if group is None else max(0, end - max(first, offset or 0))
            states.append(QueueState(queue, first, end, offset, lag))
        return TopicQueues(topic.name, topic.id, states)

    def taken(self, topic: Topic, queue: int, offset: int, first: int) -> ApiError:
        """A read below what the queue keeps: as a read of the log below its begin answers."""
        return ApiError(Code.INDEX_LESS_THAN_LOCAL_BEGIN, f"offset {offset} of queue {queue} of topic {topic.name!r} "
                        f"was taken by retention; the queue now starts at offset {first}",
                        self.service.node.leader_id)
