"""Every consume queue of a node, under one root, and the dispatcher's side of them (RocketMQ's
ConsumeQueue table, fed by ReputMessageService's CommitLogDispatcher)::

    <root>/dispatched.json                        the dispatched point, and the file grid of the queues
    <root>/<topic_id>/<queue>-<20-digit offset>   a queue's files (storage.consume_queue)

A queue is opened when first used, by a listing of its topic's directory: opening the set reads one
small file, whatever the number of queues. At most `open_queues_max` queues keep files open (least
recently used first out), so 80,000 queues fit in a process's descriptors and mappings.

A flush syncs a few dirty queues file by file; from `syncfs_from_queues` on, one syncfs(2) of the
root's file system writes them all in one pass and commits their metadata once (an fdatasync per
file commits the file system's journal once per file: for thousands of queues, ten times as long
even from many threads). It writes whatever else is dirty on that file system too: mostly the log,
which the log's own flush writes anyway.

The dispatched point is the log index (and its entry's pos) through which every queue's units are
on disk: `flush` syncs the queues first, then replaces the point (temp, fsync, rename). A start
checks that the log still holds that entry at that pos, calls `recover` with the log's end, and
dispatches again from the entry after the point: units a queue still holds are checked and skipped
(ConsumeQueue.append), the ones a crash took are written again.

Every method blocks on file calls: the owner runs them in its I/O thread.
"""

from __future__ import annotations

import bisect
import ctypes
import json
import logging
import os
import shutil
import struct
from collections import OrderedDict, defaultdict
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import NamedTuple

from raftlog.storage.codec import HEADER_SIZE, INDEX_RECORD_SIZE, Buffer
from raftlog.storage.consume_queue import DEFAULT_GRID, RECORD_POS_AT, TAGS_CODE_SIZE, ConsumeQueue, FileGrid
from raftlog.storage.errors import ConsumeQueueError
from raftlog.storage.message import TAGS_CODE_OFFSET
from raftlog.storage.meta import save_json
from raftlog.storage.segments import SegmentList, fsync_dir

log = logging.getLogger("raftlog.storage")

POINT_NAME = "dispatched.json"
GONE_SUFFIX = ".gone"  # a dropped topic's directory, renamed before its files go: a crash leaves no half topic
TAGS_CODE_AT = HEADER_SIZE + TAGS_CODE_OFFSET  # a MESSAGE entry's tags code, from the entry's start
POS_LEN = 8

Run = tuple[int, int, int, Buffer]  # (topic_id, queue, first_offset, units): consecutive units of one queue


class DispatchedPoint(NamedTuple):
    log_index: int  # every queue's units of the entries through this log index are on disk
    pos: int  # that entry's pos: a start checks that the log still holds it there


def _positions_of(records: Buffer) -> tuple[int, ...]:
    """The pos field of each 32-byte index record, copied out as one column (strided slices)."""
    count = len(records) // INDEX_RECORD_SIZE
    records = memoryview(records)
    column = bytearray(count * POS_LEN)
    for byte in range(POS_LEN):
        column[byte::POS_LEN] = records[RECORD_POS_AT + byte::INDEX_RECORD_SIZE]
    return struct.unpack(f">{count}q", column)


def tags_codes_of(records: Buffer, data: SegmentList) -> bytes:
    """The tags codes of the MESSAGE entries whose index records are `records`, read from the log's
    data files: 8 bytes each, as storage.consume_queue.units_of takes them."""
    positions = _positions_of(records)
    parts = []
    i = 0
    while i < len(positions):
        seg = data.find(positions[i])
        end = bisect.bisect_left(positions, seg.start + data.file_size, i)
        mm, at = seg.mm, TAGS_CODE_AT - seg.start
        parts.append(b"".join([mm[pos + at:pos + at + TAGS_CODE_SIZE] for pos in positions[i:end]]))
        i = end
    return b"".join(parts)


class ConsumeQueues:
    """The queues under `root`, opened as they are used."""

    def __init__(self, root: str | Path, grid: FileGrid = DEFAULT_GRID, open_queues_max: int = 1024,
                 syncfs_from_queues: int = 64) -> None:
        if open_queues_max < 1:
            raise ValueError(f"open_queues_max must be at least 1, not {open_queues_max}")
        if syncfs_from_queues < 1:
            raise ValueError(f"syncfs_from_queues must be at least 1, not {syncfs_from_queues}")
        self.root = Path(root)
        self.grid = grid
        self.open_queues_max = open_queues_max
        self.syncfs_from_queues = syncfs_from_queues
        self._topics: dict[int, dict[int, ConsumeQueue]] = {}
        self._open: OrderedDict[tuple[int, int], ConsumeQueue] = OrderedDict()  # queues that may hold files open
        self._dirty: set[ConsumeQueue] = set()  # appended to since the last flush
        self.root.mkdir(parents=True, exist_ok=True)
        # held open: syncfs reports the write errors of the file system since its descriptor was opened
        self._root_fd = os.open(self.root, os.O_RDONLY | os.O_DIRECTORY)
        self.dispatched = self._load_point()  # on disk; None: dispatch from the log's first entry
        self._through = self.dispatched  # dispatched so far

    # -- the dispatched point --------------------------------------------------------------------------

    def _load_point(self) -> DispatchedPoint | None:
        path = self.root / POINT_NAME
        try:
            raw = json.loads(path.read_text())
            grid = FileGrid(raw["first_file_units"], raw["file_units_max"])
            point = None if raw["log_index"] is None else DispatchedPoint(int(raw["log_index"]), int(raw["pos"]))
        except FileNotFoundError:
            self._save_point(None)
            return None
        except (ValueError, TypeError, KeyError) as exc:
            raise ConsumeQueueError(f"{path} is not a dispatched point: {exc}") from exc
        if grid != self.grid:
            raise ConsumeQueueError(f"{self.root}'s queues were cut in files of {grid.first_units} units up to "
                                    f"{grid.max_units}, the settings say {self.grid.first_units} up to "
                                    f"{self.grid.max_units}")
        return point

    def _save_point(self, point: DispatchedPoint | None) -> None:
        save_json(self.root / POINT_NAME, {
            "log_index": None if point is None else point.log_index, "pos": None if point is None else point.pos,
            "first_file_units": self.grid.first_units, "file_units_max": self.grid.max_units})
        self.dispatched = point

    # -- queues ------------------------------------------------------------------------------------------

    def queue(self, topic_id: int, queue: int) -> ConsumeQueue:
        """The queue, opened if it was not (an unused queue costs no file). It counts as used: past
        `open_queues_max` queues, the least recently used one closes its files."""
        cq = self._loaded(topic_id, queue)
        key = (topic_id, queue)
        if key in self._open:
            self._open.move_to_end(key)
        else:
            self._open[key] = cq
            if len(self._open) > self.open_queues_max:
                self._open.popitem(last=False)[1].close_files()
        return cq

    def bounds(self, topic_id: int, queue: int) -> tuple[int, int]:
        """A queue's (min_offset, next_offset), without opening it or counting it as used: after
        `recover`, which loaded every stored queue, one not loaded holds no unit."""
        cq = self._topics.get(topic_id, {}).get(queue)
        return (0, 0) if cq is None else (cq.min_offset, cq.next_offset)

    def _loaded(self, topic_id: int, queue: int, names: list[str] | None = None) -> ConsumeQueue:
        assert topic_id >= 0
        assert queue >= 0
        queues = self._topics.get(topic_id)
        if queues is None:
            queues = self._topics[topic_id] = {}
        cq = queues.get(queue)
        if cq is None:
            cq = queues[queue] = ConsumeQueue(f"{self.root}/{topic_id}", queue, self.grid, names)
        return cq

    def dispatch(self, runs: Iterable[Run], through: DispatchedPoint) -> None:
        """Append each run's units to its queue; `through` is the last log entry the runs cover."""
        assert self._through is None or through.log_index >= self._through.log_index
        for topic_id, queue, first_offset, units in runs:
            cq = self.queue(topic_id, queue)
            self._dirty.add(cq)
            cq.append(first_offset, units)
        self._through = through

    def drop_topic(self, topic_id: int) -> None:
        """Remove the topic's queues, files and directory; durable on return."""
        for queue, cq in self._topics.pop(topic_id, {}).items():
            self._open.pop((topic_id, queue), None)
            self._dirty.discard(cq)
            cq.close_files()
        _remove_tree(self.root / str(topic_id))

    def recover(self, log_end_pos: int) -> None:
        """Cut every queue's units past the log's end (RocketMQ's truncateDirtyLogicFiles), at a start or
        after the log was truncated; a dispatched point past it is dropped (dispatch from the log's start)."""
        for topic_id, queue, names in self._stored_queues():
            cq = self._loaded(topic_id, queue, names)
            was_open = cq.files_open
            cq.truncate_past_pos(log_end_pos)
            if not was_open:
                cq.close_files()
        if self.dispatched is not None and self.dispatched.pos >= log_end_pos:
            log.warning("the log ends at pos %d, before the consume queues' dispatched point %s: they are "
                        "dispatched again from the log's start", log_end_pos, self.dispatched)
            self._save_point(None)
        if self._through is not None and self._through.pos >= log_end_pos:
            self._through = self.dispatched

    def _stored_queues(self) -> Iterator[tuple[int, int, list[str]]]:
        """Each (topic_id, queue, its files' names) on disk, one listing per topic; removes what a crash
        left of a dropped topic."""
        for topic in os.scandir(self.root):
            if topic.name.endswith(GONE_SUFFIX):
                shutil.rmtree(topic.path)
            elif topic.is_dir():
                files: defaultdict[int, list[str]] = defaultdict(list)
                for name in os.listdir(topic.path):
                    files[_number(name.partition("-")[0], f"{topic.path}/{name}")].append(name)
                for queue, names in files.items():
                    yield _number(topic.name, topic.path), queue, names

    def next_offsets(self) -> dict[tuple[int, int], int]:
        """Each stored queue's next offset (after `recover`, which opened them all): where its next
        message goes, as of the units dispatched."""
        return {(topic_id, queue): cq.next_offset for topic_id, queues in self._topics.items()
                for queue, cq in queues.items() if cq.has_files}

    def offsets_at(self, pos: int) -> dict[tuple[int, int], int]:
        """Each stored queue's first offset at or past the log's `pos`: its offsets as of the entry before
        (what a snapshot install from there carries)."""
        offsets = {}
        for topic_id, queue, names in self._stored_queues():
            cq = self._loaded(topic_id, queue, names)
            was_open = cq.files_open
            offsets[(topic_id, queue)] = cq.first_at_or_past(pos)
            if not was_open:
                cq.close_files()
        return offsets

    def correct_min_offsets(self, log_begin_pos: int) -> Iterator[None]:
        """Retention removed the log before `log_begin_pos`: every queue's first offset moves past it. A
        step per queue, so that an owner on an event loop can let others run between them."""
        for topic_id, queue, names in list(self._stored_queues()):
            cq = self._loaded(topic_id, queue, names)
            was_open = cq.files_open
            cq.correct_min_offset(log_begin_pos)
            if not was_open:
                cq.close_files()
            yield

    def reset(self, offsets: dict[tuple[int, int], int]) -> None:
        """A snapshot install: every queue empty, each of `offsets` going on from its offset there, the
        others gone; the dispatched point dropped (the new log is dispatched from its start)."""
        for topic_id, queue, names in list(self._stored_queues()):
            if (topic_id, queue) not in offsets:
                self._loaded(topic_id, queue, names).delete()
        for (topic_id, queue), offset in offsets.items():
            self._loaded(topic_id, queue).reset(offset)
        self._dirty.clear()
        self._save_point(None)
        self._through = None

    @property
    def flushed(self) -> bool:
        """Nothing written since the last flush, and its point saved: a flush would sync nothing."""
        return not self._dirty and self._through == self.dispatched

    def flush_parts(self) -> tuple[int, DispatchedPoint | None]:
        """The owner's half of a flush from another thread: every queue counts as clean from now on (what it
        writes after this is for the next flush), and the other thread syncs the root's file system
        (`syncfs(fd)`), then saves the point (`save_point`). Returns the root's descriptor and the point."""
        for cq in self._dirty:
            cq.synced()
        self._dirty.clear()
        return self._root_fd, self._through

    def save_point(self, point: DispatchedPoint | None) -> None:
        """After a flush_parts' sync: the point it covered is durable."""
        if point != self.dispatched:
            self._save_point(point)

    # -- durability and closing ------------------------------------------------------------------------

    def flush(self) -> None:
        """Put every dirty queue's units on disk, then move the dispatched point to what they cover."""
        if len(self._dirty) >= self.syncfs_from_queues:
            syncfs(self._root_fd)
            for cq in self._dirty:
                cq.synced()
        else:
            for cq in self._dirty:
                was_open = cq.files_open
                cq.flush()
                if not was_open:  # closed by the open-queue bound since: stays closed
                    cq.close_files()
        self._dirty.clear()
        if self._through != self.dispatched:
            self._save_point(self._through)

    def close(self) -> None:
        """Flush and close every file. The set is not used after."""
        self.flush()
        for queues in self._topics.values():
            for cq in queues.values():
                cq.close_files()
        self._topics.clear()
        self._open.clear()
        os.close(self._root_fd)


_libc = ctypes.CDLL(None, use_errno=True)


def syncfs(fd: int) -> None:
    """syncfs(2), which Python's os module lacks: write every dirty page and inode of fd's file system."""
    if _libc.syncfs(fd) != 0:
        error = ctypes.get_errno()
        raise OSError(error, f"syncfs: {os.strerror(error)}")


def _remove_tree(path: Path) -> None:
    """Remove a directory for good: renamed away first (durable), so a crash midway leaves a `.gone`
    directory that the next recover removes, never a topic missing some of its files."""
    if not path.exists():
        return
    gone = path.with_name(path.name + GONE_SUFFIX)
    os.rename(path, gone)
    fsync_dir(path.parent)
    shutil.rmtree(gone)


def _number(name: str, path: str) -> int:
    """A topic's id or a queue's number, from its directory's or file's name."""
    if not name.isdigit():
        raise ConsumeQueueError(f"unexpected {path} among the consume queues")
    return int(name)
