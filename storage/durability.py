"""What of the log is on disk, and the failure latch that guards the promise.

Data files written since the last flush are dirty; a flush round (storage.flush)
fdatasyncs them and moves `durable_end_index`. Index files are synced behind the
data, in the background, once `index_sync_step_bytes` of records are behind; the
index mark (storage.meta) says below which log index the records are on disk,
so recovery trusts them up to there; a clean close syncs the index and moves the
mark to the end, and a truncate or reset that rewrites records below the mark
lowers it first. One failed sync latches: the page cache may
have dropped the data it held, so the store refuses appends from then on (a
retried fsync would report success over lost pages: PostgreSQL's "fsyncgate").
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from raftlog.storage.codec import INDEX_RECORD_SIZE
from raftlog.storage.config import StoreConfig
from raftlog.storage.errors import StorageError
from raftlog.storage.flush import GroupFlusher
from raftlog.storage.meta import save_index_mark
from raftlog.storage.segments import Segment

log = logging.getLogger("raftlog.storage")

INDEX_NO_FLOOR = 1 << 62

RunIo = Callable[..., Awaitable[Any]]  # runs a blocking call in the store's I/O thread


class Durability:
    def __init__(self, data_dir: Path, config: StoreConfig, run_io: RunIo, written_end: Callable[[], int],
                 after_flush: Callable[[], None]) -> None:
        """`written_end`: the log's end index as written; `after_flush`: called after each flush round
        (the store unmaps pages it no longer needs)."""
        self.data_dir = data_dir
        self.config = config
        self._run_io = run_io
        self._written_end = written_end
        self._after_flush = after_flush
        self.durable_end_index = -1  # end index covered by the last completed flush
        self.dirty: set[Segment] = set()  # data files written since the last flush took them
        self.dirty_index: set[Segment] = set()  # index files written since the last index sync
        self.index_synced = -1  # the index mark: records below this log index are on disk
        self._index_floor = INDEX_NO_FLOOR  # lowest end a truncate or reset set during an index sync
        self._mark_lock = asyncio.Lock()  # orders the writes of the mark
        self._index_task: asyncio.Task[None] | None = None
        self.changes = 0  # mutations so far; a flush round covers those before it began
        self._synced_changes = 0
        self._flusher = GroupFlusher(self._sync_round)
        self.failed: BaseException | None = None  # a sync error: the page cache may have lost data
        self._periodic: asyncio.Task[None] | None = None
        self.on_flush: Callable[[float], None] | None = None  # seconds of each sync round, for metrics

    def check(self) -> None:
        """Refuse a write once a sync failed."""
        if self.failed is not None:
            raise StorageError(f"a flush failed earlier ({self.failed}); durability can no longer "
                               "be promised: restart the node")

    def forget(self, gone: list[Segment]) -> None:
        """Files deleted: nothing of them is left to sync."""
        self.dirty.difference_update(gone)
        self.dirty_index.difference_update(gone)

    # -- flush rounds ---------------------------------------------------------------------

    async def flush(self) -> None:
        """Make everything written so far durable; concurrent callers share one sync."""
        if self._synced_changes < self.changes:
            await self._flusher.flush()

    def flushed(self) -> asyncio.Future[None]:
        """A future done once what is written so far is durable (GroupFlusher.next_round): for a caller
        that answers from a callback rather than a task."""
        if self._synced_changes >= self.changes:
            done = asyncio.get_running_loop().create_future()
            done.set_result(None)
            return done
        return self._flusher.next_round()

    async def wait_durable(self) -> None:
        """What an acknowledgement waits for: a flush in "sync" mode, nothing in "async"."""
        if self.config.flush_mode == "sync":
            await self.flush()

    @property
    def ack_end_index(self) -> int:
        """The end an acknowledgement may cover under the flush mode: durable in "sync",
        written in "async" (whose risk is documented in StoreConfig)."""
        return self.durable_end_index if self.config.flush_mode == "sync" else self._written_end()

    @property
    def rounds(self) -> int:
        return self._flusher.rounds

    def _sync_round(self) -> None:
        """One fdatasync of the dirty data files, inline (storage.flush says why)."""
        if self.failed is not None:
            raise StorageError(f"a flush failed earlier ({self.failed})")
        dirty, self.dirty = self.dirty, set()
        end, changes = self._written_end(), self.changes
        started = time.perf_counter()
        try:
            fdatasync_all(dirty)
        except Exception as exc:
            self.dirty |= dirty
            self.failed = exc
            log.error("flush failed: %r; the store refuses appends from now on", exc)
            raise
        self.durable_end_index = end
        self._synced_changes = max(self._synced_changes, changes)
        self._start_index_sync()
        try:
            self._after_flush()
        except OSError as exc:  # only memory is at stake: the flush itself succeeded
            log.warning("could not unmap flushed pages: %s", exc)
        if self.on_flush is not None:
            self.on_flush(time.perf_counter() - started)

    def start(self) -> None:
        """Start the background flush of flush_mode "async" (needs a running loop)."""
        if self.config.flush_mode == "async" and self._periodic is None:
            self._periodic = asyncio.create_task(self._flush_periodically(), name="raftlog-flush-timer")

    async def _flush_periodically(self) -> None:
        interval = self.config.flush_interval_ms / 1000
        while True:
            await asyncio.sleep(interval)
            try:
                await self.flush()
            except Exception:
                log.exception("background flush failed")

    async def stop_periodic(self) -> None:
        if self._periodic is not None:
            self._periodic.cancel()
            await asyncio.gather(self._periodic, return_exceptions=True)
            self._periodic = None

    async def close(self) -> bool:
        """Flush what is left, run a round still scheduled, and sync the whole index; True when all of
        it reached the disk (the next open may then trust the log's end without a scan)."""
        if self.failed is None:
            await self.flush()
        self._flusher.close()
        await self._stop_index_sync()
        if self.failed is None:
            await self._sync_index(self.durable_end_index + 1)  # all of it: the mark goes to the end
            return self.failed is None
        return False

    def cancel(self) -> None:
        """The store's files are gone: no background work may touch them."""
        for task in (self._periodic, self._index_task):
            if task is not None:
                task.cancel()
        self._periodic = self._index_task = None

    # -- the index, synced behind the data --------------------------------------------------

    def _index_behind(self) -> bool:
        behind = (self.durable_end_index + 1 - self.index_synced) * INDEX_RECORD_SIZE
        return behind >= self.config.index_sync_step_bytes and self.failed is None

    def _start_index_sync(self) -> None:
        """After a flush: sync the index in the background once step bytes of records are behind."""
        if self._index_task is None and self._index_behind():
            self._index_task = asyncio.create_task(self._sync_index_behind(), name="raftlog-index-sync")

    async def _sync_index_behind(self) -> None:
        """Until the index is less than a step behind: flushes that end while it syncs start none."""
        try:
            while self._index_behind():
                before = self.index_synced
                await self._sync_index(self.durable_end_index + 1)
                if self.index_synced == before:
                    break  # a truncate or reset lowered the end meanwhile: the next flush starts anew
        finally:
            self._index_task = None

    async def _stop_index_sync(self) -> None:
        task, self._index_task = self._index_task, None
        if task is not None:
            await asyncio.gather(task, return_exceptions=True)

    async def _sync_index(self, end: int) -> None:
        """Sync the index files, then move the mark to `end` (whose data is durable), unless a
        truncate or reset lowered the end meanwhile. A failure fails the store, as a flush's does."""
        dirty, self.dirty_index = self.dirty_index, set()
        self._index_floor = INDEX_NO_FLOOR
        try:
            await self._run_io(fdatasync_all, dirty)  # submitted at once: no file is deleted before it
            async with self._mark_lock:
                end = min(end, self._index_floor)
                if end > self.index_synced:
                    await self._run_io(save_index_mark, self.data_dir, end)
                    self.index_synced = end
        except asyncio.CancelledError:
            self.dirty_index |= dirty
            raise
        except Exception as exc:
            self.dirty_index |= dirty
            self.failed = exc
            log.error("index sync failed: %r; the store refuses appends from now on", exc)

    async def lower_index_mark(self, end: int) -> None:
        """Records from log index `end` on are about to be rewritten: the mark drops below them,
        durably, before they are (a power loss must not leave stale records trusted)."""
        self._index_floor = min(self._index_floor, end)
        async with self._mark_lock:
            if end < self.index_synced:
                await self._run_io(save_index_mark, self.data_dir, end)
                self.index_synced = end


def fdatasync_all(segments: set[Segment]) -> None:
    """fdatasync each dirty file: for shared mappings it writes what msync(MS_SYNC)
    would, and unlike mmap.flush it releases the GIL while the disk works."""
    for seg in segments:
        os.fdatasync(seg.fd)
