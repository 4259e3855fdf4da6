"""Reads of the stored log (DLedgerMmapFileStore.get): each entry found by its index record, zero-copy,
and checked against it; a damaged one is reported to the store's owner (the repairer) and refused.

`read_range` walks consecutive entries as a push carries them; recent ones, which this process
encoded or validated itself, are cut by their index records alone (the follower checks them all).
`verify` is the scrub's walk: every header, body CRC and chain link.
"""

from __future__ import annotations

import contextlib
import re
import struct
import zlib
from collections.abc import Collection, Iterator
from typing import Protocol

from raftlog.storage.codec import (
    BLANK_END,
    ENTRY_MAGICS,
    HEADER_SIZE,
    INDEX_RECORD,
    INDEX_RECORD_SIZE,
    Entry,
    chain_crc,
    check_next,
    decode_entry,
    header_of_record,
)
from raftlog.storage.consume_queue import units_of
from raftlog.storage.consume_queues import tags_codes_of
from raftlog.storage.errors import CorruptEntryError, StorageError, check_in_log
from raftlog.storage.protocol import LogBounds, RawEntries, Verified
from raftlog.storage.retention import PageRelease
from raftlog.storage.segments import SegmentList

INDEX_FIELD = struct.Struct(">q")  # an entry header's index (storage.codec: bytes 8..16)
INDEX_FIELD_AT = 8


class OwnWrites(LogBounds, Protocol):
    """The log's bounds, and the first entry this process wrote itself (read_range trusts those)."""

    own_from: int


class LogReader:
    def __init__(self, data: SegmentList, index: SegmentList, file_size: int, log: OwnWrites,
                 pages: PageRelease) -> None:
        self.data = data
        self.index = index
        self.file_size = file_size
        self.log = log
        self.pages = pages

    def get(self, index: int) -> Entry:
        """The entry at `index`, its body a zero-copy view; CRC checked."""
        check_in_log(index, self.log.begin_index, self.log.end_index)
        magic, pos, size, _index, term = self.record(index)
        seg = self.data.find(pos)
        off = pos - seg.start
        view = seg.read_view
        header = header_of_record(view, off, (magic, pos, size, index, term))
        if header is None:
            raise self.damaged(index, pos, "entry header disagrees with its index record")
        channel, chain, bcrc = header[5:8]
        body = view[off + HEADER_SIZE:off + size]
        if zlib.crc32(body) != bcrc:
            raise self.damaged(index, pos, "body CRC mismatch")
        return Entry(magic, index, term, pos, channel, chain, bcrc, body)

    def read_range(self, start: int, max_entries: int, max_bytes: int, *,
                   trust_own_writes: bool = False) -> RawEntries:
        """Raw bytes of consecutive entries from `start`, each CRC-checked, except recent ones.

        Returns at least one entry (even one larger than max_bytes) and stops at
        max_entries, max_bytes, the log end, or the end of a data file: the
        result is one zero-copy slice. Ask again from first_index + count.

        Recent entries are returned unchecked (`_recent_range`): all of the range
        past durable_end_index (not yet covered by a flush, which takes
        milliseconds), or with `trust_own_writes` all of it from the first entry
        this process wrote itself (since it opened the log, or the truncate or
        reset that last lowered its end). They are what the leader pushes while
        its own fdatasync runs, and just after. Safe because they were encoded or
        validated here, and whatever damaged them since, a follower's
        validate_follower_batch refuses (it checks every field the checks here
        cover, and the chain CRC); the leader then reads its retry checked
        (without `trust_own_writes`), which reports the damage.
        """
        assert max_entries > 0
        check_in_log(start, self.log.begin_index, self.log.end_index)
        if start > self.log.durable_end_index or (trust_own_writes and start >= self.log.own_from):
            recent = self._recent_range(start, max_entries, max_bytes)
            if recent is not None:
                return recent
        _magic, pos, _size, _index, _term = self.record(start)
        seg = self.data.find(pos)
        view = seg.read_view
        first = off = pos - seg.start
        limit = min(self.log.end_index, start + max_entries - 1)
        file_size = self.file_size
        index = start
        term_floor = -1
        while index <= limit:
            verdict, _magic, size, term_floor, _chain, _pos = check_next(
                view, off, file_size, index, term_floor, seg.start + off, None, file_size, True)
            if verdict == BLANK_END or (index > start and off + size - first > max_bytes):
                break
            if verdict is not None:
                raise self.damaged(index, seg.start + off, verdict)
            off += size
            index += 1
        return RawEntries(start, index - start, view[first:off])

    def _recent_range(self, start: int, max_entries: int, max_bytes: int) -> RawEntries | None:
        """read_range's slice, from index records alone: a binary search for its last entry,
        whose header and the first one's must agree with their records (else None: walk and check).

        The two ends are then true entry boundaries, and the bytes between them are entries
        start..last laid out back to back, as every data file holds them."""
        first = self.record(start)
        seg = self.data.find(first[1])
        file_size = self.file_size
        file_end = seg.start + file_size
        index_view = self.index.view
        unpack_record = INDEX_RECORD.unpack_from
        lo, hi = start, min(self.log.end_index, start + max_entries - 1)
        while lo < hi:
            mid = (lo + hi + 1) // 2
            _m, pos, size, _i, _t = unpack_record(index_view(mid * INDEX_RECORD_SIZE, INDEX_RECORD_SIZE))
            if pos < file_end and pos + size - first[1] <= max_bytes:
                lo = mid
            else:
                hi = mid - 1
        last = self.record(lo)
        view = seg.read_view
        if not (seg.start <= last[1] < file_end and header_of_record(view, first[1] - seg.start, first) is not None
                and header_of_record(view, last[1] - seg.start, last) is not None):
            return None
        return RawEntries(start, lo - start + 1, seg.read_view[first[1] - seg.start:last[1] + last[2] - seg.start])

    def verify(self, start: int, max_entries: int, chain: int | None) -> Verified:
        """Check up to `max_entries` from `start` as a scrub does: each header against its index
        record, each body CRC, and each chain CRC from the entry before it (the one check that
        also covers a flipped term or chain field). `chain` is the verified chain CRC of the entry
        before `start` (None: not known, its link is not checked); so is the result's, for the
        next call. An entry after a damaged one is checked without its link to it.
        """
        if start <= self.log.begin_index:
            start, chain = self.log.begin_index, self.log.before_begin_chain_crc
        last = min(self.log.end_index, start + max_entries - 1)
        damaged = []
        for index in range(start, last + 1):
            try:
                entry = self.get(index)
            except CorruptEntryError:
                damaged.append(index)
                chain = None
                continue
            if chain is not None and entry.chain_crc != chain_crc(chain, index, entry.term, entry.body_crc):
                self.damaged(index, entry.pos, "chain CRC does not follow from the entry before")
                damaged.append(index)
                chain = None
                continue
            chain = entry.chain_crc
        if last >= start:  # the scrub walks the whole log: what it read leaves the RSS behind it
            with contextlib.suppress(OSError):  # only memory is at stake
                self.pages.release_verified(start, last)
        return Verified(max(start, last + 1), damaged, chain)

    def pos_at(self, index: int) -> int:
        """The global byte position of the entry at `index`, from its index record alone."""
        check_in_log(index, self.log.begin_index, self.log.end_index)
        return self.record(index)[1]

    def get_at(self, pos: int) -> Entry | None:
        """The kept entry that starts at byte `pos` (None: none does), as `get` reads it, by the index its
        header names: a consume queue's unit or a reader's position finds its entry with one header and
        one entry read, whatever the log's length."""
        index = self._named_at(pos)
        if index is None:
            return None
        entry = self.get(index)  # its record's pos holds the entry `get` checks: another's if not pos
        return entry if entry.pos == pos else None

    def _named_at(self, pos: int) -> int | None:
        """The index field of the header at `pos` if it names a kept entry (None: outside the log)."""
        if not self.data.covers(pos):
            return None
        seg = self.data.find(pos)
        at = pos - seg.start + INDEX_FIELD_AT
        if at + INDEX_FIELD.size > self.file_size:
            return None
        index = int(INDEX_FIELD.unpack_from(seg.read_view, at)[0])
        return index if self.log.begin_index <= index <= self.log.end_index else None

    def term_at(self, index: int) -> int:
        """Term of the entry at `index`; before_begin_term for before_begin_index."""
        if index == self.log.before_begin_index:
            return self.log.before_begin_term
        check_in_log(index, self.log.begin_index, self.log.end_index)
        return self.record(index)[4]

    def indices_of(self, magics: Collection[int], start: int) -> Iterator[int]:
        """The indices from `start` on whose index records name one of `magics`, found by scanning
        the index files' type bytes alone: no entry is read (a start that rebuilds its tables reads
        only the entries they are made of)."""
        if not magics:
            return
        wanted = re.compile(b"[" + re.escape(bytes(sorted(magics))) + b"]")
        index, end = max(start, self.log.begin_index), self.log.end_index
        while index <= end:
            pos = index * INDEX_RECORD_SIZE
            seg = self.index.find(pos)
            offset = pos - seg.start
            count = min(end + 1 - index, (self.index.file_size - offset) // INDEX_RECORD_SIZE, 1 << 20)
            # a record's magic is a big-endian i32 whose low byte holds the type (types are below 256)
            types = seg.view[offset + 3:offset + count * INDEX_RECORD_SIZE:INDEX_RECORD_SIZE].tobytes()
            for found in wanted.finditer(types):
                yield index + found.start()
            index += count

    def message_units(self, first: int, last: int) -> bytes:
        """The consume queue units of the MESSAGE entries first..last (storage.consume_queue): each one's
        pos and size from its index record, its tags code from its body, without reading the entries."""
        parts = []
        index = first
        while index <= last:
            at = index * INDEX_RECORD_SIZE
            seg = self.index.find(at)
            offset = at - seg.start
            count = min(last + 1 - index, (self.index.file_size - offset) // INDEX_RECORD_SIZE)
            records = seg.view[offset:offset + count * INDEX_RECORD_SIZE]
            parts.append(units_of(records, tags_codes_of(records, self.data)))
            index += count
        return b"".join(parts)

    def first_index_of_term(self, term: int, before_index: int) -> int | None:
        """The first kept index at or below `before_index` whose term is `term`, or None.

        Terms never fall along the log, so this is a binary search over index
        records: what the compare step needs to skip a whole term at a time.
        """
        lo, hi = self.log.begin_index, min(before_index, self.log.end_index)
        while lo < hi:
            mid = (lo + hi) // 2
            if self.record(mid)[4] < term:
                lo = mid + 1
            else:
                hi = mid
        if lo <= min(before_index, self.log.end_index) and self.record(lo)[4] == term:
            return lo
        return None

    def check_copy(self, index: int, raw: bytes) -> int:
        """The position of the entry at `index`, if `raw`, a replica's stored copy, is that entry: the
        same size, index, term, position and type as its index record, a sound body, and a chain CRC
        that follows from the entry before (and leads to the one after, when that one is sound)."""
        check_in_log(index, self.log.begin_index, self.log.end_index)
        record = self.record(index)
        _magic, pos, size, _index, term = record
        if (len(raw) != size or header_of_record(raw, 0, record) is None
                or check_next(raw, 0, size, index, term, None, None, self.file_size, False)[0] is not None):
            raise StorageError(f"the copy offered for entry {index} is not that entry")
        copy = decode_entry(memoryview(raw))
        before = (self.log.before_begin_chain_crc if index == self.log.begin_index
                  else self.get(index - 1).chain_crc)  # a damaged one before is repaired first
        if before is not None and copy.chain_crc != chain_crc(before, index, term, copy.body_crc):
            raise StorageError(f"the copy offered for entry {index} does not follow the entry before it")
        if index < self.log.end_index:
            try:
                after = self.get(index + 1)
            except CorruptEntryError:
                pass  # damaged too: repaired next
            else:
                if after.chain_crc != chain_crc(copy.chain_crc, index + 1, after.term, after.body_crc):
                    raise StorageError(f"the copy offered for entry {index} does not lead to the one after")
        return pos

    def damaged(self, index: int, pos: int, reason: str) -> CorruptEntryError:
        """Tell the owner (who repairs) about a damaged entry; the error for the reader."""
        if self.log.on_damage is not None:
            self.log.on_damage(index)
        return CorruptEntryError(index, pos, reason)

    def record(self, index: int) -> tuple[int, int, int, int, int]:
        pos = index * INDEX_RECORD_SIZE
        seg = self.index.find(pos)
        record = INDEX_RECORD.unpack_from(seg.view, pos - seg.start)
        if record[3] != index or record[0] not in ENTRY_MAGICS or not self.data.covers(record[1]):
            raise self.damaged(index, record[1], "index record does not match")
        return record


