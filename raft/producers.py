"""Producer sessions: who owns each, and what each last appended, as the log says it (Kafka's
ProducerStateManager).

A producer names itself (an id and an epoch) and numbers its appends (a sequence per entry). Its
entries carry the three in the log, so the table below is a function of the log's entries in
order: every member builds the same one, and a new leader knows every producer's last sequences
from its own log. The leader consults it before it appends a batch:

- a batch whose sequences were appended already is a duplicate: it is answered with the original
  entries, not written again;
- a batch that starts past the next sequence is out of order, and one from an epoch below the
  producer's is fenced: both are refused;
- anything else is new: it starts where the producer left off.

From cluster version 1 (raft.cluster_version) a session has an owner. Its owner opens it, and
each new epoch of it, with a PRODUCER_SESSION entry naming the caller (the name its token gives),
and may close it with another; the leader takes a producer's batch only from the owner of an open
session of that id and epoch (else NOT_PRODUCER_OWNER or UNKNOWN_PRODUCER), so a reader who sees a
producer's id in the log can neither write under it nor fence it. Below version 1, a session is
opened by its first batch at sequence 0 and has no owner, as before levels. At any version a batch
at a sequence above 0 from a producer with no session is refused (UNKNOWN_PRODUCER, Kafka's
UNKNOWN_PRODUCER_ID): it is never appended as new, which would make a retry a duplicate.

A batch is a run of a producer's entries back to back in the log and in sequence (one append, or
several with nothing between them). The table is bounded: the last `batches_kept` batches of each
producer (Kafka keeps 5; a retry of an older one is out of order, as Kafka's is); at most
`producers_max` sessions, a new one refused beyond (an owned session is never forgotten to make
room; sessions without an owner, of the releases before levels, are, the least recently active
first); at most `sessions_per_name_max` open sessions of one owner; and a session that did nothing in
the last `idle_entries` entries of the log expires: idle by log time, the entries' own order, so
every member reaches the same answer. A session whose open, or batch, is above the commit index is
never forgotten: a truncation may take it away again, and `truncate` must then find what came before.
"""

from __future__ import annotations

import json
import logging
import struct
from collections import Counter, OrderedDict
from dataclasses import dataclass, field
from enum import Enum
from typing import NamedTuple

from raftlog.raft.config import RaftConfig
from raftlog.raft.member_state import MemberState
from raftlog.raft.tables import LogTable
from raftlog.storage.codec import PRODUCER_MAGICS, Entry, Magic, ProducedRun, Stamp
from raftlog.storage.message import UNSTAMPED, QueuedRun, queued_run
from raftlog.storage.protocol import LogStore
from raftlog.storage.record import Stamps

log = logging.getLogger("raftlog.raft.producers")

# what a session's numbers may be: the stamp holds a u64, a u16 and a u48 (storage.codec), and
# readers show the id as an int64
PRODUCER_ID_MAX, EPOCH_MAX, SEQUENCE_MAX = 2**63 - 1, 2**16 - 1, 2**48 - 1


def out_of_range(producer: Sequenced, count: int) -> str | None:
    """What is wrong with a batch of `count` entries in this session, if its numbers do not fit a stamp."""
    if producer.producer_id > PRODUCER_ID_MAX or producer.epoch > EPOCH_MAX:
        return f"a producer's id is at most {PRODUCER_ID_MAX}, its epoch at most {EPOCH_MAX}"
    if producer.sequence + count - 1 > SEQUENCE_MAX:
        return f"a producer's sequences end at {SEQUENCE_MAX}: take a new epoch or id"
    return None


Sequenced = Stamp  # what a producer says of its batch: who it is, and its first entry's sequence (its stamp)

SESSION = struct.Struct(">QHB")  # a PRODUCER_SESSION entry's body: producer_id, epoch, closed; then the owner
OWNER_BYTES_MAX = 255


class SessionChange(NamedTuple):
    """A PRODUCER_SESSION entry's body: a session opened (at `epoch`) or closed by its owner."""

    producer_id: int
    epoch: int
    owner: str
    closed: bool = False

    def encode(self) -> bytes:
        owner = self.owner.encode()
        assert len(owner) <= OWNER_BYTES_MAX
        return SESSION.pack(self.producer_id, self.epoch, self.closed) + owner

    @classmethod
    def decode(cls, body: bytes | memoryview) -> SessionChange:
        """ValueError if `body` is not what `encode` writes."""
        if not SESSION.size <= len(body) <= SESSION.size + OWNER_BYTES_MAX:
            raise ValueError(f"a producer session entry of {len(body)} bytes")
        producer_id, epoch, closed = SESSION.unpack_from(body)
        if producer_id > PRODUCER_ID_MAX or closed > 1:
            raise ValueError("a producer session entry's id or flag is out of bounds")
        return cls(producer_id, epoch, bytes(body[SESSION.size:]).decode(), bool(closed))


QueueKey = tuple[int, int]  # (topic_id, queue): a topic-queue's sequence


class ProducedBatch(NamedTuple):  # a tuple: one is made for every append, on the leader and each follower
    """Entries first_index..last_index, sequences first_seq..first_seq + count - 1 of one epoch."""

    first_seq: int
    first_index: int
    last_index: int

    @property
    def last_seq(self) -> int:
        return self.first_seq + self.last_index - self.first_index


@dataclass(slots=True)
class ProducerState:
    epoch: int
    batches: list[ProducedBatch] = field(default_factory=list)  # the log's sequence's, oldest first
    owner: str | None = None  # who opened it (None: a session of the releases before owners)
    opened_index: int = -1  # its PRODUCER_SESSION entry (-1: opened by its first batch)
    # its messages' batches in each topic-queue, each queue's sequence its own (as Kafka's per partition)
    queues: dict[QueueKey, list[ProducedBatch]] = field(default_factory=dict)

    @property
    def active_index(self) -> int:
        """The last entry that was its: its open, or its last batch's end (its age, in log time)."""
        return max((b[-1].last_index for b in (self.batches, *self.queues.values()) if b), default=self.opened_index)

    def batches_of(self, queue: QueueKey | None) -> list[ProducedBatch]:
        """Its batches in the log's sequence (queue None), or in a queue's."""
        return self.batches if queue is None else self.queues.get(queue, [])


class Verdict(Enum):
    NEW = "new"
    DUPLICATE = "duplicate"
    OUT_OF_ORDER = "out of order"
    FENCED = "fenced"
    UNKNOWN = "unknown"  # no open session of this id and epoch
    NOT_OWNER = "not owner"  # the session is another caller's


@dataclass(frozen=True, slots=True)
class Checked:
    verdict: Verdict
    original: ProducedBatch | None = None  # a duplicate's first appending (its entries from first_seq on)
    expected_seq: int | None = None  # an out-of-order batch's: what the producer must send next
    epoch: int | None = None  # a fenced batch's: the producer's current epoch


NEW_BATCH = Checked(Verdict.NEW)
UNKNOWN = Checked(Verdict.UNKNOWN)


class ProducerTable:
    def __init__(self, *, batches_kept: int = 5, producers_max: int = 100_000, sessions_per_name_max: int = 10_000,
                 idle_entries: int = 1_000_000_000) -> None:
        if min(batches_kept, producers_max, sessions_per_name_max, idle_entries) < 1:
            raise ValueError("batches_kept, producers_max, sessions_per_name_max and idle_entries must be positive")
        self.batches_kept = batches_kept
        self.producers_max = producers_max
        self.sessions_per_name_max = sessions_per_name_max
        self.idle_entries = idle_entries
        self.producers: OrderedDict[int, ProducerState] = OrderedDict()  # least recently active first
        self.owned: Counter[str] = Counter()  # open sessions by owner
        self.end_index = -1  # the last entry recorded: entries up to it are in the table already
        self.stable_index = -1  # of a loaded table: its entries up to here were committed, and cannot change

    def check(self, producer_id: int, epoch: int, first_seq: int, count: int, *, caller: str,
              owned: bool, queue: QueueKey | None = None) -> Checked:
        """What to do with a batch of `count` entries from `first_seq` by `caller` (nothing is recorded),
        in the log's sequence or (`queue`) a topic-queue's. `owned`: sessions have owners (cluster
        version 1), and only an opened session takes batches."""
        state = self.producers.get(producer_id)
        if state is None:
            return UNKNOWN if owned or first_seq > 0 else NEW_BATCH
        if state.owner is not None and state.owner != caller:
            return Checked(Verdict.NOT_OWNER)
        if epoch != state.epoch:
            if epoch < state.epoch:
                return Checked(Verdict.FENCED, epoch=state.epoch)
            if owned:
                return UNKNOWN  # an epoch never opened
            return NEW_BATCH if first_seq == 0 else Checked(Verdict.OUT_OF_ORDER, expected_seq=0)
        if owned and state.owner is None:
            return UNKNOWN  # a session of the releases before owners: its producer opens one
        batches = state.batches_of(queue)
        next_seq = batches[-1].last_seq + 1 if batches else 0  # the common case: right after its last batch
        if first_seq == next_seq:
            return NEW_BATCH
        if first_seq < next_seq:
            for batch in batches:
                if batch.first_seq <= first_seq and first_seq + count - 1 <= batch.last_seq:
                    return Checked(Verdict.DUPLICATE, original=batch)
        return Checked(Verdict.OUT_OF_ORDER, expected_seq=next_seq)

    def room_for(self, producer_id: int | None, owner: str) -> str | None:
        """Why a new session of `producer_id` (None: a new id) by `owner` would pass a bound, or None."""
        state = None if producer_id is None else self.producers.get(producer_id)
        if state is not None and state.owner == owner:
            return None  # a new epoch of its own session takes no more room
        if len(self.producers) >= self.producers_max:
            return f"{len(self.producers)} producer sessions are open: producers_max"
        if self.owned[owner] >= self.sessions_per_name_max:
            return f"{owner} has {self.owned[owner]} producer sessions open: producer_sessions_per_name_max"
        return None

    def change(self, change: SessionChange, index: int, committed_index: int) -> None:
        """Entry `index` opened (or closed) a session: in force from its append on."""
        if index <= self.end_index:
            return  # in the table already (a snapshot's, then the same entries pushed again)
        self.end_index = index
        self._forget(change.producer_id)
        if not change.closed:
            self.producers[change.producer_id] = ProducerState(change.epoch, owner=change.owner, opened_index=index)
            self.owned[change.owner] += 1
        if self.end_index - self.idle_entries > 0:
            self._evict(committed_index)

    def record(self, producer_id: int, epoch: int, first_seq: int, first_index: int, last_index: int,
               committed_index: int, queue: QueueKey | None = None) -> None:
        """Entries first_index..last_index are in the log, in log order, from this producer (messages of
        one topic-queue where `queue` says). Those up to end_index are in the table already (a table
        installed with a snapshot, then the entries after the snapshot's first pushed again): they are
        not recorded twice."""
        if last_index <= self.end_index:
            return
        if first_index <= self.end_index:
            first_seq += self.end_index + 1 - first_index
            first_index = self.end_index + 1
        self.end_index = last_index
        producers = self.producers
        state = producers.get(producer_id)
        if state is None or epoch != state.epoch:  # a session of the releases before owners: its first batch
            self._forget(producer_id)
            state = producers[producer_id] = ProducerState(epoch)
        producers.move_to_end(producer_id)
        batches = state.batches if queue is None else state.queues.setdefault(queue, [])
        if batches:
            last_seq_first, last_first, last_last = batches[-1]
            if last_seq_first + last_last - last_first + 1 == first_seq and last_last + 1 == first_index:
                batches[-1] = ProducedBatch(last_seq_first, last_first, last_index)  # one run: appends back
                return  # to back, or a batch a push cut in two; nothing else changes
        batches.append(ProducedBatch(first_seq, first_index, last_index))
        kept = self.batches_kept
        while len(batches) > kept and batches[0].last_index <= committed_index:
            del batches[0]
        if len(producers) > self.producers_max or self.end_index - self.idle_entries > 0:
            self._evict(committed_index)

    def truncate(self, after_index: int) -> None:
        """The log ends at `after_index` now: entries past it are gone from their batches, a session
        opened past it is gone, and so is one of the releases before owners left with no batch."""
        self.end_index = min(self.end_index, after_index)
        for producer_id in list(self.producers):
            state = self.producers[producer_id]
            if state.opened_index > after_index:
                self._forget(producer_id)
                continue
            state.batches = _cut(state.batches, after_index)
            state.queues = {queue: kept for queue, batches in state.queues.items()
                            if (kept := _cut(batches, after_index))}
            if not state.batches and not state.queues and state.owner is None:
                self._forget(producer_id)

    def _forget(self, producer_id: int) -> None:
        state = self.producers.pop(producer_id, None)
        if state is not None and state.owner is not None:
            self.owned[state.owner] -= 1
            if not self.owned[state.owner]:
                del self.owned[state.owner]

    def _evict(self, committed_index: int) -> None:
        """Forget the idle sessions, and the least recently active of the releases before owners past
        producers_max (an owned session is never forgotten to make room)."""
        horizon = self.end_index - self.idle_entries
        while self.producers:
            producer_id, state = next(iter(self.producers.items()))
            active = state.active_index
            crowded = state.owner is None and len(self.producers) > self.producers_max
            if not (active < horizon or crowded) or active > committed_index:
                break
            self._forget(producer_id)

    # -- the checkpoint and snapshot installs --------------------------------------------

    def encode(self, committed_index: int) -> bytes:
        """The table, and up to where the log it was built from is committed (its entries after that
        may yet be truncated: a table read back is cut there, and the log after it replayed). Owners
        are apart from the producers' rows, which keep the form of the releases before owners."""
        return json.dumps({"end_index": self.end_index, "stable_index": min(committed_index, self.end_index),
                           "producers": [
            [producer_id, state.epoch, [list(batch) for batch in state.batches]]
            for producer_id, state in self.producers.items()],
                           "owners": [[producer_id, state.owner, state.opened_index]
                                      for producer_id, state in self.producers.items() if state.owner is not None],
                           "queues": [[producer_id, *queue, [list(batch) for batch in batches]]
                                      for producer_id, state in self.producers.items()
                                      for queue, batches in state.queues.items()]},
                          separators=(",", ":")).encode()

    def load(self, data: bytes) -> None:
        """What `encode` wrote (ValueError if it is not that), in place of this table's contents."""
        try:
            fields = json.loads(data)
            producers: OrderedDict[int, ProducerState] = OrderedDict()
            for producer_id, epoch, batches in fields["producers"]:
                producers[int(producer_id)] = ProducerState(int(epoch), [
                    ProducedBatch(int(s), int(f), int(last)) for s, f, last in batches])
            owned: Counter[str] = Counter()
            for producer_id, owner, opened_index in fields.get("owners", ()):
                state = producers[int(producer_id)]
                state.owner, state.opened_index = str(owner), int(opened_index)
                owned[state.owner] += 1
            for producer_id, topic_id, queue, batches in fields.get("queues", ()):
                producers[int(producer_id)].queues[(int(topic_id), int(queue))] = [
                    ProducedBatch(int(s), int(f), int(last)) for s, f, last in batches]
            end_index, stable_index = int(fields["end_index"]), int(fields["stable_index"])
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"not a producer table: {exc}") from None
        self.producers, self.owned, self.end_index, self.stable_index = producers, owned, end_index, stable_index


class ProducerSessions(LogTable):
    """The producer table kept in step with this member's log: the leader's appends, a follower's,
    truncations, snapshot installs, and on start the saved table with the log's tail replayed."""

    name = "producers"
    magics = frozenset((Magic.PRODUCER_SESSION,))
    # a start reads their stamps; a push's and an append's come as runs (`produced`, `queued`)
    replays = PRODUCER_MAGICS | {Magic.MESSAGE}

    def __init__(self, config: RaftConfig, state: MemberState, store: LogStore) -> None:
        self.config = config
        self.state = state
        self.store = store
        self.table = self._empty()
        self._stamps = Stamps(store.get)  # the replayed entries' stamps

    def _empty(self) -> ProducerTable:
        return ProducerTable(batches_kept=self.config.producer_batches_kept, producers_max=self.config.producers_max,
                             sessions_per_name_max=self.config.producer_sessions_per_name_max,
                             idle_entries=self.config.producer_idle_entries)

    def produced(self, run: ProducedRun) -> None:
        """One producer's entries joined the log: (producer_id, epoch, first_seq, first_index, last_index)."""
        self.table.record(*run, self.state.committed_index)
        self._changes += 1

    def queued(self, run: QueuedRun) -> None:
        """A queue's messages joined the log: a producer's, where they are stamped."""
        topic_id, queue, _offset, first_index, last_index, producer_id, epoch, first_seq = run
        if producer_id != UNSTAMPED:
            self.table.record(producer_id, epoch, first_seq, first_index, last_index, self.state.committed_index,
                              (topic_id, queue))
            self._changes += 1

    def appended(self, index: int, magic: int, body: bytes | memoryview) -> None:
        """A PRODUCER_SESSION entry joined the log, in log order among the producers' entries."""
        try:
            change = SessionChange.decode(body)
        except ValueError as exc:  # not ours: said, skipped (the leader writes only what encode does)
            log.error("%s: producer session entry %d not taken: %s", self.config.self_id, index, exc)
            return
        self.table.change(change, index, self.state.committed_index)
        self._changes += 1

    def truncated(self, from_index: int) -> None:
        """Entries from `from_index` on left the log."""
        self.table.truncate(from_index - 1)
        self._changes += 1

    def encode(self) -> bytes:
        return self.table.encode(self.state.committed_index)

    def _loaded(self, data: bytes | None, whose: str) -> ProducerTable:
        """The table `data` encodes; an empty one for none, or for one that does not decode (said)."""
        table = self._empty()
        if data:
            try:
                table.load(data)
            except ValueError as exc:
                log.error("%s producer table not taken (its producers start afresh): %s", whose, exc)
                return self._empty()
        return table

    def installed(self, index: int, data: bytes | None) -> None:
        """The log restarts after `index` with the leader's table (None: it sent none: empty)."""
        self.table = self._loaded(data, "a snapshot's")
        self.table.truncate(index)  # what the leader had past the snapshot comes again in pushes
        self._changes += 1

    def restore(self, saved: bytes | None) -> int:
        """On start: the checkpoint's table, cut where the log it was built from was committed (after
        that, the log may have been truncated and written again since); returns the first index whose
        entries `replayed` must see."""
        self.table = self._loaded(saved, "the checkpoint's")
        self.table.truncate(min(self.table.stable_index, self.store.end_index))
        return self.table.end_index + 1

    def replayed(self, entry: Entry) -> None:
        """On start, the log after the saved table, entry by entry in log order."""
        if entry.magic == Magic.PRODUCER_SESSION:
            self.appended(entry.index, entry.magic, entry.body)
        elif entry.magic == Magic.MESSAGE:
            self.queued(queued_run(entry))
        elif (stamp := self._stamps(entry)) is not None:
            self.table.record(*stamp, entry.index, entry.index, self.state.committed_index)
            self._changes += 1


def _cut(batches: list[ProducedBatch], after_index: int) -> list[ProducedBatch]:
    """`batches` as a log that ends at `after_index` holds them."""
    return [b if b.last_index <= after_index else ProducedBatch(b.first_seq, b.first_index, after_index)
            for b in batches if b.first_index <= after_index]
