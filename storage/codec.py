"""DLedger's entry and index record formats, byte for byte (big-endian).

Entry (48-byte header, then the body)::

    offset  size  field
         0     4  magic      i32   NORMAL 1, NOOP 2, CONFIG_CHANGE 3
         4     4  size       i32   48 + bodySize
         8     8  index      i64   first entry is 0
        16     8  term       i64
        24     8  pos        i64   global byte offset of the entry (POS_OFFSET 24)
        32     4  channel    i32
        36     4  chainCrc   u32   see below
        40     4  bodyCrc    u32   zlib CRC-32 of the body
        44     4  bodySize   i32
        48     -  body

    chainCrc = crc32(prevChainCrc u32 | index i64 | term i64 | bodyCrc u32)
               over those 24 big-endian bytes, with prevChainCrc = 0 before the
               first entry. Equal chainCrc at an index means equal logs up to it.

File-end filler: magic -1 (BLANK) then i32 remaining length of the file; a data
file always keeps room for it (MIN_BLANK_LEN 8), so no entry ends a file.

Index record (32 bytes, record i at logical offset i * 32)::

    magic i32 | pos i64 | size i32 | index i64 | term i64

CRC fields are written unsigned; their bytes equal Java's signed ints.
"""

from __future__ import annotations

import struct
import zlib
from enum import IntEnum
from typing import NamedTuple

HEADER = struct.Struct(">iiqqqiIIi")
HEADER_SIZE = HEADER.size  # 48
POS_OFFSET = 24
INDEX_RECORD = struct.Struct(">iqiqq")
INDEX_RECORD_SIZE = INDEX_RECORD.size  # 32
CHAIN = struct.Struct(">IqqI")
BLANK = struct.Struct(">ii")
BLANK_MAGIC = -1
MIN_BLANK_LEN = BLANK.size  # 8


class Magic(IntEnum):
    """Entry types, DLedger's magic numbers."""

    NORMAL = 1
    NOOP = 2
    CONFIG_CHANGE = 3


ENTRY_MAGICS = frozenset(int(m) for m in Magic)


class Entry(NamedTuple):
    """One stored entry; `body` is a zero-copy view into the mapped file."""

    magic: int
    index: int  # type: ignore[assignment]  # DLedger's field name, over tuple.index
    term: int
    pos: int
    channel: int
    chain_crc: int
    body_crc: int
    body: memoryview

    @property
    def size(self) -> int:
        return HEADER_SIZE + len(self.body)


def body_crc(body: bytes | memoryview) -> int:
    return zlib.crc32(body)


def chain_crc(prev_chain_crc: int, index: int, term: int, body_crc_: int) -> int:
    return zlib.crc32(CHAIN.pack(prev_chain_crc, index, term, body_crc_))


def encode_entry(
    magic: int,
    index: int,
    term: int,
    pos: int,
    body: bytes,
    prev_chain_crc: int,
    channel: int = 0,
) -> bytes:
    """One entry as stored (tests and tools; the store encodes in batches)."""
    bcrc = zlib.crc32(body)
    chain = zlib.crc32(CHAIN.pack(prev_chain_crc, index, term, bcrc))
    header = HEADER.pack(magic, HEADER_SIZE + len(body), index, term, pos, channel, chain, bcrc,
                         len(body))
    return header + body


def decode_entry(buf: memoryview, offset: int = 0) -> Entry:
    """Decode the entry at `offset` without checking it (callers verify)."""
    magic, _size, index, term, pos, channel, chain, bcrc, bsize = HEADER.unpack_from(buf, offset)
    start = offset + HEADER_SIZE
    return Entry(magic, index, term, pos, channel, chain, bcrc, buf[start:start + bsize])


def iter_entries(buf: memoryview | bytes) -> list[Entry]:
    """Split raw consecutive entries (as `Store.read_range` returns them)."""
    view = memoryview(buf)
    entries = []
    offset = 0
    end = len(view)
    while offset < end:
        entry = decode_entry(view, offset)
        entries.append(entry)
        offset += HEADER_SIZE + len(entry.body)
    return entries


def encode_blank(length: int) -> bytes:
    """A file-end filler of `length` bytes: magic -1, the length, then zeros."""
    assert length >= MIN_BLANK_LEN
    return BLANK.pack(BLANK_MAGIC, length) + bytes(length - MIN_BLANK_LEN)


def place(write_pos: int, size: int, file_size: int) -> int:
    """Where an entry of `size` bytes goes when the log's write offset is `write_pos`.

    DLedger's preAppend rule: the entry stays in the current file only if the
    filler still fits after it; otherwise the file is closed with a filler and
    the entry starts the next file. Every replica applies the same rule, so
    positions agree when the data file size does.
    """
    in_file = write_pos % file_size
    if in_file + size + MIN_BLANK_LEN > file_size:
        return write_pos - in_file + file_size
    return write_pos
