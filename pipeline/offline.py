"""Reading a node's data directory directly: no node running, nothing written.

For archives and forensics on a copied directory. Each data file is read on
its own (one Spark partition each): planning reads only the first header of
every file and, through the index files, the chain CRC of the entry before
it, so every link of the chain is checked, across files too.

A damaged entry fails the read with its file, offset and index, except a torn
tail: damage after the checkpoint's committed index in the last file is what
a crash leaves behind, and the node itself would cut it on its next start.
"""

from __future__ import annotations

import contextlib
import json
import logging
import mmap
import os
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from raftlog.pipeline.entries import CorruptDataError, Decoder, Stop
from raftlog.pipeline.options import PipelineError
from raftlog.storage.codec import (
    BLANK_END,
    CUT_END,
    ENTRY_MAGICS,
    HEADER,
    HEADER_SIZE,
    INDEX_RECORD,
    INDEX_RECORD_SIZE,
    ZEROS_END,
)
from raftlog.storage.meta import META_NAME
from raftlog.storage.segments import NAME_DIGITS

CHECKPOINT_FILE = "checkpoint.db"  # app.node's name for it
log = logging.getLogger("raftlog.pipeline")

SCAN_BYTES_PER_ROW = 256  # how far one step of a file scan reaches, per row of a batch


@dataclass(frozen=True, slots=True)
class DataFile:
    """One data file to read, with what its neighbours tell about it."""

    path: str
    start: int  # global position of the file's first byte
    first_pos: int  # where its first entry is (the log's base position in the first file)
    first_index: int | None  # None: the file holds no entry
    prev_chain: int | None  # chain CRC of the entry before first_index, None when not known
    next_index: int | None  # first index of the following file: this one must end just before it
    last: bool


@dataclass(frozen=True, slots=True)
class DataDir:
    path: str
    data_file_size: int
    begin_index: int  # the log's first index (store.json's base + 1)
    committed_index: int  # as the checkpoint last recorded it; -1 without a checkpoint
    files: tuple[DataFile, ...]


def open_data_dir(path: str) -> DataDir:
    """Plan the read of a data directory: its description, checkpoint, and files."""
    root = Path(path)
    try:
        meta = json.loads((root / META_NAME).read_text())
        data_file_size, index_file_size = int(meta["data_file_size"]), int(meta["index_file_size"])
        base_index, base_pos = int(meta["base_index"]), meta["base_pos"]
    except FileNotFoundError:
        raise PipelineError(f"raftlog: {root} is not a raftlog data directory (no {META_NAME})") from None
    except (ValueError, KeyError, TypeError) as exc:
        raise PipelineError(f"raftlog: {root / META_NAME} is not a valid store description: {exc}") from None
    data = root / "data"
    if not data.is_dir():
        raise PipelineError(f"raftlog: {root} is not a raftlog data directory (no data/ folder)")
    committed = -1
    if (root / CHECKPOINT_FILE).exists():
        from raftlog.storage.checkpoint import read_checkpoint  # SQLAlchemy, here alone: not in every worker

        try:
            committed = read_checkpoint(root / CHECKPOINT_FILE).committed_index
        except Exception as exc:
            raise PipelineError(f"raftlog: cannot read {root / CHECKPOINT_FILE}: {exc}") from None
    else:
        log.warning("raftlog: %s has no %s: every entry of the last file may be an unacknowledged tail",
                    root, CHECKPOINT_FILE)
    names = sorted(p.name for p in data.iterdir() if len(p.name) == NAME_DIGITS and p.name.isdigit())
    heads = []
    for name in names:
        start = int(name)
        first_pos = max(start, base_pos) if base_pos is not None else start
        heads.append((str(data / name), start, first_pos, _first_index(data / name, first_pos - start)))
    last = max((i for i, h in enumerate(heads) if h[3] is not None), default=-1)  # the last file with entries
    files = []
    for i, (file_path, start, first_pos, first_index) in enumerate(heads):
        prev_chain = None
        if first_index is not None and first_index - 1 > base_index:
            prev_chain = _chain_before(root, data_file_size, index_file_size, first_index)
        elif first_index is not None and first_index - 1 == base_index:
            prev_chain = meta.get("base_chain_crc")
        following = next((h[3] for h in heads[i + 1:] if h[3] is not None), None)
        files.append(DataFile(file_path, start, first_pos, first_index, prev_chain, following, i == last))
    return DataDir(str(root), data_file_size, base_index + 1, committed, tuple(files))


def read_file(part: DataFile, data_file_size: int, committed_index: int, *, text: bool, mark_corrupt: bool,
              committed_only: bool, batch_rows: int) -> Iterator[pa.RecordBatch]:
    """The entries of one data file as record batches, every CRC and link checked."""
    if part.first_index is None:
        return
    decoder = Decoder(part.first_index, part.prev_chain, text=text, mark_corrupt=mark_corrupt,
                      file_size=data_file_size)
    with open(part.path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if size != data_file_size:
            raise CorruptDataError(part.path, part.first_index, f"file size {size}, expected {data_file_size}")
        mm = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ)
        try:
            for batch in _scan(part, mm, decoder, committed_index, batch_rows):
                if committed_only:
                    batch = batch.filter(pc.less_equal(batch.column(0), committed_index))
                if batch.num_rows:
                    yield batch
                if committed_only and decoder.next_index > committed_index:
                    return
        finally:
            decoder.clear()
            with contextlib.suppress(BufferError):  # an error's traceback holds views: unmapped with them
                mm.close()


def _scan(part: DataFile, view: mmap.mmap, decoder: Decoder, committed_index: int,
          batch_rows: int) -> Iterator[pa.RecordBatch]:
    file_end = len(view)
    offset = part.first_pos - part.start
    window = batch_rows * SCAN_BYTES_PER_ROW
    while True:
        end = min(file_end, offset + window)
        offset, stop = decoder.feed(view, offset, end, part.start)
        if decoder.full(batch_rows):
            yield decoder.batch()
        if end == file_end or (stop is not None and stop.reason != "incomplete"):
            break
        if stop is not None and offset + HEADER_SIZE <= file_end:  # an entry larger than the window
            window = max(window, HEADER.unpack_from(view, offset)[1])
    problem = _problem(stop)
    if problem is not None and not (part.last and decoder.next_index > committed_index):  # not a torn tail
        _damaged(part, decoder, stop.offset if stop else file_end, problem)
    elif part.last and decoder.next_index <= committed_index:
        _damaged(part, decoder, stop.offset if stop else file_end,
                 f"the log ends at {decoder.next_index - 1} but the checkpoint says {committed_index} is committed")
    elif part.next_index is not None and decoder.next_index != part.next_index:
        _damaged(part, decoder, stop.offset if stop else file_end,
                 f"the file ends before entry {decoder.next_index}, the next file starts at {part.next_index}")
    if decoder.rows:
        yield decoder.batch()


def _problem(stop: Stop | None) -> str | None:
    """What is wrong where the scan of a file stopped, if anything."""
    if stop is None or stop.reason in (BLANK_END, ZEROS_END):
        return None
    if stop.reason == CUT_END:
        return "an entry runs past the end of the file"
    return stop.reason


def _damaged(part: DataFile, decoder: Decoder, offset: int, problem: str) -> None:
    """Raise, or with onCorrupt=mark end the file with a row that says what is wrong."""
    if not decoder.mark_corrupt:
        raise CorruptDataError(f"{part.path}, offset {offset}", decoder.next_index, problem)
    if not decoder.has_unreadable:
        decoder.mark_unreadable(problem)


def _first_index(path: Path, offset: int) -> int | None:
    with open(path, "rb") as f:
        header = os.pread(f.fileno(), HEADER_SIZE, offset)
    if len(header) < HEADER_SIZE:
        return None
    magic, _size, index, *_ = HEADER.unpack(header)
    return index if magic in ENTRY_MAGICS else None


def _chain_before(root: Path, data_file_size: int, index_file_size: int, index: int) -> int | None:
    """The chain CRC of entry index-1, found through its index record; None if the index cannot say."""
    record_pos = (index - 1) * INDEX_RECORD_SIZE
    index_path = root / "index" / f"{record_pos - record_pos % index_file_size:0{NAME_DIGITS}d}"
    try:
        with open(index_path, "rb") as f:
            record = os.pread(f.fileno(), INDEX_RECORD_SIZE, record_pos % index_file_size)
        _magic, pos, _size, rec_index, _term = INDEX_RECORD.unpack(record)
        data_path = root / "data" / f"{pos - pos % data_file_size:0{NAME_DIGITS}d}"
        with open(data_path, "rb") as f:
            header = os.pread(f.fileno(), HEADER_SIZE, pos % data_file_size)
        _m, _s, h_index, _t, h_pos, _c, chain, _b, _bs = HEADER.unpack(header)
    except (OSError, struct.error):
        return None
    return chain if rec_index == index - 1 and h_index == index - 1 and h_pos == pos else None
