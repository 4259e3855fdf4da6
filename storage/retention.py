"""Retention's view of the files, and the pages the process lets go of.

Cleaning (storage.cleaner) deletes whole data files from the head of the log:
`head_files` lists the candidates, never the last file. The mapped pages of old
entries leave the resident set as the log grows: after each flush, once
RELEASE_STEP_BYTES more lie behind the newest RECENT_PAGES_BYTES, and behind
the scrub as it reads; the next access maps them again.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from raftlog.storage.codec import ENTRY_MAGICS, HEADER, INDEX_RECORD, INDEX_RECORD_SIZE
from raftlog.storage.segments import SegmentList

RECENT_PAGES_BYTES = 16 << 20  # the newest log bytes kept mapped; older pages leave the RSS
RELEASE_STEP_BYTES = 16 << 20  # after a flush, pages are unmapped once this many more are old enough


@dataclass(frozen=True, slots=True)
class HeadFile:
    """A data file that cleaning could delete (never the last one)."""

    path: Path
    last_index: int
    mtime: float


def head_files(data: SegmentList) -> list[HeadFile]:
    """Every data file but the last, oldest first, with its last entry index."""
    files = []
    for seg, following in zip(data.segments, data.segments[1:], strict=False):
        magic, _size, next_first = HEADER.unpack_from(following.view, 0)[:3]
        if magic not in ENTRY_MAGICS:
            break  # an empty last file: the one before it still holds the end
        files.append(HeadFile(seg.path, next_first - 1, os.stat(seg.path).st_mtime))
    return files


def disk_usage_ratio(data_dir: Path) -> float:
    """Used fraction of the file system holding the data directory, as df counts it."""
    st = os.statvfs(data_dir)
    used = (st.f_blocks - st.f_bfree) * st.f_frsize
    usable = used + st.f_bavail * st.f_frsize
    return used / usable if usable else 1.0


class PageRelease:
    def __init__(self, data: SegmentList, index: SegmentList, write_pos: Callable[[], int],
                 end_index: Callable[[], int]) -> None:
        self.data = data
        self.index = index
        self._write_pos = write_pos
        self._end_index = end_index
        self._released = (0, 0)  # data and index offsets below which flushes have unmapped the pages

    def after_flush(self) -> None:
        """Unmap what the last release left, in steps of RELEASE_STEP_BYTES."""
        data_from, index_from = self._released
        data_to = self._write_pos() - RECENT_PAGES_BYTES
        index_to = (self._end_index() + 1) * INDEX_RECORD_SIZE - RECENT_PAGES_BYTES
        if data_to - data_from >= RELEASE_STEP_BYTES or index_to - index_from >= RELEASE_STEP_BYTES:
            self._release(data_from, data_to, index_from, index_to)
            self._released = (max(data_from, data_to), max(index_from, index_to))

    def release_verified(self, start: int, last: int) -> None:
        """Unmap the entries start..last that the scrub has read. Their index records are not
        checked here: a damaged one at worst unmaps other pages, which the next access maps again."""
        first, end = start * INDEX_RECORD_SIZE, (last + 1) * INDEX_RECORD_SIZE
        first_pos = INDEX_RECORD.unpack_from(self.index.view(first, INDEX_RECORD_SIZE))[1]
        _m, last_pos, last_size, _i, _t = INDEX_RECORD.unpack_from(self.index.view(end - INDEX_RECORD_SIZE,
                                                                                   INDEX_RECORD_SIZE))
        self._release(first_pos, last_pos + last_size, first, end)

    def _release(self, data_from: int, data_to: int, index_from: int, index_to: int) -> None:
        """Unmap these data and index ranges (SegmentList.release_pages), but never the newest
        RECENT_PAGES_BYTES of either, which pushes and reads keep using."""
        self.data.release_pages(data_from, min(data_to, self._write_pos() - RECENT_PAGES_BYTES))
        self.index.release_pages(index_from, min(index_to, (self._end_index() + 1) * INDEX_RECORD_SIZE
                                                 - RECENT_PAGES_BYTES))
