"""Named consumers' committed positions, kept in the log itself.

A consumer commits a position with a CONSUMER control entry (its name, the
index of the last entry it has processed, optional metadata; position -1
removes it). Every member folds these entries into its table as they commit,
in log order, so every member answers the same for the same commit index, a
new leader included, and the table needs no store of its own beyond the
checkpoint's copy (a restart loads it and reads the log after it).

The leader judges a client's commit (a `ConsumerAsk`) under the append lock,
against its latest view: the committed table with the log's uncommitted
consumer entries on top. It refuses a compare-and-set (an expected current
position) that finds another, a position past its log's end, and a new
consumer past `consumers_max` or its owner's `consumers_per_name_max`; the
entry it then writes says everything, so followers fold without judging.

From cluster version 1 (raft.cluster_version) a consumer has an owner, the
caller that created it (its token's name), and a flag: retention keeps what a
flagged consumer has not processed (the floor, `floor`). Both are written in
the entry's extended form, from that version on, so every member counts a
name's consumers alike; a later commit keeps the owner, and keeps the flag
unless it sets it (an admin's, which the API checks). Below version 1 a commit
is written in the old form, owner and flag left out; a consumer created then
has no owner, and counts against no name's quota, as long as it lives.

A consumer that committed nothing in `consumer_idle_entries` entries (log
time: every member reaches the same answer) has expired, as in Kafka's
offsets.retention.
"""

from __future__ import annotations

import json
import logging
import re
import struct
from typing import NamedTuple

from raftlog.raft.config import RaftConfig
from raftlog.raft.errors import (
    ConsumerConflictError,
    ConsumerNotFoundError,
    ConsumerPositionError,
    ConsumersFullError,
)
from raftlog.raft.member_state import MemberState
from raftlog.raft.tables import LogTable
from raftlog.storage.codec import Magic
from raftlog.storage.protocol import LogStore

log = logging.getLogger("raftlog.raft.consumers")

# A CONSUMER entry's body (storage.codec has the layout): the old form, then from cluster version 1
# the extended form, marked by the top bit of the name's length (a name has at most 128 bytes)
RECORD = struct.Struct(">qH")  # position (-1: removed), the name's length; then the name, then the metadata
EXTENDED = 0x8000  # in RECORD's length: the name is followed by EXTRA and the owner, then the metadata
EXTRA = struct.Struct(">BB")  # flags, the owner's length; then the owner
FLOOR = 0x01  # flags: retention keeps what the consumer has not processed
OWNER_BYTES_MAX = 255
NAME = re.compile(r"[A-Za-z0-9._-]{1,128}")
METADATA_BYTES_MAX = 1024
ABSENT = -1  # an expected position that says "no such consumer yet"


class ConsumerCommit(NamedTuple):
    """A CONSUMER entry's body."""

    name: str
    position: int  # the index of the last entry processed; -1: the consumer is removed
    metadata: str = ""
    owner: str | None = None  # who created it ("": nobody, created below version 1); None: the old form
    floor: bool = False  # retention keeps what it has not processed (the extended form only)

    def encode(self) -> bytes:
        name = self.name.encode()
        if self.owner is None:
            assert not self.floor
            return RECORD.pack(self.position, len(name)) + name + self.metadata.encode()
        owner = self.owner.encode()
        assert len(name) < EXTENDED
        assert len(owner) <= OWNER_BYTES_MAX
        return (RECORD.pack(self.position, EXTENDED | len(name)) + name + EXTRA.pack(FLOOR if self.floor else 0,
                len(owner)) + owner + self.metadata.encode())

    @classmethod
    def decode(cls, body: bytes | memoryview) -> ConsumerCommit:
        """ValueError if `body` is not what `encode` writes."""
        if len(body) < RECORD.size:
            raise ValueError(f"a consumer entry of {len(body)} bytes")
        position, name_size = RECORD.unpack_from(body)
        end = RECORD.size + (name_size & ~EXTENDED)
        if len(body) < end or position < -1:
            raise ValueError("a consumer entry's name or position is out of bounds")
        name = bytes(body[RECORD.size:end]).decode()
        if not name_size & EXTENDED:
            return cls(name, position, bytes(body[end:]).decode())
        if len(body) < end + EXTRA.size:
            raise ValueError("a consumer entry's flags are cut off")
        flags, owner_size = EXTRA.unpack_from(body, end)
        owner_end = end + EXTRA.size + owner_size
        if len(body) < owner_end or flags & ~FLOOR:
            raise ValueError("a consumer entry's owner or flags are out of bounds")
        return cls(name, position, bytes(body[owner_end:]).decode(), bytes(body[end + EXTRA.size:owner_end]).decode(),
                   bool(flags & FLOOR))


class ConsumerAsk(NamedTuple):
    """A commit (position -1: a removal) as a client asks it of the leader, which makes the entry of
    it and of the latest table (`ConsumerPositions.decide`)."""

    name: str
    position: int
    metadata: str = ""
    expected: int | None = None  # a compare-and-set: the position it must find (ABSENT: no such consumer)
    caller: str = ""  # who asks: the owner of a consumer it creates
    floor: bool | None = None  # the retention-floor flag set or cleared (an admin's); None: as it is


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
    owner: str = ""  # the caller that created it ("": none recorded, created below cluster version 1)
    floor: bool = False  # retention keeps what it has not processed


class ConsumerPositions(LogTable):
    """The table, as of `folded_index`, and the consumer entries after it that the log holds."""

    name = "consumers"
    magics = frozenset((Magic.CONSUMER,))

    def __init__(self, config: RaftConfig, state: MemberState, store: LogStore) -> None:
        self.config = config
        self.state = state
        self.store = store
        self.table: dict[str, ConsumerPosition] = {}
        self.folded_index = -1  # every consumer entry up to here is in the table
        # the log's consumer entries after folded_index, in order, each read as it joined the log (None: not ours)
        self.pending: list[tuple[int, ConsumerCommit | None]] = []

    @property
    def changes(self) -> int:
        """Counts every change of the table (folded first): the checkpoint writes one that changed."""
        self.fold()
        return self._changes

    # -- the log moves -----------------------------------------------------------------

    def appended(self, index: int, magic: int, body: bytes | memoryview) -> None:
        """A consumer entry joined the log, in log order (one a snapshot's table holds is skipped)."""
        if index > self.folded_index:
            self.pending.append((index, self._read(index, body)))

    def committed(self, index: int) -> None:
        if self.pending and self.pending[0][0] <= index:
            self.fold()

    def truncated(self, from_index: int) -> None:
        """Entries from `from_index` on left the log (never committed ones: the table keeps)."""
        self.pending = [p for p in self.pending if p[0] < from_index]

    def fold(self) -> None:
        """Take the committed consumer entries into the table."""
        committed = self.state.committed_index
        if committed <= self.folded_index:
            return
        taken = 0
        for index, commit in self.pending:
            if index > committed:
                break
            taken += 1
            if commit is not None:
                self._apply(self.table, commit, index)
        del self.pending[:taken]
        self.folded_index = committed
        if taken:
            self._expire(committed)
            self._changes += 1

    def _read(self, index: int, body: bytes | memoryview) -> ConsumerCommit | None:
        try:
            return ConsumerCommit.decode(body)
        except ValueError as exc:  # not ours: said, skipped
            log.error("%s: consumer entry %d not taken: %s", self.config.self_id, index, exc)
            return None

    @staticmethod
    def _apply(table: dict[str, ConsumerPosition], commit: ConsumerCommit, index: int) -> None:
        if commit.position < 0:
            table.pop(commit.name, None)
        else:
            table[commit.name] = ConsumerPosition(commit.position, commit.metadata, index, commit.owner or "",
                                                  commit.floor)

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
        """The lowest position of a live consumer with the retention-floor flag (None: no such consumer),
        for retention's floor."""
        positions = [p.position for p in self.live().values() if p.floor]
        return min(positions) if positions else None

    def decide(self, ask: ConsumerAsk, extended: bool) -> ConsumerCommit:
        """The leader, under its append lock: the entry to write for `ask`, in the extended form where
        `extended` (cluster version 1), else the old one. Raises if the compare-and-set fails, if a
        removal finds no consumer, if the position is past the log's end, or if a new consumer would
        pass consumers_max or (extended) its owner's consumers_per_name_max."""
        latest = self._latest()
        current = latest.get(ask.name)
        found = ABSENT if current is None else current.position
        leader = self.state.leader_id
        if ask.expected is not None and ask.expected != found:
            raise ConsumerConflictError(f"consumer {ask.name!r} is at {found}, not {ask.expected}", leader, found)
        if ask.position < 0:
            if current is None:
                raise ConsumerNotFoundError(f"no consumer {ask.name!r}", leader)
            return ConsumerCommit(ask.name, -1)  # a removal needs no owner nor flag: the old form
        if ask.position > self.store.end_index:
            raise ConsumerPositionError(f"position {ask.position} is past the log's end, {self.store.end_index}: a "
                                        "consumer commits the index of an entry it has processed", leader)
        if current is None:
            self._check_room(latest, ask.caller if extended else None)
        if not extended:
            assert not ask.floor
            return ConsumerCommit(ask.name, ask.position, ask.metadata)
        owner = ask.caller if current is None else current.owner
        floor = (current is not None and current.floor) if ask.floor is None else ask.floor
        return ConsumerCommit(ask.name, ask.position, ask.metadata, owner, floor)

    def _latest(self) -> dict[str, ConsumerPosition]:
        """The committed table with the log's uncommitted consumer entries on top."""
        latest = self.live(self.store.end_index + 1)
        for index, pending in self.pending:
            if pending is not None:
                self._apply(latest, pending, index)
        return latest

    def _check_room(self, latest: dict[str, ConsumerPosition], owner: str | None) -> None:
        """Raises if a new consumer of `owner` (None: none recorded) would pass a bound."""
        if len(latest) >= self.config.consumers_max:
            raise ConsumersFullError(f"{len(latest)} consumers; consumers_max is {self.config.consumers_max}",
                                     self.state.leader_id)
        if owner is None:
            return
        owned = sum(1 for p in latest.values() if p.owner == owner)
        if owned >= self.config.consumers_per_name_max:
            raise ConsumersFullError(f"{owner} has {owned} consumers; consumers_per_name_max is "
                                     f"{self.config.consumers_per_name_max}", self.state.leader_id)

    # -- the checkpoint and snapshot installs ---------------------------------------------

    def encode(self) -> bytes:
        """As JSON: each consumer's position, metadata and entry, and apart ("extras") the owners and
        flags, which the releases before cluster versions do not read (a snapshot may go to one)."""
        self.fold()
        extras = {name: [p.owner, p.floor] for name, p in self.table.items() if p.owner or p.floor}
        return json.dumps({"folded_index": self.folded_index, "consumers": [
            [name, *p[:3]] for name, p in self.table.items()], **({"extras": extras} if extras else {})},
            separators=(",", ":")).encode()

    def _decode(self, data: bytes | None, whose: str) -> tuple[dict[str, ConsumerPosition], int]:
        if not data:
            return {}, -1
        try:
            fields = json.loads(data)
            extras = fields.get("extras", {})
            table = {str(name): ConsumerPosition(int(position), str(metadata), int(index),
                                                 *_extra(extras.get(name, ("", False))))
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

    def installed(self, index: int, data: bytes | None) -> None:
        """The log restarts after `index` with the leader's table (its consumer entries after `index`,
        which pushes bring again, are skipped up to where that table was folded)."""
        self.table, folded = self._decode(data, "a snapshot's")
        self.folded_index = max(folded, index)
        self.pending = []
        self._changes += 1


def _extra(fields: list[object] | tuple[object, ...]) -> tuple[str, bool]:
    """A consumer's owner and flag as `encode` saved them (ValueError, TypeError if they are not)."""
    owner, floor = fields
    if not isinstance(owner, str) or not isinstance(floor, bool):
        raise TypeError(f"a consumer's owner and flag, not {fields!r}")
    return owner, floor
