"""DLedger's entry and index record formats, byte for byte (big-endian).

Entry (48-byte header, then the body)::

    offset  size  field
         0     4  magic      i32   NORMAL 1, NOOP 2, CONFIG_CHANGE 3, PRODUCED 4, CONSUMER 5,
                                   CONTINUED 6, PRODUCER_SESSION 7, CLUSTER_VERSION 8, MESSAGE 9,
                                   TOPIC 10, QUEUE_COMMIT 11
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

A PRODUCED entry is a NORMAL entry that a producer session wrote (raft.producers): its body
starts with the producer's stamp, 16 bytes, then the client's body; bodySize and bodyCrc
cover both, so DLedger's reader reads it as an entry whose body has 16 bytes more::

    producer_id u64 | epoch u16 | sequence u48

A producer's batch of several bodies is stamped once in every 256 entries: its first entry is
PRODUCED, and each later one is CONTINUED, whose body starts with the distance back to the last
head, one byte, then the client's body; its stamp is the head's, with the sequence plus the
distance::

    distance u8 (1 <= distance <= index)

A continuation never starts a data file (the writer stamps the entry that starts a new file as a
head), so a continuation's head is in its own file: retention, which deletes whole files, and a
snapshot install, which starts a log where the leader's first file starts, never part the two.

A CONSUMER entry's body is a named consumer's position (raft.consumers), in one of two forms::

    position i64 | name_len u16 | name | metadata                          (the old form)
    position i64 | (0x8000 + name_len) u16 | name | flags u8 | owner_len u8 | owner | metadata

The second, written from cluster version 1, carries the consumer's owner and flags (bit 0: the
retention floor); a name has at most 128 bytes, so the length's top bit tells them apart, and a
release before the second reads it as a name past the body's end (it skips the entry). Position
-1 removes the consumer; names, owners and metadata are UTF-8.

File-end filler: magic -1 (BLANK) then i32 remaining length of the file; a data
file always keeps room for it (MIN_BLANK_LEN 8), so no entry ends a file.

Index record (32 bytes, record i at logical offset i * 32)::

    magic i32 | pos i64 | size i32 | index i64 | term i64

CRC fields are written unsigned; their bytes equal Java's signed ints.

`place` and `check_next` are the format's rules, each stated once here; storage/_codec.c
compiles the same rules for the hot loops, and tests/storage/test_compiled_codec.py holds
the two to the same verdicts.
"""

from __future__ import annotations

import importlib
import mmap
import struct
import zlib
from enum import IntEnum
from typing import Any, NamedTuple

try:  # the rules compiled (storage/_codec.c); not built without a compiler: app.server says so at start
    compiled: Any = importlib.import_module("raftlog.storage._codec")
except ImportError:
    compiled = None

HEADER = struct.Struct(">iiqqqiIIi")
HEADER_SIZE = HEADER.size  # 48
POS_OFFSET = 24
INDEX_RECORD = struct.Struct(">iqiqq")
INDEX_RECORD_SIZE = INDEX_RECORD.size  # 32
CHAIN = struct.Struct(">IqqI")
BLANK = struct.Struct(">ii")
BLANK_MAGIC = -1
MIN_BLANK_LEN = BLANK.size  # 8
STAMP = struct.Struct(">QQ")  # producer_id, then epoch << 48 | sequence
STAMP_SIZE = STAMP.size  # 16
DISTANCE = struct.Struct(">B")  # a CONTINUED entry's distance back to its head
DISTANCE_SIZE = DISTANCE.size  # 1
DISTANCE_MAX = 255  # the 256th entry of a batch is a head again
SEQUENCE_BITS = 48

Buffer = bytes | bytearray | memoryview | mmap.mmap  # what entries are checked and decoded in


class Magic(IntEnum):
    """Entry types, DLedger's magic numbers."""

    NORMAL = 1
    NOOP = 2
    CONFIG_CHANGE = 3
    PRODUCED = 4  # raftlog's: a NORMAL entry with its producer's stamp ahead of the body
    CONSUMER = 5  # raftlog's: a control entry, a named consumer's committed position (raft.consumers)
    CONTINUED = 6  # raftlog's: a later entry of a PRODUCED batch, its distance back to the head ahead of the body
    # raftlog's, from cluster version 1 (raft.cluster_version) on: a control entry, a producer session opened
    # or closed by its owner (raft.producers)
    PRODUCER_SESSION = 7
    CLUSTER_VERSION = 8  # raftlog's: a control entry, the format and protocol level every member knows
    # raftlog's, from cluster version 2 on: a message of a topic's queue (storage.message), a control entry changing
    # the topic catalog (raft.topics), and one of a consumer group's committed offsets per queue (raft.consumers)
    MESSAGE = 9
    TOPIC = 10
    QUEUE_COMMIT = 11


ENTRY_MAGICS = frozenset(int(m) for m in Magic)
# the entries a member reads as they join its log: configurations, consumer positions, producer sessions,
# the cluster version
CONTROL_MAGICS = frozenset((Magic.CONFIG_CHANGE, Magic.CONSUMER, Magic.PRODUCER_SESSION, Magic.CLUSTER_VERSION,
                            Magic.TOPIC, Magic.QUEUE_COMMIT))
# the control entries a reader of data sees only when it asks (the others keep their DLedger types)
BOOKKEEPING_MAGICS = frozenset((Magic.CONSUMER, Magic.PRODUCER_SESSION, Magic.CLUSTER_VERSION, Magic.TOPIC,
                                Magic.QUEUE_COMMIT))
PRODUCER_MAGICS = frozenset((Magic.PRODUCED, Magic.CONTINUED))  # a producer session's entries
DATA_MAGICS = frozenset((Magic.NORMAL, *PRODUCER_MAGICS, Magic.MESSAGE))  # the entries readers see as data
MESSAGE_HEADER_SIZE = 33  # a MESSAGE entry's body holds at least its header (storage.message)
MESSAGE_STAMPED = 0x01  # ... whose last byte's bit 0 says a producer's stamp follows it
PREFIX_SIZES: dict[int, int] = {Magic.PRODUCED: STAMP_SIZE, Magic.CONTINUED: DISTANCE_SIZE}  # before the body sent


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


class Stamp(NamedTuple):
    """Who wrote a PRODUCED entry: its producer session, and its sequence in it."""

    producer_id: int
    epoch: int
    sequence: int

    def pack(self) -> bytes:
        return STAMP.pack(*self.pack_ints())

    def pack_ints(self) -> tuple[int, int]:
        """The two u64 it is stored as: producer_id, then epoch << 48 | sequence."""
        return self.producer_id, self.epoch << SEQUENCE_BITS | self.sequence


# (producer_id, epoch, first sequence, first index, last index): consecutive entries of one
# producer (PRODUCED and CONTINUED) with consecutive sequences, as a follower's batch holds them
ProducedRun = tuple[int, int, int, int, int]


def unpack_stamp(buf: Buffer | memoryview, offset: int = 0) -> Stamp:
    producer_id, rest = STAMP.unpack_from(buf, offset)
    return Stamp(producer_id, rest >> SEQUENCE_BITS, rest & ((1 << SEQUENCE_BITS) - 1))


def head_index(entry: Entry) -> int | None:
    """The index of the PRODUCED entry that stamps `entry` (None: it has no stamp)."""
    if entry.magic == Magic.PRODUCED:
        return entry.index
    if entry.magic == Magic.CONTINUED:
        return entry.index - int(DISTANCE.unpack_from(entry.body)[0])
    return None


def client_body(entry: Entry) -> memoryview:
    """The body as its client sent it: a producer's entry's without its stamp or distance."""
    return entry.body[PREFIX_SIZES[entry.magic]:] if entry.magic in PREFIX_SIZES else entry.body


def client_body_crc(entry: Entry) -> int:
    """The CRC-32 of the body as its client sent it."""
    return zlib.crc32(client_body(entry)) if entry.magic in PREFIX_SIZES else entry.body_crc


def add_produced(runs: list[ProducedRun], stamp: Stamp, index: int) -> None:
    """Entry `index` with `stamp` follows `runs`: it extends the last run, or starts one."""
    producer_id, epoch, sequence = stamp
    if runs:
        last = runs[-1]
        if (last[0], last[1]) == (producer_id, epoch) and last[4] + 1 == index \
                and last[2] + index - last[3] == sequence:
            runs[-1] = (producer_id, epoch, last[2], last[3], index)
            return
    runs.append((producer_id, epoch, sequence, index, index))


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


def place(write_pos: int, size: int, file_size: int) -> int | None:
    """Where an entry of `size` bytes goes when the log's write offset is `write_pos` (None: it fits
    no data file).

    DLedger's preAppend rule: the entry stays in the current file only if the
    filler still fits after it; otherwise the file is closed with a filler and
    the entry starts the next file. Every replica applies the same rule, so
    positions agree when the data file size does. Both writers (the leader's
    encode, the follower's validate) and every reader's check place by it.
    """
    if size + MIN_BLANK_LEN > file_size:
        return None
    in_file = write_pos % file_size
    if in_file + size + MIN_BLANK_LEN > file_size:
        return write_pos - in_file + file_size
    return write_pos


def header_of_record(buf: Buffer, offset: int, record: tuple[int, int, int, int, int]) -> tuple[int, ...] | None:
    """The header of the entry at buf[offset], if it says what its index record (magic, pos, size,
    index, term) does: the record can then be trusted to find the entry. Else None."""
    magic, pos, size, index, term = record
    if size < HEADER_SIZE or offset < 0 or offset + size > len(buf):
        return None
    header = HEADER.unpack_from(buf, offset)
    if (header[0], header[1], header[2], header[3], header[4], header[8]) != (magic, size, index, term, pos,
                                                                              size - HEADER_SIZE):
        return None
    return header


# check_next's verdicts where entries end without damage: a file-end filler, bytes never written,
# and an entry cut by the end of the bytes at hand
BLANK_END, ZEROS_END, CUT_END = "blank", "zeros", "incomplete"
ENDS = frozenset({BLANK_END, ZEROS_END, CUT_END})
BODY_CRC_FAULT, CHAIN_CRC_FAULT = "body CRC mismatch", "chain CRC mismatch"
CRC_FAULTS = frozenset({BODY_CRC_FAULT, CHAIN_CRC_FAULT})

Checked = tuple[str | None, int, int, int, int, int]  # (verdict, magic, size, term, chain_crc, pos)


def check_next(buf: Buffer, offset: int, end: int, index: int, term_floor: int, write_pos: int | None,
               prev_chain: int | None, file_size: int, in_file: bool) -> Checked:
    """The rules the next entry must keep: the one check the follower's validation, recovery,
    reads and the pipeline's readers all run (reference_check_next says what it checks).

    Compiled where storage/_codec.c is built; its verdict on anything but a sound entry is left to
    the reference, which words it."""
    if compiled is not None:
        checked: Checked | None = compiled.check_next(
            buf, offset, end, index, term_floor, -1 if write_pos is None else write_pos,
            -1 if prev_chain is None else prev_chain, file_size, in_file)
        if checked is not None:
            return checked
    return reference_check_next(buf, offset, end, index, term_floor, write_pos, prev_chain, file_size, in_file)


def reference_check_next(buf: Buffer, offset: int, end: int, index: int, term_floor: int, write_pos: int | None,
                         prev_chain: int | None, file_size: int, in_file: bool) -> Checked:
    """Check the entry at buf[offset:end] against what the log before it says it must be.

    The rules, in order: a known magic, size = 48 + bodySize, a PRODUCED
    entry's body holding its stamp (a CONTINUED one's, its distance), the expected index, a term not below
    `term_floor`, room in a data file (`place`), pos =
    where the log places it (`write_pos`; None: positions unknown, unchecked),
    the body present, bodyCrc, chainCrc (`prev_chain` None: the first link is
    taken on trust), a CONTINUED entry's distance within the log, and the
    entry not at a file's start (`file_size` 0: files unknown). That its head
    is the distance back is the follower's check, which knows the entries
    before. With `in_file` the bytes are a data file's, so the entry must fit
    where it lies. The verdict is None for a sound entry placed at
    `pos`, one of ENDS where the entries end without damage (a filler whose
    length is right, zeros, bytes cut short), or the first rule broken, in
    words. The fields come back with any verdict that could read them, so a
    reader may step over an entry whose CRC is bad.
    """
    if offset + HEADER_SIZE > end:  # only a filler or zeros fit in fewer bytes than a header
        if offset + MIN_BLANK_LEN > end:
            return CUT_END, 0, 0, 0, 0, 0
        magic, size = BLANK.unpack_from(buf, offset)
        return _no_entry(magic, size, write_pos, file_size, CUT_END), magic, size, 0, 0, 0
    magic, size, index_, term, pos, _channel, chain, bcrc, body_size = HEADER.unpack_from(buf, offset)
    if magic not in ENTRY_MAGICS:
        return _no_entry(magic, size, write_pos, file_size, f"bad magic {magic}"), magic, size, 0, 0, 0
    placed = pos if write_pos is None else place(write_pos, size, file_size)
    verdict: str | None = None
    if body_size < 0 or size != HEADER_SIZE + body_size:
        verdict = f"size {size} != 48 + bodySize {body_size}"
    elif magic == Magic.MESSAGE and body_size < MESSAGE_HEADER_SIZE:
        verdict = f"a message entry's body of {body_size} bytes cannot hold its {MESSAGE_HEADER_SIZE}-byte header"
    elif magic in PREFIX_SIZES and body_size < PREFIX_SIZES[magic]:
        verdict = f"a {Magic(magic).name.lower()} entry's body of {body_size} bytes cannot hold its " \
                  f"{PREFIX_SIZES[magic]}-byte {'stamp' if magic == Magic.PRODUCED else 'distance'}"
    elif index_ != index:
        verdict = f"index {index_}, expected {index}"
    elif term < term_floor:
        verdict = f"term {term} below previous term {term_floor}"
    elif placed is None:
        verdict = f"entry of {size} bytes exceeds a data file"
    elif in_file and write_pos is not None and placed != write_pos:
        verdict = f"entry of {size} bytes runs into its file's end"
    elif pos != placed:
        verdict = f"pos {pos}, expected {placed}"
    elif offset + size > end:
        verdict = CUT_END
    elif zlib.crc32(buf[offset + HEADER_SIZE:offset + size]) != bcrc:
        verdict = BODY_CRC_FAULT
    elif prev_chain is not None and zlib.crc32(CHAIN.pack(prev_chain, index_, term, bcrc)) != chain:
        verdict = CHAIN_CRC_FAULT
    elif magic == Magic.CONTINUED and not 1 <= (distance := DISTANCE.unpack_from(buf, offset + HEADER_SIZE)[0]) \
            <= index:
        verdict = f"a continued entry's distance {distance} back from index {index} names no entry"
    elif magic == Magic.CONTINUED and file_size > 0 and placed % file_size == 0:
        verdict = "a continued entry starts a data file, apart from its head"
    elif magic == Magic.MESSAGE and buf[offset + HEADER_SIZE + MESSAGE_HEADER_SIZE - 1] & MESSAGE_STAMPED \
            and body_size < MESSAGE_HEADER_SIZE + STAMP_SIZE:
        verdict = f"a stamped message entry's body of {body_size} bytes cannot hold its header and stamp"
    return verdict, magic, size, term, chain, pos if placed is None else placed


def _no_entry(magic: int, size: int, write_pos: int | None, file_size: int, otherwise: str) -> str:
    """The verdict where no entry starts: a filler (its length is the rest of its file, where that
    is known), zeros, or `otherwise`."""
    if magic == BLANK_MAGIC:
        remaining = None if write_pos is None else file_size - write_pos % file_size
        return BLANK_END if remaining in (None, size) else f"file-end filler of {size} bytes where {remaining} remain"
    if magic == 0 and size == 0:
        return ZEROS_END
    return otherwise
