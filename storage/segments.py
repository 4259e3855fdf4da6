"""Fixed-size memory-mapped files addressed by one global offset (DLedger's MmapFileList).

A segment list is a directory of files of `file_size` bytes each, named by
their start offset zero-padded to 20 digits; the files are contiguous, so
the one holding offset `p` is found by arithmetic. New files are reserved
on disk with posix_fallocate when they are created, so a write through the
mapping can never fault for lack of space (an ENOSPC surfaces here, as
DiskFullError, before anything is written).

Every method here blocks (file system calls) except `view`, `write` and
`find`, which only touch mapped memory; the store runs the blocking ones in
its I/O thread.
"""

from __future__ import annotations

import contextlib
import errno
import mmap
import os
from collections.abc import Iterator
from pathlib import Path

from raftlog.storage.errors import DiskFullError, StoreOpenError

NAME_DIGITS = 20


class Segment:
    """One mapped file. `view` is a writable memoryview of the whole mapping."""

    __slots__ = ("fd", "mm", "path", "read_view", "start", "view")

    def __init__(self, start: int, path: Path, fd: int, mm: mmap.mmap) -> None:
        self.start = start
        self.path = path
        self.fd = fd
        self.mm = mm
        self.view = memoryview(mm)
        self.read_view = self.view.toreadonly()  # what readers get slices of

    def close(self) -> None:
        """Unmap and close. Views handed out earlier keep the mapping alive until dropped."""
        self.read_view.release()
        self.view.release()
        with contextlib.suppress(BufferError):  # a caller holds a view: the mapping dies with it
            self.mm.close()
        os.close(self.fd)


def segment_name(start: int) -> str:
    return f"{start:0{NAME_DIGITS}d}"


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class SegmentList:
    def __init__(self, directory: Path, file_size: int) -> None:
        self.directory = directory
        self.file_size = file_size
        self.segments: list[Segment] = []

    # -- lookup (memory only) ------------------------------------------------

    @property
    def end(self) -> int:
        """Offset just past the last file."""
        return self.segments[-1].start + self.file_size if self.segments else 0

    def covers(self, pos: int) -> bool:
        return bool(self.segments) and self.segments[0].start <= pos < self.end

    def find(self, pos: int) -> Segment:
        return self.segments[(pos - self.segments[0].start) // self.file_size]

    def view(self, pos: int, length: int) -> memoryview:
        """Zero-copy bytes [pos, pos + length), which must lie in one file."""
        seg = self.find(pos)
        offset = pos - seg.start
        return seg.view[offset:offset + length]

    def write(self, pos: int, data: bytes | bytearray | memoryview) -> Segment:
        """Write `data` to [pos, pos + len), which must lie in one existing file. With pwrite, not
        through the mapping (which reads see at once: one page cache): an fdatasync after writes
        through a shared mapping cost ten times as much on ext4 here once the file had tens of MiB
        behind the write position (0.55 against 0.04 ms), and with it the latency of every append."""
        seg = self.find(pos)
        offset = pos - seg.start
        assert offset + len(data) <= self.file_size
        if os.pwrite(seg.fd, data, offset) != len(data):
            raise OSError(f"a short write to {seg.path} at {offset}")
        return seg

    def spans(self, pos: int, length: int) -> Iterator[tuple[Segment, memoryview, int]]:
        """The file regions holding [pos, pos + length), each with its offset in that range."""
        done = 0
        while done < length:
            seg = self.find(pos + done)
            offset = pos + done - seg.start
            n = min(length - done, self.file_size - offset)
            yield seg, seg.view[offset:offset + n], done
            done += n

    # -- files (blocking) ----------------------------------------------------

    def load(self) -> list[str]:
        """Map the existing files; returns notes on what had to be repaired.

        A last file shorter than `file_size` is a creation cut short by a crash
        and is extended; any other file of the wrong size, or a gap between
        files, means the directory is not a log this store wrote.
        """
        self.directory.mkdir(parents=True, exist_ok=True)
        notes = []
        for stray in self.directory.glob("*.tmp"):
            stray.unlink()
            notes.append(f"removed unfinished file {stray}")
        names = sorted(p.name for p in self.directory.iterdir())
        for i, name in enumerate(names):
            path = self.directory / name
            if len(name) != NAME_DIGITS or not name.isdigit():
                raise StoreOpenError(f"unexpected file {path} in the log directory")
            start = int(name)
            if start % self.file_size:
                raise StoreOpenError(f"{path}: start offset is not a multiple of {self.file_size}")
            if self.segments and start != self.end:
                raise StoreOpenError(f"{path}: gap in the log files (expected start {self.end})")
            size = path.stat().st_size
            if size != self.file_size:
                if i != len(names) - 1 or size > self.file_size:
                    raise StoreOpenError(
                        f"{path}: size {size}, expected {self.file_size} (file damaged?)")
                notes.append(f"extended half-created file {path} from {size} bytes")
                self._reserve(path, size)
            self.segments.append(self._map(start, path))
        return notes

    def create(self, start: int) -> Segment:
        """Create, reserve and map the file starting at `start`; it becomes the last."""
        assert start % self.file_size == 0
        assert not self.segments or start == self.end
        path = self.directory / segment_name(start)
        tmp = path.with_suffix(".tmp")
        fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            _fallocate(fd, self.file_size, tmp)
            os.fsync(fd)
        except BaseException:
            os.close(fd)
            tmp.unlink(missing_ok=True)
            raise
        os.close(fd)
        os.rename(tmp, path)
        fsync_dir(self.directory)
        seg = self._map(start, path)
        self.segments.append(seg)
        return seg

    def remove_from(self, pos: int) -> list[Segment]:
        """Detach the files that start after `pos`, last first: deleted in that order, a
        crash midway leaves a contiguous log. The caller deletes them."""
        keep = [s for s in self.segments if s.start <= pos]
        gone = self.segments[len(keep):]
        self.segments = keep
        return gone[::-1]

    def remove_head(self, count: int) -> list[Segment]:
        """Detach the first `count` files; the caller deletes them."""
        gone = self.segments[:count]
        self.segments = self.segments[count:]
        return gone

    def reset(self) -> list[Segment]:
        gone, self.segments = self.segments, []
        return gone

    def delete(self, segments: list[Segment]) -> None:
        for seg in segments:
            seg.close()
            seg.path.unlink(missing_ok=True)
        if segments:
            fsync_dir(self.directory)


    def close(self) -> None:
        for seg in self.reset():
            seg.close()

    def release_pages(self, start: int, end: int) -> None:
        """Drop this process's mapping of the pages of global offsets start..end (rounded down to
        pages). They stay in the page cache, where a later access finds them, so the log does not
        count in the node's RSS. Safe for dirty pages too: the kernel keeps a shared file page's
        dirt when it unmaps it, and the next fdatasync writes it."""
        for seg in self.segments:
            lo = max(start, seg.start) - seg.start
            hi = min(end, seg.start + self.file_size) - seg.start
            lo -= lo % mmap.PAGESIZE
            hi -= hi % mmap.PAGESIZE
            if hi > lo:
                seg.mm.madvise(mmap.MADV_DONTNEED, lo, hi - lo)

    def _map(self, start: int, path: Path) -> Segment:
        fd = os.open(path, os.O_RDWR)
        try:
            mm = mmap.mmap(fd, self.file_size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        except BaseException:
            os.close(fd)
            raise
        return Segment(start, path, fd, mm)

    def _reserve(self, path: Path, size: int) -> None:
        fd = os.open(path, os.O_RDWR)
        try:
            _fallocate(fd, self.file_size, path)
            os.fsync(fd)
        finally:
            os.close(fd)


def _fallocate(fd: int, length: int, path: Path) -> None:
    try:
        os.posix_fallocate(fd, 0, length)
    except OSError as exc:
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            raise DiskFullError(f"no space for a new log file {path} ({length} bytes)") from exc
        raise
