"""Queue offsets: each topic-queue's next offset as of the log's tail (RocketMQ's topicQueueTable).

The leader gives a queue's messages the next offsets of that queue from its own log, its
uncommitted tail included, under the append lock: offsets are contiguous from 0 in each queue.
Every member keeps the same table from the messages' runs as they join its log, so a new leader
goes on from its own tail. A truncation takes each queue back to the first offset the entries cut
had taken: a truncation cuts uncommitted entries only, whose appends were never answered, so no
answered offset is ever given to another message.

Not in the checkpoint: a start reads the offsets from the consume queues, which hold every
committed message, and the messages of the log after them (restored first: raft.node lists the
dispatcher before this table). A snapshot install carries the
leader's committed offsets.
"""

from __future__ import annotations

import json
import logging
from collections import deque
from typing import Protocol

from raftlog.raft.tables import LogTable
from raftlog.storage.codec import Entry, Magic
from raftlog.storage.message import QueuedRun, queued_run, run_from, run_through

log = logging.getLogger("raftlog.raft.queues")

QueueKey = tuple[int, int]  # (topic_id, queue)


class Dispatched(Protocol):
    """The consume queues, restored (raft.consume_dispatch): their offsets, and where the log goes on."""

    start_index: int

    def next_offsets(self) -> dict[QueueKey, int]: ...


class QueueOffsets(LogTable):
    name = "queue_offsets"
    replays = frozenset((Magic.MESSAGE,))
    checkpointed = False

    def __init__(self, self_id: str, dispatched: Dispatched | None = None) -> None:
        """`dispatched`: the consume queues' dispatcher, whose queues give the offsets at a start."""
        self.self_id = self_id
        self.dispatched = dispatched
        self.next: dict[QueueKey, int] = {}  # as of the log's tail
        self.tail: deque[QueuedRun] = deque()  # the runs not known committed, in log order
        self.base_index = -1  # the runs up to here are in `next` and out of `tail` (a snapshot's)
        self.committed_index = -1

    def next_offset(self, topic_id: int, queue: int) -> int:
        return self.next.get((topic_id, queue), 0)

    # -- the log moves ---------------------------------------------------------------------

    def queued(self, run: QueuedRun) -> None:
        if run[4] <= self.base_index:
            return  # in the table already: a snapshot's
        if run[3] <= self.base_index:  # its start is: the rest is new
            run = run_from(run, self.base_index + 1)
        key = (run[0], run[1])
        expected = self.next.get(key, 0)
        if run[2] != expected:  # a leader of another release, or a bug: the checker's to find, said here
            log.error("%s: queue %d of topic %d: messages from offset %d at entry %d, expected %d", self.self_id,
                      run[1], run[0], run[2], run[3], expected)
        self.next[key] = run[2] + run[4] - run[3] + 1
        self.tail.append(run)

    def committed(self, index: int) -> None:
        tail = self.tail
        while tail and tail[0][3] <= index:
            run = tail.popleft()
            if run[4] > index:  # committed in part: the rest stays
                tail.appendleft(run_from(run, index + 1))
        self.committed_index = index

    def truncated(self, from_index: int) -> None:
        tail = self.tail
        while tail and tail[-1][4] >= from_index:
            run = tail.pop()
            self.next[(run[0], run[1])] = run[2] + max(0, from_index - run[3])
            if run[3] < from_index:  # cut inside: its first part stays
                tail.append(run_through(run, from_index - 1))
                break

    def replayed(self, entry: Entry) -> None:
        self.queued(queued_run(entry))

    # -- starts and snapshot installs --------------------------------------------------------

    def restore(self, saved: bytes | None) -> int:
        """The consume queues' offsets, and the log's messages after what they hold (without consume
        queues, the simulation's: every message of the log)."""
        if self.dispatched is None:
            return 0
        self.next = self.dispatched.next_offsets()
        return self.dispatched.start_index

    def committed_offsets(self) -> dict[QueueKey, int]:
        """The table without its uncommitted tail."""
        offsets = dict(self.next)
        for run in reversed(self.tail):
            offsets[(run[0], run[1])] = run[2]
        return offsets

    def encode(self) -> bytes:
        """The committed offsets, and the index they hold every message up to (the commit index: the
        tail holds the messages after it)."""
        return json.dumps({"through": self.committed_index, "queues": [[*key, offset] for key, offset in
                                                          self.committed_offsets().items()]},
                          separators=(",", ":")).encode()

    def installed(self, index: int, data: bytes | None) -> None:
        """The leader's offsets as of an index at or past `index` (its messages after it come again in
        pushes, skipped up to there)."""
        try:
            fields = json.loads(data or b'{"through": -1, "queues": []}')
            offsets = {(int(t), int(q)): int(n) for t, q, n in fields["queues"]}
            through = int(fields["through"])
        except (KeyError, TypeError, ValueError) as exc:
            log.error("%s: a snapshot's queue offsets not taken: %s", self.self_id, exc)
            offsets, through = {}, index
        self.next = offsets
        self.tail.clear()
        self.base_index = max(index, through)
        self.committed_index = max(self.committed_index, self.base_index)
