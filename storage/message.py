"""A MESSAGE entry's body: a message of one queue of a topic (RocketMQ's message over DLedger).

Every message entry holds its own topic, queue and queue offset (RocketMQ's message holds
topic, queueId and queueOffset): a consume queue is rebuilt from the log alone, a reader of
the log sees where each message belongs, and a follower checks offsets as it validates. A
batch's entries never share a header (no continuation form): one decoder reads any of them.

Body (big-endian)::

    offset  size  field
         0     8  topic_id      u64  the topic's id: the index of the TOPIC entry that created it
         8     4  queue         u32  0 <= queue < the topic's queue count
        12     8  queue_offset  u64  contiguous from 0 in each queue, assigned by the leader
        20     8  tags_code     u64  the tags' 64-bit Bloom code (0: no tags): a consume queue's unit holds it
        28     4  meta_len      u32  bytes of the keys, tags and properties after the stamp
        32     1  flags         u8   bit 0: a producer's stamp follows
        33    16  stamp              with flag bit 0: producer_id u64 | epoch u16 | sequence u48, the sequence
                                     counted per topic-queue (exactly once per queue, as Kafka's per partition)
         -  meta_len  meta           keys, tags, properties
         -     -  body               the client's body: the rest of the entry

meta: three count-prefixed lists of UTF-8 strings::

    n_keys u16 | (len u16 | key)*  n_tags u16 | (len u16 | tag)*  n_props u16 | (len u16 | name | len u32 | value)*

A tag's code sets three of the 64 bits, from its CRC-32 h: h & 63, h >> 6 & 63, h >> 12 & 63. A
filter on tag t passes the units whose code holds all of code(t), then checks the tags exactly
(RocketMQ's tag hash, then the tag). A key's queue is crc32(key) % queue_count (zlib's CRC-32 of the
key's UTF-8): every client computes it the same way.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterable, Mapping, Sequence
from typing import NamedTuple

from raftlog.storage.codec import MESSAGE_HEADER_SIZE as CODEC_MESSAGE_HEADER_SIZE
from raftlog.storage.codec import MESSAGE_STAMPED as CODEC_STAMPED
from raftlog.storage.codec import STAMP, STAMP_SIZE, Buffer, Entry, Stamp, unpack_stamp

MESSAGE_HEADER = struct.Struct(">QIQQIB")
MESSAGE_HEADER_SIZE = MESSAGE_HEADER.size  # 33
assert MESSAGE_HEADER_SIZE == CODEC_MESSAGE_HEADER_SIZE  # the check every entry passes holds the same
TAGS_CODE_OFFSET = 20  # where a consume queue's dispatcher reads the tags' code
STAMPED = CODEC_STAMPED
QUEUE_MAX = 1 << 16  # queues per topic
_COUNT = struct.Struct(">H")
_SHORT = struct.Struct(">H")
_LONG = struct.Struct(">I")
NO_META = bytes(3 * _COUNT.size)  # no keys, no tags, no properties


class MessageFormatError(ValueError):
    """A message body that does not hold what its header says."""


class Message(NamedTuple):
    """A message as its entry holds it; `body` is a view into the entry's body."""

    topic_id: int
    queue: int
    queue_offset: int
    tags_code: int
    stamp: Stamp | None
    keys: tuple[str, ...]
    tags: tuple[str, ...]
    properties: dict[str, str]
    body: memoryview


class Meta:
    """What a message carries beside its body, encoded once (a batch's messages may share one)."""

    __slots__ = ("_code", "_encoded", "keys", "properties", "tags")

    def __init__(self, keys: tuple[str, ...] = (), tags: tuple[str, ...] = (),
                 properties: tuple[tuple[str, str], ...] = ()) -> None:
        self.keys, self.tags, self.properties = keys, tags, properties
        self._encoded: bytes | None = None
        self._code: int | None = None

    @classmethod
    def of(cls, keys: Sequence[str] = (), tags: Sequence[str] = (),
           properties: Mapping[str, str] | None = None) -> Meta:
        return cls(tuple(keys), tuple(tags), tuple((properties or {}).items()))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Meta) and (self.keys, self.tags, self.properties) == (
            other.keys, other.tags, other.properties)

    def __hash__(self) -> int:
        return hash((self.keys, self.tags, self.properties))

    def __repr__(self) -> str:
        return f"Meta(keys={self.keys!r}, tags={self.tags!r}, properties={self.properties!r})"

    def encode(self) -> bytes:
        if self._encoded is None:
            self._encoded = _encoded(self.keys, self.tags, self.properties)
        return self._encoded

    @property
    def tags_code(self) -> int:
        if self._code is None:
            self._code = tags_code(self.tags)
        return self._code


def _encoded(keys: tuple[str, ...], tags: tuple[str, ...], properties: tuple[tuple[str, str], ...]) -> bytes:
    if not (keys or tags or properties):
        return NO_META
    parts = [_COUNT.pack(len(keys))]
    parts += [_SHORT.pack(len(b)) + b for b in (key.encode() for key in keys)]
    parts.append(_COUNT.pack(len(tags)))
    parts += [_SHORT.pack(len(b)) + b for b in (tag.encode() for tag in tags)]
    parts.append(_COUNT.pack(len(properties)))
    for name, value in properties:
        name_bytes, value_bytes = name.encode(), value.encode()
        parts.append(_SHORT.pack(len(name_bytes)) + name_bytes + _LONG.pack(len(value_bytes)) + value_bytes)
    return b"".join(parts)


def tag_code(tag: str) -> int:
    h = zlib.crc32(tag.encode())
    return 1 << (h & 63) | 1 << (h >> 6 & 63) | 1 << (h >> 12 & 63)


def tags_code(tags: Iterable[str]) -> int:
    code = 0
    for tag in tags:
        code |= tag_code(tag)
    return code


def key_queue(key: str | bytes, queue_count: int) -> int:
    """The queue a key's messages go to while the topic has `queue_count` queues."""
    return zlib.crc32(key.encode() if isinstance(key, str) else key) % queue_count


def encode_message(topic_id: int, queue: int, queue_offset: int, meta: bytes, tags_code_: int, body: bytes,
                   stamp: Stamp | None = None) -> bytes:
    """One MESSAGE entry's body; `meta` is Meta.encode()'s, `tags_code_` its tags' code."""
    header = MESSAGE_HEADER.pack(topic_id, queue, queue_offset, tags_code_, len(meta),
                                 STAMPED if stamp is not None else 0)
    return b"".join((header, STAMP.pack(*stamp.pack_ints()) if stamp is not None else b"", meta, body))


def message_prefix_size(body: Buffer) -> int:
    """Bytes of a MESSAGE entry's body before the client's body: header, stamp and meta."""
    _topic, _queue, _offset, _code, meta_len, flags = MESSAGE_HEADER.unpack_from(body)
    return MESSAGE_HEADER_SIZE + (STAMP_SIZE if flags & STAMPED else 0) + int(meta_len)


def decode_message(body: memoryview) -> Message:
    """The reference decoder of a MESSAGE entry's body (MessageFormatError if it holds no message)."""
    if len(body) < MESSAGE_HEADER_SIZE:
        raise MessageFormatError(f"a message of {len(body)} bytes cannot hold its {MESSAGE_HEADER_SIZE}-byte header")
    topic_id, queue, queue_offset, code, meta_len, flags = MESSAGE_HEADER.unpack_from(body)
    offset = MESSAGE_HEADER_SIZE
    stamp = None
    if flags & STAMPED:
        if offset + STAMP_SIZE > len(body):
            raise MessageFormatError("a stamped message has no room for its stamp")
        stamp = unpack_stamp(body, offset)
        offset += STAMP_SIZE
    end = offset + meta_len
    if end > len(body):
        raise MessageFormatError(f"a message's meta of {meta_len} bytes runs past its body")
    reader = _MetaReader(body, offset, end)
    keys = reader.strings(_SHORT)
    tags = reader.strings(_SHORT)
    properties = dict(zip(*(iter(reader.pairs()),) * 2, strict=True))
    if reader.offset != end:
        raise MessageFormatError(f"a message's meta holds {end - reader.offset} bytes past its lists")
    return Message(topic_id, queue, queue_offset, code, stamp, keys, tags, properties, body[end:])


class _MetaReader:
    """Reads the meta's lists, each bound by the meta's end."""

    def __init__(self, body: memoryview, offset: int, end: int) -> None:
        self.body, self.offset, self.end = body, offset, end

    def _take(self, size: int) -> memoryview:
        if self.offset + size > self.end:
            raise MessageFormatError("a message's keys, tags or properties run past their meta")
        part = self.body[self.offset:self.offset + size]
        self.offset += size
        return part

    def _string(self, length: struct.Struct) -> str:
        (size,) = length.unpack(self._take(length.size))
        try:
            return str(self._take(size), "utf-8")
        except UnicodeDecodeError as exc:
            raise MessageFormatError(f"a message's string is not UTF-8: {exc}") from None

    def strings(self, length: struct.Struct) -> tuple[str, ...]:
        (count,) = _COUNT.unpack(self._take(_COUNT.size))
        return tuple(self._string(length) for _ in range(count))

    def pairs(self) -> list[str]:
        (count,) = _COUNT.unpack(self._take(_COUNT.size))
        flat = []
        for _ in range(count):
            flat.append(self._string(_SHORT))
            flat.append(self._string(_LONG))
        return flat


# (topic_id, queue, first_offset, first_index, last_index, producer_id or -1, epoch, first_seq): consecutive
# MESSAGE entries of one queue with consecutive offsets (and, when stamped, one producer's consecutive
# sequences), as the store finds them while it checks a batch: the queue offsets' and producers' tables
QueuedRun = tuple[int, int, int, int, int, int, int, int]
UNSTAMPED = -1


def queued_of(body: Buffer, offset: int = 0) -> tuple[int, int, int, int, int, int]:
    """A MESSAGE entry's (topic_id, queue, queue_offset, producer_id or -1, epoch, sequence), from its body."""
    topic_id, queue, queue_offset, _code, _meta_len, flags = MESSAGE_HEADER.unpack_from(body, offset)
    if flags & STAMPED:
        producer_id, epoch, sequence = unpack_stamp(body, offset + MESSAGE_HEADER_SIZE)
        return topic_id, queue, queue_offset, producer_id, epoch, sequence
    return topic_id, queue, queue_offset, UNSTAMPED, 0, 0


def queued_run(entry: Entry) -> QueuedRun:
    """A MESSAGE entry as a run of its own."""
    topic_id, queue, queue_offset, producer_id, epoch, sequence = queued_of(entry.body)
    return topic_id, queue, queue_offset, entry.index, entry.index, producer_id, epoch, sequence


def run_from(run: QueuedRun, index: int) -> QueuedRun:
    """The part of `run` from its entry `index` on."""
    skip = index - run[3]
    return (run[0], run[1], run[2] + skip, index, run[4], run[5], run[6],
            run[7] + skip if run[5] != UNSTAMPED else 0)


def run_through(run: QueuedRun, index: int) -> QueuedRun:
    """The part of `run` up to its entry `index`."""
    return (*run[:4], index, *run[5:])


def add_queued(runs: list[QueuedRun], message: tuple[int, int, int, int, int, int], index: int) -> None:
    """The message at `index` follows `runs`: it extends the last run, or starts one."""
    topic_id, queue, queue_offset, producer_id, epoch, sequence = message
    if runs:
        last = runs[-1]
        step = index - last[3]
        if last[:2] == (topic_id, queue) and last[4] + 1 == index and last[2] + step == queue_offset \
                and last[5:7] == (producer_id, epoch) and (producer_id == UNSTAMPED or last[7] + step == sequence):
            runs[-1] = (*last[:4], index, *last[5:])
            return
    runs.append((topic_id, queue, queue_offset, index, index, producer_id, epoch, sequence))
