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
from collections.abc import Callable
from dataclasses import dataclass

from raftlog.storage import codec
from raftlog.storage.codec import (
    CHAIN,
    CONTROL_MAGICS,
    CUT_END,
    DISTANCE,
    DISTANCE_MAX,
    DISTANCE_SIZE,
    ENDS,
    ENTRY_MAGICS,
    HEADER,
    HEADER_SIZE,
    INDEX_RECORD,
    SEQUENCE_BITS,
    Entry,
    Magic,
    ProducedRun,
    Stamp,
    add_produced,
    head_index,
    place,
    reference_check_next,
    unpack_stamp,
)
from raftlog.storage.errors import AppendRejectedError, EntryTooLargeError, StorageError
from raftlog.storage.message import QueuedRun, add_queued, queued_of
from raftlog.storage.record import Head, MissingHeadError, Stamps


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
    control_indices: tuple[int, ...] = ()  # its CONTROL_MAGICS entries: configurations, consumer positions
    produced: tuple[ProducedRun, ...] = ()  # its producers' entries, run by run: a follower's producer table
    queued: tuple[QueuedRun, ...] = ()  # its messages, run by run: a follower's queue offsets

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
    stamp: Stamp | None = None,
) -> Batch:
    """Encode `bodies` as entries first_index..., placed from `write_pos`; with a `stamp`, a producer's
    entries whose sequences count up from the stamp's: a PRODUCED head, then CONTINUED entries (a new
    head where one starts a data file, and at the 256th)."""
    compiled = codec.compiled
    if compiled is not None and type(bodies) is list and magic in ENTRY_MAGICS:
        parts = compiled.encode_batch(bodies, first_index, term, magic, channel, write_pos, prev_chain_crc,
                                      file_size, stamp)
        if parts is not None:
            data, runs, fillers, records, positions, chain, end_pos = parts
            return Batch(first_index, data, runs, fillers, records, positions, term, chain, end_pos)
    return reference_encode(bodies, first_index, term, magic, channel, write_pos, prev_chain_crc, file_size, stamp)


def reference_encode(
    bodies: list[bytes],
    first_index: int,
    term: int,
    magic: int,
    channel: int,
    write_pos: int,
    prev_chain_crc: int,
    file_size: int,
    stamp: Stamp | None = None,
) -> Batch:
    """Encode `bodies` as entries first_index..., placed from `write_pos`."""
    if not bodies:
        raise ValueError("an append needs at least one body")
    if magic not in ENTRY_MAGICS:
        raise ValueError(f"magic {magic} is not an entry type")
    if (stamp is not None) != (magic == Magic.PRODUCED) or magic == Magic.CONTINUED:
        raise ValueError("PRODUCED entries, and they alone, carry a stamp (CONTINUED ones come with it)")
    if stamp is not None:  # each field as a stamp stores it (a u64, 16 bits, 48 bits), every sequence too
        producer_id, epoch, first_seq = stamp
        if not 0 <= producer_id < 1 << 64 or not 0 <= epoch < 1 << (64 - SEQUENCE_BITS) \
                or not 0 <= first_seq <= (1 << SEQUENCE_BITS) - len(bodies):
            raise ValueError(f"a stamp's producer id, epoch or sequences out of range: {stamp}")
    crc32 = zlib.crc32
    pack_header = HEADER.pack
    pack_chain = CHAIN.pack
    pack_record = INDEX_RECORD.pack
    parts: list[bytes] = []
    records: list[bytes] = []
    positions: list[int] = []
    layout = Layout(write_pos)
    offset = 0
    index = first_index
    chain = prev_chain_crc
    head = -1  # the entry that stamps the next continuation (-1: none yet)
    for i, body in enumerate(bodies):
        entry_magic = magic
        if stamp is not None:  # stamped once, but for an entry that starts a file or is 256 on: a head again
            if head >= 0 and i - head <= DISTANCE_MAX \
                    and place(layout.pos, HEADER_SIZE + DISTANCE_SIZE + len(body), file_size) == layout.pos:
                entry_magic, body = Magic.CONTINUED, DISTANCE.pack(i - head) + body
            else:
                head, body = i, Stamp(producer_id, epoch, first_seq + i).pack() + body
        body_size = len(body)
        size = HEADER_SIZE + body_size
        placed = place(layout.pos, size, file_size)
        if placed is None:
            raise EntryTooLargeError(f"entry of {size} bytes cannot fit in a data file of {file_size} bytes")
        pos = layout.move_to(offset, placed)
        bcrc = crc32(body)
        chain = crc32(pack_chain(chain, index, term, bcrc))
        parts.append(pack_header(entry_magic, size, index, term, pos, channel, chain, bcrc, body_size))
        parts.append(body)
        records.append(pack_record(entry_magic, pos, size, index, term))
        positions.append(pos)
        layout.pos = pos + size
        offset += size
        index += 1
    return Batch(first_index, b"".join(parts), layout.runs_to(offset), layout.fillers, b"".join(records), positions,
                 term, chain, layout.pos)


def validate_follower_batch(
    data: bytes | memoryview,
    first_index: int,
    prev_term: int,
    write_pos: int | None,
    prev_chain_crc: int | None,
    file_size: int,
    entry_at: Callable[[int], Entry] | None = None,
) -> Batch:
    """Check raw entries from another replica against the local log end (reference_validate says
    how); the compiled loop's verdict where it is built, the reference's words for a rejection.
    `entry_at` reads the local log, for the head of a batch a push continues."""
    view = memoryview(data)
    return validate_after(view, first_index, prev_term, write_pos, prev_chain_crc, file_size,
                          _tail_head(view, first_index, entry_at))


def validate_after(
    view: memoryview,
    first_index: int,
    prev_term: int,
    write_pos: int | None,
    prev_chain_crc: int | None,
    file_size: int,
    tail: Head | None,
) -> Batch:
    """validate_follower_batch, given the head of the log's last entry (`tail`, reference_validate's)."""
    compiled = codec.compiled
    if compiled is not None and len(view) >= HEADER_SIZE:
        pos = _adopted_pos(view, first_index, file_size) if write_pos is None else write_pos
        parts = compiled.validate_batch(view, first_index, prev_term, pos,
                                        -1 if prev_chain_crc is None else prev_chain_crc, file_size,
                                        None if tail is None else (tail[0], *tail[1]))
        if parts is not None:
            runs, fillers, records, positions, last_term, chain, end_pos, control_indices, produced, queued = parts
            return Batch(first_index, view, runs, fillers, records, positions, last_term, chain, end_pos,
                         control_indices, produced, queued)
    return reference_validate(view, first_index, prev_term, write_pos, prev_chain_crc, file_size, tail)


def _tail_head(view: memoryview, first_index: int, entry_at: Callable[[int], Entry] | None) -> Head | None:
    """The head of the batch the log's last entry belongs to, where the entries at hand begin with a
    continuation (else None, unread): the head that continuation must name."""
    if entry_at is None or len(view) < HEADER_SIZE or HEADER.unpack_from(view)[0] != Magic.CONTINUED:
        return None
    try:
        head = head_index(entry_at(first_index - 1))
        return None if head is None else (head, unpack_stamp(entry_at(head).body))
    except StorageError:  # no entry before these: nothing for them to continue
        return None


def reference_validate(
    data: bytes | memoryview,
    first_index: int,
    prev_term: int,
    write_pos: int | None,
    prev_chain_crc: int | None,
    file_size: int,
    tail: Head | None = None,
) -> Batch:
    """Check raw entries from another replica against the local log end: each must be the next
    entry where the local log places it (codec.reference_check_next's rules, in a stream of
    entries without fillers), and a continuation must name the head of the batch before it (`tail`:
    the head of the log's last entry, if that is a producer's). `write_pos` / `prev_chain_crc` of
    None (a log reset for a snapshot with no known position or chain) adopt the first entry's.
    Raises AppendRejectedError naming the first bad entry.
    """
    view = memoryview(data)
    end = len(view)
    if end < HEADER_SIZE:
        raise AppendRejectedError(first_index, "no entries" if not end else "truncated header")
    pack_record = INDEX_RECORD.pack
    control_indices: list[int] = []
    produced: list[ProducedRun] = []
    queued: list[QueuedRun] = []
    records: list[bytes] = []
    positions: list[int] = []
    expected = first_index
    term_floor = prev_term
    chain = prev_chain_crc
    stamps = Stamps(head=tail)  # no entry to read by: a continuation goes on the batch before it
    layout = Layout(_adopted_pos(view, first_index, file_size) if write_pos is None else write_pos)
    offset = 0
    while offset < end:
        verdict, magic, size, term, chain, placed = reference_check_next(
            view, offset, end, expected, term_floor, layout.pos, chain, file_size, False)
        if verdict is not None:
            raise AppendRejectedError(expected, "truncated entry" if verdict == CUT_END
                                      else f"no entry ({verdict})" if verdict in ENDS else verdict)
        pos = layout.move_to(offset, placed)
        if magic in CONTROL_MAGICS:
            control_indices.append(expected)
        try:
            stamp = stamps.stamp(magic, expected, view[offset + HEADER_SIZE:offset + size])
        except MissingHeadError as exc:
            raise AppendRejectedError(expected, f"a continued entry's distance {expected - exc.head_index} names "
                                                "no head of the batch it continues") from None
        if stamp is not None:
            add_produced(produced, stamp, expected)
        if magic == Magic.MESSAGE:
            add_queued(queued, queued_of(view, offset + HEADER_SIZE), expected)
        records.append(pack_record(magic, pos, size, expected, term))
        positions.append(pos)
        term_floor = term
        layout.pos = pos + size
        offset += size
        expected += 1
    return Batch(first_index, view, layout.runs_to(offset), layout.fillers, b"".join(records), positions, term_floor,
                 chain, layout.pos, tuple(control_indices), tuple(produced), tuple(queued))


class Layout:
    """Where a batch's entries go in the global offset space, as both writers place them (codec.place):
    runs of entries back to back, and a filler closing each data file an entry did not fit."""

    def __init__(self, write_pos: int) -> None:
        self.pos = write_pos  # where the next entry goes, if it fits its file
        self.runs: list[tuple[int, int, int]] = []
        self.fillers: list[int] = []
        self._run_from = 0  # the data offset where the current run starts ...
        self._run_pos = write_pos  # ... and where it goes

    def move_to(self, offset: int, placed: int) -> int:
        """The entry at data offset `offset` goes to `placed`: past a filler if that is not `pos`."""
        if placed != self.pos:  # the file is closed with a filler; the entry starts the next
            if offset > self._run_from:
                self.runs.append((self._run_from, offset, self._run_pos))
            self.fillers.append(self.pos)
            self.pos = self._run_pos = placed
            self._run_from = offset
        return placed

    def runs_to(self, end: int) -> list[tuple[int, int, int]]:
        """The runs, the last one ending at data offset `end`."""
        return [*self.runs, (self._run_from, end, self._run_pos)]


def _adopted_pos(view: memoryview, first_index: int, file_size: int) -> int:
    """After a reset without a position, the first entry's own pos, if it can start a log."""
    size, _index, _term, entry_pos = HEADER.unpack_from(view)[1:5]
    if entry_pos < 0 or place(entry_pos, size, file_size) != entry_pos:
        raise AppendRejectedError(first_index, f"pos {entry_pos} cannot start a log")
    return int(entry_pos)
