"""Topic changes, messages and consumer groups' commits, appended by the leader (RocketMQ's asyncPutMessage).

A topic change is a TOPIC entry the catalog decides against the log's tail, under the append lock.
A batch of messages goes to one queue of one topic, all or nothing: the queue the caller named,
else the one its messages' keys hash to (refused if they hash to several), else the next of the
topic's queues in turn. Under the append lock the leader takes the queue's next offset from its own
log's tail (raft.queues) and writes the batch as MESSAGE entries whose offsets count up from it
(RocketMQ's topicQueueTable and queueOffset, taken under putMessageLock).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from raftlog.raft.client_appends import Appended, ClientAppends
from raftlog.raft.cluster_version import TOPICS, ClusterVersion
from raftlog.raft.config import RaftConfig
from raftlog.raft.errors import TopicError
from raftlog.raft.group_offsets import GroupAsk, GroupCommit, GroupOffsets
from raftlog.raft.member_state import MemberState
from raftlog.raft.messages import Code
from raftlog.raft.producers import Sequenced
from raftlog.raft.queues import QueueOffsets
from raftlog.raft.topics import Topic, TopicCatalog, TopicChange
from raftlog.storage.codec import Magic
from raftlog.storage.message import Meta, encode_message, key_queue, queued_of


@dataclass(frozen=True, slots=True)
class MessageBatch:
    """Messages for one queue of a topic; `queue` None: by the messages' keys, else the member's turn."""

    topic: str
    bodies: Sequence[bytes]
    metas: Sequence[Meta]  # one per body
    queue: int | None = None


@dataclass(frozen=True, slots=True)
class MessagesAppended:
    """Where a batch went: its topic and queue, the first message's queue offset, and its entries."""

    topic: Topic
    queue: int
    first_offset: int
    entries: Appended


@dataclass(slots=True)
class _Turns:
    """The next queue of each topic, for messages with no queue and no key."""

    next: dict[int, int] = field(default_factory=dict)

    def take(self, topic: Topic) -> int:
        queue = self.next.get(topic.id, 0) % topic.queues
        self.next[topic.id] = queue + 1
        return queue


def queue_of(topic: Topic, batch: MessageBatch, turns: Callable[[Topic], int]) -> int:
    """The queue a batch goes to: named, or its keys' (all one), or the topic's next in turn."""
    if batch.queue is not None:
        if not 0 <= batch.queue < topic.queues:
            raise TopicError(Code.TOPIC_NOT_FOUND, f"topic {topic.name!r} has queues 0 to {topic.queues - 1}, "
                                                   f"not {batch.queue}")
        return batch.queue
    queues = {key_queue(meta.keys[0], topic.queues) for meta in batch.metas if meta.keys}
    if len(queues) > 1:
        raise TopicError(Code.KEYS_IN_SEVERAL_QUEUES,
                         f"the batch's keys fall in queues {sorted(queues)} of topic {topic.name!r}: a batch goes to "
                         "one queue (split it per queue, or ask the member to: split=true)")
    return queues.pop() if queues else turns(topic)


class _Duplicate(Exception):
    """A producer's retry of messages in the log already: answered with the originals, once committed."""

    def __init__(self, original: MessagesAppended) -> None:
        super().__init__("a duplicate")
        self.original = original


class TopicAppends:
    def __init__(self, config: RaftConfig, state: MemberState, appends: ClientAppends, catalog: TopicCatalog,
                 offsets: QueueOffsets, groups: GroupOffsets, version: ClusterVersion,
                 member_ids: Callable[[], Sequence[str]],
                 clock_ms: Callable[[], int] = lambda: int(time.time() * 1000)) -> None:
        self.config = config
        self.state = state
        self.appends = appends
        self.catalog = catalog
        self.offsets = offsets
        self.groups = groups
        self.version = version
        self._member_ids = member_ids
        self._clock_ms = clock_ms
        self._turns = _Turns()

    async def _topics_allowed(self) -> None:
        """Topics need their cluster version: a group just started waits for its leader to raise it."""
        if self.version.level < TOPICS:
            await self.version.wait_for(TOPICS, self.config.max_wait_ack_ms / 1000)

    async def change_topic(self, op: str, name: str, fields: Mapping[str, Any]) -> Topic | None:
        """Create, change or delete topic `name`: a TOPIC entry, once committed; the topic as it is then
        (None once deleted)."""
        await self._topics_allowed()
        decided: list[TopicChange] = []

        def decide() -> list[bytes]:
            self.version.require(TOPICS, self._member_ids())
            change = self.catalog.decide(op, name, fields, now_ms=self._clock_ms(), leader_id=self.state.leader_id)
            decided.append(change)
            return [change.encode()]

        appended = await self.appends.append_committed([b""], self.state.current_term, Magic.TOPIC, decide=decide)
        return None if op == "delete" else self.catalog.by_id.get(appended.first_index) if op == "create" \
            else self.catalog.current.get(name)

    async def append_messages(self, batch: MessageBatch, caller: str = "", producer: Sequenced | None = None
                              ) -> MessagesAppended:
        """The batch's messages in their queue, once committed. A producer's batch (`producer`: its
        session and the batch's first sequence in the queue) that is in the log already is answered with
        its original messages (exactly once per queue, as Kafka's per partition)."""
        if not batch.bodies or len(batch.bodies) != len(batch.metas):
            raise ValueError("a batch of messages holds one or more bodies, each with its keys, tags and properties")
        await self._topics_allowed()
        placed: list[tuple[Topic, int, int]] = []

        def decide() -> list[bytes]:
            self.version.require(TOPICS, self._member_ids())
            topic = self.catalog.get(batch.topic, self.state.leader_id)
            if not topic.writable:
                raise TopicError(Code.TOPIC_NOT_WRITABLE, f"topic {topic.name!r} takes no messages ({topic.perm})",
                                 self.state.leader_id)
            for body in batch.bodies:
                if len(body) > topic.max_message_bytes:
                    raise TopicError(Code.MESSAGE_TOO_LARGE, f"a message of {len(body)} bytes; topic {topic.name!r} "
                                     f"takes at most {topic.max_message_bytes}", self.state.leader_id)
            queue = queue_of(topic, batch, self._turns.take)
            if producer is not None and (original := self.appends.original_of(
                    producer, len(batch.bodies), caller, (topic.id, queue))) is not None:
                raise _Duplicate(MessagesAppended(topic, queue, self._offset_at(original.first_index), original))
            first = self.offsets.next_offset(topic.id, queue)
            placed.append((topic, queue, first))
            return [encode_message(topic.id, queue, first + i, meta.encode(), meta.tags_code, body,
                                   None if producer is None else producer._replace(
                                       sequence=producer.sequence + i))
                    for i, (body, meta) in enumerate(zip(batch.bodies, batch.metas, strict=True))]

        try:
            appended = await self.appends.append_committed(batch.bodies, self.state.current_term, Magic.MESSAGE,
                                                           caller=caller, decide=decide)
        except _Duplicate as duplicate:
            await self.appends.original_committed(duplicate.original.entries)
            return duplicate.original
        topic, queue, first = placed[0]
        return MessagesAppended(topic, queue, first, appended)

    def _offset_at(self, index: int) -> int:
        return queued_of(self.appends.store.get(index).body)[2]

    async def commit_group(self, ask: GroupAsk) -> tuple[Appended, GroupCommit]:
        """A consumer group's offsets in many queues, one QUEUE_COMMIT entry, once committed. Each queue
        must be one of a topic in the catalog as of the log's tail: a client names its topic by the id
        its member's catalog held, and the topic may have been deleted since."""
        await self._topics_allowed()
        decided: list[GroupCommit] = []

        def decide() -> list[bytes]:
            self.version.require(TOPICS, self._member_ids())
            for queue in ask.queues:
                topic = self.catalog.by_id.get(queue.topic_id)
                if topic is None or not 0 <= queue.queue < topic.queues:
                    raise TopicError(Code.TOPIC_NOT_FOUND, f"no topic of id {queue.topic_id} (deleted?)"
                                     if topic is None else f"topic {topic.name!r} has queues 0 to "
                                     f"{topic.queues - 1}, not {queue.queue}", self.state.leader_id)
            commit = self.groups.decide(ask)
            decided.append(commit)
            return [commit.encode()]

        appended = await self.appends.append_committed([b""], self.state.current_term, Magic.QUEUE_COMMIT,
                                                       decide=decide)
        return appended, decided[0]
