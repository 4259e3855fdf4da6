"""One queue's index of its messages: RocketMQ's ConsumeQueue over raftlog's log.

A unit is 20 bytes, big-endian, ``pos i64 | size i32 | tags_code i64``: a MESSAGE entry's position
and size in the log (as its index record says) and its tags' code (RocketMQ's long, the same 8 bytes
as the message's u64, and read as that). Queue offset N is unit N.

A queue's files are ``<topic directory>/<queue>-<20-digit offset>``, cut on one grid (FileGrid):
the first holds 1,024 units (20 KiB), each next one twice as many, up to RocketMQ's 300,000 (6 MB).
Tens of thousands of queues of a few messages cost a few KiB each, a queue of ten million units is
41 files, and the file of an offset is arithmetic. An unused queue has no file. The queues of a
topic share its directory, unlike RocketMQ's directory per queue: 80,000 queues would add 80,000
directories, each an inode, a 4 KiB block, a mkdir and a listing at a start.

A file grows by appends (pwrite) and is never reserved ahead: its size says where the queue
ends, so opening a queue is a listing and a stat, with no read, and a full disk is an error from
the write (through a mapping it would be a SIGBUS). A file is mapped for reads once it is full
(Python's mmap cannot map past a file's end); the one still growing is read with pread.

The first file is named by min_offset (RocketMQ's minLogicOffset), not by where it starts on the
grid: retention moves min_offset with one rename, atomic and durable with one directory sync, and
a queue needs no file besides its units (a tiny file each would double the inodes and disk of
80,000 small queues). Every later file is named by its start.

The queue is derived from the log, which rebuilds it (storage.consume_queues' dispatched point
says from where): appends reach the disk lazily (`flush`). A truncation, a move of min_offset and
a delete are durable on return, so a crash never brings back units the log no longer holds.

Every method blocks on file calls: the owner runs them in its I/O thread.
"""

from __future__ import annotations

import contextlib
import errno
import mmap
import os
import struct
from collections.abc import Callable, Iterable
from pathlib import Path

from raftlog.storage.codec import INDEX_RECORD_SIZE, Buffer
from raftlog.storage.errors import ConsumeQueueError, DiskFullError, QueueOffsetError
from raftlog.storage.segments import NAME_DIGITS, fsync_dir, segment_name

UNIT = struct.Struct(">qiQ")  # pos, size, tags_code
UNIT_SIZE = UNIT.size  # 20
TAGS_CODE_SIZE = 8
RECORD_POS_AT = 4  # an index record's pos i64 and size i32, bytes 4..16: a unit's first 12 bytes
POS_SIZE_LEN = 12


class FileGrid:
    """Where each file of a queue starts and how many units it holds: file k holds
    first_units << k units, up to max_units. The same for every queue of a node."""

    __slots__ = ("_doubled_end", "_doubling", "first_units", "max_units")

    def __init__(self, first_units: int = 1024, max_units: int = 300_000) -> None:
        if not 0 < first_units <= max_units:
            raise ValueError(f"a queue's files hold 0 < first_units ({first_units}) <= max_units ({max_units})")
        self.first_units = first_units
        self.max_units = max_units
        doubling = 0
        while first_units << doubling < max_units:
            doubling += 1
        self._doubling = doubling  # files 0..doubling-1 double; from file `doubling` on, max_units each
        self._doubled_end = first_units * ((1 << doubling) - 1)  # the first offset past the doubling files

    def file_of(self, offset: int) -> int:
        if offset < self._doubled_end:
            return (offset // self.first_units + 1).bit_length() - 1
        return self._doubling + (offset - self._doubled_end) // self.max_units

    def start_of(self, k: int) -> int:
        if k <= self._doubling:
            return self.first_units * ((1 << k) - 1)
        return self._doubled_end + (k - self._doubling) * self.max_units

    def units_in(self, k: int) -> int:
        return self.first_units << k if k < self._doubling else self.max_units

    def __eq__(self, other: object) -> bool:
        return isinstance(other, FileGrid) and (self.first_units, self.max_units) == (other.first_units,
                                                                                        other.max_units)

    def __hash__(self) -> int:
        return hash((self.first_units, self.max_units))


DEFAULT_GRID = FileGrid()


def units_of(records: Buffer, tags_codes: Buffer) -> bytes:
    """The units of consecutive MESSAGE entries, from their index records (32 bytes each, as the
    index files hold them) and their tags' codes (8 bytes each, big-endian).

    A unit's pos and size are bytes 4..16 of its record, so each column is copied with strided
    slices: 20 copies in C whatever the count (a Python loop over the entries is 3x slower)."""
    count, rest = divmod(len(records), INDEX_RECORD_SIZE)
    assert rest == 0
    assert len(tags_codes) == count * TAGS_CODE_SIZE
    records = memoryview(records)
    tags_codes = memoryview(tags_codes)
    units = bytearray(count * UNIT_SIZE)
    for byte in range(POS_SIZE_LEN):
        units[byte::UNIT_SIZE] = records[RECORD_POS_AT + byte::INDEX_RECORD_SIZE]
    for byte in range(TAGS_CODE_SIZE):
        units[POS_SIZE_LEN + byte::UNIT_SIZE] = tags_codes[byte::TAGS_CODE_SIZE]
    return bytes(units)


class QueueFile:
    """An open file of a queue: its descriptor, and its mapping once it is full and read."""

    __slots__ = ("fd", "mm")

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.mm: mmap.mmap | None = None

    def close(self) -> None:
        if self.mm is not None:
            self.mm.close()  # reads copy out of it: no view of it is ever handed out
        os.close(self.fd)


def file_prefix(queue: int) -> str:
    """What the names of a queue's files start with, in its topic's directory."""
    return f"{queue}-"


class ConsumeQueue:
    """One (topic, queue)'s units, in its topic's `directory`. Open files are kept until `close_files`."""

    __slots__ = ("_dirty_files", "_files", "_sync_dirs", "directory", "grid", "has_files", "min_offset",
                 "next_offset", "queue")

    def __init__(self, directory: str | Path, queue: int, grid: FileGrid = DEFAULT_GRID,
                 names: Iterable[str] | None = None) -> None:
        """Find the queue's end from its files' names and sizes (nothing is read or mapped); `names`:
        its files' names, when the caller has listed the directory already."""
        self.directory = os.fspath(directory)
        self.queue = queue
        self.grid = grid
        self.min_offset = 0  # the first unit kept
        self.next_offset = 0  # one past the last unit
        self.has_files = False  # the queue has held a unit: the file of min_offset exists
        self._files: dict[int, QueueFile] | None = None  # by file number; None while none is open
        self._dirty_files: set[int] | None = None  # written since the last flush
        self._sync_dirs: set[str] | None = None  # directories whose entries changed since the last flush
        self._load(self._listed() if names is None else sorted(names))

    # -- opening ---------------------------------------------------------------------------------

    def _listed(self) -> list[str]:
        prefix = file_prefix(self.queue)
        try:
            return sorted(name for name in os.listdir(self.directory) if name.startswith(prefix))
        except FileNotFoundError:
            return []

    def _load(self, names: list[str]) -> None:
        if not names:
            return
        self.min_offset = self.next_offset = self._offset_named(names[0])
        self.has_files = True
        first = self.grid.file_of(self.min_offset)
        for i, name in enumerate(names):
            k = first + i
            path = f"{self.directory}/{name}"
            if i and path != self._path(k):
                raise ConsumeQueueError(f"{path}: expected the queue's next file, {self._path(k)}")
            size = os.stat(path).st_size
            capacity = self.grid.units_in(k) * UNIT_SIZE
            if size > capacity:
                raise ConsumeQueueError(f"{path}: {size} bytes, more than its {capacity} (another file grid?)")
            self.next_offset = max(self.min_offset, self.grid.start_of(k) + size // UNIT_SIZE)
            if size < capacity:  # the last file; after a power loss an earlier one may have lost its tail
                self._remove_after(names[i + 1:])
                return

    def _offset_named(self, name: str) -> int:
        digits = name[len(file_prefix(self.queue)):]
        if not (name.startswith(file_prefix(self.queue)) and len(digits) == NAME_DIGITS
                and digits.isdigit()):
            raise ConsumeQueueError(f"unexpected file {self.directory}/{name} for queue {self.queue}")
        return int(digits)

    def _remove_after(self, names: list[str]) -> None:
        """Delete the files after a short one: their units lie past a gap (the log rebuilds them)."""
        for name in reversed(names):
            os.unlink(f"{self.directory}/{name}")
        if names:
            fsync_dir(Path(self.directory))

    # -- reads -------------------------------------------------------------------------------------

    def unit(self, offset: int) -> tuple[int, int, int]:
        """(pos, size, tags_code) of the unit at `offset`."""
        if not self.min_offset <= offset < self.next_offset:
            raise QueueOffsetError(offset, self.min_offset, self.next_offset)
        k = self.grid.file_of(offset)
        pos, size, tags_code = UNIT.unpack(self._bytes(k, (offset - self.grid.start_of(k)) * UNIT_SIZE, UNIT_SIZE))
        return pos, size, tags_code

    def units(self, offset: int, count: int) -> bytes:
        """Up to `count` units from `offset` (a page of a consumer's read); none at next_offset."""
        if not self.min_offset <= offset <= self.next_offset:
            raise QueueOffsetError(offset, self.min_offset, self.next_offset)
        return self._read(offset, min(count, self.next_offset - offset))

    def _read(self, offset: int, count: int) -> bytes:
        parts = []
        while count > 0:
            k = self.grid.file_of(offset)
            start = self.grid.start_of(k)
            n = min(count, start + self.grid.units_in(k) - offset)
            parts.append(self._bytes(k, (offset - start) * UNIT_SIZE, n * UNIT_SIZE))
            offset += n
            count -= n
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def _bytes(self, k: int, at: int, length: int) -> bytes:
        file = self._file(k)
        if file.mm is None and self.next_offset >= self.grid.start_of(k) + self.grid.units_in(k):
            file.mm = mmap.mmap(file.fd, self.grid.units_in(k) * UNIT_SIZE, mmap.MAP_SHARED, mmap.PROT_READ)
        if file.mm is not None:
            return file.mm[at:at + length]
        data = os.pread(file.fd, length, at)
        if len(data) != length:
            raise ConsumeQueueError(f"{self._path(k)}: {len(data)} bytes at {at}, expected {length} "
                                    "(the file was cut by another process?)")
        return data

    def first_at_or_past(self, pos: int) -> int:
        """The offset of the first unit whose pos is at least `pos` (next_offset: none). Units are in
        log order, so a binary search."""
        lo, hi = self.min_offset, self.next_offset
        while lo < hi:
            mid = (lo + hi) // 2
            if self.unit(mid)[0] < pos:
                lo = mid + 1
            else:
                hi = mid
        return lo

    # -- appends -------------------------------------------------------------------------------------

    def append(self, first_offset: int, units: Buffer) -> None:
        """Add the units of offsets first_offset..; first_offset is next_offset, or below it for a
        re-dispatch after a start, whose units the queue already holds must be the same (checked
        and skipped; below min_offset, retention took them: skipped)."""
        view = memoryview(units)
        count, rest = divmod(len(view), UNIT_SIZE)
        if rest:
            raise ConsumeQueueError(f"{self.directory}: {len(view)} bytes are not whole {UNIT_SIZE}-byte units")
        if first_offset > self.next_offset:
            raise ConsumeQueueError(f"{self.directory}: units from offset {first_offset} would leave a gap "
                                    f"after the queue's end, {self.next_offset}")
        held = min(count, self.next_offset - first_offset)
        if held > 0:
            held = self._check_held(first_offset, view[:held * UNIT_SIZE])
        if held < count:
            self._write(first_offset + held, view[held * UNIT_SIZE:])

    def _check_held(self, first_offset: int, units: memoryview) -> int:
        """How many of `units` (all below next_offset) the queue holds as they are; it cuts itself at a
        unit of zeros, a hole a power loss left among unflushed units (past the dispatched point)."""
        count = len(units) // UNIT_SIZE
        gone = min(count, max(0, self.min_offset - first_offset))
        held = self._read(first_offset + gone, count - gone)
        if held == units[gone * UNIT_SIZE:]:
            return count
        i = gone + _first_difference(held, units[gone * UNIT_SIZE:])
        ours = UNIT.unpack_from(held, (i - gone) * UNIT_SIZE)
        if ours != (0, 0, 0):
            raise ConsumeQueueError(
                f"{self.directory}: offset {first_offset + i} holds the unit (pos, size, tags_code) {ours}, "
                f"a re-dispatch brings {UNIT.unpack_from(units, i * UNIT_SIZE)}: the queue and the log disagree")
        self.truncate(first_offset + i)
        return i

    def _write(self, offset: int, units: memoryview) -> None:
        while units:
            k = self.grid.file_of(offset)
            start = self.grid.start_of(k)
            chunk = units[:(start + self.grid.units_in(k) - offset) * UNIT_SIZE]
            file = self._create(k) if not self.has_files or k > self._last_file() else self._file(k)
            try:
                written = os.pwrite(file.fd, chunk, (offset - start) * UNIT_SIZE)
            except OSError as exc:
                raise _disk_full(exc, self._path(k)) from exc
            if written != len(chunk):
                raise OSError(f"a short write to {self._path(k)}")
            self._dirty().add(k)
            offset += len(chunk) // UNIT_SIZE
            self.next_offset = offset
            units = units[len(chunk):]

    def _create(self, k: int) -> QueueFile:
        if not self.has_files:
            self._make_directory()
        path = self._path(k)
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        except OSError as exc:
            raise _disk_full(exc, path) from exc
        self.has_files = True
        self._dirs_to_sync().add(self.directory)
        files = self._files = self._files or {}
        file = files[k] = QueueFile(fd)
        return file

    def _make_directory(self) -> None:
        """Create the topic's directory (and the root, if missing); each is synced into its parent at
        the next flush."""
        missing = []
        path = Path(self.directory)
        while not path.exists():
            missing.append(path)
            path = path.parent
        for created in reversed(missing):
            created.mkdir(exist_ok=True)
            self._dirs_to_sync().add(str(created.parent))

    # -- truncation and retention ----------------------------------------------------------------

    def truncate(self, next_offset: int) -> None:
        """Drop the units from `next_offset` on (the log was cut, or recovery cut it); durable on
        return. Units below min_offset are gone already: a cut below it empties the queue there."""
        cut = max(next_offset, self.min_offset)
        if cut >= self.next_offset:
            return
        keep = self.grid.file_of(max(self.min_offset, cut - 1))
        last = self._last_file()
        self._close_files(lambda k: k >= keep)  # a mapping of a file must not outlive its size
        for k in range(last, keep, -1):  # last first: a crash midway leaves the queue whole, shorter
            os.unlink(self._path(k))
            self._dirty().discard(k)
        fd = os.open(self._path(keep), os.O_RDWR)
        try:
            os.ftruncate(fd, (cut - self.grid.start_of(keep)) * UNIT_SIZE)
            os.fdatasync(fd)
        finally:
            os.close(fd)
        if last > keep:
            fsync_dir(Path(self.directory))
        self.next_offset = cut

    def truncate_past_pos(self, pos: int) -> None:
        """Drop every unit whose pos is `pos` or more: the log was cut there (RocketMQ's
        truncateDirtyLogicFiles)."""
        if self.next_offset > self.min_offset and self.unit(self.next_offset - 1)[0] >= pos:
            self.truncate(self.first_at_or_past(pos))

    def correct_min_offset(self, log_begin_pos: int) -> None:
        """Retention removed the log before `log_begin_pos`: min_offset moves to the first unit at or
        past it, and the files wholly before it are deleted (RocketMQ's correctMinOffset and
        deleteExpiredFile). Durable on return: the first file is renamed to the new min_offset."""
        new_min = self.first_at_or_past(log_begin_pos)
        if new_min <= self.min_offset:
            return
        first, keep = self.grid.file_of(self.min_offset), self.grid.file_of(new_min)
        if keep > self._last_file():  # emptied at a full file's end: the next file holds the name
            self._create(keep)
        self._close_files(lambda k: k < keep)
        for k in range(first, keep):  # first first: a crash midway leaves a later min_offset, never a gap
            os.unlink(self._path(k))
            self._dirty().discard(k)
        os.rename(self._path(keep), self._path(keep, named=new_min))
        self.min_offset = new_min
        fsync_dir(Path(self.directory))

    def reset(self, offset: int) -> None:
        """Empty the queue, its next unit at `offset` (a snapshot install: the log restarts after the
        messages that took the offsets below it); durable on return, kept by an empty first file's name."""
        self.delete()
        self.min_offset = self.next_offset = offset
        if offset:
            self._create(self.grid.file_of(offset))
            self.flush()

    # -- durability and closing --------------------------------------------------------------------

    def flush(self) -> None:
        """Put the units appended since the last flush on disk, with the directory entries of new files."""
        for k in self._dirty_files or ():
            os.fdatasync(self._file(k).fd)
        for directory in self._sync_dirs or ():
            fsync_dir(Path(directory))
        self._dirty_files = self._sync_dirs = None

    def synced(self) -> None:
        """The whole file system was synced (syncfs): nothing of the queue is left to flush."""
        self._dirty_files = self._sync_dirs = None

    @property
    def files_open(self) -> bool:
        return self._files is not None

    def close_files(self) -> None:
        """Close the queue's open files (they reopen when next used); unflushed units stay to flush."""
        self._close_files(lambda k: True)

    def delete(self) -> None:
        """Remove the queue's files, and its topic's directory if no queue is left in it (the topic is
        deleted); durable on return. Last first: a crash midway leaves a shorter queue."""
        self.close_files()
        if self.has_files:
            for k in range(self._last_file(), self.grid.file_of(self.min_offset) - 1, -1):
                os.unlink(self._path(k))
            fsync_dir(Path(self.directory))
        with contextlib.suppress(OSError):  # other queues of the topic are in it
            os.rmdir(self.directory)
            fsync_dir(Path(self.directory).parent)
        self.min_offset = self.next_offset = 0
        self.has_files = False
        self._dirty_files = self._sync_dirs = None

    # -- files -------------------------------------------------------------------------------------

    def _last_file(self) -> int:
        return self.grid.file_of(max(self.min_offset, self.next_offset - 1))

    def _path(self, k: int, named: int | None = None) -> str:
        """File k's path: named by its start, the first one by min_offset (or by `named`)."""
        if named is None:
            named = self.min_offset if k == self.grid.file_of(self.min_offset) else self.grid.start_of(k)
        return f"{self.directory}/{file_prefix(self.queue)}{segment_name(named)}"

    def _file(self, k: int) -> QueueFile:
        files = self._files = self._files or {}
        file = files.get(k)
        if file is None:
            file = files[k] = QueueFile(os.open(self._path(k), os.O_RDWR))
        return file

    def _close_files(self, which: Callable[[int], bool]) -> None:
        if self._files is None:
            return
        for k in [k for k in self._files if which(k)]:
            self._files.pop(k).close()
        if not self._files:
            self._files = None

    def _dirty(self) -> set[int]:
        dirty = self._dirty_files = self._dirty_files or set()
        return dirty

    def _dirs_to_sync(self) -> set[str]:
        dirs = self._sync_dirs = self._sync_dirs or set()
        return dirs


def _first_difference(a: bytes, b: memoryview) -> int:
    """The first unit at which two runs of units differ (they do)."""
    return next(i for i in range(len(a) // UNIT_SIZE)
                if a[i * UNIT_SIZE:(i + 1) * UNIT_SIZE] != b[i * UNIT_SIZE:(i + 1) * UNIT_SIZE])


def _disk_full(exc: OSError, path: str) -> Exception:
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return DiskFullError(f"no space for a consume queue's units in {path}")
    return exc
