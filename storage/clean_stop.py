"""A note left by a clean close, so that the next open need not scan the log.

Recovery scans the last three data files, as DLedger does: about 13 s for a
GiB of log. After a crash it must, but after a clean close the end of the
log is known. `Store.close()` writes `<data_dir>/clean-stop.json` once every
byte is synced (the index files too, which flushes leave behind, and the
index mark then says so) and the files are unmapped: the log's end, and each
file's size and mtime. `Store.open()` takes the note away (durably, before anything
else can write) and trusts it only if every file is as the note saw it and
the last entry checks out; otherwise it scans as after a crash.

A file changed after the close (damage done by hand or by a test, a copied or
cut file) has a new mtime: `save` waits until the kernel's coarse clock, which
stamps mtimes, has passed the files' mtimes, so that no later change can keep
one (on Linux filesystems that stamp mtimes finer than a second, as ext4, XFS
and tmpfs do). Damage that no mtime shows (a failing disk) is the scrub's to
find, as in files older than the last three.
"""

from __future__ import annotations

import json
import time
import zlib
from dataclasses import asdict, dataclass
from pathlib import Path

from raftlog.storage.codec import HEADER, HEADER_SIZE, INDEX_RECORD, INDEX_RECORD_SIZE, MIN_BLANK_LEN
from raftlog.storage.meta import StoreMeta, save_json
from raftlog.storage.recovery import LogEnd
from raftlog.storage.segments import SegmentList, fsync_dir

NAME = "clean-stop.json"
CLOCK_WAIT_S_MAX = 1.0
CLOCK_REALTIME_COARSE = 5  # Linux's clock id (not in Python's time module): the clock file times come from


@dataclass(frozen=True, slots=True)
class CleanStop:
    end_index: int
    end_term: int
    end_chain_crc: int | None
    write_pos: int | None
    base_index: int
    files: dict[str, list[int]]  # path relative to the data dir -> [size, mtime_ns]

    @property
    def end(self) -> LogEnd:
        return LogEnd(self.end_index, self.end_term, self.end_chain_crc, self.write_pos)


def file_stats(data_dir: Path, paths: list[Path]) -> dict[str, list[int]]:
    stats = {}
    for path in paths:
        st = path.stat()
        stats[str(path.relative_to(data_dir))] = [st.st_size, st.st_mtime_ns]
    return stats


def save(data_dir: Path, end: LogEnd, base_index: int, paths: list[Path]) -> None:
    """Write the note for a log whose files are synced and closed."""
    stop = CleanStop(end.end_index, end.end_term, end.end_chain_crc, end.write_pos, base_index,
                     file_stats(data_dir, paths))
    newest = max((mtime for _size, mtime in stop.files.values()), default=0)
    deadline = time.monotonic() + CLOCK_WAIT_S_MAX
    while time.clock_gettime_ns(CLOCK_REALTIME_COARSE) <= newest and time.monotonic() < deadline:
        time.sleep(0.001)
    save_json(data_dir / NAME, asdict(stop))


def take(data_dir: Path) -> CleanStop | None:
    """Read the note and remove it for good: whatever happens next is not a clean stop."""
    path = data_dir / NAME
    try:
        raw = path.read_text()
    except FileNotFoundError:
        return None
    path.unlink()
    fsync_dir(data_dir)
    try:
        return CleanStop(**json.loads(raw))
    except (ValueError, TypeError):
        return None  # a note cut short: scan


def trusted_end(stop: CleanStop, data_dir: Path, data: SegmentList, index: SegmentList,
                meta: StoreMeta) -> LogEnd | None:
    """The note's log end if the files are as it saw them and its last entry is sound."""
    paths = [seg.path for seg in data.segments + index.segments]
    if stop.base_index != meta.base_index or file_stats(data_dir, paths) != stop.files:
        return None
    if stop.end_index == meta.base_index:
        sound = (stop.write_pos, stop.end_chain_crc, stop.end_term) == (meta.base_pos, meta.base_chain_crc,
                                                                       meta.base_term)
    else:
        sound = _last_entry_sound(stop, data, index)
    if not sound or (stop.write_pos is not None and not _clean_after(data, stop.write_pos)):
        return None
    return stop.end


def _last_entry_sound(stop: CleanStop, data: SegmentList, index: SegmentList) -> bool:
    record_pos = stop.end_index * INDEX_RECORD_SIZE
    if stop.write_pos is None or not index.covers(record_pos):
        return False
    _magic, pos, size, idx, term = INDEX_RECORD.unpack_from(index.view(record_pos, INDEX_RECORD_SIZE))
    if (idx, term, pos + size) != (stop.end_index, stop.end_term, stop.write_pos) or not data.covers(pos):
        return False
    _m, hsize, hidx, hterm, hpos, _ch, chain, body_crc, body_size = HEADER.unpack_from(data.view(pos, HEADER_SIZE))
    return ((hsize, hidx, hterm, hpos, chain) == (size, idx, term, pos, stop.end_chain_crc)
            and hsize == HEADER_SIZE + body_size
            and zlib.crc32(data.view(pos + HEADER_SIZE, body_size)) == body_crc)


def _clean_after(data: SegmentList, write_pos: int) -> bool:
    """Nothing but the zero header that ends the log at `write_pos` (or no file there yet)."""
    if not data.covers(write_pos):
        return True
    return not any(data.view(write_pos, MIN_BLANK_LEN))
