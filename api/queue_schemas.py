"""Pydantic models of the topic queues' read routes (api.queue_routes): what openapi.yaml documents.
A message reads as an entry of the log does (api.schemas.EntryOut), with its topic fields."""

from __future__ import annotations

import dataclasses

from pydantic import BaseModel, ConfigDict, Field

from raftlog.api.queue_reads import QueueState, TopicQueues
from raftlog.api.schemas import EntryOut


class MessagePage(BaseModel):
    model_config = ConfigDict(json_schema_extra={"examples": [{"messages": [
        {"index": 90, "term": 3, "pos": 14230, "type": "message", "body": "order 7", "encoding": "utf-8",
         "body_crc": 2211246003, "topic_id": 57, "topic": "orders", "queue": 3, "queue_offset": 12,
         "keys": ["customer-42"], "tags": ["created"], "properties": {}}], "next_offset": 13,
        "committed_index": 91}]})

    messages: list[EntryOut] = Field(description="In queue order; with a tag filter, only the messages that pass it")
    next_offset: int = Field(description="The queue offset to ask for next: past the messages a tag filter skipped")
    committed_index: int = Field(description="The commit index this answer was read under")


class QueueOut(BaseModel):
    queue: int
    min_offset: int = Field(description="Its first offset kept: retention moves it")
    next_offset: int = Field(description="One past its last committed message (0: it has none yet)")
    group_offset: int | None = Field(None, description="With group: the next offset the group reads here (null: it "
                                     "committed none, and reads from min_offset)")
    lag: int | None = Field(None, description="With group: next_offset minus the group's offset (or min_offset)")

    @classmethod
    def of(cls, state: QueueState) -> QueueOut:
        return cls(**dataclasses.asdict(state))


class QueueList(BaseModel):
    model_config = ConfigDict(json_schema_extra={"examples": [{"topic": "orders", "topic_id": 57, "queues": [
        {"queue": 0, "min_offset": 0, "next_offset": 12, "group_offset": 10, "lag": 2}]}]})

    topic: str
    topic_id: int
    queues: list[QueueOut] = Field(description="Every queue of the topic, by number")

    @classmethod
    def of(cls, listed: TopicQueues) -> QueueList:
        return cls(topic=listed.topic, topic_id=listed.topic_id, queues=[QueueOut.of(q) for q in listed.queues])
