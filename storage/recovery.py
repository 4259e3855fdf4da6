"""Rebuilding the log's end from its files on open, as DLedger does and more.

DLedger scans from the third-to-last data file and stops at the first entry
that breaks a rule. This scan also verifies both CRCs, rewrites index
records that are missing or disagree with the data, and tells a torn tail
(cut away: it was never acknowledged) from a damaged committed entry (the
node must not start: a peer has to supply a good copy).

Flushes sync the data files only, so the scan starts no later than the index
mark (`meta.load_index_mark`): before it, data and index records are known
synced; from it on, every record is rebuilt from the data.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

from raftlog.storage.codec import (
    BLANK_END,
    CUT_END,
    ENTRY_MAGICS,
    HEADER,
    HEADER_SIZE,
    INDEX_RECORD,
    INDEX_RECORD_SIZE,
    MIN_BLANK_LEN,
    ZEROS_END,
    check_next,
    header_of_record,
    place,
)
from raftlog.storage.errors import CorruptLogError
from raftlog.storage.meta import StoreMeta
from raftlog.storage.segments import Segment, SegmentList

log = logging.getLogger("raftlog.storage.recovery")

SCAN_FILES = 3  # DLedger starts from the third-to-last data file


@dataclass(slots=True)
class RecoveryReport:
    """What recovery found and did; logged, and kept on the store for metrics."""

    files_scanned: int = 0
    entries_scanned: int = 0
    index_records_rebuilt: int = 0
    truncated_at: int | None = None  # global pos where a torn tail was cut
    truncate_reason: str | None = None
    files_removed: int = 0
    lost_from: int | None = None  # salvage: the first committed index that was damaged or missing
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0


@dataclass(slots=True)
class LogEnd:
    end_index: int
    end_term: int
    end_chain_crc: int | None
    write_pos: int | None


@dataclass(slots=True)
class _Cursor:
    seg_no: int
    pos: int
    expected: int
    term_floor: int
    chain: int | None  # None: adopt the first scanned entry's (its predecessor was verified before)


def recover(data: SegmentList, index: SegmentList, meta: StoreMeta, committed_index: int,
            salvage: bool = False, index_synced: int | None = None) -> tuple[LogEnd, RecoveryReport]:
    """Scan, verify, repair the tail and the index; raise CorruptLogError if committed data is bad.

    `committed_index` must be durable on this node (the caller checkpoints at
    most what it flushed): a damaged entry at or below it is not a torn tail.
    With `salvage`, the log is cut before the first damaged or missing entry
    all the same, and `report.lost_from` says where committed data was lost.
    `index_synced` is the index mark (meta.load_index_mark): records below it
    are trusted, every later one is checked against the data and rewritten if
    it differs (behind, ahead, stale, zeroed or torn by a power loss); None
    trusts the records before the usual scan, as for a log whose flushes
    synced the index.
    """
    started = time.perf_counter()
    report = RecoveryReport()
    base = LogEnd(meta.base_index, meta.base_term, meta.base_chain_crc, meta.base_pos)
    _finish_cleaning(data, index, meta, report)
    if not data.segments:
        report.files_removed += _drop(index, index.reset())
        _check_committed_present(data, base, committed_index, salvage, report)
        return base, report
    cursor = _scan_start(data, index, meta, report)
    if index_synced is not None and cursor.seg_no > 0 and cursor.expected >= index_synced:
        # Start at the mark: what lies before it (data, fillers, records) was synced before it
        # was saved; from it on, even the filler before the usual start may not have been.
        cursor = _cursor_at_mark(data, index, meta, index_synced, report)
    end, stop = _scan(data, index, cursor, report)
    if stop is not None:
        reason, bad_pos, bad_index = stop
        if bad_index <= committed_index and not salvage:
            seg = data.find(bad_pos)
            raise CorruptLogError(str(seg.path), bad_pos - seg.start, bad_index, reason)
        report.truncated_at, report.truncate_reason = end.write_pos, reason
    _check_committed_present(data, end, committed_index, salvage, report)
    _cut_tail(data, index, end, report)
    report.seconds = time.perf_counter() - started
    _log_report(report, end)
    return end, report


def _check_committed_present(data: SegmentList, end: LogEnd, committed_index: int, salvage: bool,
                             report: RecoveryReport) -> None:
    """Entries the checkpoint says are committed (and durable here) must all be found."""
    if end.end_index >= committed_index:
        return
    if salvage:
        report.lost_from = end.end_index + 1
        report.notes.append(f"committed entries {end.end_index + 1}..{committed_index} were damaged or missing "
                            "and are cut away: this member must get them again from its peers")
        return
    pos = end.write_pos or 0
    path = str(data.find(pos).path) if data.covers(pos) else str(data.directory)
    offset = pos % data.file_size
    raise CorruptLogError(path, offset, end.end_index + 1,
                          f"the log ends at {end.end_index} but {committed_index} is committed")


def _finish_cleaning(data: SegmentList, index: SegmentList, meta: StoreMeta,
                     report: RecoveryReport) -> None:
    """Delete head files that a cleaning interrupted by a crash left behind the base."""
    if meta.base_pos is not None:
        stale = sum(1 for seg in data.segments[:-1] if seg.start + data.file_size <= meta.base_pos)
        report.files_removed += _drop(data, data.remove_head(stale))
    begin_record = (meta.base_index + 1) * INDEX_RECORD_SIZE
    stale = sum(1 for seg in index.segments[:-1] if seg.start + index.file_size <= begin_record)
    report.files_removed += _drop(index, index.remove_head(stale))


def _scan_start(data: SegmentList, index: SegmentList, meta: StoreMeta,
                report: RecoveryReport) -> _Cursor:
    """Where to start: the third-to-last file if its first entry is sound and the
    index covers the log's beginning; otherwise the first file."""
    begin_record = (meta.base_index + 1) * INDEX_RECORD_SIZE
    if index.segments and not index.covers(begin_record):
        report.notes.append("index files do not cover the log's beginning: rebuilding all")
        report.files_removed += _drop(index, index.reset())
    seg_no = max(0, len(data.segments) - SCAN_FILES)
    if seg_no > 0 and index.segments:
        seg = data.segments[seg_no]
        idx = HEADER.unpack_from(seg.view, 0)[2]
        verdict, _magic, _size, term, _chain, _pos = check_next(
            seg.view, 0, data.file_size, idx, 0, seg.start, None, data.file_size, True)
        if verdict is None and idx > meta.base_index:
            if index.end > idx * INDEX_RECORD_SIZE:
                return _Cursor(seg_no, seg.start, idx, term, None)
            report.notes.append("index files end before the scan would start: scanning every file")
        else:
            report.notes.append(f"first entry of {seg.path} is not sound: scanning every file")
    first = data.segments[0]
    pos = meta.base_pos if meta.base_pos is not None and data.covers(meta.base_pos) else first.start
    return _Cursor(0, pos, meta.base_index + 1, meta.base_term, meta.base_chain_crc)


def _cursor_at_mark(data: SegmentList, index: SegmentList, meta: StoreMeta, synced_end: int,
                    report: RecoveryReport) -> _Cursor:
    """Start the scan at entry `synced_end`, whose predecessor's record is synced: the
    entry it points to must agree with it, or every file is scanned."""
    first = data.segments[0]
    from_base = _Cursor(0, meta.base_pos if meta.base_pos is not None and data.covers(meta.base_pos)
                        else first.start, meta.base_index + 1, meta.base_term, meta.base_chain_crc)
    last = synced_end - 1
    if last <= meta.base_index:
        return from_base
    record_pos = last * INDEX_RECORD_SIZE
    if index.covers(record_pos):
        record = INDEX_RECORD.unpack_from(index.view(record_pos, INDEX_RECORD_SIZE))
        magic, pos, size, idx, term = record
        if magic in ENTRY_MAGICS and idx == last and data.covers(pos) and place(pos, size, data.file_size) == pos:
            seg = data.find(pos)
            header = header_of_record(seg.view, pos - seg.start, record)
            if header is not None:
                seg_no = (pos - first.start) // data.file_size
                return _Cursor(seg_no, pos + size, synced_end, term, header[6])
    report.notes.append(f"the synced index record of entry {last} does not match its entry: "
                        "scanning every file")
    return from_base


def _scan(data: SegmentList, index: SegmentList, cur: _Cursor,
          report: RecoveryReport) -> tuple[LogEnd, tuple[str, int, int] | None]:
    """Walk entries from the cursor; returns the end of the good prefix and, if the
    walk stopped on bytes that are not a clean end, (reason, pos, index)."""
    file_size = data.file_size
    pack_record = INDEX_RECORD.pack
    expected, term_floor, chain, pos = cur.expected, cur.term_floor, cur.chain, cur.pos
    end_pos = pos
    for seg in data.segments[cur.seg_no:]:
        report.files_scanned += 1
        view = seg.view
        start = seg.start
        off = pos - start
        first_of_file = expected
        records: list[bytes] = []
        while True:
            verdict, magic, size, term, entry_chain, _pos = check_next(
                view, off, file_size, expected, term_floor, start + off, chain, file_size, True)
            if verdict is not None:
                break
            chain = entry_chain
            term_floor = term
            records.append(pack_record(magic, start + off, size, expected, term))
            off += size
            expected += 1
        if records:
            end_pos = start + off
        report.entries_scanned += len(records)
        conflict = _check_index(index, first_of_file, b"".join(records), report)
        if conflict is not None:
            reason = "magic differs from the index record's (one of them is damaged)"
            conflict_pos = INDEX_RECORD.unpack_from(records[conflict - first_of_file])[1]
            return _end_before(data, index, conflict, cur), (reason, conflict_pos, conflict)
        end = LogEnd(expected - 1, term_floor, chain, end_pos)
        if verdict == ZEROS_END:
            return end, None
        if verdict != BLANK_END:  # a filler: the log goes on in the next file
            reason = "an entry runs past the end of its file" if verdict == CUT_END else verdict
            return end, (reason, seg.start + off, expected)
        pos = seg.start + file_size
    return LogEnd(expected - 1, term_floor, chain, end_pos), None


def _end_before(data: SegmentList, index: SegmentList, first_bad: int, cur: _Cursor) -> LogEnd:
    """The log end just before entry `first_bad`, whose record is already verified."""
    if first_bad == cur.expected and cur.seg_no == 0:
        return LogEnd(cur.expected - 1, cur.term_floor, cur.chain, cur.pos)
    rec_pos = (first_bad - 1) * INDEX_RECORD_SIZE
    _magic, pos, size, idx, term = INDEX_RECORD.unpack_from(index.view(rec_pos, INDEX_RECORD_SIZE))
    chain = HEADER.unpack_from(data.view(pos, HEADER_SIZE))[6]
    return LogEnd(idx, term, chain, pos + size)


def _check_index(index: SegmentList, first: int, records: bytes,
                 report: RecoveryReport) -> int | None:
    """Make the index records for entries first... equal `records`, rewriting what differs.

    Returns the first index whose record agrees with the data on everything but
    a valid magic: no CRC covers the magic, so which copy is damaged is unknown.
    """
    if not records:
        return None
    pos = first * INDEX_RECORD_SIZE
    end = pos + len(records)
    if not index.segments:
        index.create(pos - pos % index.file_size)
    while index.end < end:
        index.create(index.end)
    for _seg, current, done in index.spans(pos, len(records)):
        chunk = records[done:done + len(current)]
        if current == chunk:
            continue
        for r in range(0, len(chunk), INDEX_RECORD_SIZE):
            old, new = current[r:r + INDEX_RECORD_SIZE], chunk[r:r + INDEX_RECORD_SIZE]
            if old == new:
                continue
            if old[4:] == new[4:] and INDEX_RECORD.unpack_from(old)[0] in ENTRY_MAGICS:
                return first + (done + r) // INDEX_RECORD_SIZE
            old[:] = new
            report.index_records_rebuilt += 1
    return None


def _cut_tail(data: SegmentList, index: SegmentList, end: LogEnd, report: RecoveryReport) -> None:
    """Forget everything after the good prefix: a zero header at the write offset
    (so no later scan can read old bytes there as a filler or entry) and no files beyond."""
    assert end.write_pos is not None
    if data.covers(end.write_pos):
        seg = data.find(end.write_pos)
        off = end.write_pos - seg.start
        if any(seg.view[off:off + MIN_BLANK_LEN]):
            seg.view[off:off + MIN_BLANK_LEN] = bytes(MIN_BLANK_LEN)
    report.files_removed += _drop(data, data.remove_from(end.write_pos))
    report.files_removed += _drop(index, index.remove_from((end.end_index + 1) * INDEX_RECORD_SIZE))


def _drop(files: SegmentList, gone: list[Segment]) -> int:
    files.delete(gone)
    return len(gone)


def _log_report(report: RecoveryReport, end: LogEnd) -> None:
    for note in report.notes:
        log.warning("recovery: %s", note)
    if report.truncated_at is not None:
        log.warning("recovery: cut a torn tail at pos %d (%s)", report.truncated_at,
                    report.truncate_reason)
    if report.index_records_rebuilt:
        log.warning("recovery: rebuilt %d index records", report.index_records_rebuilt)
    log.info("recovery: end index %d term %d, %d entries in %d files scanned in %.3fs, "
             "%d files removed", end.end_index, end.end_term, report.entries_scanned,
             report.files_scanned, report.seconds, report.files_removed)
