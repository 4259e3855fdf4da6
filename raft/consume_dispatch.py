"""The consume queues' dispatcher: committed messages into their topic-queue's consume queue (RocketMQ's
ReputMessageService feeding its CommitLogDispatcher).

A table of the log like the others (raft.tables): the messages' runs come as their entries join the
log, and each run is dispatched once committed, never before: a consume queue holds committed
messages only, the same on every member. A unit's pos and size come from the entry's index record and
its tags code from the entry's body (storage.reader.message_units), without decoding the message.
A topic's deletion drops its consume queues once the deletion commits.

The queues are derived data, flushed lazily by `flush` (one syncfs of their file system, in a
thread); their dispatched point says through which entry they are on disk. At a start the queues are
cut where the log goes on after that point (RocketMQ's truncateDirtyLogicFiles), the queue offsets
(raft.queues) are read from them, and the messages after the point are dispatched again. A snapshot
install carries each queue's offset as of the install's first entry: every queue restarts empty
there, and the installed log is dispatched from its start. Retention moves each queue's first offset
to the log's first kept entry (`retained`, RocketMQ's correctMinOffset).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections import deque

from raftlog.raft.tables import LogTable
from raftlog.raft.topics import TopicChange
from raftlog.storage.codec import Entry, Magic
from raftlog.storage.consume_queues import ConsumeQueues, DispatchedPoint, syncfs
from raftlog.storage.message import QueuedRun, queued_run, run_from, run_through
from raftlog.storage.protocol import LogStore

log = logging.getLogger("raftlog.raft.consume_dispatch")
FLUSH_INTERVAL_S = 1.0


class ConsumeQueueDispatcher(LogTable):
    name = "consume_queues"
    magics = frozenset((Magic.TOPIC,))
    replays = frozenset((Magic.MESSAGE,))
    checkpointed = False  # the queues are their own record, with their dispatched point

    def __init__(self, self_id: str, store: LogStore, queues: ConsumeQueues) -> None:
        self.self_id = self_id
        self.store = store
        self.queues = queues
        self.pending: deque[QueuedRun] = deque()  # the messages not dispatched yet, in log order
        self.deletions: deque[tuple[int, int]] = deque()  # (entry, topic_id) of deletions not committed yet
        self.dispatched_index = -1  # every message up to here is in its queue
        self.start_index = 0  # where a start dispatched again from

    # -- the log moves ---------------------------------------------------------------------

    def queued(self, run: QueuedRun) -> None:
        if run[4] > self.dispatched_index:
            self.pending.append(run)

    def appended(self, index: int, magic: int, body: bytes | memoryview) -> None:
        try:
            change = TopicChange.decode(body)
        except ValueError:
            return  # said by the catalog
        if change.op == "delete" and isinstance(change.fields.get("id"), int):
            self.deletions.append((index, change.fields["id"]))

    def committed(self, index: int) -> None:
        pending, runs = self.pending, []
        while pending and pending[0][3] <= index:
            run = pending.popleft()
            if run[4] > index:  # committed in part: the rest waits
                pending.appendleft(run_from(run, index + 1))
                run = run_through(run, index)
            runs.append(run)
        if runs:
            last = runs[-1][4]
            self.queues.dispatch([(t, q, offset, self.store.message_units(first, end))
                                  for t, q, offset, first, end, *_ in runs],
                                 DispatchedPoint(last, self.store.pos_at(last)))
            self.dispatched_index = last
        while self.deletions and self.deletions[0][0] <= index:
            _index, topic_id = self.deletions.popleft()
            self.queues.drop_topic(topic_id)

    def truncated(self, from_index: int) -> None:
        while self.pending and self.pending[-1][4] >= from_index:  # never committed: never dispatched
            run = self.pending.pop()
            if run[3] < from_index:
                self.pending.append(run_through(run, from_index - 1))
                break
        while self.deletions and self.deletions[-1][0] >= from_index:
            self.deletions.pop()

    # -- starts, snapshot installs and retention ---------------------------------------------

    def restore(self, saved: bytes | None) -> int:
        """Cut the queues where the log goes on after their dispatched point, and dispatch again from
        there (the point's entry must still be where it was: else from the log's start)."""
        store, point = self.store, self.queues.dispatched
        start = store.begin_index
        if point is not None and store.begin_index <= point.log_index <= store.end_index \
                and store.pos_at(point.log_index) == point.pos:
            start = point.log_index + 1
        elif point is not None:
            log.warning("%s: the consume queues' dispatched point %s is not in the log: dispatched again from its "
                        "start, %d", self.self_id, point, start)
        cut = store.pos_at(start) if start <= store.end_index else store.write_pos
        self.queues.recover(cut if cut is not None else 0)
        self.start_index = start
        self.dispatched_index = start - 1
        return start

    def replayed(self, entry: Entry) -> None:
        if entry.magic == Magic.MESSAGE:
            self.queued(queued_run(entry))
        else:
            self.appended(entry.index, entry.magic, entry.body)

    def next_offsets(self) -> dict[tuple[int, int], int]:
        """Each queue's next offset, as of the start's dispatched entries (raft.queues reads it)."""
        return self.queues.next_offsets()

    def encode(self) -> bytes:
        """Each queue's offset as of the log's first kept entry: a snapshot install's queues start there."""
        begin = self.store.begin_pos
        offsets = self.queues.offsets_at(begin if begin is not None else 0)
        return json.dumps([[*key, offset] for key, offset in offsets.items()], separators=(",", ":")).encode()

    def installed(self, index: int, data: bytes | None) -> None:
        try:
            offsets = {(int(t), int(q)): int(n) for t, q, n in json.loads(data or b"[]")}
        except (TypeError, ValueError) as exc:
            log.error("%s: a snapshot's consume queue offsets not taken (its queues start at 0): %s", self.self_id,
                      exc)
            offsets = {}
        self.queues.reset(offsets)
        self.pending.clear()
        self.deletions.clear()
        self.dispatched_index = index

    async def retained(self) -> None:
        """Retention removed the log's head files: every queue's first offset moves up to what is kept
        (a queue at a time, letting the loop serve between them)."""
        begin = self.store.begin_pos
        if begin is not None:
            for done, _step in enumerate(self.queues.correct_min_offsets(begin)):
                if done % 64 == 63:
                    await asyncio.sleep(0)

    async def flush(self) -> None:
        """The queues' units on disk, and then their dispatched point (the sync in a thread); nothing at
        rest (a syncfs of an idle file system still costs a second's tick its CPU)."""
        if self.queues.flushed:
            return
        root_fd, point = self.queues.flush_parts()
        await asyncio.to_thread(syncfs, root_fd)
        await asyncio.to_thread(self.queues.save_point, point)

    async def run(self) -> None:
        """Flush every FLUSH_INTERVAL_S, lazily: the queues are rebuilt from the log after a crash."""
        while True:
            await asyncio.sleep(FLUSH_INTERVAL_S)
            try:
                await self.flush()
            except OSError as exc:  # the next round tries again; a start rebuilds from the point saved
                log.error("%s: the consume queues were not flushed: %s", self.self_id, exc)

    async def close(self) -> None:
        """The last flush, and the files closed (the member stops)."""
        await self.flush()
        self.queues.close()
