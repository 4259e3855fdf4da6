"""An entry's record as its readers see it: the one decoder of it, which the API's reads, the Python
client and the pipeline call.

A record is the entry's place in the log (index, term, pos), its type as readers name it, the body
its client sent and that body's CRC, the producer's stamp where one wrote it, and a message's topic
fields. A producer's entry (PRODUCED, CONTINUED) reads as a normal one, its stamp ahead of the body
in the log (Stamps below resolves a continuation's); a MESSAGE entry reads as a message, its header,
stamp and keys, tags and properties ahead of the body (storage.message). The compiled codec
(storage/_codec.c) and the pipeline's numpy decoder resolve the same fields on their own, and
tests/storage/test_record.py holds them to this one.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from typing import NamedTuple

from raftlog.storage.codec import (
    DISTANCE,
    PRODUCER_MAGICS,
    Buffer,
    Entry,
    Magic,
    Stamp,
    client_body,
    client_body_crc,
    unpack_stamp,
)
from raftlog.storage.message import decode_message

# each type's name as readers see it: a producer's entry is a normal one
TYPE_NAMES = {int(m): "normal" if m in PRODUCER_MAGICS else m.name.lower() for m in Magic}
UNKNOWN_TYPE = "other"  # a type this release does not know: a newer member's (the client may meet one)

TopicName = Callable[[int], str | None]  # a topic's name by its id, where the reader holds the topic catalog


Head = tuple[int, Stamp]  # a producer's batch's head entry: its index and stamp


class MissingHeadError(LookupError):
    """A continuation whose head came before the entries read, with nothing given to read it by."""

    def __init__(self, index: int, head_index: int) -> None:
        self.index, self.head_index = index, head_index
        super().__init__(f"entry {index} continues the producer's batch of entry {head_index}, which was not read")


class Stamps:
    """The stamps of producers' entries read in log order, the one rule of a continuation's stamp: its
    head's, with the sequence plus the distance. A continuation's head is the last head before it, only
    its batch's entries between (one append writes a batch); where the reading begins inside the batch
    it is read by `entry_at` (None: MissingHeadError, and the caller may `know` it and ask again). Only
    stamps are kept, never a view into a file. storage.record decodes the rest of an entry's record."""

    def __init__(self, entry_at: Callable[[int], Entry] | None = None, head: Head | None = None) -> None:
        self._entry_at = entry_at
        self.head = head  # the head of the batch the last entry read belongs to (None: not a producer's)

    def __call__(self, entry: Entry) -> Stamp | None:
        return self.stamp(entry.magic, entry.index, entry.body)

    def stamp(self, magic: int, index: int, body: Buffer) -> Stamp | None:
        """The stamp of entry `index` (None: it is not a producer's), the next one in log order."""
        if magic == Magic.PRODUCED:
            stamp = unpack_stamp(body)
            self.head = (index, stamp)
            return stamp
        if magic != Magic.CONTINUED:
            self.head = None
            return None
        distance = DISTANCE.unpack_from(body)[0]
        head = self.head
        if head is None or head[0] != index - distance:
            if self._entry_at is None:
                raise MissingHeadError(index, index - distance)
            head = self.head = (index - distance, unpack_stamp(self._entry_at(index - distance).body))
        return head[1]._replace(sequence=head[1].sequence + distance)

    def know(self, head_index: int, stamp: Stamp) -> None:
        """The head of the batch the next continuation goes on, read elsewhere."""
        self.head = (head_index, stamp)


class Record(NamedTuple):
    """One entry as readers see it; the message fields are None but for a message."""

    index: int  # type: ignore[assignment]  # the entry's, over tuple.index
    term: int
    pos: int
    type: str  # TYPE_NAMES': normal, message, noop, config_change, or a control entry's type
    body: bytes  # as its client sent it
    body_crc: int  # of `body`
    producer: Stamp | None = None  # the producer session's id, epoch and sequence, if one wrote it
    topic_id: int | None = None  # the index of the TOPIC entry that created the message's topic
    topic: str | None = None  # the topic's name, where the reader knows it
    queue: int | None = None
    queue_offset: int | None = None
    keys: tuple[str, ...] | None = None
    tags: tuple[str, ...] | None = None
    properties: dict[str, str] | None = None


class Records:
    """The records of entries read in log order. A continuation whose head came before them is stamped
    from `entry_at` (None: MissingHeadError, until the caller `know`s the head); `topic_name` names a
    message's topic (None: unnamed). A message that does not decode raises MessageFormatError."""

    def __init__(self, entry_at: Callable[[int], Entry] | None = None, topic_name: TopicName | None = None) -> None:
        self._stamps = Stamps(entry_at)
        self._topic_name = topic_name

    def __call__(self, entry: Entry) -> Record:
        stamp = self._stamps(entry)  # every entry, in order: one not a producer's ends its batch
        if entry.magic == Magic.MESSAGE:
            return self._message(entry)
        return Record(entry.index, entry.term, entry.pos, TYPE_NAMES.get(entry.magic, UNKNOWN_TYPE),
                      bytes(client_body(entry)), client_body_crc(entry), stamp)

    def _message(self, entry: Entry) -> Record:
        message = decode_message(entry.body)
        body = bytes(message.body)
        topic = None if self._topic_name is None else self._topic_name(message.topic_id)
        return Record(entry.index, entry.term, entry.pos, TYPE_NAMES[entry.magic], body, zlib.crc32(body),
                      message.stamp, message.topic_id, topic, message.queue, message.queue_offset, message.keys,
                      message.tags, message.properties)

    def know(self, head_index: int, stamp: Stamp) -> None:
        """The stamp of the head a continuation read next goes on, read elsewhere."""
        self._stamps.know(head_index, stamp)
