"""Pydantic models of the topic routes (api.topic_routes): what openapi.yaml documents. Each answer's
model maps the service's typed answer (raft.topics.Topic, api.answers.MessageAnswer) for REST, once
(`of`). A message's body travels as an entry's does (api.schemas.NewEntry: text, or base64)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from raftlog.api.answers import MessageAnswer
from raftlog.api.schemas import ErrorDetail, NewEntry
from raftlog.api.topics import KEYS_MAX, PROPERTIES_MAX, TAGS_MAX, MessageResult
from raftlog.raft.topics import DESCRIPTION_MAX, MESSAGE_BYTES_DEFAULT, MESSAGE_BYTES_LIMIT, NAME, Topic
from raftlog.storage.message import QUEUE_MAX

TOPIC_NAME = f"^{NAME.pattern}$"  # raft.topics' rule, as a JSON schema pattern
TOPIC_NAME_TEXT = "1 to 127 letters, digits, '.', '_' or '-'"
QUEUES_TEXT = f"How many queues it has, 1 to {QUEUE_MAX}: it may grow, never shrink"
SIZE_TEXT = (f"Its largest message body in bytes (default {MESSAGE_BYTES_DEFAULT}); a member's max_entry_bytes "
             "bounds every entry too")
PERM_TEXT = "readable: its messages may be read; writable: it takes messages (false drains it: TOPIC_NOT_WRITABLE)"


class NewTopic(BaseModel):
    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [
        {"name": "orders", "queues": 8, "description": "orders by customer"}]})

    name: str = Field(max_length=127, pattern=TOPIC_NAME, description=TOPIC_NAME_TEXT)
    queues: int = Field(ge=1, le=QUEUE_MAX, description=QUEUES_TEXT)
    max_message_bytes: int | None = Field(None, ge=1, le=MESSAGE_BYTES_LIMIT, description=SIZE_TEXT)
    readable: bool = Field(True, description=PERM_TEXT)
    writable: bool = True
    description: str = Field("", max_length=DESCRIPTION_MAX)

    def fields(self) -> dict[str, Any]:
        """What the create sets (raft.topics.CHANGEABLE's names)."""
        return self.model_dump(exclude={"name"}, exclude_none=True)


class TopicPatch(BaseModel):
    """The fields a change sets; the others stay as they are."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [
        {"queues": 16}, {"writable": False}]})

    queues: int | None = Field(None, ge=1, le=QUEUE_MAX, description=QUEUES_TEXT)
    max_message_bytes: int | None = Field(None, ge=1, le=MESSAGE_BYTES_LIMIT, description=SIZE_TEXT)
    readable: bool | None = Field(None, description=PERM_TEXT)
    writable: bool | None = None
    description: str | None = Field(None, max_length=DESCRIPTION_MAX)

    def fields(self) -> dict[str, Any]:
        return self.model_dump(exclude_none=True)


class TopicOut(BaseModel):
    model_config = ConfigDict(json_schema_extra={"examples": [
        {"name": "orders", "id": 57, "queues": 8, "max_message_bytes": MESSAGE_BYTES_DEFAULT, "readable": True,
         "writable": True, "perm": "rw", "description": "orders by customer", "created_ms": 1767225600000}]})

    name: str
    id: int = Field(description="The index of the entry that created it, which its messages carry: a topic "
                    "deleted and created again has another id")
    queues: int
    max_message_bytes: int
    readable: bool
    writable: bool
    perm: str = Field(description="RocketMQ's permission string: rw, r-, -w or --")
    description: str
    created_ms: int = Field(description="When it was created, by the leader's clock (ms since the Unix epoch)")

    @classmethod
    def of(cls, topic: Topic) -> TopicOut:
        return cls(**topic.json())


class TopicList(BaseModel):
    topics: list[TopicOut] = Field(description="By name")


class NewMessage(NewEntry):
    """A message: its body as an entry's is (text, or base64 as `encoding` says), with what it carries."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [
        {"body": "order 7", "keys": ["customer-42"], "tags": ["created"], "properties": {"region": "eu"}}]})

    keys: list[str] = Field([], max_length=KEYS_MAX, description="Its keys: the first one's queue is the batch's, "
                            "crc32(key) % queues (zlib's CRC-32 of its UTF-8)")
    tags: list[str] = Field([], max_length=TAGS_MAX, description="Its tags, which reads may filter on")
    properties: dict[str, str] = Field({}, max_length=PROPERTIES_MAX, description="Its headers")


class NewMessages(BaseModel):
    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [
        {"messages": [{"body": "order 7", "keys": ["customer-42"]}, {"body": "order 8", "keys": ["customer-42"]}]},
        {"messages": [{"body": "a", "keys": ["k1"]}, {"body": "b", "keys": ["k2"]}], "split": True}]})

    messages: list[NewMessage]
    queue: int | None = Field(None, ge=0, lt=QUEUE_MAX, description="The queue they all go to; without it, their "
                              "keys' queue, or the member's turn for messages without keys")
    split: bool = Field(False, description="A batch whose keys fall in several queues is split, one batch per queue, "
                        "each all or nothing (without: 400 KEYS_IN_SEVERAL_QUEUES)")


class MessageAppended(BaseModel):
    topic: str
    topic_id: int
    queue: int
    queue_offset: int = Field(description="Its offset in its queue, from 0")
    index: int
    pos: int = Field(description="Its entry's byte offset in the log, the same on every member")
    duplicate: bool = Field(False, description="A producer's retry (X-Raftlog-Producer-Id): the message was "
                            "appended before, and this is where; nothing was appended now")


class MessageRefused(BaseModel):
    error: ErrorDetail = Field(description="Its part's error (a split batch's part is all or nothing)")


class MessagesAppended(BaseModel):
    model_config = ConfigDict(json_schema_extra={"examples": [{"messages": [
        {"topic": "orders", "topic_id": 57, "queue": 3, "queue_offset": 12, "index": 90, "pos": 14230,
         "duplicate": False}]}]})

    messages: list[MessageAppended | MessageRefused] = Field(description="One per message, in the order sent")


def messages_json(results: list[MessageResult]) -> dict[str, Any]:
    """MessagesAppended's JSON, built as plain values: a batch has thousands of messages, and a model each
    cost the event loop more than their append (this is the schema's shape, which openapi.yaml shows)."""
    return {"messages": [
        {"topic": r.topic, "topic_id": r.topic_id, "queue": r.queue, "queue_offset": r.queue_offset, "index": r.index,
         "pos": r.pos, "duplicate": r.duplicate} if isinstance(r, MessageAnswer) else r.body() for r in results]}
