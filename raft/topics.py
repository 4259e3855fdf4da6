"""The topic catalog: a table of the log, made of TOPIC entries (RocketMQ's TopicConfig, kept in the log).

A topic has a name, an id (the index of the entry that created it, which its messages carry: a
topic deleted and created again never mixes old messages with new), a queue count that may grow
and never shrinks, a largest message size, read and write permissions (RocketMQ's perm: an
operator stops writes to drain a topic), a description and a creation time. Every change is a
TOPIC entry the leader checks against the catalog as of its log's tail, as a configuration is, and
is in the catalog from its append on: every member holds the same catalog for the same log, a new
leader included, through restarts, retention and snapshot installs. A truncation takes back what
the entries cut had changed.

A TOPIC entry's body is JSON: {"op": "create" | "change" | "delete", "name": ..., and the fields
set}; a create's "created_ms" is the leader's clock, so every member holds the same; a delete's "id"
names the topic whose consume queues go.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from raftlog.raft.errors import TopicError
from raftlog.raft.messages import Code
from raftlog.raft.tables import LogTable
from raftlog.storage.codec import Magic
from raftlog.storage.message import QUEUE_MAX

log = logging.getLogger("raftlog.raft.topics")

NAME = re.compile(r"[A-Za-z0-9._-]{1,127}")  # RocketMQ's topic characters, and '.' for hierarchies
DESCRIPTION_MAX = 1024
MESSAGE_BYTES_DEFAULT = 4 << 20  # RocketMQ's maxMessageSize (the client port's max_entry_bytes bounds it too)
MESSAGE_BYTES_LIMIT = 1 << 30
OPS = ("create", "change", "delete")


@dataclass(frozen=True, slots=True)
class Topic:
    name: str
    id: int  # the index of the TOPIC entry that created it
    queues: int
    max_message_bytes: int = MESSAGE_BYTES_DEFAULT
    readable: bool = True
    writable: bool = True
    description: str = ""
    created_ms: int = 0

    @property
    def perm(self) -> str:
        """RocketMQ's permission string: "rw", "r-", "-w" or "--"."""
        return ("r" if self.readable else "-") + ("w" if self.writable else "-")

    def json(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "perm": self.perm}


CHANGEABLE = ("queues", "max_message_bytes", "readable", "writable", "description")


@dataclass(frozen=True, slots=True)
class TopicChange:
    """What one TOPIC entry does; `fields` holds only what it sets."""

    op: str
    name: str
    fields: Mapping[str, Any]

    def encode(self) -> bytes:
        return json.dumps({"op": self.op, "name": self.name, **self.fields}, separators=(",", ":")).encode()

    @classmethod
    def decode(cls, body: bytes | memoryview) -> TopicChange:
        """ValueError if `body` is not what encode writes."""
        try:
            fields = json.loads(bytes(body))
            op, name = fields.pop("op"), fields.pop("name")
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            raise ValueError(f"not a topic change ({exc})") from None
        if op not in OPS or not isinstance(name, str) or not set(fields) <= {*CHANGEABLE, "created_ms", "id"}:
            raise ValueError(f"not a topic change: {op!r} of {name!r} with {sorted(fields)}")
        return cls(op, name, fields)

    def applied(self, topics: dict[str, Topic], index: int) -> None:
        """The change made to `topics`, entry `index`'s (checked by the leader: nothing here refuses)."""
        if self.op == "delete":
            topics.pop(self.name, None)
        elif self.op == "create":
            topics[self.name] = Topic(self.name, index, **self.fields)
        elif self.name in topics:
            topics[self.name] = dataclasses.replace(topics[self.name], **self.fields)


class TopicCatalog(LogTable):
    """The catalog as of the last committed change folded (`base`), and the log's changes after it."""

    name = "topics"
    magics = frozenset((Magic.TOPIC,))

    def __init__(self, self_id: str, topics_max: int) -> None:
        self.self_id = self_id
        self.topics_max = topics_max
        self.base: dict[str, Topic] = {}
        self.base_index = -1  # every change up to here is in `base`
        self.tail: list[tuple[int, TopicChange]] = []  # the log's changes after base_index, in order
        self.current: dict[str, Topic] = {}  # base with the tail on top: the catalog as of the log's tail
        self.by_id: dict[int, Topic] = {}

    # -- the log moves ---------------------------------------------------------------------

    def appended(self, index: int, magic: int, body: bytes | memoryview) -> None:
        if index <= self.base_index:
            return  # in the table already: a snapshot's, then the same entries pushed again
        try:
            change = TopicChange.decode(body)
        except ValueError as exc:  # not ours: said, skipped (the leader writes only what encode does)
            log.error("%s: topic entry %d not taken: %s", self.self_id, index, exc)
            return
        self.tail.append((index, change))
        change.applied(self.current, index)
        self._indexed()

    def committed(self, index: int) -> None:
        if not self.tail or self.tail[0][0] > index:
            return
        while self.tail and self.tail[0][0] <= index:
            at, change = self.tail.pop(0)
            change.applied(self.base, at)
            self.base_index = at
        self._changes += 1

    def truncated(self, from_index: int) -> None:
        kept = [(index, change) for index, change in self.tail if index < from_index]
        if len(kept) != len(self.tail):
            self.tail = kept
            self._rebuilt()

    def _rebuilt(self) -> None:
        self.current = dict(self.base)
        for index, change in self.tail:
            change.applied(self.current, index)
        self._indexed()

    def _indexed(self) -> None:
        self.by_id = {topic.id: topic for topic in self.current.values()}

    # -- the checkpoint, snapshot installs and starts ---------------------------------------

    def encode(self) -> bytes:
        """The committed catalog (the checkpoint's commit index is never below what it folded)."""
        return json.dumps({"base_index": self.base_index, "topics": [dataclasses.astuple(t) for t in
                                                                     self.base.values()]},
                          separators=(",", ":")).encode()

    def _decode(self, data: bytes | None, whose: str) -> tuple[dict[str, Topic], int]:
        if not data:
            return {}, -1
        try:
            fields = json.loads(data)
            topics = [Topic(*row) for row in fields["topics"]]
            return {topic.name: topic for topic in topics}, int(fields["base_index"])
        except (KeyError, TypeError, ValueError) as exc:
            log.error("%s topic catalog not taken (it is read again from the log): %s", whose, exc)
            return {}, -1

    def restore(self, saved: bytes | None) -> int:
        self.base, self.base_index = self._decode(saved, "the checkpoint's")
        self.tail = []
        self._rebuilt()
        return self.base_index + 1

    def installed(self, index: int, data: bytes | None) -> None:
        """The leader's committed catalog (its changes after `index` come again in pushes, and are
        skipped up to where that catalog was folded)."""
        self.base, folded = self._decode(data, "a snapshot's")
        self.base_index = max(folded, index)
        self.tail = []
        self._rebuilt()
        self._changes += 1

    # -- what the leader decides, and readers see ----------------------------------------------

    def name_of(self, topic_id: int) -> str | None:
        """A topic's name by its id (None: deleted, or not created as of the log's tail)."""
        topic = self.by_id.get(topic_id)
        return None if topic is None else topic.name

    def get(self, name: str, leader_id: str | None = None) -> Topic:
        topic = self.current.get(name)
        if topic is None:
            raise TopicError(Code.TOPIC_NOT_FOUND, f"no topic {name!r}", leader_id)
        return topic

    def decide(self, op: str, name: str, fields: Mapping[str, Any], *, now_ms: int,
               leader_id: str | None) -> TopicChange:
        """The change `op` asks of topic `name`, checked against the catalog as of the log's tail;
        TopicError names what it cannot take."""
        def refuse(code: Code, message: str) -> TopicError:
            return TopicError(code, message, leader_id)

        if not NAME.fullmatch(name):
            raise refuse(Code.INVALID_TOPIC, f"a topic's name is 1 to 127 of A-Z a-z 0-9 . _ -, not {name!r}")
        unknown = set(fields) - set(CHANGEABLE)
        if unknown:
            raise refuse(Code.INVALID_TOPIC, f"a topic has no field {', '.join(sorted(unknown))}")
        current = self.current.get(name)
        if op == "create":
            if current is not None:
                raise refuse(Code.TOPIC_EXISTS, f"topic {name!r} exists (id {current.id})")
            if len(self.current) >= self.topics_max:
                raise refuse(Code.TOPICS_FULL, f"{len(self.current)} topics; topics_max is {self.topics_max}")
            if "queues" not in fields:
                raise refuse(Code.INVALID_TOPIC, "a new topic needs its queue count")
            _check(refuse, fields)
            return TopicChange(op, name, {**fields, "created_ms": now_ms})
        if current is None:
            raise refuse(Code.TOPIC_NOT_FOUND, f"no topic {name!r}")
        if op == "delete":
            return TopicChange(op, name, {"id": current.id})  # its consume queues go once it commits
        _check(refuse, fields)
        if fields.get("queues", current.queues) < current.queues:
            raise refuse(Code.INVALID_TOPIC, f"topic {name!r} has {current.queues} queues: a queue count grows, "
                                             "never shrinks (a queue's messages and offsets stay where they are)")
        return TopicChange(op, name, dict(fields))


def _check(refuse: Any, fields: Mapping[str, Any]) -> None:
    """The fields' values, each within what the catalog can take."""
    queues = fields.get("queues", 1)
    if not isinstance(queues, int) or isinstance(queues, bool) or not 1 <= queues <= QUEUE_MAX:
        raise refuse(Code.INVALID_TOPIC, f"a topic has 1 to {QUEUE_MAX} queues, not {queues!r}")
    size = fields.get("max_message_bytes", 1)
    if not isinstance(size, int) or isinstance(size, bool) or not 1 <= size <= MESSAGE_BYTES_LIMIT:
        raise refuse(Code.INVALID_TOPIC, f"a topic's largest message is 1 to {MESSAGE_BYTES_LIMIT} bytes, "
                                         f"not {size!r}")
    for flag in ("readable", "writable"):
        if not isinstance(fields.get(flag, True), bool):
            raise refuse(Code.INVALID_TOPIC, f"{flag} is true or false")
    description = fields.get("description", "")
    if not isinstance(description, str) or len(description) > DESCRIPTION_MAX:
        raise refuse(Code.INVALID_TOPIC, f"a topic's description is a string of at most {DESCRIPTION_MAX} characters")
