"""The cluster version: the format and protocol level every member of the group knows (etcd's
cluster version, Redpanda's feature table).

Each member reports a level in every heartbeat answer: the highest its release knows (LEVEL),
or less where its `reported_level` setting says so (an operator holding an upgrade back). Members
of the releases before levels report none, and count as 0. The leader appends a CLUSTER_VERSION
entry with the lowest level that every voter and learner of its configuration reports, once that
is above the log's, and never lower. A new entry type, or a new field in one, is written only from
the level that brings it (`require`): a member of a lower level could not read it.

The level in force is the log's latest CLUSTER_VERSION entry, from its append on (as a
configuration is): a truncation takes it back, and a member refuses to start on a log whose level
is above its own.
"""

from __future__ import annotations

import json
import logging
import struct
from collections.abc import Iterable

from raftlog.raft.errors import ClusterVersionError
from raftlog.raft.member_state import MemberState
from raftlog.raft.tables import LogTable
from raftlog.raft.waiting import Signal, loop_time, wait_event
from raftlog.storage.codec import Magic
from raftlog.storage.errors import StorageError
from raftlog.storage.protocol import LogStore

log = logging.getLogger("raftlog.raft.cluster_version")

PRODUCER_OWNERS = 1  # producer sessions opened and closed by their owners: PRODUCER_SESSION entries
CONSUMER_OWNERS = 1  # the same release's: named consumers' owners and retention-floor flags (CONSUMER's extended form)
TOPICS = 2  # topics and queues: TOPIC, MESSAGE and QUEUE_COMMIT entries (raft.topics, raft.queues)
LEVEL = TOPICS  # what this release knows
FEATURES = {  # what each level brings: the entries and fields first written at it
    PRODUCER_OWNERS: "producer sessions with owners (PRODUCER_SESSION entries), and named consumers' owners "
                     "and retention-floor flags (CONSUMER entries' extended form)",
    TOPICS: "topics and their queues (TOPIC, MESSAGE and QUEUE_COMMIT entries)",
}
BODY = struct.Struct(">H")  # a CLUSTER_VERSION entry's body: the level


def encode_level(level: int) -> bytes:
    return BODY.pack(level)


def decode_level(body: bytes | memoryview) -> int:
    """ValueError if `body` is not what encode_level writes."""
    if len(body) != BODY.size:
        raise ValueError(f"a cluster version entry of {len(body)} bytes")
    return int(BODY.unpack(body)[0])


class ClusterVersion(LogTable):
    """The level in force as of this member's log tail, and on the leader what each member reports."""

    name = "cluster_version"
    magics = frozenset((Magic.CLUSTER_VERSION,))

    def __init__(self, self_id: str, own_level: int, state: MemberState, store: LogStore) -> None:
        self.self_id = self_id
        self.own_level = own_level  # what this member reports
        self.state = state
        self.store = store
        self.entries: list[tuple[int, int]] = []  # (index, level) of the log's CLUSTER_VERSION entries, in order
        self.reported: dict[str, int] = {}  # the leader's: each other member's level, as it last answered
        self.raised = Signal()  # fired when an entry raises the level

    @property
    def level(self) -> int:
        return self.entries[-1][1] if self.entries else 0

    # -- the log moves -------------------------------------------------------------------

    def appended(self, index: int, magic: int, body: bytes | memoryview) -> None:
        """A CLUSTER_VERSION entry joined the log: its level is in force."""
        try:
            level = decode_level(body)
        except ValueError as exc:  # not ours: said, skipped (the leader writes only what encode_level does)
            log.error("%s: cluster version entry %d not taken: %s", self.self_id, index, exc)
            return
        if self.entries and index <= self.entries[-1][0]:
            return  # in the table already (a snapshot's, then the same entries pushed again)
        self.entries.append((index, level))
        self._changes += 1
        self.raised.fire()
        if level > self.own_level:  # the leader heard this member report it: a setting lowered since
            log.error("%s: the group's cluster version is now %d, above this member's level %d", self.self_id,
                      level, self.own_level)

    def truncated(self, from_index: int) -> None:
        """Entries from `from_index` on left the log."""
        kept = [entry for entry in self.entries if entry[0] < from_index]
        if len(kept) != len(self.entries):
            self.entries = kept
            self._changes += 1

    # -- the leader ------------------------------------------------------------------------

    def heard(self, member_id: str, level: int) -> None:
        self.reported[member_id] = level

    def forget_reports(self) -> None:
        """A new leader learns every member's level again."""
        self.reported.clear()

    def target(self, member_ids: Iterable[str]) -> int | None:
        """The level every member of `member_ids` has reported (this one's own included), None while
        one has not answered yet."""
        levels = [self.own_level]
        for member_id in member_ids:
            if member_id == self.self_id:
                continue
            if member_id not in self.reported:
                return None
            levels.append(self.reported[member_id])
        return min(levels)

    async def wait_for(self, level: int, timeout_s: float) -> None:
        """Until the level in force is `level` or more, at most `timeout_s`: a leader that has just
        heard every member report it raises it at its next heartbeat."""
        deadline = loop_time() + timeout_s
        while self.level < level and (left := deadline - loop_time()) > 0:
            await wait_event(self.raised.current(), left)

    def require(self, level: int, member_ids: Iterable[str]) -> None:
        """Raises ClusterVersionError unless the level in force is `level` or more: the error names what
        needs it and the members that hold it back."""
        if self.level >= level:
            return
        behind: list[tuple[str, int | None]] = [(self.self_id, self.own_level)] if self.own_level < level else []
        behind += sorted((m, self.reported.get(m)) for m in member_ids
                         if m != self.self_id and self.reported.get(m, 0) < level)
        shown = ", ".join(f"{m} (not heard from)" if lvl is None else f"{m} (level {lvl})" for m, lvl in behind)
        raise ClusterVersionError(
            f"{FEATURES.get(level, f'level {level}')} need cluster version {level}; it is {self.level}, held back "
            f"by {shown or 'no member now: the leader raises it at its next heartbeat'}", self.state.leader_id,
            [m for m, _ in behind])

    # -- the checkpoint, snapshot installs and starts ---------------------------------------

    def encode(self) -> bytes:
        """The entries, up to where the log they come from is committed first (a restart cuts there)."""
        return json.dumps({"stable_index": self.state.committed_index,
                           "entries": self.entries}, separators=(",", ":")).encode()

    def _decode(self, data: bytes | None, whose: str) -> tuple[list[tuple[int, int]], int]:
        if not data:
            return [], -1
        try:
            fields = json.loads(data)
            return [(int(i), int(level)) for i, level in fields["entries"]], int(fields["stable_index"])
        except (KeyError, TypeError, ValueError) as exc:
            log.error("%s cluster version not taken (it is read again from the log): %s", whose, exc)
            return [], -1

    def restore(self, saved: bytes | None) -> int:
        """On start: the checkpoint's entries, cut where its log was committed; returns the first index
        whose entries `replayed` must see."""
        entries, stable = self._decode(saved, "the checkpoint's")
        stable = min(stable, self.store.end_index)
        self.entries = [entry for entry in entries if entry[0] <= stable]
        return stable + 1

    def installed(self, index: int, data: bytes | None) -> None:
        """The log restarts after `index` with the leader's entries (its later ones come again in pushes)."""
        entries, _stable = self._decode(data, "a snapshot's")
        self.entries = [entry for entry in entries if entry[0] <= index]
        self._changes += 1

    def check_startable(self) -> None:
        """A member does not run a log of a level above its own: it could not read what that level writes."""
        if self.level > self.own_level:
            raise StorageError(f"the log's cluster version is {self.level} (entry {self.entries[-1][0]}), above "
                               f"this member's level {self.own_level}: run a release that knows level {self.level}")

