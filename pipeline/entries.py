"""Stored entries (DLedger's format, `storage.codec`) into Arrow record batches, every CRC checked.

Both readers end here: the online one feeds the bytes of `GET /v1/entries` with
`Accept: application/vnd.raftlog.entries` as they arrive, the offline one a
mapped data file. The buffers are kept until a batch is cut; then numpy gathers
the headers into columns and the bodies into one Arrow data buffer.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from raftlog.storage.codec import (
    CRC_FAULTS,
    DISTANCE_SIZE,
    ENDS,
    HEADER_SIZE,
    SEQUENCE_BITS,
    STAMP_SIZE,
    Buffer,
    Magic,
    Stamp,
    check_next,
)
from raftlog.storage.message import Message, MessageFormatError, decode_message
from raftlog.storage.record import TYPE_NAMES

STRINGS = pa.list_(pa.string())
PROPERTIES = pa.map_(pa.string(), pa.string())
BASE_FIELDS = [
    pa.field("index", pa.int64()),
    pa.field("term", pa.int64()),
    pa.field("pos", pa.int64()),
    pa.field("type", pa.string()),
    pa.field("channel", pa.int32()),
    pa.field("body", pa.binary()),
    pa.field("body_crc", pa.int32()),
    pa.field("chain_crc", pa.int32()),
    pa.field("producer_id", pa.int64()),  # a producer session's entry: its stamp; else null
    pa.field("producer_epoch", pa.int64()),
    pa.field("sequence", pa.int64()),
    pa.field("topic_id", pa.int64()),  # a message's: its topic, queue, offset in it and what it carries; else null
    pa.field("queue", pa.int32()),
    pa.field("queue_offset", pa.int64()),
    pa.field("keys", STRINGS),
    pa.field("tags", STRINGS),
    pa.field("properties", PROPERTIES),
]
TEXT_FIELD = pa.field("body_text", pa.string())
BATCH_BYTES = 32 << 20  # a record batch is cut at this many log bytes, whatever its rows
CORRUPT_FIELD = pa.field("corrupt", pa.string())


def arrow_schema(*, text: bool, corrupt: bool) -> pa.Schema:
    return pa.schema(BASE_FIELDS + ([TEXT_FIELD] if text else []) + ([CORRUPT_FIELD] if corrupt else []))


class CorruptDataError(RuntimeError):
    """Stored bytes that break the format: where, which index, and why."""

    def __init__(self, where: str, index: int, reason: str) -> None:
        self.where, self.index, self.reason = where, index, reason
        super().__init__(f"corrupt entry {index} ({where}): {reason}")


@dataclass(slots=True)
class Stop:
    """Why a scan ended before the bytes it was given did."""

    reason: str  # "blank" (file-end filler), "zeros" (nothing written), "incomplete", or a damage
    offset: int

    @property
    def damaged(self) -> bool:
        return self.reason not in ENDS


# the 48-byte header as numpy reads it; CRCs as signed ints, as Java and Spark's `int` hold them
HEADER_DTYPE = np.dtype([("magic", ">i4"), ("size", ">i4"), ("index", ">i8"), ("term", ">i8"), ("pos", ">i8"),
                         ("channel", ">i4"), ("chain", ">i4"), ("body_crc", ">i4"), ("body_size", ">i4")])
HEADER_BYTES = np.arange(HEADER_SIZE)
STAMP_DTYPE = np.dtype([("producer_id", ">u8"), ("rest", ">u8")])  # rest: epoch << 48 | sequence
STAMP_BYTES = HEADER_SIZE + np.arange(STAMP_SIZE)  # from the entry's start
DISTANCE_BYTES = HEADER_SIZE + np.arange(DISTANCE_SIZE)  # a CONTINUED entry's, from its start
HEAD_DTYPE = np.dtype([("index", np.int64), ("producer_id", ">u8"), ("rest", ">u8")])  # a batch's head and its stamp


# Arrow arrays are built from their buffers, never with pa.array or pa.scalar: those import pandas (half a second of
# CPU in each of Spark's Python workers, which start fresh)
def _arrow(values: np.ndarray, valid: np.ndarray | None = None) -> pa.Array:
    """A numeric column, null where `valid` is False."""
    values = np.ascontiguousarray(values)
    return pa.Array.from_buffers(pa.from_numpy_dtype(values.dtype), len(values), [_bitmap(valid), pa.py_buffer(values)])


def _bitmap(valid: np.ndarray | None) -> pa.Buffer | None:
    return None if valid is None or valid.all() else pa.py_buffer(np.packbits(valid, bitorder="little"))


def _strings(values: list[str | None]) -> pa.Array:
    valid = np.array([v is not None for v in values], bool)
    encoded = [(v or "").encode() for v in values]
    offsets = np.zeros(len(values) + 1, np.int32)
    np.cumsum([len(e) for e in encoded], out=offsets[1:])
    return pa.Array.from_buffers(pa.string(), len(values), [_bitmap(valid), pa.py_buffer(offsets),
                                                            pa.py_buffer(b"".join(encoded))])


TYPE_DICTIONARY = _strings([TYPE_NAMES.get(m) for m in range(max(TYPE_NAMES) + 1)])


class Decoder:
    """Decodes consecutive entries, checking index order, positions, body and chain CRCs.

    The walk over the entries is the only per-entry Python: it checks each one
    and notes its offset; the columns are then cut out of the buffers with numpy.
    `prev_chain` is the chain CRC of the entry before the first (None: unknown,
    the first entry's link is taken on trust). With `mark_corrupt` a damaged
    entry is kept as a row whose `corrupt` column says why; otherwise the scan
    stops there and the caller decides (a torn tail, or an error).
    """

    def __init__(self, first_index: int, prev_chain: int | None, *, text: bool = False,
                 mark_corrupt: bool = False, file_size: int = 0,
                 head_stamp: Callable[[int], Stamp] | None = None) -> None:
        self.next_index = first_index
        self.head_stamp = head_stamp  # the stamp of a head before the first entry fed (None: there is none)
        self._head = np.zeros(1, HEAD_DTYPE)  # the last head of a producer's batch cut, for those continuing it
        self._head["index"] = -1
        self._damaged = np.zeros(0, np.int64)  # the last damaged entries kept as rows: no head to follow
        self.file_size = file_size  # of the data files fed (0: positions are not checked)
        self.prev_chain = prev_chain
        self.prev_term = -1  # terms never fall along the log
        self.text = text
        self.mark_corrupt = mark_corrupt
        self.schema = arrow_schema(text=text, corrupt=mark_corrupt)
        self.clear()

    def clear(self) -> None:
        """Forget the rows not yet cut into a batch (and the views they hold)."""
        self._segments: list[tuple[Buffer, array]] = []  # a buffer and the offsets of its entries
        self._rows = 0
        self._bytes = 0
        self._corrupt: dict[int, str] = {}  # row -> why, for damaged entries kept as rows
        self._unreadable: tuple[int, str] | None = None  # a last row standing for an entry with a bad header

    @property
    def rows(self) -> int:
        return self._rows + (self._unreadable is not None)

    def full(self, batch_rows: int) -> bool:
        """Time to cut a batch: enough rows, or enough bytes to keep a batch's memory bounded."""
        return self._rows >= batch_rows or self._bytes >= BATCH_BYTES

    @property
    def has_unreadable(self) -> bool:
        return self._unreadable is not None

    def mark_unreadable(self, reason: str) -> None:
        """With mark_corrupt: the entry at next_index cannot be read at all (its reader stops here)."""
        assert self.mark_corrupt
        self._unreadable = (self.next_index, reason)

    def feed(self, buf: Buffer, offset: int, end: int, pos_base: int | None) -> tuple[int, Stop | None]:
        """Decode the whole entries in buf[offset:end]; returns the offset after them and why it stopped
        early, if it did. `pos_base` is the global position of buf[0] (None: positions unchecked).
        Damage stops the scan at the damaged entry unless it is marked (see the class)."""
        offsets = array("q")
        note = offsets.append
        expected = self.next_index
        prev_chain, prev_term = self.prev_chain, self.prev_term
        file_size = self.file_size
        start = offset
        stop = None
        while offset < end:
            problem, _magic, size, term, chain, _pos = check_next(
                buf, offset, end, expected, prev_term, None if pos_base is None else pos_base + offset, prev_chain,
                file_size, True)
            if problem is not None:
                if problem in ENDS or problem not in CRC_FAULTS or not self.mark_corrupt:
                    stop = Stop(problem, offset)
                    if self.mark_corrupt and problem not in ENDS:
                        self._unreadable = (expected, problem)
                    break
                self._corrupt[self._rows + len(offsets)] = problem  # kept as a row that says why
            note(offset)
            prev_chain, prev_term = chain, term
            expected += 1
            offset += size
        if offsets:
            self._segments.append((buf, offsets))
            self._rows += len(offsets)
            self._bytes += offset - start
        self.next_index, self.prev_chain, self.prev_term = expected, prev_chain, prev_term
        return offset, stop

    def _stamps(self, header: np.ndarray, prefix: np.ndarray, damaged: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Each row's stamp (zeros where it has none): a head's own, and a continuation's its head's with
        the distance added to the sequence, the head found among the rows, before them, or by `head_stamp`;
        and the continuations left without one, which are damaged or continue a damaged head."""
        stamps = prefix.copy()
        index = header["index"].astype(np.int64)
        sound = np.ones(len(header), bool)
        sound[damaged] = False  # a damaged entry's stamp or distance is not to be followed
        heads = (header["magic"] == Magic.PRODUCED) & sound
        known = np.zeros(1 + int(heads.sum()), HEAD_DTYPE)  # ascending: the last head cut, then the rows'
        known[0] = self._head[0]
        known["index"][1:], known["producer_id"][1:], known["rest"][1:] = \
            index[heads], prefix["producer_id"][heads], prefix["rest"][heads]
        continued = np.flatnonzero(header["magic"] == Magic.CONTINUED)
        distance = prefix["rest"][continued].astype(np.int64)
        wanted = index[continued] - distance
        damaged_indices = np.concatenate([self._damaged, index[damaged]])
        followed = sound[continued] & ~np.isin(wanted, damaged_indices)
        self._damaged = damaged_indices[-16:]
        unstamped = continued[~followed]
        continued, distance, wanted = continued[followed], distance[followed], wanted[followed]
        if len(continued):
            at = np.minimum(np.searchsorted(known["index"], wanted), len(known) - 1)
            missing = np.unique(wanted[known["index"][at] != wanted])
            if len(missing):  # the reading began inside their batches
                found = np.zeros(len(missing), HEAD_DTYPE)
                for row, head_index in enumerate(missing.tolist()):
                    found[row] = (head_index, *self._head_stamp(head_index).pack_ints())
                known = np.sort(np.concatenate([known, found]), order="index")
                at = np.searchsorted(known["index"], wanted)
            stamps["producer_id"][continued] = known["producer_id"][at]
            stamps["rest"][continued] = known["rest"][at] + distance.astype(np.uint64)
        self._head = known[-1:].copy()
        return stamps, unstamped

    def _head_stamp(self, index: int) -> Stamp:
        if self.head_stamp is None:
            raise CorruptDataError("the entries read", index, "the head of a batch continued here is not in its file")
        return self.head_stamp(index)

    def _messages(self, buf: Buffer, at: np.ndarray, header: np.ndarray, messages: Messages) -> np.ndarray:
        """Decode a segment's messages into `messages` (storage.message's decoder), rows counted from
        messages.first_row; returns the offsets of the bytes ahead of their bodies. A damaged row is left
        as stored; one that holds no message is marked so, or raises CorruptDataError."""
        view, starts, sizes = memoryview(buf), [], []
        for i in np.flatnonzero(header["magic"] == Magic.MESSAGE).tolist():
            row, start = messages.first_row + i, int(at[i]) + HEADER_SIZE
            if row in self._corrupt:
                continue
            body = view[start:start + int(header["body_size"][i])]
            try:
                message = decode_message(body)
            except MessageFormatError as exc:
                if not self.mark_corrupt:
                    raise CorruptDataError("the entries read", int(header["index"][i]), str(exc)) from None
                self._corrupt[row] = str(exc)
                continue
            starts.append(start)
            sizes.append(len(body) - len(message.body))
            messages.add(row, message, sizes[-1])
            del body, message  # no view of the buffer left behind: a mapped file is closed after
        messages.first_row += len(at)
        return _spans(np.array(starts, np.int64), np.array(sizes, np.int64))

    def batch(self) -> pa.RecordBatch:
        """The rows decoded since the last batch, as Arrow columns."""
        headers, bodies, prefixes = [], [], []
        messages = Messages()
        for buf, offsets in self._segments:
            data = np.frombuffer(buf, np.uint8)
            at = np.frombuffer(offsets, np.int64)
            header_bytes = at[:, None] + HEADER_BYTES
            header = data[header_bytes].view(HEADER_DTYPE)[:, 0]
            headers.append(header)
            first, last = int(at[0]), int(at[-1])
            span = data[first:last + HEADER_SIZE + int(header["body_size"][-1])]
            dropped = [header_bytes.ravel()]
            prefix = np.zeros(len(at), STAMP_DTYPE)  # a head's stamp; a continuation's distance, as its `rest`
            for magic, prefix_bytes, part, dtype in ((Magic.PRODUCED, STAMP_BYTES, None, STAMP_DTYPE),
                                                     (Magic.CONTINUED, DISTANCE_BYTES, "rest", "u1")):
                rows = header["magic"] == magic
                if rows.any():  # the client's body is what follows the stamp or the distance
                    taken = at[rows][:, None] + prefix_bytes
                    values = data[taken].view(dtype)[:, 0]
                    if part is None:
                        prefix[rows] = values
                    else:
                        prefix[part][rows] = values
                    dropped.append(taken.ravel())
            dropped.append(self._messages(buf, at, header, messages))
            prefixes.append(prefix)
            bodies.append(np.delete(span, np.concatenate(dropped) - first))
        header = np.concatenate(headers) if headers else np.zeros(0, HEADER_DTYPE)
        produced = np.isin(header["magic"], (Magic.PRODUCED, Magic.CONTINUED))
        sizes = header["body_size"].astype(np.int64) - STAMP_SIZE * (header["magic"] == Magic.PRODUCED) \
            - DISTANCE_SIZE * (header["magic"] == Magic.CONTINUED)
        sizes[messages.rows] -= np.array(messages.prefix_sizes, np.int64)
        damaged = np.fromiter(self._corrupt, np.int64, len(self._corrupt))
        stamps, unstamped = self._stamps(header, np.concatenate(prefixes) if prefixes else np.zeros(0, STAMP_DTYPE),
                                         damaged)
        produced[unstamped] = False
        messages.stamp(stamps, produced)
        if self._unreadable is not None:
            filler = np.zeros(1, HEADER_DTYPE)
            filler["index"] = self._unreadable[0]
            header = np.concatenate([header, filler])
            sizes = np.append(sizes, 0)
            produced = np.append(produced, False)
        n = len(header)
        value_offsets = np.zeros(n + 1, np.int64)
        np.cumsum(sizes, out=value_offsets[1:])
        if value_offsets[-1] >= 1 << 31:
            raise ValueError("a record batch holds at most 2 GiB of bodies; cut batches smaller")
        data = np.concatenate(bodies) if bodies else np.zeros(0, np.uint8)
        known = None  # of an unreadable entry, nothing is known but its index
        if self._unreadable is not None:
            known = np.ones(n, bool)
            known[-1] = False
        body = pa.Array.from_buffers(pa.binary(), n, [_bitmap(known), pa.py_buffer(value_offsets.astype(np.int32)),
                                                      pa.py_buffer(data)])
        columns = [_arrow(header["index"].astype(np.int64)), _arrow(header["term"].astype(np.int64), known),
                   _arrow(header["pos"].astype(np.int64), known),
                   TYPE_DICTIONARY.take(_arrow(header["magic"].astype(np.int32), known)),
                   _arrow(header["channel"].astype(np.int32), known), body,
                   _arrow(header["body_crc"].astype(np.int32), known), _arrow(header["chain"].astype(np.int32), known),
                   *_stamp_columns(produced, stamps), *messages.columns(n)]
        if self.text:
            columns.append(_utf8(columns[5]))
        if self.mark_corrupt:
            reasons = [self._corrupt.get(i) for i in range(self._rows)]
            if self._unreadable is not None:
                reasons.append(self._unreadable[1])
            columns.append(_strings(reasons))
        self.clear()
        return pa.RecordBatch.from_arrays(columns, schema=self.schema)


def _stamp_columns(produced: np.ndarray, stamps: np.ndarray) -> list[pa.Array]:
    """producer_id, producer_epoch and sequence: the stamps of the rows `produced` marks, else null."""
    rest = stamps["rest"].astype(np.uint64)
    columns = []
    for values_of in (stamps["producer_id"], rest >> np.uint64(SEQUENCE_BITS),
                      rest & np.uint64((1 << SEQUENCE_BITS) - 1)):
        values = np.zeros(len(produced), np.int64)
        values[:len(values_of)] = np.where(produced[:len(values_of)], values_of.astype(np.int64), 0)
        columns.append(_arrow(values, produced))
    return columns


@dataclass(slots=True)
class Messages:
    """The message fields of a batch's rows, gathered message by message."""

    first_row: int = 0  # of the segment decoded next
    rows: list[int] = field(default_factory=list)
    prefix_sizes: list[int] = field(default_factory=list)  # bytes ahead of each message's body
    messages: list[Message] = field(default_factory=list)  # each one's fields, its body left out

    def add(self, row: int, message: Message, prefix_size: int) -> None:
        self.rows.append(row)
        self.prefix_sizes.append(prefix_size)
        self.messages.append(message._replace(body=memoryview(b"")))

    def stamp(self, stamps: np.ndarray, produced: np.ndarray) -> None:
        """The stamped messages' stamps, beside the producers' entries'."""
        for row, message in zip(self.rows, self.messages, strict=True):
            if message.stamp is not None:
                stamps[row] = message.stamp.pack_ints()
                produced[row] = True

    def columns(self, n: int) -> list[pa.Array]:
        """topic_id, queue, queue_offset, keys, tags and properties of `n` rows, null but for messages."""
        valid = np.zeros(n, bool)
        valid[self.rows] = True
        columns = []
        for name, dtype in (("topic_id", np.int64), ("queue", np.int32), ("queue_offset", np.int64)):
            values = np.zeros(n, dtype)
            values[self.rows] = [getattr(m, name) for m in self.messages]
            columns.append(_arrow(values, valid))
        for name in ("keys", "tags"):
            lists = [getattr(m, name) for m in self.messages]
            columns.append(_lists(STRINGS, valid, self.rows, lists, [_strings([s for items in lists for s in items])]))
        pairs = [list(m.properties.items()) for m in self.messages]
        entries = pa.StructArray.from_arrays([_strings([k for p in pairs for k, _ in p]),
                                              _strings([v for p in pairs for _, v in p])],
                                             fields=[PROPERTIES.key_field, PROPERTIES.item_field])
        columns.append(_lists(PROPERTIES, valid, self.rows, pairs, [entries]))
        return columns


def _lists(kind: pa.DataType, valid: np.ndarray, rows: list[int], lists: Sequence[Sequence[Any]],
           children: list[pa.Array]) -> pa.Array:
    """A list (or map) column: row rows[i] holds lists[i]'s items, in `children`; the others null."""
    counts = np.zeros(len(valid), np.int32)
    counts[rows] = [len(items) for items in lists]
    offsets = np.zeros(len(valid) + 1, np.int32)
    np.cumsum(counts, out=offsets[1:])
    return pa.Array.from_buffers(kind, len(valid), [_bitmap(valid), pa.py_buffer(offsets)], children=children)


def _spans(starts: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """The offsets of the bytes in [start, start + size) for each span."""
    ends = np.cumsum(sizes)
    return np.repeat(starts - ends + sizes, sizes) + np.arange(int(ends[-1]) if len(ends) else 0)


def _utf8(body: pa.Array) -> pa.Array:
    """Bodies as text; null where a body is not valid UTF-8."""
    try:
        return body.cast(pa.string())
    except pa.ArrowInvalid:
        texts = []
        for value in body.to_pylist():
            try:
                texts.append(None if value is None else value.decode("utf-8"))
            except UnicodeDecodeError:
                texts.append(None)
        return _strings(texts)
