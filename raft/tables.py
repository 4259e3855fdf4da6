"""The tables a member derives from its log, in one registry (RocketMQ's CommitLogDispatcher list).

Configurations, producer sessions, consumer positions, the cluster version, the topic catalog
and the consume queues are each made of some entries of the log. Each is a `LogTable`: it says
which control entries it is made of, and what it does when entries join the log (a leader's
append or a follower's push), leave it (a truncation), commit, or are replaced by a snapshot
install; how it is saved with the checkpoint and restored on start. The registry hands each
control entry to the tables made of it, in log order with the runs the store found as it
validated the entries (a producer's entries, a queue's messages), reading each control entry
once. Adding a table is one module and one line in raft.node.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, Protocol

from raftlog.storage.codec import Entry, ProducedRun
from raftlog.storage.errors import StorageError
from raftlog.storage.message import QueuedRun
from raftlog.storage.protocol import FollowerAppend, LogStore

log = logging.getLogger("raftlog.raft.tables")
CONTROL, PRODUCED, QUEUED = 0, 1, 2  # what a follower's push brought, in this order where they share an index


class LogTable:
    """A table made of entries of the log; every step does nothing unless the table says otherwise."""

    name: ClassVar[str]  # its key in the checkpoint and in a snapshot install
    magics: ClassVar[frozenset[int]] = frozenset()  # the control entries it is made of
    replays: ClassVar[frozenset[int]] = frozenset()  # the other entries a start hands it (`replayed`)
    checkpointed: ClassVar[bool] = True  # kept in the checkpoint
    sent: ClassVar[bool] = True  # sent with a snapshot install
    _changes: int = 0

    @property
    def changes(self) -> int:
        """Counts the table's changes: the checkpoint writes a table whose count moved."""
        return self._changes

    def appended(self, index: int, magic: int, body: bytes | memoryview) -> None:
        """A control entry of `magics` joined the log at `index`, in log order: a leader's or a follower's."""

    def produced(self, run: ProducedRun) -> None:
        """A producer's entries joined the log, in log order among the control entries."""

    def queued(self, run: QueuedRun) -> None:
        """A queue's messages joined the log, in log order among the control entries."""

    def committed(self, index: int) -> None:
        """The commit index moved to `index`."""

    def truncated(self, from_index: int) -> None:
        """Entries from `from_index` on left the log."""

    def installed(self, index: int, data: bytes | None) -> None:
        """The log restarts after `index`, with the leader's table as it encoded it (None: it sent none)."""

    def encode(self) -> bytes:
        return b""

    def restore(self, saved: bytes | None) -> int:
        """On start: the table as the checkpoint saved it; returns the first index `replayed` must see."""
        return 1 << 63

    def replayed(self, entry: Entry) -> None:
        """On start, an entry of `magics` or `replays` after the saved table, in log order."""
        if entry.magic in self.magics:
            self.appended(entry.index, entry.magic, entry.body)


class Checkpointing(Protocol):
    def watch_tables(self, **sources: LogTable) -> None: ...


class Tables:
    """Every table of a member; the handler, the leader's appends, the dispatchers and the start call it."""

    def __init__(self, self_id: str, store: LogStore, tables: Sequence[LogTable]) -> None:
        self.self_id = self_id
        self.store = store
        self.tables = tuple(tables)
        self._made_of: dict[int, tuple[LogTable, ...]] = {}
        for table in self.tables:
            for magic in table.magics:
                self._made_of[magic] = (*self._made_of.get(magic, ()), table)
        self._producers = tuple(t for t in self.tables if type(t).produced is not LogTable.produced)
        self._queues = tuple(t for t in self.tables if type(t).queued is not LogTable.queued)

    def restore(self, saved: Mapping[str, bytes | None], checkpoint: Checkpointing) -> None:
        """On start: each table as the checkpoint saved it, then the entries of the log after them that the
        tables are made of, each read once; from then on the checkpoint saves the tables that change."""
        starts = [table.restore(saved.get(table.name)) for table in self.tables]
        wanted = {magic for table in self.tables for magic in table.magics | table.replays}
        for index in self.store.indices_of(frozenset(wanted), min(starts, default=1 << 63)):
            try:
                entry = self.store.get(index)
            except StorageError as exc:  # damaged: the scrub repairs it; its producer may see one duplicate
                log.warning("%s: entry %d not read for the tables: %s", self.self_id, index, exc)
                continue
            for table, start in zip(self.tables, starts, strict=True):
                if index >= start and entry.magic in table.magics | table.replays:
                    table.replayed(entry)
        checkpoint.watch_tables(**{table.name: table for table in self.tables if table.checkpointed})

    def appended(self, index: int, magic: int, body: bytes | memoryview) -> None:
        """The leader wrote a control entry."""
        for table in self._made_of.get(magic, ()):
            table.appended(index, magic, body)

    def produced(self, run: ProducedRun) -> None:
        for table in self._producers:
            table.produced(run)

    def queued(self, run: QueuedRun) -> None:
        for table in self._queues:
            table.queued(run)

    def took(self, appended: FollowerAppend) -> None:
        """A follower's push brought entries: each control entry read once, in log order with the runs."""
        steps: list[tuple[int, int, Any]] = [(index, CONTROL, index) for index in appended.control_indices]
        steps += [(run[3], PRODUCED, run) for run in appended.produced]
        steps += [(run[3], QUEUED, run) for run in appended.queued]
        if appended.produced or appended.queued:
            steps.sort(key=lambda step: step[:2])
        for _index, kind, step in steps:
            if kind == PRODUCED:
                self.produced(step)
            elif kind == QUEUED:
                self.queued(step)
            else:
                try:
                    entry = self.store.get(step)
                except StorageError as exc:  # damaged as it arrived: the scrub repairs it
                    log.error("%s: control entry %d not read: %s", self.self_id, step, exc)
                    continue
                self.appended(step, entry.magic, entry.body)

    def committed(self, index: int) -> None:
        for table in self.tables:
            table.committed(index)

    def truncated(self, from_index: int) -> None:
        for table in self.tables:
            table.truncated(from_index)

    def installed(self, index: int, data: Mapping[str, bytes]) -> None:
        for table in self.tables:
            if table.sent:
                table.installed(index, data.get(table.name))

    def encode(self) -> dict[str, bytes]:
        """What a snapshot install sends: every table it carries, by name."""
        return {table.name: table.encode() for table in self.tables if table.sent}
