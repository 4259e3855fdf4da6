"""Retention and disk space, DLedger's CleanSpaceService.

Every `clean_interval_ms` the service reads the disk usage of the data
directory's file system and:

- sets the store's disk-full flag above `disk_full_ratio` (appends then fail
  with DISK_FULL before writing anything) and clears it below;
- at the hours of `delete_when`, or whenever usage is above
  `disk_space_ratio_to_check_expired`, deletes head data files older than
  `file_reserved_hours`, oldest first; above
  `disk_space_ratio_to_force_clean` (with `enable_disk_force_clean`) age no
  longer protects them.

Whatever the pressure, it never deletes the last file, nor one holding an
entry above the safe index the layer above supplies (what it still needs:
the node passes its applied index, so nothing uncommitted or unapplied goes;
a follower left behind the first kept entry gets a snapshot install); nor,
unless forced, one holding an entry that a named consumer an admin flagged
has not processed (the floor the layer above supplies: the lowest position
among them).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime

from raftlog.storage.config import parse_delete_when
from raftlog.storage.retention import HeadFile
from raftlog.storage.store import Store

log = logging.getLogger("raftlog.storage.cleaner")

HOUR_S = 3600


def files_to_delete(files: Sequence[HeadFile], now: float, reserved_s: float, safe_index: int,
                    force: bool) -> int:
    """How many of the oldest head files may go: expired (or forced) and all at or below safe_index."""
    count = 0
    for f in files:
        if f.last_index > safe_index or (not force and now < f.mtime + reserved_s):
            break
        count += 1
    return count


class CleanService:
    def __init__(self, store: Store, safe_index: Callable[[], int], *,
                 floor: Callable[[], int | None] = lambda: None, clock: Callable[[], float] = time.time,
                 disk_usage: Callable[[], float] | None = None,
                 cleaned: Callable[[], Awaitable[None]] | None = None) -> None:
        """`cleaned`: called after head files are deleted (the consume queues' first offsets move)."""
        self.store = store
        self.cleaned = cleaned
        self.safe_index = safe_index
        self.floor = floor  # the last index the slowest flagged consumer processed (None: none)
        self.clock = clock
        self.disk_usage = disk_usage or store.disk_usage_ratio
        self._hours = parse_delete_when(store.config.delete_when)
        self._task: asyncio.Task[None] | None = None
        self.files_deleted = 0

    async def run_once(self) -> int:
        """One check; returns the number of data files deleted."""
        config = self.store.config
        ratio = self.disk_usage()
        full = ratio > config.disk_full_ratio
        if full != self.store.disk_full:
            log.warning("disk usage %.1f%%: disk-full flag %s", ratio * 100, "set" if full else "cleared")
            self.store.disk_full = full
        now = self.clock()
        time_to_delete = datetime.fromtimestamp(now).hour in self._hours
        if not (time_to_delete or ratio > config.disk_space_ratio_to_check_expired):
            return 0
        force = config.enable_disk_force_clean and ratio > config.disk_space_ratio_to_force_clean
        reserved_s = max(config.file_reserved_hours, 1) * HOUR_S
        safe = self.safe_index()
        if not force and (floor := self.floor()) is not None:
            safe = min(safe, floor)
        count = files_to_delete(self.store.head_files(), now, reserved_s, safe, force)
        if count:
            await self.store.delete_head_files(count)
            self.files_deleted += count
            if self.cleaned is not None:
                await self.cleaned()
            log.info("cleaned %d data files (disk usage %.1f%%, forced: %s)", count, ratio * 100, force)
        return count

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="raftlog-cleaner")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    async def _run(self) -> None:
        interval = self.store.config.clean_interval_ms / 1000
        while True:
            try:
                await self.run_once()
            except Exception:
                log.exception("cleaning failed")
            await asyncio.sleep(interval)
