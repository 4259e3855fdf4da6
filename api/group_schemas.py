"""Pydantic models of the consumer groups' routes (api.group_routes): what openapi.yaml documents. Each
answer's model maps the service's typed answer (api.answers.GroupCommitted, GroupAnswer) for REST,
once (`of`)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from raftlog.api.answers import GroupAnswer, GroupCommitted, QueueLag
from raftlog.api.groups import OFFSET_MAX
from raftlog.raft.group_offsets import QUEUES_PER_COMMIT_MAX
from raftlog.storage.message import QUEUE_MAX

OFFSET_TEXT = ("The next offset the group reads in the queue (0: nothing read yet), at most the queue's end; -1 "
               "removes the group's offset there")
EXPECTED_TEXT = ("A compare-and-set: the offset the group must hold in the queue now (-1: none yet), else 409 "
                 "CONSUMER_CONFLICT and none of the commit's queues move. Without any, commits of the group that "
                 "reach a member together are combined into one entry, per queue the latest winning")


class QueueCommitIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    queue: int = Field(ge=0, lt=QUEUE_MAX)
    offset: int = Field(ge=-1, le=OFFSET_MAX, description=OFFSET_TEXT)
    expected: int | None = Field(None, ge=-1, le=OFFSET_MAX, description=EXPECTED_TEXT)


class GroupCommitIn(BaseModel):
    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [
        {"topic": "orders", "queues": [{"queue": 0, "offset": 12}, {"queue": 1, "offset": 7}]},
        {"topic": "orders", "queues": [{"queue": 0, "offset": 12, "expected": 10}, {"queue": 1, "offset": 0,
                                                                                     "expected": -1}]}]})

    topic: str = Field(description="The topic whose queues these are")
    queues: list[QueueCommitIn] = Field(min_length=1, max_length=QUEUES_PER_COMMIT_MAX, description=(
        "Each queue once; all go into one entry, all or nothing"))


class QueueOffsetOut(BaseModel):
    queue: int
    offset: int = Field(description="What the entry holds for the group there (-1: removed)")


class GroupCommittedOut(BaseModel):
    model_config = ConfigDict(json_schema_extra={"examples": [
        {"group": "billing", "index": 90, "topic": "orders", "topic_id": 57, "queues": [{"queue": 0, "offset": 12}]}]})

    group: str
    index: int = Field(description="The QUEUE_COMMIT entry that holds the commit (commits combined with it share it)")
    topic: str
    topic_id: int
    queues: list[QueueOffsetOut] = Field(description="The commit's queues, as the entry holds them: a plain commit "
                                         "combined with a later one of the same queue holds the later offset")

    @classmethod
    def of(cls, committed: GroupCommitted, topic: str) -> GroupCommittedOut:
        return cls(group=committed.group, index=committed.index, topic=topic,
                   topic_id=committed.offsets[0][0] if committed.offsets else 0,
                   queues=[QueueOffsetOut(queue=queue, offset=offset) for _, queue, offset in committed.offsets])


class QueueLagOut(BaseModel):
    queue: int
    offset: int = Field(description="The next offset the group reads there")
    end: int = Field(description="The queue's next offset as of the answering member's commit index")
    lag: int = Field(description="end - offset: messages the group has not read there")


class GroupTopicOut(BaseModel):
    topic: str
    topic_id: int
    lag: int = Field(description="Its queues' lag together")
    queues: list[QueueLagOut] = Field(description="The queues the group holds an offset in, by number")

    @classmethod
    def of(cls, queues: list[QueueLag]) -> GroupTopicOut:
        return cls(topic=queues[0].topic, topic_id=queues[0].topic_id, lag=sum(q.lag for q in queues),
                   queues=[QueueLagOut(queue=q.queue, offset=q.offset, end=q.end, lag=q.lag) for q in queues])


class GroupSummary(BaseModel):
    model_config = ConfigDict(json_schema_extra={"examples": [
        {"name": "billing", "owner": "billing", "index": 90, "queue_count": 8, "lag": 3}]})

    name: str
    owner: str = Field(description="The caller that created it")
    index: int = Field(description="Its last commit's QUEUE_COMMIT entry")
    queue_count: int = Field(description="The queues of live topics it holds an offset in")
    lag: int = Field(description="Its lag in all of them together, on the answering member")

    @classmethod
    def of(cls, group: GroupAnswer) -> GroupSummary:
        return cls(name=group.name, owner=group.owner, index=group.index, queue_count=len(group.queues),
                   lag=group.lag)


class GroupOut(GroupSummary):
    model_config = ConfigDict(json_schema_extra={"examples": [
        {"name": "billing", "owner": "billing", "index": 90, "queue_count": 2, "lag": 3, "topics": [
            {"topic": "orders", "topic_id": 57, "lag": 3, "queues": [
                {"queue": 0, "offset": 12, "end": 15, "lag": 3}, {"queue": 1, "offset": 7, "end": 7, "lag": 0}]}]}]})

    topics: list[GroupTopicOut] = Field(description="By topic id (a deleted topic's offsets are left out)")

    @classmethod
    def of(cls, group: GroupAnswer) -> GroupOut:
        return cls(**GroupSummary.of(group).model_dump(),
                   topics=[GroupTopicOut.of(queues) for queues in group.by_topic()])


class GroupList(BaseModel):
    groups: list[GroupSummary] = Field(description="By name; expired ones (consumer_idle_entries) left out")
