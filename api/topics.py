"""Topics and their messages as the API offers them (raft.topics keeps the catalog in the log,
raft.topic_appends appends a batch of messages to one queue of a topic).

A change to the catalog and a batch of messages go through the leader, as appends do: a follower
forwards them over the peer port. What the member the client called can judge, it judges first,
before anything goes to the leader: only an admin changes the catalog, and a batch's counts, sizes,
keys, tags and properties must fit (the leader checks them again, against its own limits).

A batch goes to one queue, all or nothing. One whose keys fall in several queues is refused
(KEYS_IN_SEVERAL_QUEUES) unless the caller asks the member to split it, as Kafka's producer splits
a batch per partition: each queue's part (by its messages' first keys, with the topic's queue count
as this member's catalog holds it) is then a batch of its own, all or nothing on its own, and each
message is answered, in the order sent, with its place or its part's error. Messages without keys
in a split batch make a part of their own, which the leader places by its turn. A part whose keys
the leader finds in several queues (the topic grew since this member's catalog) is refused as an
unsplit batch would be.

Reads of the catalog are linearizable unless asked otherwise, as reads of named consumers are:
the member catches up with the leader's confirmed commit index first.
"""

from __future__ import annotations

import asyncio
import logging
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from raftlog.api.answers import MessageAnswer, MessagesAnswer
from raftlog.api.auth import Caller, Role
from raftlog.api.errors import ApiError, api_error, bad_request, too_large
from raftlog.api.service import LogService
from raftlog.raft.messages import Code
from raftlog.raft.messages import Role as RaftRole
from raftlog.raft.producers import Sequenced
from raftlog.raft.topic_appends import MessageBatch
from raftlog.raft.topics import NAME, OPS, Topic
from raftlog.storage.message import MESSAGE_HEADER_SIZE, Meta, key_queue

log = logging.getLogger("raftlog.api.topics")

# What one message may carry beside its body: a key, a tag and a property's name are short strings
# (RocketMQ's keys and tags), and a few of each; the entry's whole size is bounded by max_entry_bytes.
KEYS_MAX = 32
TAGS_MAX = 32
PROPERTIES_MAX = 64
NAME_BYTES_MAX = 1024  # a key, a tag or a property's name, in UTF-8
VALUE_BYTES_MAX = 16 << 10  # a property's value, in UTF-8

MessageResult = MessageAnswer | ApiError  # a split batch's message: its place, or its part's error


class TopicService:
    def __init__(self, service: LogService) -> None:
        self.service = service

    # -- the catalog ---------------------------------------------------------------------

    async def change(self, op: str, name: str, fields: Mapping[str, Any], *, caller: Caller) -> Topic | None:
        """Create, change or delete topic `name` as `caller` (an admin): the topic once its entry is
        committed (None: deleted)."""
        if caller.role < Role.ADMIN:
            raise ApiError(Code.PERMISSION_DENIED, f"changing the topic catalog needs the admin role; this token is "
                                                   f"a {caller.role.name.lower()}")
        if op not in OPS:
            raise bad_request(f"no topic change {op[:20]!r}")
        if not NAME.fullmatch(name):  # judged here too: the catalog's refusal would quote all of it
            raise ApiError(Code.INVALID_TOPIC, f"a topic's name is 1 to 127 of A-Z a-z 0-9 . _ -, not "
                                               f"{name[:140]!r}")
        if op == "change" and not fields:
            raise ApiError(Code.INVALID_TOPIC, "a change sets at least one of the topic's fields")
        service = self.service
        if service.node.role is RaftRole.LEADER:
            return await self.change_here(op, name, fields, caller.name)
        return await service.through_leader(lambda leader: service.peers.change_topic(leader, op, name, fields,
                                                                                       caller.name))

    async def changed(self, op: str, name: str, fields: Mapping[str, Any], *, caller: Caller) -> Topic:
        """A topic created or changed (`change`'s), as it is once committed."""
        topic = await self.change(op, name, fields, caller=caller)
        if topic is None:  # a delete came right after, before the answer
            raise ApiError(Code.TOPIC_NOT_FOUND, f"topic {name[:140]!r} was deleted meanwhile",
                           self.service.node.leader_id)
        return topic

    async def change_here(self, op: str, name: str, fields: Mapping[str, Any], caller: str) -> Topic | None:
        """The change, made by this member, which leads (a forwarded change's caller was judged where
        its client called)."""
        node = self.service.node
        try:
            topic = await node.topic_appends.change_topic(op, name, fields)
        except Exception as exc:
            raise api_error(exc, node.leader_id) from None
        log.info("topic %s: %s by %s%s", name[:140], op, caller, f" ({topic.id}, {topic.perm}, {topic.queues} queues)"
                 if topic is not None else "")
        return topic

    async def get(self, name: str, linearizable: bool = True) -> Topic:
        topic = (await self.catalog(linearizable)).get(name) if NAME.fullmatch(name) else None
        if topic is None:
            raise ApiError(Code.TOPIC_NOT_FOUND, f"no topic {name[:140]!r}", self.service.node.leader_id)
        return topic

    async def list_all(self, linearizable: bool = True) -> list[Topic]:
        """Every topic, by name."""
        return sorted((await self.catalog(linearizable)).values(), key=lambda topic: topic.name)

    async def catalog(self, linearizable: bool) -> dict[str, Topic]:
        """The catalog as of this member's log, caught up first with the leader's confirmed commit index
        (`linearizable`): a topic whose change was answered is seen."""
        node = self.service.node
        if linearizable:
            await self.service.readable_end(node.committed_index + 1, sys.maxsize, linearizable=True)
        return node.topics.current

    # -- messages ------------------------------------------------------------------------

    def check(self, bodies: Sequence[bytes], metas: Sequence[Meta], producer: Sequenced | None = None) -> None:
        """A batch this member's limits take: its count, bodies and producer's numbers
        (LogService.check_bodies), each message's keys, tags and properties, and each entry's size
        with them."""
        self.service.check_bodies(bodies, producer)
        assert len(bodies) == len(metas)
        limit = self.service.limits.max_entry_bytes
        for i, (body, meta) in enumerate(zip(bodies, metas, strict=True)):
            if (problem := meta_problem(meta)) is not None:
                raise bad_request(f"message {i}: {problem}")
            size = MESSAGE_HEADER_SIZE + len(meta.encode()) + len(body)
            if size > limit:
                raise too_large(f"message {i} makes an entry of {size} bytes with its keys, tags and properties; "
                                f"max_entry_bytes is {limit}")

    async def append(self, topic: str, bodies: Sequence[bytes], metas: Sequence[Meta], *, queue: int | None = None,
                     split: bool = False, caller: str, producer: Sequenced | None = None) -> list[MessageResult]:
        """The messages in topic `topic`, each answered in the order sent: in `queue`, else by their
        keys, else by the leader's turn; `split`: a batch whose keys fall in several queues, split per
        queue (an error here only when every part failed). `producer`: a producer's batch, whose
        sequence is its queue's (it goes to one queue: never split)."""
        self.check(bodies, metas, producer)
        if not NAME.fullmatch(topic):  # no such topic: nothing goes to the leader
            raise ApiError(Code.TOPIC_NOT_FOUND, f"no topic {topic[:140]!r}", self.service.node.leader_id)
        if queue is not None and queue < 0:
            raise bad_request(f"a queue is 0 or more, not {queue}")
        if split and producer is not None:
            raise bad_request("a producer's batch goes to one queue, its sequence that queue's: split it per queue "
                              "before it is numbered")
        parts = await self._parts(topic, metas) if split and queue is None else None
        if parts is None:
            batch = MessageBatch(topic, bodies, metas, queue)
            return list((await self.append_batch(batch, caller, producer)).messages())
        batches = [MessageBatch(topic, [bodies[i] for i in part], [metas[i] for i in part]) for part in parts]
        results = await asyncio.gather(*(self.append_batch(batch, caller) for batch in batches),
                                       return_exceptions=True)
        answers: list[MessageResult | None] = [None] * len(bodies)
        errors = []
        for part, result in zip(parts, results, strict=True):
            if isinstance(result, BaseException):
                if not isinstance(result, Exception):  # cancelled: the caller left
                    raise result
                errors.append(error := api_error(result, self.service.node.leader_id))
                for i in part:
                    answers[i] = error
            else:
                for i, placed in zip(part, result.messages(), strict=True):
                    answers[i] = placed
        if len(errors) == len(parts):
            raise errors[0]
        return [answer for answer in answers if answer is not None]

    async def _parts(self, name: str, metas: Sequence[Meta]) -> list[list[int]] | None:
        """The indices of each queue's messages, by their first keys' queues, and then of those without
        keys; None when the batch needs no split (its keys fall in one queue, or it has none)."""
        if not any(meta.keys for meta in metas):
            return None
        queues = (await self.local_topic(name)).queues
        by_queue: dict[int, list[int]] = {}
        keyless = []
        for i, meta in enumerate(metas):
            if meta.keys:
                by_queue.setdefault(key_queue(meta.keys[0], queues), []).append(i)
            else:
                keyless.append(i)
        if len(by_queue) == 1:
            return None
        return [*by_queue.values(), *([keyless] if keyless else [])]

    async def local_topic(self, name: str) -> Topic:
        """Topic `name` as this member's catalog holds it; caught up with the leader first if it holds
        none (a topic created a moment ago through another member)."""
        topic = self.service.node.topics.current.get(name)
        return topic if topic is not None else await self.get(name, linearizable=True)

    async def append_batch(self, batch: MessageBatch, caller: str, producer: Sequenced | None = None
                           ) -> MessagesAnswer:
        """One batch, appended by the leader (here, or through the peer connection) once committed."""
        service = self.service
        if service.node.role is RaftRole.LEADER:
            return await self._append_here(batch, caller, producer)
        return await service.through_leader(lambda leader: service.peers.append_messages(leader, batch, caller,
                                                                                          producer))

    async def append_forwarded(self, batch: MessageBatch, caller: str, producer: Sequenced | None = None
                               ) -> MessagesAnswer:
        """A batch another member's client sent: checked against this member's limits too (each member
        has its own settings), and appended here if this member leads."""
        self.check(batch.bodies, batch.metas, producer)
        return await self._append_here(batch, caller, producer)

    async def _append_here(self, batch: MessageBatch, caller: str, producer: Sequenced | None) -> MessagesAnswer:
        node = self.service.node
        try:
            placed = await node.topic_appends.append_messages(batch, caller, producer)
        except Exception as exc:
            raise api_error(exc, node.leader_id) from None
        entries = placed.entries
        return MessagesAnswer(placed.topic.name, placed.topic.id, placed.queue, placed.first_offset,
                              entries.first_index, entries.term, entries.positions, node.config.self_id,
                              entries.duplicate)


def meta_problem(meta: Meta) -> str | None:
    """What is wrong with a message's keys, tags and properties, or None."""
    for what, values, limit in (("keys", meta.keys, KEYS_MAX), ("tags", meta.tags, TAGS_MAX),
                                ("properties", meta.properties, PROPERTIES_MAX)):
        if len(values) > limit:
            return f"{len(values)} {what}; a message has at most {limit}"
    names = [*meta.keys, *meta.tags, *(name for name, _ in meta.properties)]
    try:
        if any(not name or len(name.encode()) > NAME_BYTES_MAX for name in names):
            return f"a key, a tag or a property's name is 1 to {NAME_BYTES_MAX} bytes of UTF-8"
        if any(len(value.encode()) > VALUE_BYTES_MAX for _, value in meta.properties):
            return f"a property's value is at most {VALUE_BYTES_MAX} bytes of UTF-8"
    except UnicodeEncodeError:  # a lone surrogate, which JSON's escapes can carry
        return "a key, a tag or a property is not valid Unicode"
    return None
