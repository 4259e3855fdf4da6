"""Stored entries (DLedger's format, `storage.codec`) into Arrow record batches, every CRC checked.

Both readers end here: the online one feeds the bytes of `GET /v1/entries` with
`Accept: application/vnd.raftlog.entries` as they arrive, the offline one a
mapped data file. Bodies stay views into those buffers until a batch is cut,
when they are joined into one Arrow data buffer: one copy per byte.
"""

from __future__ import annotations

import zlib
from array import array
from dataclasses import dataclass

import pyarrow as pa

from storage.codec import BLANK, BLANK_MAGIC, CHAIN, ENTRY_MAGICS, HEADER, HEADER_SIZE, MIN_BLANK_LEN, Magic

TYPE_NAMES = {int(m): m.name.lower() for m in Magic}

BASE_FIELDS = [
    pa.field("index", pa.int64()),
    pa.field("term", pa.int64()),
    pa.field("pos", pa.int64()),
    pa.field("type", pa.string()),
    pa.field("channel", pa.int32()),
    pa.field("body", pa.binary()),
    pa.field("body_crc", pa.int32()),
    pa.field("chain_crc", pa.int32()),
]
TEXT_FIELD = pa.field("body_text", pa.string())
CORRUPT_FIELD = pa.field("corrupt", pa.string())


def arrow_schema(*, text: bool, corrupt: bool) -> pa.Schema:
    return pa.schema(BASE_FIELDS + ([TEXT_FIELD] if text else []) + ([CORRUPT_FIELD] if corrupt else []))


def signed32(value: int) -> int:
    """A CRC as Java (and Spark's `int`) holds it: the same four bytes, signed."""
    return value - (1 << 32) if value & 0x80000000 else value


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
        return self.reason not in ("blank", "zeros", "incomplete")


class Decoder:
    """Decodes consecutive entries, checking index order, positions, body and chain CRCs.

    `prev_chain` is the chain CRC of the entry before the first (None: unknown,
    the first entry's link is taken on trust). With `mark_corrupt` a damaged
    entry is kept as a row whose `corrupt` column says why; otherwise the scan
    stops there and the caller decides (a torn tail, or an error).
    """

    def __init__(self, first_index: int | None, prev_chain: int | None, *, text: bool = False,
                 mark_corrupt: bool = False) -> None:
        self.next_index = first_index
        self.prev_chain = prev_chain
        self.text = text
        self.mark_corrupt = mark_corrupt
        self.schema = arrow_schema(text=text, corrupt=mark_corrupt)
        self.clear()

    def clear(self) -> None:
        """Forget the rows not yet cut into a batch (and the views they hold)."""
        self._index = array("q")
        self._term = array("q")
        self._pos = array("q")
        self._channel = array("i")
        self._body_crc = array("i")
        self._chain = array("i")
        self._types: list[str | None] = []
        self._bodies: list[memoryview] = []
        self._corrupt: list[str | None] = []
        self._valid: list[bool] = []  # False only for rows that stand for an unreadable entry

    @property
    def rows(self) -> int:
        return len(self._index)

    def feed(self, buf: memoryview, offset: int, end: int, pos_base: int | None) -> tuple[int, Stop | None]:
        """Decode the whole entries in buf[offset:end]; returns the offset after them and why it stopped
        early, if it did. `pos_base` is the global position of buf[0] (None: positions unchecked).
        Damage stops the scan at the damaged entry unless it is marked (see the class)."""
        unpack = HEADER.unpack_from
        crc32 = zlib.crc32
        pack_chain = CHAIN.pack
        while offset + HEADER_SIZE <= end:
            magic, size, index, term, pos, channel, chain, bcrc, bsize = unpack(buf, offset)
            if magic == BLANK_MAGIC:
                return offset, Stop("blank", offset)
            if magic == 0 and size == 0:
                return offset, Stop("zeros", offset)
            expected = self.next_index if self.next_index is not None else index
            problem = None
            if magic not in ENTRY_MAGICS:
                problem = f"bad magic {magic}"
            elif size != HEADER_SIZE + bsize or bsize < 0:
                problem = f"size {size} disagrees with body size {bsize}"
            elif index != expected:
                problem = f"index {index} where {expected} belongs"
            elif pos_base is not None and pos != pos_base + offset:
                problem = f"position {pos} stored at {pos_base + offset}"
            if problem is not None:
                return offset, self._damaged(expected, offset, problem, whole=False)
            if offset + size > end:
                return offset, Stop("incomplete", offset)
            body = buf[offset + HEADER_SIZE:offset + size]
            if crc32(body) != bcrc:
                problem = "body CRC mismatch"
            elif self.prev_chain is not None and crc32(pack_chain(self.prev_chain, index, term, bcrc)) != chain:
                problem = "chain CRC mismatch"
            if problem is not None and self._damaged(index, offset, problem, whole=True):
                return offset, Stop(problem, offset)
            self._corrupt.append(problem)
            self._index.append(index)
            self._term.append(term)
            self._pos.append(pos)
            self._channel.append(channel)
            self._body_crc.append(signed32(bcrc))
            self._chain.append(signed32(chain))
            self._types.append(TYPE_NAMES[magic])
            self._bodies.append(body)
            self._valid.append(True)
            self.prev_chain = chain
            self.next_index = index + 1
            offset += size
        if offset + MIN_BLANK_LEN <= end and BLANK.unpack_from(buf, offset)[0] == BLANK_MAGIC:
            return offset, Stop("blank", offset)  # a filler shorter than a header
        return offset, (Stop("incomplete", offset) if offset < end else None)

    def _damaged(self, index: int, offset: int, reason: str, *, whole: bool) -> Stop | None:
        """A damaged entry stops the scan, unless damage is marked: then an entry whose header is sound
        becomes a marked row like any other, one whose header is not a marked row of its own."""
        if not self.mark_corrupt:
            return Stop(reason, offset)
        if whole:
            return None
        self._corrupt.append(reason)
        for column in (self._index, self._term, self._pos, self._channel, self._body_crc, self._chain):
            column.append(index if column is self._index else 0)
        self._types.append(None)
        self._bodies.append(memoryview(b""))
        self._valid.append(False)
        return Stop(reason, offset)

    def batch(self) -> pa.RecordBatch:
        """The rows decoded since the last batch, as Arrow columns."""
        n = self.rows
        offsets = array("i", [0])
        total = 0
        for body in self._bodies:
            total += len(body)
            offsets.append(total)
        if total >= 1 << 31:
            raise ValueError("a record batch holds at most 2 GiB of bodies; cut batches smaller")
        data = b"".join(self._bodies)
        valid = None if all(self._valid) else pa.array(self._valid, pa.bool_())
        body = pa.Array.from_buffers(pa.binary(), n, [None, pa.py_buffer(offsets), pa.py_buffer(data)])

        def column(values: array, kind: pa.DataType) -> pa.Array:
            arr = pa.Array.from_buffers(kind, n, [None, pa.py_buffer(values)])
            return arr if valid is None else pa.compute.if_else(valid, arr, pa.scalar(None, kind))

        columns = [pa.Array.from_buffers(pa.int64(), n, [None, pa.py_buffer(self._index)]),
                   column(self._term, pa.int64()), column(self._pos, pa.int64()),
                   pa.array(self._types, pa.string()), column(self._channel, pa.int32()),
                   body if valid is None else pa.compute.if_else(valid, body, pa.scalar(None, pa.binary())),
                   column(self._body_crc, pa.int32()), column(self._chain, pa.int32())]
        if self.text:
            columns.append(_utf8(body))
        if self.mark_corrupt:
            columns.append(pa.array(self._corrupt, pa.string()))
        self.clear()
        return pa.RecordBatch.from_arrays(columns, schema=self.schema)


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
        return pa.array(texts, pa.string())
