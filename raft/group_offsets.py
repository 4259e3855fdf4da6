"""Consumer groups' offsets per queue, kept in the log (RocketMQ's consumerOffset.json, Kafka's
__consumer_offsets): a named consumer becomes a consumer group with a committed offset per topic-queue.

A commit is a QUEUE_COMMIT control entry: the group, its owner, and any number of queues, each with
the offset of the next message the group reads there (Kafka's and RocketMQ's committed offset: 0,
nothing read yet; -1 removes the queue's offset), so one entry carries a commit of many queues.
The leader judges a client's commit under the append lock against its latest view (the committed
table with the log's uncommitted commits on top): each queue's expected offset, where the client
gives one, must be what it finds there (a compare-and-set over 8 queues is one entry, all or
nothing), an offset may not pass the queue's end, and a new group must have room. Every member
folds the entries as they commit, in log order, as consumer positions are (raft.consumers): every
member answers the same for the same commit index. A group that committed nothing in
consumer_idle_entries entries has expired.

A QUEUE_COMMIT entry's body (big-endian)::

    flags u8 (bit 0: remove the group) | name_len u8 | owner_len u8 | count u32 | name | owner
    then count x (topic_id u64 | queue u32 | offset i64)
"""

from __future__ import annotations

import json
import logging
import struct
from collections.abc import Callable, Sequence
from typing import NamedTuple

from raftlog.raft.config import RaftConfig
from raftlog.raft.consumers import NAME
from raftlog.raft.errors import ConsumerConflictError, ConsumerNotFoundError, ConsumerPositionError, ConsumersFullError
from raftlog.raft.member_state import MemberState
from raftlog.raft.tables import LogTable
from raftlog.storage.codec import Magic

log = logging.getLogger("raftlog.raft.group_offsets")

HEAD = struct.Struct(">BBBI")
QUEUE_OFFSET = struct.Struct(">QIq")
REMOVE_GROUP = 0x01
QUEUES_PER_COMMIT_MAX = 65_536
QueueKey = tuple[int, int]  # (topic_id, queue)


class GroupCommit(NamedTuple):
    """A QUEUE_COMMIT entry's body."""

    group: str
    owner: str
    offsets: tuple[tuple[int, int, int], ...]  # (topic_id, queue, offset); offset -1: the queue's is removed
    remove: bool = False

    def encode(self) -> bytes:
        name, owner = self.group.encode(), self.owner.encode()
        return b"".join((HEAD.pack(REMOVE_GROUP if self.remove else 0, len(name), len(owner), len(self.offsets)),
                         name, owner, *(QUEUE_OFFSET.pack(*offset) for offset in self.offsets)))

    @classmethod
    def decode(cls, body: bytes | memoryview) -> GroupCommit:
        """ValueError if `body` is not what `encode` writes."""
        if len(body) < HEAD.size:
            raise ValueError(f"a queue commit of {len(body)} bytes")
        flags, name_size, owner_size, count = HEAD.unpack_from(body)
        start = HEAD.size + name_size + owner_size
        if flags & ~REMOVE_GROUP or len(body) != start + count * QUEUE_OFFSET.size:
            raise ValueError("a queue commit's flags or sizes are out of bounds")
        offsets = tuple(QUEUE_OFFSET.iter_unpack(body[start:]))
        if any(offset < -1 for _t, _q, offset in offsets):
            raise ValueError("a queue commit's offset is below -1")
        return cls(bytes(body[HEAD.size:HEAD.size + name_size]).decode(),
                   bytes(body[HEAD.size + name_size:start]).decode(), offsets, bool(flags & REMOVE_GROUP))


class QueueAsk(NamedTuple):
    """One queue's commit as a client asks it: `expected` None commits whatever the group holds there."""

    topic_id: int
    queue: int
    offset: int  # -1: remove the queue's offset
    expected: int | None = None  # -1: the group must hold no offset there


class GroupAsk(NamedTuple):
    group: str
    queues: Sequence[QueueAsk]
    caller: str = ""  # the owner of a group it creates
    remove: bool = False  # remove the group (its queues' offsets with it)


class Group(NamedTuple):
    offsets: dict[QueueKey, int]
    owner: str
    entry_index: int  # its last commit: its last sign of life, in log time


class GroupOffsets(LogTable):
    """The committed table as of `folded_index`, and the log's commits after it."""

    name = "groups"
    magics = frozenset((Magic.QUEUE_COMMIT,))

    def __init__(self, config: RaftConfig, state: MemberState, queue_end: Callable[[int, int], int]) -> None:
        """`queue_end`: a queue's next offset as of the log's tail (raft.queues)."""
        self.config = config
        self.state = state
        self.queue_end = queue_end
        self.table: dict[str, Group] = {}
        self.folded_index = -1
        self.pending: list[tuple[int, GroupCommit | None]] = []

    # -- the log moves ---------------------------------------------------------------------

    def appended(self, index: int, magic: int, body: bytes | memoryview) -> None:
        if index <= self.folded_index:
            return
        try:
            commit: GroupCommit | None = GroupCommit.decode(body)
        except ValueError as exc:  # not ours: said, skipped
            log.error("%s: queue commit entry %d not taken: %s", self.config.self_id, index, exc)
            commit = None
        self.pending.append((index, commit))

    def committed(self, index: int) -> None:
        if not self.pending or self.pending[0][0] > index:
            return
        taken = 0
        for at, commit in self.pending:
            if at > index:
                break
            taken += 1
            if commit is not None:
                _apply(self.table, commit, at)
        del self.pending[:taken]
        self.folded_index = index
        horizon = index - self.config.consumer_idle_entries
        for name in [name for name, group in self.table.items() if group.entry_index < horizon]:
            del self.table[name]
        self._changes += 1

    def truncated(self, from_index: int) -> None:
        self.pending = [p for p in self.pending if p[0] < from_index]

    # -- what readers and the leader see ---------------------------------------------------

    def live(self) -> dict[str, Group]:
        """The committed table, expired groups left out."""
        horizon = self.state.committed_index - self.config.consumer_idle_entries
        return {name: group for name, group in sorted(self.table.items()) if group.entry_index >= horizon}

    def decide(self, ask: GroupAsk) -> GroupCommit:
        """The leader, under its append lock: the entry to write for `ask`, or the refusal."""
        leader = self.state.leader_id
        latest = dict(self.table)
        for index, pending in self.pending:
            if pending is not None:
                _apply(latest, pending, index)
        current = latest.get(ask.group)
        if ask.remove:
            if current is None:
                raise ConsumerNotFoundError(f"no consumer group {ask.group!r}", leader)
            return GroupCommit(ask.group, current.owner, (), remove=True)
        if not 0 < len(ask.queues) <= QUEUES_PER_COMMIT_MAX:
            raise ValueError(f"a commit names 1 to {QUEUES_PER_COMMIT_MAX} queues")
        held = {} if current is None else current.offsets
        for queue in ask.queues:
            found = held.get((queue.topic_id, queue.queue), -1)
            if queue.expected is not None and queue.expected != found:
                raise ConsumerConflictError(f"consumer group {ask.group!r} is at {found} in queue {queue.queue} of "
                                            f"topic {queue.topic_id}, not {queue.expected}", leader, found)
            end = self.queue_end(queue.topic_id, queue.queue)
            if queue.offset > end:
                raise ConsumerPositionError(f"offset {queue.offset} is past the end of queue {queue.queue} of topic "
                                            f"{queue.topic_id}, {end}: a group commits the next offset it reads",
                                            leader)
        if current is None and len(latest) >= self.config.consumers_max:
            raise ConsumersFullError(f"{len(latest)} consumer groups; consumers_max is {self.config.consumers_max}",
                                     leader)
        owner = ask.caller if current is None else current.owner
        return GroupCommit(ask.group, owner, tuple((q.topic_id, q.queue, q.offset) for q in ask.queues))

    # -- the checkpoint and snapshot installs ---------------------------------------------

    def encode(self) -> bytes:
        return json.dumps({"folded_index": self.folded_index, "groups": [
            [name, group.owner, group.entry_index, [[*key, offset] for key, offset in group.offsets.items()]]
            for name, group in self.table.items()]}, separators=(",", ":")).encode()

    def _decode(self, data: bytes | None, whose: str) -> tuple[dict[str, Group], int]:
        if not data:
            return {}, -1
        try:
            fields = json.loads(data)
            table = {str(name): Group({(int(t), int(q)): int(o) for t, q, o in offsets}, str(owner), int(index))
                     for name, owner, index, offsets in fields["groups"]}
            return table, int(fields["folded_index"])
        except (KeyError, TypeError, ValueError) as exc:
            log.error("%s consumer groups' offsets not taken (read again from the log): %s", whose, exc)
            return {}, -1

    def restore(self, saved: bytes | None) -> int:
        self.table, self.folded_index = self._decode(saved, "the checkpoint's")
        self.pending = []
        return self.folded_index + 1

    def installed(self, index: int, data: bytes | None) -> None:
        self.table, folded = self._decode(data, "a snapshot's")
        self.folded_index = max(folded, index)
        self.pending = []
        self._changes += 1


def group_problem(group: str) -> str | None:
    """Why a group's name is malformed (None: it is not)."""
    if NAME.fullmatch(group) is None:
        return f"a consumer group's name is 1 to 128 letters, digits, '.', '_' or '-', not {group[:140]!r}"
    return None


def _apply(table: dict[str, Group], commit: GroupCommit, index: int) -> None:
    if commit.remove:
        table.pop(commit.group, None)
        return
    current = table.get(commit.group)
    offsets = {} if current is None else dict(current.offsets)
    for topic_id, queue, offset in commit.offsets:
        if offset < 0:
            offsets.pop((topic_id, queue), None)
        else:
            offsets[(topic_id, queue)] = offset
    table[commit.group] = Group(offsets, commit.owner if current is None else current.owner, index)
