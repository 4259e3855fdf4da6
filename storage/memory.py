"""An in-memory log store with the file store's interface and byte-identical entries.

For tests of the layers above: it lays out, encodes and validates batches with
the same code as `Store` (storage.batch), so positions, CRCs and rejections
agree; it keeps entries in a list instead of mapped files, and every append
is durable at once.
"""

from __future__ import annotations

import asyncio
import bisect
import zlib
from collections.abc import Callable, Collection, Iterator, Sequence

from raftlog.storage.batch import Batch, encode_leader_batch, validate_follower_batch
from raftlog.storage.checkpoint import TableSource, check_vote
from raftlog.storage.codec import HEADER, Entry, Magic, Stamp, decode_entry
from raftlog.storage.config import StoreConfig
from raftlog.storage.consume_queue import UNIT
from raftlog.storage.errors import (
    CorruptEntryError,
    DiskFullError,
    IndexCleanedError,
    StorageError,
    check_in_log,
)
from raftlog.storage.message import MESSAGE_HEADER
from raftlog.storage.protocol import AppendResult, FollowerAppend, RawEntries, Verified


class MemoryStore:
    def __init__(self, config: StoreConfig | None = None) -> None:
        self.config = config or StoreConfig()
        self.before_begin_index = -1
        self.before_begin_term = -1
        self._base_chain: int | None = 0
        self._base_pos: int | None = 0
        self._entries: list[bytes] = []  # entry before_begin_index + 1 + i
        self._positions: list[int] = []
        self._write_pos: int | None = 0
        self._end_chain: int | None = 0
        self.end_term = -1
        self.disk_full = False
        self.on_damage: Callable[[int], None] | None = None  # never called: entries here cannot rot

    # -- state ---------------------------------------------------------------------

    @property
    def begin_index(self) -> int:
        return self.before_begin_index + 1

    @property
    def before_begin_chain_crc(self) -> int | None:
        return self._base_chain

    @property
    def begin_pos(self) -> int | None:
        return self._base_pos

    @property
    def end_index(self) -> int:
        return self.before_begin_index + len(self._entries)

    @property
    def durable_end_index(self) -> int:
        return self.end_index

    @property
    def ack_end_index(self) -> int:
        return self.end_index

    @property
    def write_pos(self) -> int | None:
        return self._write_pos

    @property
    def end_chain_crc(self) -> int | None:
        return self._end_chain

    def start(self) -> None:
        pass

    async def close(self) -> None:
        pass

    def disk_usage_ratio(self) -> float:
        return 0.0  # it holds nothing on disk

    async def flush(self) -> None:
        pass

    async def wait_durable(self) -> None:
        pass

    def flushed(self) -> asyncio.Future[None]:
        done = asyncio.get_running_loop().create_future()
        done.set_result(None)
        return done

    # -- appends -------------------------------------------------------------------

    async def append_as_leader(self, bodies: Sequence[bytes], term: int,
                               magic: int = Magic.NORMAL, channel: int = 0,
                               stamp: Stamp | None = None) -> AppendResult:
        assert term >= self.end_term, "a leader's term never falls below its log's"
        if self._write_pos is None or self._end_chain is None:
            raise StorageError("the log was reset without a position")
        self._check_writable()
        batch = encode_leader_batch(list(bodies), self.end_index + 1, term, magic, channel,
                                    self._write_pos, self._end_chain, self.config.data_file_size, stamp)
        self._keep(batch)
        return AppendResult(batch.first_index, batch.positions)

    async def append_as_follower(self, data: bytes | memoryview) -> FollowerAppend:
        appended = self.append_as_follower_now(data)
        assert appended is not None  # memory always has room
        return appended

    def append_as_follower_now(self, data: bytes | memoryview) -> FollowerAppend | None:
        self._check_writable()
        batch = validate_follower_batch(data, self.end_index + 1, self.end_term, self._write_pos,
                                        self._end_chain, self.config.data_file_size, self.get)
        self._keep(batch)
        return FollowerAppend(self.end_index, batch.control_indices, batch.produced, batch.queued)

    def _check_writable(self) -> None:
        if self.disk_full:
            raise DiskFullError("disk-full flag is set")

    def _keep(self, batch: Batch) -> None:
        if self._base_pos is None:
            self._base_pos = batch.positions[0]
        data = bytes(batch.data)
        offset = 0
        for pos in batch.positions:
            size = HEADER.unpack_from(data, offset)[1]
            self._entries.append(data[offset:offset + size])
            self._positions.append(pos)
            offset += size
        self.end_term = batch.last_term
        self._end_chain = batch.last_chain_crc
        self._write_pos = batch.end_pos

    # -- reads -----------------------------------------------------------------------

    def get(self, index: int) -> Entry:
        check_in_log(index, self.begin_index, self.end_index)
        entry = decode_entry(memoryview(self._entries[index - self.begin_index]))
        if zlib.crc32(entry.body) != entry.body_crc:
            raise CorruptEntryError(index, entry.pos, "body CRC mismatch")
        return entry

    def verify(self, start: int, max_entries: int, chain: int | None) -> Verified:
        """Entries held in memory are the bytes checked on append: nothing to find."""
        start = max(start, self.begin_index)
        last = min(self.end_index, start + max_entries - 1)
        return Verified(max(start, last + 1), [], self.get(last).chain_crc if last >= start else chain)

    async def repair(self, index: int, raw: bytes) -> None:
        raise StorageError(f"entry {index} of an in-memory log cannot be damaged, so not repaired")

    def pos_at(self, index: int) -> int:
        check_in_log(index, self.begin_index, self.end_index)
        return self._positions[index - self.begin_index]

    def get_at(self, pos: int) -> Entry | None:
        at = bisect.bisect_left(self._positions, pos)
        return self.get(self.begin_index + at) if at < len(self._positions) and self._positions[at] == pos else None

    def read_range(self, start: int, max_entries: int, max_bytes: int, *,
                   trust_own_writes: bool = False) -> RawEntries:
        assert max_entries > 0
        check_in_log(start, self.begin_index, self.end_index)
        first = start - self.begin_index
        file_no = self._positions[first] // self.config.data_file_size
        stop = min(len(self._entries), first + max_entries)
        total = 0
        i = first
        while i < stop and self._positions[i] // self.config.data_file_size == file_no:
            size = len(self._entries[i])
            if i > first and total + size > max_bytes:
                break
            total += size
            i += 1
        return RawEntries(start, i - first, memoryview(b"".join(self._entries[first:i])))

    def term_at(self, index: int) -> int:
        if index == self.before_begin_index:
            return self.before_begin_term
        return self.get(index).term

    def indices_of(self, magics: Collection[int], start: int) -> Iterator[int]:
        first = max(start, self.begin_index)
        for i, raw in enumerate(self._entries[first - self.begin_index:]):
            if int.from_bytes(raw[:4], "big") in magics:
                yield first + i

    def message_units(self, first: int, last: int) -> bytes:
        entries = [self.get(i) for i in range(first, last + 1)]
        return b"".join(UNIT.pack(e.pos, e.size, MESSAGE_HEADER.unpack_from(e.body)[3]) for e in entries)

    def first_index_of_term(self, term: int, before_index: int) -> int | None:
        for index in range(self.begin_index, min(before_index, self.end_index) + 1):
            found = self.term_at(index)
            if found == term:
                return index
            if found > term:
                return None
        return None

    # -- truncation and reset ------------------------------------------------------------

    async def truncate(self, index: int) -> int:
        if index > self.end_index:
            return self.end_index
        if index < self.begin_index:
            raise IndexCleanedError(index, self.begin_index, self.end_index)
        if index == self.begin_index:
            self.end_term, self._end_chain = self.before_begin_term, self._base_chain
            self._write_pos = self._base_pos
        else:
            prev = self.get(index - 1)
            self.end_term, self._end_chain = prev.term, prev.chain_crc
            self._write_pos = prev.pos + prev.size
        keep = index - self.begin_index
        del self._entries[keep:], self._positions[keep:]
        return self.end_index

    async def reset_begin(self, index: int, term: int, *, chain_crc: int | None = None,
                          next_pos: int | None = None) -> None:
        self._entries.clear()
        self._positions.clear()
        self.before_begin_index, self.before_begin_term = index, term
        self._base_chain, self._base_pos = chain_crc, next_pos
        self.end_term, self._end_chain, self._write_pos = term, chain_crc, next_pos


class MemoryCheckpoint:
    """Term, vote and progress kept in memory, with the Checkpoint's interface (tests)."""

    def __init__(self) -> None:
        self.current_term = 0
        self.voted_for: str | None = None
        self.committed_index = -1
        self.applied_index = -1
        self.config_index: int = -1
        self.config: bytes | None = None
        self.saved_tables: dict[str, bytes | None] = {}  # each table of the log, by name
        self._tables: dict[str, TableSource] = {}

    def watch_tables(self, **sources: TableSource) -> None:
        self._tables = sources

    async def save_vote(self, term: int, voted_for: str | None) -> None:
        check_vote(self.current_term, self.voted_for, term, voted_for)
        self.current_term, self.voted_for = term, voted_for

    def note_progress(self, committed_index: int, applied_index: int) -> None:
        """Noted and saved at once, the tables with them (as Checkpoint writes them together)."""
        self.committed_index, self.applied_index = committed_index, applied_index
        for name, source in self._tables.items():
            self.saved_tables[name] = source.encode()

    async def save_config(self, index: int, config: bytes) -> None:
        if index < self.config_index:
            raise ValueError(f"configuration of entry {index} after that of entry {self.config_index}")
        self.config_index, self.config = index, config
