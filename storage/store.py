"""The log store: DLedger's memory-mapped entry and index files (DLedgerMmapFileStore).

Layout of a data directory::

    <data_dir>/data/<20-digit start offset>    entries, data_file_size each
    <data_dir>/index/<20-digit start offset>   32-byte records, index_file_size each
    <data_dir>/store.json                      file sizes and the log's base (meta.py)
    <data_dir>/LOCK                            held while a process has the store open

Writes go through the mappings; mutations (appends, truncate, reset, cleaning)
are serialised by one asyncio lock and never wait on the disk except to create
or delete files, which run in the store's single I/O thread, and for the
fdatasync of `flush`, which runs inline on the event loop (storage.flush).

One fdatasync per flush: a flush syncs the data files only. The index files
follow in the background once `index_sync_step_bytes` of records are behind,
and `<data_dir>/index-synced.json` (the index mark) records the log index
below which every record is on disk. After a power loss, recovery rebuilds
every record from the mark on from the data; a clean close syncs the index
and moves the mark to the end, and a truncate or reset that rewrites records
below the mark lowers it first. Reads are synchronous and zero-copy: `get` and
`read_range` return memoryviews into the mappings, valid for committed entries
for as long as the caller holds them (a truncate may overwrite the bytes of
uncommitted ones: copy those if you keep them).
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import logging
import os
import zlib
from collections.abc import Callable, Sequence
from concurrent.futures import Executor, ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TypeVar

from raftlog.storage import clean_stop
from raftlog.storage.batch import Batch, encode_leader_batch, validate_follower_batch
from raftlog.storage.codec import (
    BLANK_MAGIC,
    ENTRY_MAGICS,
    HEADER,
    HEADER_SIZE,
    INDEX_RECORD,
    INDEX_RECORD_SIZE,
    MIN_BLANK_LEN,
    Entry,
    Magic,
    chain_crc,
    decode_entry,
    encode_blank,
)
from raftlog.storage.config import StoreConfig
from raftlog.storage.durability import Durability, fdatasync_all
from raftlog.storage.errors import (
    CorruptEntryError,
    DiskFullError,
    IndexCleanedError,
    StorageError,
    StoreLockedError,
    StoreOpenError,
    check_in_log,
)
from raftlog.storage.meta import StoreMeta, load_index_mark, load_meta, save_index_mark, save_meta
from raftlog.storage.protocol import AppendResult, FollowerAppend, RawEntries, Verified
from raftlog.storage.recovery import LogEnd, RecoveryReport, recover
from raftlog.storage.segments import Segment, SegmentList

log = logging.getLogger("raftlog.storage")

END_MARK = bytes(MIN_BLANK_LEN)
RECENT_PAGES_BYTES = 16 << 20  # the newest log bytes kept mapped; older pages leave the RSS
RELEASE_STEP_BYTES = 16 << 20  # after a flush, pages are unmapped once this many more are old enough

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class HeadFile:
    """A data file that cleaning could delete (never the last one)."""

    path: Path
    last_index: int
    mtime: float


class Store:
    """One node's log. Open with `Store.open`; close with `await store.close()`."""

    def __init__(self, data_dir: Path, config: StoreConfig, lock_fd: int,
                 executor: Executor | None = None) -> None:
        self.data_dir = data_dir
        self.config = config
        self._lock_fd = lock_fd
        self.data = SegmentList(data_dir / "data", config.data_file_size)
        self.index = SegmentList(data_dir / "index", config.index_file_size)
        self.meta = StoreMeta(config.data_file_size, config.index_file_size)
        self.end_index = -1
        self.end_term = -1
        self._end_chain: int | None = 0
        self._write_pos: int | None = 0
        self.disk_full = False  # set by the cleaning service above disk_full_ratio
        self.recovery = RecoveryReport()
        self._io = executor or ThreadPoolExecutor(max_workers=1, thread_name_prefix="raftlog-io")
        self._lock = asyncio.Lock()
        self._own_from = 0  # entries from this index on were written by this process (read_range)
        self._owns_io = executor is None
        self.durability = Durability(data_dir, config, self._run_io, lambda: self.end_index, self._release_flushed)
        self._released = (0, 0)  # data and index offsets below which flushes have unmapped the pages
        self.on_damage: Callable[[int], None] | None = None  # the index of each damaged entry a read finds

    # -- opening and closing ---------------------------------------------------

    @classmethod
    def open(cls, data_dir: str | Path, config: StoreConfig | None = None, *,
             committed_index: int = -1, salvage: bool = False, executor: Executor | None = None) -> Store:
        """Open (or create) the log in `data_dir` and recover its end. Blocking.

        `committed_index` is the durable commit index from the checkpoint: a
        damaged entry at or below it raises CorruptLogError (file and offset)
        instead of being cut away as a torn tail, unless `salvage` says to cut
        it all the same (`store.recovery.lost_from` then says from where).
        `executor` runs the blocking file work (default: one thread of the
        store's own).
        """
        config = config or StoreConfig()
        data_dir = Path(data_dir)
        data_dir.mkdir(parents=True, exist_ok=True)
        store = cls(data_dir, config, _lock_dir(data_dir), executor)
        try:
            store._recover(committed_index, salvage)
        except BaseException:
            store._release()
            raise
        return store

    def _recover(self, committed_index: int, salvage: bool) -> None:
        meta = load_meta(self.data_dir, self.config.data_file_size, self.config.index_file_size)
        notes = self.data.load() + self.index.load()
        if meta is None:
            if self.data.segments or self.index.segments:
                raise StoreOpenError(f"{self.data_dir} holds log files but no store.json")
            save_meta(self.data_dir, self.meta)
        else:
            self.meta = meta
        if self.meta.resetting:  # a reset_begin was cut short: finish it
            self.data.delete(self.data.reset())
            self.index.delete(self.index.reset())
            self.meta = replace(self.meta, resetting=False)
            save_meta(self.data_dir, self.meta)
            notes.append("finished an interrupted reset of the log")
        mark = load_index_mark(self.data_dir)
        stop = clean_stop.take(self.data_dir)
        end = clean_stop.trusted_end(stop, self.data_dir, self.data, self.index, self.meta) if stop else None
        if end is not None and end.end_index >= committed_index:
            report = RecoveryReport(notes=["closed cleanly: the log's end is known, no scan"])
        else:
            end, report = recover(self.data, self.index, self.meta, committed_index, salvage, mark)
        report.notes[:0] = notes
        self.recovery = report
        self.end_index, self.end_term = end.end_index, end.end_term
        self._end_chain, self._write_pos = end.end_chain_crc, end.write_pos
        # A killed process leaves unflushed appends in the page cache and recovery
        # repairs in memory: both must be on disk before this end counts as durable.
        fdatasync_all(set(self.data.segments) | set(self.index.segments))
        self.durability.durable_end_index = self.end_index
        self._own_from = self.durability.index_synced = self.end_index + 1
        if mark != self._own_from:
            save_index_mark(self.data_dir, self._own_from)

    def start(self) -> None:
        """Start the background flush of flush_mode "async" (needs a running loop)."""
        self.durability.start()

    async def close(self) -> None:
        """Flush everything, stop background work, unmap the files. Idempotent."""
        if self._lock_fd < 0:
            return
        await self.durability.stop_periodic()
        clean = False
        try:
            async with self._lock:
                clean = await self.durability.close()
        finally:
            if self._owns_io:
                self._io.shutdown(wait=True)
            paths = [seg.path for seg in self.data.segments + self.index.segments]
            self._close_files()
            try:
                if clean:  # the next open may skip the scan
                    clean_stop.save(self.data_dir, LogEnd(self.end_index, self.end_term, self._end_chain,
                                                          self._write_pos), self.meta.base_index, paths)
            finally:
                self._release()

    def _close_files(self) -> None:
        self.data.close()
        self.index.close()

    def _release(self) -> None:
        self.durability.cancel()
        self._close_files()
        if self._lock_fd >= 0:
            os.close(self._lock_fd)
            self._lock_fd = -1

    # -- state -------------------------------------------------------------------

    @property
    def before_begin_index(self) -> int:
        return self.meta.base_index

    @property
    def before_begin_term(self) -> int:
        return self.meta.base_term

    @property
    def before_begin_chain_crc(self) -> int | None:
        return self.meta.base_chain_crc

    @property
    def begin_index(self) -> int:
        return self.meta.base_index + 1

    @property
    def begin_pos(self) -> int | None:
        """Where the first kept entry's placement starts."""
        return self.meta.base_pos

    @property
    def write_pos(self) -> int | None:
        """Global offset where the next entry's placement starts (None: adopt after a reset)."""
        return self._write_pos

    @property
    def end_chain_crc(self) -> int | None:
        return self._end_chain

    # -- appends -------------------------------------------------------------------

    async def append_as_leader(self, bodies: Sequence[bytes], term: int,
                               magic: int = Magic.NORMAL, channel: int = 0) -> AppendResult:
        """Append `bodies` as new entries of `term`: one copy into the mapping, one index write."""
        async with self._lock:
            self._check_writable()
            assert term >= self.end_term, "a leader's term never falls below its log's"
            if self._write_pos is None or self._end_chain is None:
                raise StorageError("the log was reset without a position: it takes follower "
                                   "appends until the first entry fixes one")
            batch = encode_leader_batch(list(bodies), self.end_index + 1, term, magic, channel,
                                        self._write_pos, self._end_chain,
                                        self.config.data_file_size)
            await self._write(batch)
        return AppendResult(batch.first_index, batch.positions)

    async def append_as_follower(self, data: bytes | memoryview) -> FollowerAppend:
        """Append raw entries exactly as another replica stored them; returns the new end index
        and the configuration entries among them.

        All or nothing: the whole batch is validated (see
        `validate_follower_batch`) before a byte is written.
        """
        if not isinstance(data, bytes):  # the caller's buffer may change while files are created
            data = bytes(data)
        async with self._lock:
            self._check_writable()
            batch = validate_follower_batch(data, self.end_index + 1, self.end_term,
                                            self._write_pos, self._end_chain,
                                            self.config.data_file_size)
            await self._write(batch)
            return FollowerAppend(self.end_index, batch.config_indices)

    def append_as_follower_now(self, data: bytes | memoryview) -> FollowerAppend | None:
        """append_as_follower without waiting, for the common case of a push that fits the files
        there are: None, and nothing written, when it would have to wait (another mutation holds the
        store, or files must be created first). `data` is not copied: nothing runs meanwhile."""
        if self._lock.locked():
            return None
        self._check_writable()
        batch = validate_follower_batch(data, self.end_index + 1, self.end_term, self._write_pos,
                                        self._end_chain, self.config.data_file_size)
        if not self._has_room(batch):
            return None
        self._place(batch)
        return FollowerAppend(self.end_index, batch.config_indices)

    def _check_writable(self) -> None:
        self.durability.check()
        if self.disk_full:
            raise DiskFullError(f"disk usage of {self.data_dir} is above "
                                f"{self.config.disk_full_ratio:.0%}; appends are refused")

    async def _write(self, batch: Batch) -> None:
        first_pos = batch.fillers[0] if batch.fillers else batch.runs[0][2]
        if self.meta.base_pos is None:  # first entry after a reset fixes the position, first on disk
            await self._save_meta(replace(self.meta, base_pos=first_pos))
        await self._ensure_files(self.data, first_pos, batch.end_pos)
        record_pos = batch.first_index * INDEX_RECORD_SIZE
        await self._ensure_files(self.index, record_pos, record_pos + len(batch.index_records))
        self._place(batch)

    def _has_room(self, batch: Batch) -> bool:
        """Whether `_write` would place the batch without waiting: no position to fix, no file to create."""
        record_end = batch.first_index * INDEX_RECORD_SIZE + len(batch.index_records)
        return (self.meta.base_pos is not None and bool(self.data.segments) and self.data.end >= batch.end_pos
                and bool(self.index.segments) and self.index.end >= record_end)

    def _place(self, batch: Batch) -> None:
        """Copy a batch into files that hold it."""
        record_pos = batch.first_index * INDEX_RECORD_SIZE
        data = memoryview(batch.data)
        file_size = self.config.data_file_size
        durability = self.durability
        dirty = durability.dirty
        for pos in batch.fillers:
            dirty.add(self.data.write(pos, encode_blank(file_size - pos % file_size)))
        for start, end, pos in batch.runs:
            dirty.add(self.data.write(pos, data[start:end]))
        self.data.write(batch.end_pos, END_MARK)  # a clean end reads as zeros, whatever was there
        for seg, view, done in self.index.spans(record_pos, len(batch.index_records)):
            view[:] = batch.index_records[done:done + len(view)]
            durability.dirty_index.add(seg)
        durability.changes += 1
        self.end_index = batch.last_index
        self.end_term = batch.last_term
        self._end_chain = batch.last_chain_crc
        self._write_pos = batch.end_pos

    async def _ensure_files(self, files: SegmentList, first: int, end: int) -> None:
        """Create the files that bytes [first, end) need, in the I/O thread."""
        if not files.segments:
            await self._run_io(files.create, first - first % files.file_size)
        while files.end < end:
            await self._run_io(files.create, files.end)

    # -- reads -------------------------------------------------------------------------

    def get(self, index: int) -> Entry:
        """The entry at `index`, its body a zero-copy view; CRC checked."""
        check_in_log(index, self.begin_index, self.end_index)
        magic, pos, size, _index, term = self._record(index)
        seg = self.data.find(pos)
        off = pos - seg.start
        view = seg.read_view
        h_magic, h_size, h_index, h_term, h_pos, channel, chain, bcrc, bsize = \
            HEADER.unpack_from(view, off)
        body = view[off + HEADER_SIZE:off + h_size]
        if (h_magic, h_size, h_index, h_term, h_pos, bsize) != (magic, size, index, term, pos, size - HEADER_SIZE):
            raise self._damaged(index, pos, "entry header disagrees with its index record")
        if zlib.crc32(body) != bcrc:
            raise self._damaged(index, pos, "body CRC mismatch")
        return Entry(magic, index, term, pos, channel, chain, bcrc, body)

    def read_range(self, start: int, max_entries: int, max_bytes: int, *,
                   trust_own_writes: bool = False) -> RawEntries:
        """Raw bytes of consecutive entries from `start`, each CRC-checked, except recent ones.

        Returns at least one entry (even one larger than max_bytes) and stops at
        max_entries, max_bytes, the log end, or the end of a data file: the
        result is one zero-copy slice. Ask again from first_index + count.

        Recent entries are returned unchecked (`_recent_range`): all of the range
        past durable_end_index (not yet covered by a flush, which takes
        milliseconds), or with `trust_own_writes` all of it from the first entry
        this process wrote itself (since it opened the log, or the truncate or
        reset that last lowered its end). They are what the leader pushes while
        its own fdatasync runs, and just after. Safe because they were encoded or
        validated here, and whatever damaged them since, a follower's
        validate_follower_batch refuses (it checks every field the checks here
        cover, and the chain CRC); the leader then reads its retry checked
        (without `trust_own_writes`), which reports the damage.
        """
        assert max_entries > 0
        check_in_log(start, self.begin_index, self.end_index)
        if start > self.durable_end_index or (trust_own_writes and start >= self._own_from):
            recent = self._recent_range(start, max_entries, max_bytes)
            if recent is not None:
                return recent
        _magic, pos, _size, _index, _term = self._record(start)
        seg = self.data.find(pos)
        view = seg.read_view
        first = off = pos - seg.start
        limit = min(self.end_index, start + max_entries - 1)
        crc32 = zlib.crc32
        unpack_header = HEADER.unpack_from
        file_size = self.config.data_file_size
        index = start
        while index <= limit and off + HEADER_SIZE <= file_size:
            magic, size, h_index, _t, h_pos, _c, _chain, bcrc, bsize = unpack_header(view, off)
            if magic == BLANK_MAGIC:
                break
            if index > start and off + size - first > max_bytes:
                break
            if (magic not in ENTRY_MAGICS or h_index != index or h_pos != seg.start + off
                    or bsize != size - HEADER_SIZE):
                raise self._damaged(index, seg.start + off, "bad entry header")
            if crc32(view[off + HEADER_SIZE:off + size]) != bcrc:
                raise self._damaged(index, seg.start + off, "body CRC mismatch")
            off += size
            index += 1
        return RawEntries(start, index - start, view[first:off])

    def _recent_range(self, start: int, max_entries: int, max_bytes: int) -> RawEntries | None:
        """read_range's slice, from index records alone: a binary search for its last entry,
        whose header and the first one's must agree with their records (else None: walk and check).

        The two ends are then true entry boundaries, and the bytes between them are entries
        start..last laid out back to back, as every data file holds them."""
        first = self._record(start)
        seg = self.data.find(first[1])
        file_size = self.config.data_file_size
        file_end = seg.start + file_size
        index_view = self.index.view
        unpack_record = INDEX_RECORD.unpack_from
        lo, hi = start, min(self.end_index, start + max_entries - 1)
        while lo < hi:
            mid = (lo + hi + 1) // 2
            _m, pos, size, _i, _t = unpack_record(index_view(mid * INDEX_RECORD_SIZE, INDEX_RECORD_SIZE))
            if pos < file_end and pos + size - first[1] <= max_bytes:
                lo = mid
            else:
                hi = mid - 1
        last = self._record(lo)
        if not (seg.start <= last[1] < file_end and _header_agrees(seg.read_view, seg.start, first, file_size)
                and _header_agrees(seg.read_view, seg.start, last, file_size)):
            return None
        return RawEntries(start, lo - start + 1, seg.read_view[first[1] - seg.start:last[1] + last[2] - seg.start])

    def verify(self, start: int, max_entries: int, chain: int | None) -> Verified:
        """Check up to `max_entries` from `start` as a scrub does: each header against its index
        record, each body CRC, and each chain CRC from the entry before it (the one check that
        also covers a flipped term or chain field). `chain` is the verified chain CRC of the entry
        before `start` (None: not known, its link is not checked); so is the result's, for the
        next call. An entry after a damaged one is checked without its link to it.
        """
        if start <= self.begin_index:
            start, chain = self.begin_index, self.meta.base_chain_crc
        last = min(self.end_index, start + max_entries - 1)
        damaged = []
        for index in range(start, last + 1):
            try:
                entry = self.get(index)
            except CorruptEntryError:
                damaged.append(index)
                chain = None
                continue
            if chain is not None and entry.chain_crc != chain_crc(chain, index, entry.term, entry.body_crc):
                self._damaged(index, entry.pos, "chain CRC does not follow from the entry before")
                damaged.append(index)
                chain = None
                continue
            chain = entry.chain_crc
        if last >= start:  # the scrub walks the whole log: what it read leaves the RSS behind it
            with contextlib.suppress(OSError):  # only memory is at stake
                self._release_verified(start, last)
        return Verified(max(start, last + 1), damaged, chain)

    def _release_verified(self, start: int, last: int) -> None:
        """Unmap the entries start..last that the scrub has read. Their index records are not
        checked here: a damaged one at worst unmaps other pages, which the next access maps again."""
        first, end = start * INDEX_RECORD_SIZE, (last + 1) * INDEX_RECORD_SIZE
        first_pos = INDEX_RECORD.unpack_from(self.index.view(first, INDEX_RECORD_SIZE))[1]
        _m, last_pos, last_size, _i, _t = INDEX_RECORD.unpack_from(self.index.view(end - INDEX_RECORD_SIZE,
                                                                                   INDEX_RECORD_SIZE))
        self._release_pages(first_pos, last_pos + last_size, first, end)

    def _release_flushed(self) -> None:
        """After a flush: unmap what the last release left, in steps of RELEASE_STEP_BYTES."""
        data_from, index_from = self._released
        data_to = (self._write_pos or 0) - RECENT_PAGES_BYTES
        index_to = (self.end_index + 1) * INDEX_RECORD_SIZE - RECENT_PAGES_BYTES
        if data_to - data_from >= RELEASE_STEP_BYTES or index_to - index_from >= RELEASE_STEP_BYTES:
            self._release_pages(data_from, data_to, index_from, index_to)
            self._released = (max(data_from, data_to), max(index_from, index_to))

    def _release_pages(self, data_from: int, data_to: int, index_from: int, index_to: int) -> None:
        """Unmap these data and index ranges (SegmentList.release_pages), but never the newest
        RECENT_PAGES_BYTES of either, which pushes and reads keep using."""
        self.data.release_pages(data_from, min(data_to, (self._write_pos or 0) - RECENT_PAGES_BYTES))
        self.index.release_pages(index_from, min(index_to, (self.end_index + 1) * INDEX_RECORD_SIZE
                                                 - RECENT_PAGES_BYTES))

    async def repair(self, index: int, raw: bytes) -> None:
        """Overwrite the damaged entry at `index` with `raw`, a replica's stored copy of it.

        The copy must be that entry: the same size, index, term, position and type as its
        index record, a sound body, and a chain CRC that follows from the entry before (and
        leads to the one after, when that one is sound). Written in place and made durable.
        """
        async with self._lock:
            check_in_log(index, self.begin_index, self.end_index)
            magic, pos, size, _index, term = self._record(index)
            copy = decode_entry(memoryview(raw)) if len(raw) >= HEADER_SIZE else None
            if (copy is None or len(raw) != size or HEADER_SIZE + len(copy.body) != size
                    or (copy.magic, copy.index, copy.term, copy.pos) != (magic, index, term, pos)
                    or zlib.crc32(copy.body) != copy.body_crc):
                raise StorageError(f"the copy offered for entry {index} is not that entry")
            before = (self.meta.base_chain_crc if index == self.begin_index
                      else self.get(index - 1).chain_crc)  # a damaged one before is repaired first
            if before is not None and copy.chain_crc != chain_crc(before, index, term, copy.body_crc):
                raise StorageError(f"the copy offered for entry {index} does not follow the entry before it")
            if index < self.end_index:
                try:
                    after = self.get(index + 1)
                except CorruptEntryError:
                    pass  # damaged too: repaired next
                else:
                    if after.chain_crc != chain_crc(copy.chain_crc, index + 1, after.term, after.body_crc):
                        raise StorageError(f"the copy offered for entry {index} does not lead to the one after")
            self.durability.dirty.add(self.data.write(pos, raw))
            self.durability.changes += 1
        await self.flush()

    def pos_at(self, index: int) -> int:
        """The global byte position of the entry at `index`, from its index record alone."""
        check_in_log(index, self.begin_index, self.end_index)
        return self._record(index)[1]

    def term_at(self, index: int) -> int:
        """Term of the entry at `index`; before_begin_term for before_begin_index."""
        if index == self.meta.base_index:
            return self.meta.base_term
        check_in_log(index, self.begin_index, self.end_index)
        return self._record(index)[4]

    def first_index_of_term(self, term: int, before_index: int) -> int | None:
        """The first kept index at or below `before_index` whose term is `term`, or None.

        Terms never fall along the log, so this is a binary search over index
        records: what the compare step needs to skip a whole term at a time.
        """
        lo, hi = self.begin_index, min(before_index, self.end_index)
        while lo < hi:
            mid = (lo + hi) // 2
            if self._record(mid)[4] < term:
                lo = mid + 1
            else:
                hi = mid
        if lo <= min(before_index, self.end_index) and self._record(lo)[4] == term:
            return lo
        return None

    def _damaged(self, index: int, pos: int, reason: str) -> CorruptEntryError:
        """Tell the owner (who repairs) about a damaged entry; the error for the reader."""
        if self.on_damage is not None:
            self.on_damage(index)
        return CorruptEntryError(index, pos, reason)

    def _record(self, index: int) -> tuple[int, int, int, int, int]:
        pos = index * INDEX_RECORD_SIZE
        seg = self.index.find(pos)
        record = INDEX_RECORD.unpack_from(seg.view, pos - seg.start)
        if record[3] != index or record[0] not in ENTRY_MAGICS or not self.data.covers(record[1]):
            raise self._damaged(index, record[1], "index record does not match")
        return record

    # -- truncation and reset ------------------------------------------------------------

    async def truncate(self, index: int) -> int:
        """Drop `index` and every entry after it; returns the new end index.

        Beyond the end: nothing to drop, returns end_index. At begin_index: the
        log becomes empty at its base. Below begin_index (cleaned entries, which
        are committed and never truncated): IndexCleanedError.
        """
        async with self._lock:
            if index > self.end_index:
                return self.end_index
            if index < self.begin_index:
                raise IndexCleanedError(index, self.begin_index, self.end_index)
            if index == self.begin_index:
                end_term, chain, write_pos = self.meta.base_term, self.meta.base_chain_crc, \
                    self.meta.base_pos
            else:
                prev = self.get(index - 1)
                end_term, chain, write_pos = prev.term, prev.chain_crc, prev.pos + prev.size
            durability = self.durability
            await durability.lower_index_mark(index)  # records from `index` on will be written anew
            if write_pos is not None and self.data.covers(write_pos):
                durability.dirty.add(self.data.write(write_pos, END_MARK))  # erase the next header or filler
            gone = self.data.remove_from(write_pos if write_pos is not None else -1)
            gone += self.index.remove_from(index * INDEX_RECORD_SIZE)
            durability.forget(gone)
            durability.changes += 1
            self.end_index, self.end_term = index - 1, end_term
            self._end_chain, self._write_pos = chain, write_pos
            durability.durable_end_index = min(durability.durable_end_index, self.end_index)
            self._own_from = min(self._own_from, index)
            if gone:  # the end mark reaches the disk before files vanish: no resurrection. Every
                # dirty data file with it: a synced kept file must not hold entries whose filler
                # or predecessors in an earlier file a power loss would take (a hole)
                await self._run_io(fdatasync_all, set(durability.dirty))
                await self._run_io(self._delete, gone)
            log.info("truncated the log at %d; end index %d", index, self.end_index)
            return self.end_index

    async def reset_begin(self, index: int, term: int, *, chain_crc: int | None = None,
                          next_pos: int | None = None) -> None:
        """Empty the log and restart it after (index, term), for a snapshot install.

        `chain_crc` and `next_pos` are the leader's chain CRC of `index` and the
        position of `index + 1`; when not given, the first follower append after
        the reset supplies them.
        """
        if index < -1:
            raise ValueError(f"index {index} cannot end a log")
        if next_pos is not None and (next_pos < 0 or next_pos % self.config.data_file_size + HEADER_SIZE
                                     + MIN_BLANK_LEN > self.config.data_file_size):
            raise ValueError(f"next_pos {next_pos} cannot start a log")
        async with self._lock:
            await self.durability.lower_index_mark(index + 1)
            # A crash from here on finds the flag and finishes the reset on open.
            await self._save_meta(replace(self.meta, base_index=index, base_term=term,
                                          base_chain_crc=chain_crc, base_pos=next_pos,
                                          resetting=True))
            gone = self.data.reset() + self.index.reset()
            self.durability.dirty.clear()
            self.durability.dirty_index.clear()
            self.durability.changes += 1
            self.end_index, self.end_term = index, term
            self._end_chain, self._write_pos = chain_crc, next_pos
            self.durability.durable_end_index = index
            self._own_from = index + 1
            await self._run_io(self._delete, gone)
            await self._save_meta(replace(self.meta, resetting=False))
            log.info("log reset to begin after index %d term %d", index, term)

    # -- cleaning --------------------------------------------------------------------------

    def head_files(self) -> list[HeadFile]:
        """Every data file but the last, oldest first, with its last entry index."""
        files = []
        for seg, following in zip(self.data.segments, self.data.segments[1:], strict=False):
            magic, _size, next_first = HEADER.unpack_from(following.view, 0)[:3]
            if magic not in ENTRY_MAGICS:
                break  # an empty last file: the one before it still holds the end
            files.append(HeadFile(seg.path, next_first - 1, os.stat(seg.path).st_mtime))
        return files

    async def delete_head_files(self, count: int) -> None:
        """Delete the first `count` data files (never the last) and the index files
        holding only their records; the log then begins at the next file's first entry."""
        async with self._lock:
            assert 0 < count < len(self.data.segments)
            first = self.data.segments[count]
            magic, _size, new_begin = HEADER.unpack_from(first.view, 0)[:3]
            assert magic in ENTRY_MAGICS, "the log must go on in the first file kept"
            if new_begin - 1 == self.meta.base_index:  # the files held no entry of the log
                meta = replace(self.meta, base_pos=first.start)
            else:
                last_gone = self.get(new_begin - 1)
                meta = replace(self.meta, base_index=last_gone.index, base_term=last_gone.term,
                               base_chain_crc=last_gone.chain_crc, base_pos=first.start)
            # The base moves before the files go: a crash in between leaves files that
            # recovery finishes deleting, never a hole.
            await self._save_meta(meta)
            gone = self.data.remove_head(count)
            records_before = new_begin * INDEX_RECORD_SIZE
            index_count = sum(1 for seg in self.index.segments[:-1]
                              if seg.start + self.index.file_size <= records_before)
            gone += self.index.remove_head(index_count)
            self.durability.forget(gone)
            await self._run_io(self._delete, gone)
            log.info("cleaned %d data and %d index files; the log begins at %d", count,
                     index_count, new_begin)

    def disk_usage_ratio(self) -> float:
        """Used fraction of the file system holding the data directory, as df counts it."""
        st = os.statvfs(self.data_dir)
        used = (st.f_blocks - st.f_bfree) * st.f_frsize
        usable = used + st.f_bavail * st.f_frsize
        return used / usable if usable else 1.0

    # -- durability (storage.durability) ----------------------------------------------------

    @property
    def durable_end_index(self) -> int:
        return self.durability.durable_end_index

    @property
    def ack_end_index(self) -> int:
        return self.durability.ack_end_index

    @property
    def flush_rounds(self) -> int:
        return self.durability.rounds

    async def flush(self) -> None:
        await self.durability.flush()

    def flushed(self) -> asyncio.Future[None]:
        return self.durability.flushed()

    async def wait_durable(self) -> None:
        await self.durability.wait_durable()

    # -- I/O thread ------------------------------------------------------------------------------

    async def _run_io(self, fn: Callable[..., T], *args: object) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._io, fn, *args)

    async def _save_meta(self, meta: StoreMeta) -> None:
        await self._run_io(save_meta, self.data_dir, meta)
        self.meta = meta

    def _delete(self, segments: list[Segment]) -> None:
        data = [s for s in segments if s.path.parent == self.data.directory]
        self.data.delete(data)
        self.index.delete([s for s in segments if s.path.parent != self.data.directory])


def _header_agrees(view: memoryview, start: int, record: tuple[int, int, int, int, int], file_size: int) -> bool:
    """The entry header at the record's position (in the file mapped at `start`) says what it says."""
    magic, pos, size, index, term = record
    off = pos - start
    if off + size > file_size or size < HEADER_SIZE:
        return False
    h_magic, h_size, h_index, h_term, h_pos, _ch, _chain, _bcrc, bsize = HEADER.unpack_from(view, off)
    return (h_magic, h_size, h_index, h_term, h_pos, bsize) == (magic, size, index, term, pos, size - HEADER_SIZE)


def _lock_dir(data_dir: Path) -> int:
    fd = os.open(data_dir / "LOCK", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise StoreLockedError(f"{data_dir} is in use by another process") from None
    return fd


