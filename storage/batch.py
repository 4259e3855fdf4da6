"""Laying out a batch of entries: encode (leader) or validate (follower), never write.

Both paths produce a `Batch`: the entry bytes, where each run of them goes in
the global offset space, the fillers that close full files, and the index
records. The store copies a batch into its files; the in-memory store keeps
it in lists. Neither path touches storage, so a rejected batch leaves
nothing behind.

The loops are the hot path of both appends. They run compiled (storage/_codec.c,
built with the package) where it is built: the same bytes and verdicts, 3 to 4 times
faster; a batch the compiled loop refuses, and every batch where it is not built,
goes through the Python loops below, the reference, which also name what is wrong.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

from raftlog.storage.codec import (
    CHAIN,
    ENTRY_MAGICS,
    HEADER,
    HEADER_SIZE,
    INDEX_RECORD,
    MIN_BLANK_LEN,
    Magic,
)
from raftlog.storage.errors import AppendRejectedError, EntryTooLargeError

try:
    from raftlog.storage import _codec as compiled  # type: ignore[attr-defined]
except ImportError:  # not built (no compiler at install): app.server says so at start
    compiled = None


@dataclass(slots=True)
class Batch:
    """Consecutive entries ready to copy, starting at `first_index`."""

    first_index: int
    data: bytes | memoryview  # the entries back to back, no fillers
    runs: list[tuple[int, int, int]]  # (start in data, end in data, global pos)
    fillers: list[int]  # global pos of each filler, before the run that follows it
    index_records: bytes  # 32 bytes per entry, for indices first_index...
    positions: list[int]
    last_term: int
    last_chain_crc: int | None  # None only for a follower batch of no entry after a reset without a chain
    end_pos: int  # write offset after the batch
    config_indices: tuple[int, ...] = ()  # its CONFIG_CHANGE entries: a follower learns of a new configuration


    @property
    def count(self) -> int:
        return len(self.positions)

    @property
    def last_index(self) -> int:
        return self.first_index + len(self.positions) - 1


def encode_leader_batch(
    bodies: list[bytes],
    first_index: int,
    term: int,
    magic: int,
    channel: int,
    write_pos: int,
    prev_chain_crc: int,
    file_size: int,
) -> Batch:
    """Encode `bodies` as entries first_index..., placed from `write_pos`."""
    if compiled is not None and type(bodies) is list and magic in ENTRY_MAGICS:
        parts = compiled.encode_batch(bodies, first_index, term, magic, channel, write_pos, prev_chain_crc,
                                      file_size)
        if parts is not None:
            data, runs, fillers, records, positions, chain, end_pos = parts
            return Batch(first_index, data, runs, fillers, records, positions, term, chain, end_pos)
    return reference_encode(bodies, first_index, term, magic, channel, write_pos, prev_chain_crc, file_size)


def reference_encode(
    bodies: list[bytes],
    first_index: int,
    term: int,
    magic: int,
    channel: int,
    write_pos: int,
    prev_chain_crc: int,
    file_size: int,
) -> Batch:
    """Encode `bodies` as entries first_index..., placed from `write_pos`."""
    if not bodies:
        raise ValueError("an append needs at least one body")
    if magic not in ENTRY_MAGICS:
        raise ValueError(f"magic {magic} is not an entry type")
    crc32 = zlib.crc32
    pack_header = HEADER.pack
    pack_chain = CHAIN.pack
    pack_record = INDEX_RECORD.pack
    parts: list[bytes] = []
    records: list[bytes] = []
    positions: list[int] = []
    runs: list[tuple[int, int, int]] = []
    fillers: list[int] = []
    pos = write_pos
    room_end = _room_end(pos, file_size)
    run_from = offset = 0
    run_pos = pos
    index = first_index
    chain = prev_chain_crc
    for body in bodies:
        body_size = len(body)
        size = HEADER_SIZE + body_size
        if pos + size > room_end:  # the file is closed with a filler; the entry starts the next
            if size + MIN_BLANK_LEN > file_size:
                raise EntryTooLargeError(
                    f"entry of {size} bytes cannot fit in a data file of {file_size} bytes")
            if offset > run_from:
                runs.append((run_from, offset, run_pos))
            fillers.append(pos)
            pos = room_end + MIN_BLANK_LEN
            room_end = pos + file_size - MIN_BLANK_LEN
            run_from, run_pos = offset, pos
        bcrc = crc32(body)
        chain = crc32(pack_chain(chain, index, term, bcrc))
        parts.append(pack_header(magic, size, index, term, pos, channel, chain, bcrc, body_size))
        parts.append(body)
        records.append(pack_record(magic, pos, size, index, term))
        positions.append(pos)
        pos += size
        offset += size
        index += 1
    runs.append((run_from, offset, run_pos))
    return Batch(first_index, b"".join(parts), runs, fillers, b"".join(records), positions, term,
                 chain, pos)


def validate_follower_batch(
    data: bytes | memoryview,
    first_index: int,
    prev_term: int,
    write_pos: int | None,
    prev_chain_crc: int | None,
    file_size: int,
) -> Batch:
    """Check raw entries from another replica against the local log end (reference_validate says
    how); the compiled loop's verdict where it is built, the reference's words for a rejection."""
    view = memoryview(data)
    if compiled is not None and len(view) >= HEADER_SIZE:
        pos = _adopted_pos(view, first_index, file_size) if write_pos is None else write_pos
        parts = compiled.validate_batch(view, first_index, prev_term, pos,
                                        -1 if prev_chain_crc is None else prev_chain_crc, file_size)
        if parts is not None:
            runs, fillers, records, positions, last_term, chain, end_pos, config_indices = parts
            return Batch(first_index, view, runs, fillers, records, positions, last_term, chain, end_pos,
                         config_indices)
    return reference_validate(view, first_index, prev_term, write_pos, prev_chain_crc, file_size)


def reference_validate(
    data: bytes | memoryview,
    first_index: int,
    prev_term: int,
    write_pos: int | None,
    prev_chain_crc: int | None,
    file_size: int,
) -> Batch:
    """Check raw entries from another replica against the local log end.

    Rules, in order, for each entry: a whole header, a known magic, size =
    48 + bodySize and the body present, index = the next index, term not
    below the previous, room in a data file, pos = where the local log puts
    it, bodyCrc, chainCrc. `write_pos` / `prev_chain_crc` of None (a log reset
    for a snapshot with no known position or chain) adopt the first entry's.
    Raises AppendRejectedError naming the first bad entry.
    """
    view = memoryview(data)
    end = len(view)
    if end < HEADER_SIZE:
        raise AppendRejectedError(first_index, "no entries" if not end else "truncated header")
    crc32 = zlib.crc32
    unpack_header = HEADER.unpack_from
    pack_chain = CHAIN.pack
    pack_record = INDEX_RECORD.pack
    magics = ENTRY_MAGICS
    config_magic = Magic.CONFIG_CHANGE
    config_indices: list[int] = []
    records: list[bytes] = []
    positions: list[int] = []
    runs: list[tuple[int, int, int]] = []
    fillers: list[int] = []
    expected = first_index
    term_floor = prev_term
    chain = prev_chain_crc
    pos = _adopted_pos(view, first_index, file_size) if write_pos is None else write_pos
    room_end = _room_end(pos, file_size)
    run_from = offset = 0
    run_pos = pos
    last_header = end - HEADER_SIZE
    while offset < end:
        if offset > last_header:
            raise AppendRejectedError(expected, f"truncated header ({end - offset} bytes)")
        magic, size, index, term, entry_pos, _channel, entry_chain, bcrc, body_size = \
            unpack_header(view, offset)
        next_offset = offset + size
        if (magic not in magics or size != HEADER_SIZE + body_size or body_size < 0
                or next_offset > end or index != expected or term < term_floor):
            raise _header_rejection(view, offset, expected, term_floor, file_size)
        if pos + size > room_end:  # the file is closed with a filler; the entry starts the next
            if size + MIN_BLANK_LEN > file_size:
                raise _header_rejection(view, offset, expected, term_floor, file_size)
            if offset > run_from:
                runs.append((run_from, offset, run_pos))
            fillers.append(pos)
            pos = room_end + MIN_BLANK_LEN
            room_end = pos + file_size - MIN_BLANK_LEN
            run_from, run_pos = offset, pos
        if entry_pos != pos:
            raise AppendRejectedError(index, f"pos {entry_pos}, local write offset {pos}")
        if crc32(view[offset + HEADER_SIZE:next_offset]) != bcrc:
            raise AppendRejectedError(index, "body CRC mismatch")
        if chain is not None and crc32(pack_chain(chain, index, term, bcrc)) != entry_chain:
            raise AppendRejectedError(index, "chain CRC mismatch (logs diverge before it)")
        chain = entry_chain
        if magic == config_magic:
            config_indices.append(index)
        records.append(pack_record(magic, pos, size, index, term))
        positions.append(pos)
        term_floor = term
        pos += size
        offset = next_offset
        expected += 1
    runs.append((run_from, offset, run_pos))
    return Batch(first_index, view, runs, fillers, b"".join(records), positions, term_floor,
                 chain, pos, tuple(config_indices))


def _room_end(pos: int, file_size: int) -> int:
    """Where entries in the data file holding `pos` must end: the filler keeps its room (codec.place)."""
    return pos - pos % file_size + file_size - MIN_BLANK_LEN


def _adopted_pos(view: memoryview, first_index: int, file_size: int) -> int:
    """After a reset without a position, the first entry's own pos, if it can start a log."""
    size, _index, _term, entry_pos = HEADER.unpack_from(view)[1:5]
    if entry_pos < 0 or entry_pos % file_size + size + MIN_BLANK_LEN > file_size:
        raise AppendRejectedError(first_index, f"pos {entry_pos} cannot start a log")
    return int(entry_pos)


def _header_rejection(view: memoryview, offset: int, expected: int, term_floor: int,
                      file_size: int) -> AppendRejectedError:
    """Name the first header rule the entry at `offset` breaks (off the fast path)."""
    magic, size, index, term, _pos, _channel, _chain, _bcrc, body_size = HEADER.unpack_from(view, offset)
    if magic not in ENTRY_MAGICS:
        return AppendRejectedError(expected, f"bad magic {magic}")
    if body_size < 0 or size != HEADER_SIZE + body_size:
        return AppendRejectedError(expected, f"size {size} != 48 + bodySize {body_size}")
    if offset + size > len(view):
        return AppendRejectedError(expected, "truncated body")
    if index != expected:
        return AppendRejectedError(expected, f"index {index}, expected {expected}")
    if term < term_floor:
        return AppendRejectedError(index, f"term {term} below previous term {term_floor}")
    return AppendRejectedError(index, f"entry of {size} bytes exceeds a data file")
