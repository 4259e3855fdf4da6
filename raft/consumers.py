"""Named consumers' committed positions, kept in the log itself.

A consumer commits a position with a CONSUMER control entry (its name, the
index of the last entry it has processed, optional metadata; position -1
removes it). Every member folds these entries into its table as they commit,
in log order, so every member answers the same for the same commit index, a
new leader included, and the table needs no store of its own beyond the
checkpoint's copy (a restart loads it and reads the log after it).

The leader checks a compare-and-set (an expected current position) under the
append lock, against its latest view: the committed table with the log's
uncommitted consumer entries on top. The entry it then writes is plain, so
followers fold without judging.

A consumer that committed nothing in `consumer_idle_entries` entries (log
time: every member reaches the same answer) has expired, as in Kafka's
offsets.retention.
"""

from __future__ import annotations

import json
import logging
import re
import struct
from collections.abc import Iterable
from typing import NamedTuple

from raftlog.raft.config import RaftConfig
from raftlog.raft.errors import ConsumerConflictError, ConsumerNotFoundError, ConsumersFullError
from raftlog.raft.member_state import MemberState
from raftlog.storage.codec import Entry, Magic
from raftlog.storage.errors import StorageError
from raftlog.storage.protocol import LogStore

log = logging.getLogger("raftlog.raft.consumers")

RECORD = struct.Struct(">qH")  # position (-1: removed), the name's length; then the name, then the metadata
NAME = re.compile(r"[A-Za-z0-9._-]{1,128}")
METADATA_BYTES_MAX = 1024
ABSENT = -1  # an expected position that says "no such consumer yet"


class ConsumerCommit(NamedTuple):
    """A CONSUMER entry's body."""

    name: str
    position: int  # the index of the last entry processed; -1: the consumer is removed
    metadata: str = ""

    def encode(self) -> bytes:
        name = self.name.encode()
        return RECORD.pack(self.position, len(name)) + name + self.metadata.encode()

    @classmethod
    def decode(cls, body: bytes | memoryview) -> ConsumerCommit:
        """ValueError if `body` is not what `encode` writes."""
        if len(body) < RECORD.size:
            raise ValueError(f"a consumer entry of {len(body)} bytes")
        position, name_size = RECORD.unpack_from(body)
        end = RECORD.size + name_size
        if len(body) < end or position < -1:
            raise ValueError("a consumer entry's name or position is out of bounds")
        return cls(bytes(body[RECORD.size:end]).decode(), position, bytes(body[end:]).decode())


def commit_problem(name: str, position: int, metadata: str) -> str | None:
    """Why a client's commit is malformed (None: it is not): its bad request's message."""
    if NAME.fullmatch(name) is None:
        return f"a consumer name is 1 to 128 letters, digits, '.', '_' or '-', not {name[:140]!r}"
    if not 0 <= position < 1 << 63:  # RECORD's signed 64 bits
        return f"a position is the index of the last entry processed, 0 to 2^63 - 1, not {position}"
    if len(metadata.encode()) > METADATA_BYTES_MAX:
        return f"a consumer's metadata is at most {METADATA_BYTES_MAX} bytes"
    return None


class ConsumerPosition(NamedTuple):
    position: int
    metadata: str
    entry_index: int  # the entry that committed it: the consumer's last sign of life, in log time


class ConsumerPositions:
    """The table, as of `folded_index`, and the consumer entries after it that the log holds."""

    magics: frozenset[int] = frozenset((Magic.CONSUMER,))  # what a start replays

    def __init__(self, config: RaftConfig, state: MemberState, store: LogStore) -> None:
        self.config = config
        self.state = state
        self.store = store
        self.table: dict[str, ConsumerPosition] = {}
        self.folded_index = -1  # every consumer entry up to here is in the table
        self.pending: list[int] = []  # the log's consumer entries after folded_index, in order
        self._changes = 0

    @property
    def changes(self) -> int:
        """Counts every change of the table (folded first): the checkpoint writes one that changed."""
        self.fold()
        return self._changes

    # -- the log moves -----------------------------------------------------------------

    def appended(self, indices: Iterable[int]) -> None:
        """Consumer entries joined the log, in log order (those a snapshot's table holds are skipped)."""
        self.pending.extend(i for i in indices if i > self.folded_index)

    def truncated(self, from_index: int) -> None:
        """Entries from `from_index` on left the log (never committed ones: the table keeps)."""
        self.pending = [i for i in self.pending if i < from_index]

    def fold(self) -> None:
        """Take the committed consumer entries into the table."""
        committed = self.state.committed_index
        if committed <= self.folded_index:
            return
        taken = 0
        for index in self.pending:
            if index > committed:
                break
            taken += 1
            commit = self._read(index)
            if commit is not None:
                self._apply(self.table, commit, index)
        del self.pending[:taken]
        self.folded_index = committed
        if taken:
            self._expire(committed)
            self._changes += 1

    def _read(self, index: int) -> ConsumerCommit | None:
        try:
            entry = self.store.get(index)
            return ConsumerCommit.decode(entry.body) if entry.magic == Magic.CONSUMER else None
        except (StorageError, ValueError) as exc:  # damaged (the scrub repairs it) or not ours: said, skipped
            log.error("%s: consumer entry %d not taken: %s", self.config.self_id, index, exc)
            return None

    @staticmethod
    def _apply(table: dict[str, ConsumerPosition], commit: ConsumerCommit, index: int) -> None:
        if commit.position < 0:
            table.pop(commit.name, None)
        else:
            table[commit.name] = ConsumerPosition(commit.position, commit.metadata, index)

    def _expire(self, through: int) -> None:
        horizon = through - self.config.consumer_idle_entries
        for name in [name for name, p in self.table.items() if p.entry_index < horizon]:
            del self.table[name]

    # -- what readers and the leader see ---------------------------------------------------

    def live(self, through: int | None = None) -> dict[str, ConsumerPosition]:
        """The committed table as of commit index `through` (default: this member's), expired ones left out."""
        self.fold()
        horizon = (self.state.committed_index if through is None else through) - self.config.consumer_idle_entries
        return {name: p for name, p in sorted(self.table.items()) if p.entry_index >= horizon}

    def floor(self) -> int | None:
        """The lowest live position (None: no consumer), for retention's floor."""
        positions = [p.position for p in self.live().values()]
        return min(positions) if positions else None

    def check(self, commit: ConsumerCommit, expected: int | None) -> None:
        """The leader, under its append lock, before it writes `commit`: raises if the compare-and-set
        fails (`expected`: the position it must find; ABSENT: no such consumer), if a removal finds no
        consumer, or if a new one would pass consumers_max."""
        latest = self.live(self.store.end_index + 1)
        for index in self.pending:
            pending = self._read(index)
            if pending is not None:
                self._apply(latest, pending, index)
        current = latest.get(commit.name)
        found = ABSENT if current is None else current.position
        if expected is not None and expected != found:
            raise ConsumerConflictError(f"consumer {commit.name!r} is at {found}, not {expected}",
                                        self.state.leader_id, found)
        if commit.position < 0 and current is None:
            raise ConsumerNotFoundError(f"no consumer {commit.name!r}", self.state.leader_id)
        if current is None and len(latest) >= self.config.consumers_max:
            raise ConsumersFullError(f"{len(latest)} consumers; consumers_max is {self.config.consumers_max}",
                                     self.state.leader_id)

    # -- the checkpoint and snapshot installs ---------------------------------------------

    def encode(self) -> bytes:
        self.fold()
        return json.dumps({"folded_index": self.folded_index, "consumers": [
            [name, *p] for name, p in self.table.items()]}, separators=(",", ":")).encode()

    def _decode(self, data: bytes | None, whose: str) -> tuple[dict[str, ConsumerPosition], int]:
        if not data:
            return {}, -1
        try:
            fields = json.loads(data)
            table = {str(name): ConsumerPosition(int(position), str(metadata), int(index))
                     for name, position, metadata, index in fields["consumers"]}
            return table, int(fields["folded_index"])
        except (KeyError, TypeError, ValueError) as exc:
            log.error("%s consumer table not taken (consumers resume from the log after it): %s", whose, exc)
            return {}, -1

    def restore(self, saved: bytes | None) -> int:
        """On start, the checkpoint's table; returns the first index whose entries `replayed` must see
        (the table holds only committed entries: nothing in it is cut)."""
        self.table, self.folded_index = self._decode(saved, "the checkpoint's")
        self.pending = []
        return self.folded_index + 1

    def replayed(self, entry: Entry) -> None:
        if entry.magic == Magic.CONSUMER:
            self.appended([entry.index])

    def installed(self, index: int, data: bytes | None) -> None:
        """The log restarts after `index` with the leader's table (its consumer entries after `index`,
        which pushes bring again, are skipped up to where that table was folded)."""
        self.table, folded = self._decode(data, "a snapshot's")
        self.folded_index = max(folded, index)
        self.pending = []
        self._changes += 1
