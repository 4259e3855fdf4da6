"""Producer sessions: what each producer last appended, as the log says it (Kafka's ProducerStateManager).

A producer names itself (an id and an epoch) and numbers its appends (a sequence per entry). Its
entries carry the three in the log, so the table below is a function of the log's entries in
order: every member builds the same one, and a new leader knows every producer's last sequences
from its own log. The leader consults it before it appends a batch:

- a batch whose sequences were appended already is a duplicate: it is answered with the original
  entries, not written again;
- a batch that starts past the next sequence is out of order, and one from an epoch below the
  producer's is fenced: both are refused;
- anything else is new: it starts where the producer left off, a new epoch of a producer starts at
  sequence 0 (as Kafka's does), and a producer with no record starts anywhere (its record may have
  been forgotten, by the bounds below; Kafka's unknown producer is taken the same way).

A batch is a run of a producer's entries back to back in the log and in sequence (one append, or
several with nothing between them). The table is bounded: the last `batches_kept` batches of each
producer (Kafka keeps 5; a retry of an older one is out of order, as Kafka's is), at most
`producers_max` producers (the least recently appended go first), and a producer that appended
nothing in the last `idle_entries` entries of the log is forgotten: idle by log time, the entries'
own order, so every member reaches the same answer. A batch above the commit index is never
forgotten: a truncation may take it away again, and `truncate` must then find the batch before it.
"""

from __future__ import annotations

import json
import logging
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import Enum
from typing import NamedTuple

from raftlog.raft.config import RaftConfig
from raftlog.raft.member_state import MemberState
from raftlog.storage.codec import PRODUCER_MAGICS, Entry, ProducedRun, Stamp, Stamps
from raftlog.storage.protocol import LogStore

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
    batches: list[ProducedBatch] = field(default_factory=list)  # oldest first

    @property
    def last(self) -> ProducedBatch:
        return self.batches[-1]


class Verdict(Enum):
    NEW = "new"
    DUPLICATE = "duplicate"
    OUT_OF_ORDER = "out of order"
    FENCED = "fenced"


@dataclass(frozen=True, slots=True)
class Checked:
    verdict: Verdict
    original: ProducedBatch | None = None  # a duplicate's first appending (its entries from first_seq on)
    expected_seq: int | None = None  # an out-of-order batch's: what the producer must send next
    epoch: int | None = None  # a fenced batch's: the producer's current epoch


NEW_BATCH = Checked(Verdict.NEW)


class ProducerTable:
    def __init__(self, *, batches_kept: int = 5, producers_max: int = 100_000,
                 idle_entries: int = 1_000_000_000) -> None:
        if batches_kept < 1 or producers_max < 1 or idle_entries < 1:
            raise ValueError("batches_kept, producers_max and idle_entries must be positive")
        self.batches_kept = batches_kept
        self.producers_max = producers_max
        self.idle_entries = idle_entries
        self.producers: OrderedDict[int, ProducerState] = OrderedDict()  # least recently appended first
        self.end_index = -1  # the last entry recorded: entries up to it are in the table already
        self.stable_index = -1  # of a loaded table: its entries up to here were committed, and cannot change

    def check(self, producer_id: int, epoch: int, first_seq: int, count: int) -> Checked:
        """What to do with a batch of `count` entries from `first_seq` (nothing is recorded)."""
        state = self.producers.get(producer_id)
        if state is None:
            return NEW_BATCH
        if epoch != state.epoch:
            if epoch < state.epoch:
                return Checked(Verdict.FENCED, epoch=state.epoch)
            return NEW_BATCH if first_seq == 0 else Checked(Verdict.OUT_OF_ORDER, expected_seq=0)
        last_first_seq, last_first, last_last = state.batches[-1]  # its last batch (the common case: right after it)
        next_seq = last_first_seq + last_last - last_first + 1
        if first_seq == next_seq:
            return NEW_BATCH
        if first_seq < next_seq:
            for batch in state.batches:
                if batch.first_seq <= first_seq and first_seq + count - 1 <= batch.last_seq:
                    return Checked(Verdict.DUPLICATE, original=batch)
        return Checked(Verdict.OUT_OF_ORDER, expected_seq=next_seq)

    def record(self, producer_id: int, epoch: int, first_seq: int, first_index: int, last_index: int,
               committed_index: int) -> None:
        """Entries first_index..last_index are in the log, in log order, from this producer. Those up
        to end_index are in the table already (a table installed with a snapshot, then the entries
        after the snapshot's first pushed again): they are not recorded twice."""
        if last_index <= self.end_index:
            return
        if first_index <= self.end_index:
            first_seq += self.end_index + 1 - first_index
            first_index = self.end_index + 1
        self.end_index = last_index
        producers = self.producers
        state = producers.get(producer_id)
        if state is None or epoch != state.epoch:
            state = producers[producer_id] = ProducerState(epoch)
        producers.move_to_end(producer_id)
        batches = state.batches
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
        """The log ends at `after_index` now: entries past it are gone from their batches, and a
        producer left with none is forgotten."""
        self.end_index = min(self.end_index, after_index)
        for producer_id in list(self.producers):
            state = self.producers[producer_id]
            state.batches = [b if b.last_index <= after_index else
                             ProducedBatch(b.first_seq, b.first_index, after_index)
                             for b in state.batches if b.first_index <= after_index]
            if not state.batches:
                del self.producers[producer_id]

    def _evict(self, committed_index: int) -> None:
        """Forget the least recently appended producers past producers_max, and the idle ones."""
        horizon = self.end_index - self.idle_entries
        while self.producers:
            producer_id, state = next(iter(self.producers.items()))
            idle = state.last.last_index < horizon
            if not (idle or len(self.producers) > self.producers_max) or state.last.last_index > committed_index:
                break
            del self.producers[producer_id]

    # -- the checkpoint and snapshot installs --------------------------------------------

    def encode(self, committed_index: int) -> bytes:
        """The table, and up to where the log it was built from is committed (its entries after that
        may yet be truncated: a table read back is cut there, and the log after it replayed)."""
        return json.dumps({"end_index": self.end_index, "stable_index": min(committed_index, self.end_index),
                           "producers": [
            [producer_id, state.epoch, [list(batch) for batch in state.batches]]
            for producer_id, state in self.producers.items()]}, separators=(",", ":")).encode()

    def load(self, data: bytes) -> None:
        """What `encode` wrote (ValueError if it is not that), in place of this table's contents."""
        try:
            fields = json.loads(data)
            producers: OrderedDict[int, ProducerState] = OrderedDict()
            for producer_id, epoch, batches in fields["producers"]:
                producers[int(producer_id)] = ProducerState(int(epoch), [
                    ProducedBatch(int(s), int(f), int(last)) for s, f, last in batches])
            end_index, stable_index = int(fields["end_index"]), int(fields["stable_index"])
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"not a producer table: {exc}") from None
        self.producers, self.end_index, self.stable_index = producers, end_index, stable_index


class ProducerSessions:
    """The producer table kept in step with this member's log: the leader's appends, a follower's,
    truncations, snapshot installs, and on start the saved table with the log's tail replayed."""

    magics: frozenset[int] = PRODUCER_MAGICS  # what a start replays

    def __init__(self, config: RaftConfig, state: MemberState, store: LogStore) -> None:
        self.config = config
        self.state = state
        self.store = store
        self.table = self._empty()
        self.changes = 0  # counts every change: the checkpoint writes a table that changed
        self._stamps = Stamps(store.get)  # the replayed entries' stamps

    def _empty(self) -> ProducerTable:
        return ProducerTable(batches_kept=self.config.producer_batches_kept, producers_max=self.config.producers_max,
                             idle_entries=self.config.producer_idle_entries)

    def appended(self, runs: Iterable[ProducedRun]) -> None:
        """Producers' entries joined the log, in log order."""
        for run in runs:
            self.appended_one(*run)

    def appended_one(self, producer_id: int, epoch: int, first_seq: int, first_index: int, last_index: int) -> None:
        """One producer's entries first_index..last_index joined the log (a leader's append)."""
        self.table.record(producer_id, epoch, first_seq, first_index, last_index, self.state.committed_index)
        self.changes += 1

    def truncated(self, from_index: int) -> None:
        """Entries from `from_index` on left the log."""
        self.table.truncate(from_index - 1)
        self.changes += 1

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
        self.changes += 1

    def restore(self, saved: bytes | None) -> int:
        """On start: the checkpoint's table, cut where the log it was built from was committed (after
        that, the log may have been truncated and written again since); returns the first index whose
        entries `replayed` must see."""
        self.table = self._loaded(saved, "the checkpoint's")
        self.table.truncate(min(self.table.stable_index, self.store.end_index))
        return self.table.end_index + 1

    def replayed(self, entry: Entry) -> None:
        """On start, the log after the saved table, entry by entry in log order."""
        if (stamp := self._stamps(entry)) is not None:
            self.table.record(*stamp, entry.index, entry.index, self.state.committed_index)
            self.changes += 1
