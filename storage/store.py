"""The log store: DLedger's memory-mapped entry and index files (DLedgerMmapFileStore).

Layout of a data directory::

    <data_dir>/data/<20-digit start offset>    entries, data_file_size each
    <data_dir>/index/<20-digit start offset>   32-byte records, index_file_size each
    <data_dir>/store.json                      file sizes and the log's base (meta.py)
    <data_dir>/index-synced.json               the index mark (storage.durability)
    <data_dir>/LOCK                            held while a process has the store open

Mutations (appends, truncate, reset, cleaning) are serialised by one asyncio
lock and never wait on the disk except to create or delete files, in the
store's single I/O thread, and for a flush (storage.durability). Reads are
synchronous and zero-copy (storage.reader): valid for committed entries for as
long as the caller holds them (a truncate may overwrite the bytes of
uncommitted ones: copy those if you keep them).
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable, Collection, Iterator, Sequence
from concurrent.futures import Executor, ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import TypeVar

from raftlog.storage import clean_stop
from raftlog.storage.batch import Batch, encode_leader_batch, validate_follower_batch
from raftlog.storage.codec import (
    ENTRY_MAGICS,
    HEADER,
    HEADER_SIZE,
    INDEX_RECORD_SIZE,
    MIN_BLANK_LEN,
    Entry,
    Magic,
    Stamp,
    encode_blank,
)
from raftlog.storage.config import StoreConfig
from raftlog.storage.durability import Durability, fdatasync_all
from raftlog.storage.errors import (
    DiskFullError,
    IndexCleanedError,
    StorageError,
    StoreOpenError,
)
from raftlog.storage.meta import StoreMeta, load_index_mark, load_meta, lock_data_dir, save_index_mark, save_meta
from raftlog.storage.protocol import AppendResult, FollowerAppend, RawEntries, Verified
from raftlog.storage.reader import LogReader
from raftlog.storage.recovery import LogEnd, RecoveryReport, recover
from raftlog.storage.retention import HeadFile, PageRelease, disk_usage_ratio, head_files
from raftlog.storage.segments import Segment, SegmentList

log = logging.getLogger("raftlog.storage")

END_MARK = bytes(MIN_BLANK_LEN)

T = TypeVar("T")


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
        self.own_from = 0  # entries from this index on were written by this process (read_range)
        self._owns_io = executor is None
        self.pages = PageRelease(self.data, self.index, lambda: self._write_pos or 0, lambda: self.end_index)
        self.reader = LogReader(self.data, self.index, config.data_file_size, self, self.pages)
        self.durability = Durability(data_dir, config, self._run_io, lambda: self.end_index, self.pages.after_flush)
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
        store = cls(data_dir, config, lock_data_dir(data_dir), executor)
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
        self.own_from = self.durability.index_synced = self.end_index + 1
        if mark != self.own_from:
            save_index_mark(self.data_dir, self.own_from)

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
                               magic: int = Magic.NORMAL, channel: int = 0,
                               stamp: Stamp | None = None) -> AppendResult:
        """Append `bodies` as new entries of `term`: one copy into the mapping, one index write."""
        async with self._lock:
            self._check_writable()
            assert term >= self.end_term, "a leader's term never falls below its log's"
            if self._write_pos is None or self._end_chain is None:
                raise StorageError("the log was reset without a position: it takes follower "
                                   "appends until the first entry fixes one")
            batch = encode_leader_batch(list(bodies), self.end_index + 1, term, magic, channel,
                                        self._write_pos, self._end_chain,
                                        self.config.data_file_size, stamp)
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
                                            self.config.data_file_size, self.get)
            await self._write(batch)
            return FollowerAppend(self.end_index, batch.control_indices, batch.produced, batch.queued)

    def append_as_follower_now(self, data: bytes | memoryview) -> FollowerAppend | None:
        """append_as_follower without waiting, for the common case of a push that fits the files
        there are: None, and nothing written, when it would have to wait (another mutation holds the
        store, or files must be created first). `data` is not copied: nothing runs meanwhile."""
        if self._lock.locked():
            return None
        self._check_writable()
        batch = validate_follower_batch(data, self.end_index + 1, self.end_term, self._write_pos,
                                        self._end_chain, self.config.data_file_size, self.get)
        if not self._has_room(batch):
            return None
        self._place(batch)
        return FollowerAppend(self.end_index, batch.control_indices, batch.produced, batch.queued)

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
        return self.reader.get(index)

    def read_range(self, start: int, max_entries: int, max_bytes: int, *,
                   trust_own_writes: bool = False) -> RawEntries:
        return self.reader.read_range(start, max_entries, max_bytes, trust_own_writes=trust_own_writes)

    def verify(self, start: int, max_entries: int, chain: int | None) -> Verified:
        return self.reader.verify(start, max_entries, chain)

    def pos_at(self, index: int) -> int:
        return self.reader.pos_at(index)

    def get_at(self, pos: int) -> Entry | None:
        return self.reader.get_at(pos)

    def term_at(self, index: int) -> int:
        return self.reader.term_at(index)

    def first_index_of_term(self, term: int, before_index: int) -> int | None:
        return self.reader.first_index_of_term(term, before_index)

    def indices_of(self, magics: Collection[int], start: int) -> Iterator[int]:
        return self.reader.indices_of(magics, start)

    def message_units(self, first: int, last: int) -> bytes:
        return self.reader.message_units(first, last)

    async def repair(self, index: int, raw: bytes) -> None:
        """Overwrite the damaged entry at `index` with `raw`, a replica's stored copy of it.

        The copy must be that entry (LogReader.check_copy); it is written in place and made durable.
        """
        async with self._lock:
            pos = self.reader.check_copy(index, raw)
            self.durability.dirty.add(self.data.write(pos, raw))
            self.durability.changes += 1
        await self.flush()

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
            self.own_from = min(self.own_from, index)
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
            self.own_from = index + 1
            await self._run_io(self._delete, gone)
            await self._save_meta(replace(self.meta, resetting=False))
            log.info("log reset to begin after index %d term %d", index, term)

    # -- cleaning --------------------------------------------------------------------------

    def head_files(self) -> list[HeadFile]:
        """Every data file but the last, oldest first, with its last entry index."""
        return head_files(self.data)

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
        return disk_usage_ratio(self.data_dir)

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
