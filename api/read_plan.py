"""The plan of a read of the log, written once for REST and gRPC, which only render what it gives.

A read starts at an index, at the entry that starts at a byte position, or on after a named
consumer's committed position; it ends where the read's consistency lets this member answer
(LogService.readable_end); a stream then goes on chunk by chunk (api.follow), and every entry it
shows is decoded into its record (storage.record), stamps and message fields resolved. A read of a
topic's queue is a plan beside this one, with the same answers: the records of its entries.
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Iterable, Iterator
from dataclasses import dataclass
from typing import NamedTuple

from raftlog.api.consumers import ConsumerCommits
from raftlog.api.follow import committed_chunks
from raftlog.api.service import LogService
from raftlog.storage.codec import BOOKKEEPING_MAGICS, Entry, iter_entries
from raftlog.storage.record import Record, Records, TopicName


@dataclass(frozen=True, slots=True)
class LogRead:
    """A read of the log as a REST or gRPC request asks for it."""

    start: int | None = None  # the first index (None: 0)
    pos: int | None = None  # or the first entry's byte position
    consumer: str | None = None  # or on after this named consumer's committed position (from `start` without one)
    limit: int = 0  # at most this many entries (0: a stream's are all committed, or no end when following)
    linearizable: bool = True
    control: bool = False  # the bookkeeping entries too, which reads of data skip
    follow: bool = False  # a stream: every entry as it commits
    wait_s: float = 0.0  # a long-poll: when nothing from the start is committed yet, wait this long for it


class Page(NamedTuple):
    records: list[Record]
    next: int  # the position to read next: an index (a queue's read: a queue offset, api.queue_reads)
    committed: int  # the commit index it was read under


@dataclass(frozen=True, slots=True)
class Stream:
    """A stream's stored entries chunk by chunk, and their records."""

    end: int  # the readable end when it began
    chunks: AsyncIterator[list[memoryview] | None]  # None: nothing for idle_s, a keepalive's turn
    decode: Records
    control: bool

    def records(self, chunk: Iterable[memoryview]) -> Iterator[Record]:
        """The records of a chunk's entries that the read shows."""
        decode = self.decode
        return (decode(entry) for entry in shown((e for view in chunk for e in iter_entries(view)), self.control))


class LogReads:
    """Reads of this member's log. `topic_name` names messages' topics (None: by their ids only)."""

    def __init__(self, service: LogService, consumers: ConsumerCommits, topic_name: TopicName | None = None) -> None:
        self.service = service
        self.consumers = consumers
        self.topic_name = topic_name

    def records(self) -> Records:
        """The decoder of one read's entries, in log order (a batch's head before them read from the store)."""
        return Records(self.service.store.get, self.topic_name)

    async def first_index(self, read: LogRead) -> int:
        start = read.start or 0
        if read.pos is not None:
            start = await self.service.index_at_pos(read.pos, read.linearizable)
        if read.consumer is not None:
            after = await self.consumers.resume_index(read.consumer, read.linearizable)
            start = start if after is None else after
        return start

    async def one(self, read: LogRead) -> Record:
        """The committed entry the read starts at."""
        return self.records()(await self.service.get(await self.first_index(read), read.linearizable))

    async def page(self, read: LogRead, size: int) -> Page:
        """Up to `size` entries (LogService.read's bound in bytes too), waiting up to read.wait_s for a first."""
        service = self.service
        start = await self.first_index(read)
        entries, committed = await service.read(start, size, read.linearizable)
        if not entries and read.wait_s and await service.await_entry(start, read.wait_s):
            entries, committed = await service.read(start, size, linearizable=False)
        decode = self.records()
        return Page([decode(entry) for entry in shown(entries, read.control)], start + len(entries), committed)

    async def stream(self, read: LogRead, idle_s: float | None = None) -> Stream:
        """The read's entries as a stream; its first chunk is read now, before the answer's status goes
        out, so that a start cleaned away is an error, not a stream cut short."""
        service = self.service
        start = await self.first_index(read)
        requested = start + read.limit - 1 if read.limit else sys.maxsize
        end = await service.readable_end(start, requested, read.linearizable)
        if end < start and read.wait_s and not read.follow and await service.await_entry(start, read.wait_s):
            end = service.node.committed_index
        last = min(end, requested)
        first = None
        if last >= start:
            first = await service.read_raw(start, last - start + 1, linearizable=False)
        chunks = committed_chunks(service, first, start, requested if read.follow else last, follow=read.follow,
                                  budget=service.follow_budget, idle_s=idle_s)
        return Stream(end, chunks, self.records(), read.control)


def shown(entries: Iterable[Entry], control: bool) -> Iterator[Entry]:
    """What a reader of data gets: the bookkeeping entries (named consumers' commits, producer sessions,
    the cluster version, topics and queue commits) only when it asks."""
    return iter(entries) if control else (entry for entry in entries if entry.magic not in BOOKKEEPING_MAGICS)
