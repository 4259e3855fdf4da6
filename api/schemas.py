"""Pydantic models of the public API: what openapi.yaml documents and SDKs generate from. Each
answer's model maps LogService's typed answer (api.answers) for REST, once (`of`)."""

from __future__ import annotations

import dataclasses
import re
from typing import Literal

from fastapi import Query
from pydantic import BaseModel, ConfigDict, Field, field_validator

from raftlog.api.answers import (
    AppendAnswer,
    ConsumerAnswer,
    MembershipAnswer,
    ProducerAnswer,
    StatusAnswer,
    TransferAnswer,
)
from raftlog.raft.config import Peer
from raftlog.raft.consumers import METADATA_BYTES_MAX
from raftlog.raft.producers import PRODUCER_ID_MAX

Encoding = Literal["utf-8", "base64"]
Consistency = Literal["linearizable", "local"]
CONSISTENCY = Query("linearizable", examples=["linearizable"], description=(
    "linearizable: what the leader has committed when the request arrives is seen (a read index round "
    "when this member has not reached the index); local: what this member has committed"))


class NewEntry(BaseModel):
    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [{"body": "hello", "encoding": "utf-8"}]})

    body: str = Field(description="The entry's body, as text or base64 as `encoding` says")
    encoding: Encoding = "utf-8"


class NewBatch(BaseModel):
    model_config = ConfigDict(extra="forbid", json_schema_extra={
        "examples": [{"entries": [{"body": "a"}, {"body": "Yg==", "encoding": "base64"}]}]})

    entries: list[NewEntry]


DUPLICATE = ("A producer's retry (X-Raftlog-Producer-Id): the entries were appended before, and these are "
             "their index, term and positions; nothing was appended now")


class Appended(BaseModel):
    model_config = ConfigDict(json_schema_extra={"examples": [
        {"index": 42, "term": 3, "pos": 6216, "leader": "n1", "duplicate": False}]})

    index: int
    term: int
    pos: int = Field(description="The entry's global byte offset in the log, the same on every member")
    leader: str
    duplicate: bool = Field(description=DUPLICATE)

    @classmethod
    def of(cls, answer: AppendAnswer) -> Appended:
        return cls(index=answer.first_index, term=answer.term, pos=answer.positions[0], leader=answer.leader,
                   duplicate=answer.duplicate)


class BatchAppended(BaseModel):
    model_config = ConfigDict(json_schema_extra={"examples": [
        {"first_index": 43, "last_index": 44, "term": 3, "positions": [6364, 6413], "leader": "n1",
         "duplicate": False}]})

    first_index: int
    last_index: int
    term: int
    positions: list[int]
    leader: str
    duplicate: bool = Field(description=DUPLICATE)

    @classmethod
    def of(cls, answer: AppendAnswer) -> BatchAppended:
        return cls(first_index=answer.first_index, last_index=answer.last_index, term=answer.term,
                   positions=list(answer.positions), leader=answer.leader, duplicate=answer.duplicate)


class NewProducer(BaseModel):
    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [{}, {"id": 6917529027641081856}]})

    id: int | None = Field(None, ge=0, le=PRODUCER_ID_MAX, description="A producer restarting under its own id: the "
                           "answer is the next epoch, which fences the one before once it appends. Without "
                           "it, a new random id")


class ProducerSession(BaseModel):
    model_config = ConfigDict(json_schema_extra={"examples": [{"id": 6917529027641081856, "epoch": 0}]})

    id: int
    epoch: int

    @classmethod
    def of(cls, answer: ProducerAnswer) -> ProducerSession:
        return cls(id=answer.id, epoch=answer.epoch)


class ProducerOut(BaseModel):
    id: int
    epoch: int
    sequence: int


class ConsumerCommitIn(BaseModel):
    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [
        {"position": 41}, {"position": 41, "metadata": "batch 7", "expected": 40}]})

    position: int = Field(ge=0, description="The index of the last entry the consumer has processed: it resumes "
                          "at the next one")
    metadata: str = Field("", max_length=METADATA_BYTES_MAX, description=f"Free text kept with the position "
                          f"(at most {METADATA_BYTES_MAX} bytes)")
    expected: int | None = Field(None, ge=-1, description="A compare-and-set: the position the consumer must be at "
                                 "now (-1: it must not exist yet), else 409 CONSUMER_CONFLICT. Without it, commits "
                                 "that reach a member together are combined into one entry, the latest winning")
    retention_floor: bool | None = Field(None, description="Admin only: set (true) or clear (false) the consumer's "
                                         "retention-floor flag, so that retention keeps what it has not processed; "
                                         "absent: as it is (needs cluster version 1 to set)")


class ConsumerOut(BaseModel):
    model_config = ConfigDict(json_schema_extra={"examples": [
        {"name": "billing", "position": 41, "metadata": "", "index": 57, "lag": 3, "lag_bytes": 480,
         "owner": "billing", "retention_floor": False}]})

    name: str
    position: int = Field(description="The index of the last entry processed; -1 once removed")
    metadata: str
    index: int = Field(description="The CONSUMER entry that committed it")
    lag: int = Field(description="Committed entries after the position, on the answering member")
    lag_bytes: int | None = Field(description="Their bytes (null: some were cleaned away)")
    owner: str | None = Field(None, description="The caller that created it, whose consumers_per_name_max it counts "
                              "against (null: none recorded, created below cluster version 1)")
    retention_floor: bool = Field(False, description="Retention keeps what it has not processed (an admin sets it)")

    @classmethod
    def of(cls, answer: ConsumerAnswer) -> ConsumerOut:
        return cls(**dataclasses.asdict(answer))


class ConsumerList(BaseModel):
    consumers: list[ConsumerOut] = Field(description="By name; expired ones (consumer_idle_entries) left out")


class EntryOut(BaseModel):
    model_config = ConfigDict(json_schema_extra={"examples": [
        {"index": 42, "term": 3, "pos": 6216, "type": "normal", "body": "hello", "encoding": "utf-8",
         "body_crc": 907060870},
        {"index": 43, "term": 3, "pos": 6264, "type": "message", "body": "hello", "encoding": "utf-8",
         "body_crc": 907060870, "topic_id": 12, "queue": 3, "queue_offset": 0, "keys": ["customer-42"],
         "tags": ["order"], "properties": {"region": "eu"}}]})

    index: int
    term: int
    pos: int
    type: Literal["normal", "message", "noop", "config_change", "consumer", "producer_session", "cluster_version",
                  "topic", "queue_commit"] = Field(
        description="message: a message of a topic's queue, with its topic fields; consumer (a named consumer's "
                    "commit), producer_session (a session opened or closed), cluster_version (the group's level "
                    "raised), topic (a change to the topic catalog) and queue_commit (a consumer group's offsets): "
                    "bookkeeping entries that reads show only with control=true")
    body: str = Field(description="As its client sent it (a message's own body, after its header)")
    encoding: Encoding = Field(description="utf-8 when the body is valid UTF-8, else base64")
    body_crc: int = Field(description="CRC-32 of the body")
    producer: ProducerOut | None = Field(None, description="The producer session that appended it, if one did")
    topic_id: int | None = Field(None, description="A message's topic: the index of the entry that created it")
    topic: str | None = Field(None, description="A message's topic's name, where the member knows it")
    queue: int | None = Field(None, description="A message's queue in its topic")
    queue_offset: int | None = Field(None, description="A message's offset in its queue, from 0")
    keys: list[str] | None = Field(None, description="A message's keys")
    tags: list[str] | None = Field(None, description="A message's tags")
    properties: dict[str, str] | None = Field(None, description="A message's properties")


class EntryPage(BaseModel):
    entries: list[EntryOut]
    next: int = Field(description="The index to ask for next")
    committed_index: int = Field(description="The commit index this answer was read under")


class Member(BaseModel):
    id: str
    peer_url: str
    client_url: str | None = Field(description="null while the member does not answer")
    grpc_address: str | None = Field(description="host:port of its gRPC API (null while it does not answer)")
    voter: bool
    role: Literal["leader", "follower", "candidate"] | None
    term: int | None = Field(description="The member's term, as it says (null while it does not answer)")
    end_index: int | None
    committed_index: int | None
    applied_index: int | None
    match_index: int | None = Field(description="Last index the leader knows this member holds")
    lag: int | None = Field(description="Entries this member is behind the leader's log end")
    lag_bytes: int | None = Field(description="Log bytes this member is behind the leader's log end")
    inflight_bytes: int | None = Field(description="Log bytes the leader has pushed to it, unanswered")
    last_contact_ms: int | None = Field(description="Milliseconds since the leader last heard from it")
    rejoining: bool | None = Field(description="It lost committed entries (a damaged disk) and gets them back "
                                   "from the others; until then it neither votes nor stands")
    reachable: bool = Field(description="Whether it answered this status request")
    level: int | None = Field(description="The format and protocol level it reports (null: it did not answer, "
                              "or its release is from before levels, and counts as 0)")


class Disk(BaseModel):
    data_dir: str
    usage_ratio: float
    full: bool


class ClusterStatus(BaseModel):
    group: str
    self: str
    role: Literal["leader", "follower", "candidate"]
    term: int
    leader: str | None
    members: list[Member]
    configuration_index: int = Field(description="The entry of the configuration in force on this member "
                                     "(-1: the `peers` setting's)")
    begin_index: int
    end_index: int
    committed_index: int
    applied_index: int
    uptime_s: float
    flush_mode: Literal["sync", "async"]
    disk: Disk
    cluster_version: int = Field(description="The level every member knows, as this member's log says: "
                                 "formats and calls of higher levels are refused (docs/operations.md, Upgrades)")

    @classmethod
    def of(cls, answer: StatusAnswer) -> ClusterStatus:
        return cls.model_validate(answer.json())


class TransferTarget(BaseModel):
    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [{"target": "n2"}]})

    target: str


class Transferred(BaseModel):
    """The target accepted and is taking leadership (it leads once its vote round ends)."""

    leader: str
    previous: str

    @classmethod
    def of(cls, answer: TransferAnswer) -> Transferred:
        return cls(leader=answer.leader, previous=answer.previous)


# a host name, an IPv4 address or a bracketed IPv6 address; with a port
HOST = r"(?:[A-Za-z0-9](?:[A-Za-z0-9.-]{0,251}[A-Za-z0-9])?|\[[0-9A-Fa-f:.]{2,45}\])"
HOST_PORT = rf"^{HOST}:[0-9]{{1,5}}$"
PORT = re.compile(r"^(?:https?://)?(?:[^/\[\]]+|\[[^\]]*\]):([0-9]{1,5})(?:/|$)")  # the port after the host


class NewMember(BaseModel):
    """A member to add: a learner (it receives the log, and votes once promoted) unless `learner` is false."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [
        {"id": "n4", "peer_address": "127.0.0.1:9004", "client_url": "http://127.0.0.1:8004",
         "grpc_address": "127.0.0.1:7004", "learner": True}]})

    id: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.]*[A-Za-z0-9_][A-Za-z0-9_.]*$",
                    description="Letters, digits, _ and ., not dots alone (`..` is no path segment; a `-` would "
                                "not fit the peers setting)")
    peer_address: str = Field(max_length=255, pattern=HOST_PORT, description="host:port of its peer port")
    client_url: str | None = Field(default=None, max_length=255, pattern=rf"^https?://{HOST}(?::[0-9]{{1,5}})?(?:/\S*)?$")
    grpc_address: str | None = Field(default=None, max_length=255, pattern=HOST_PORT)
    learner: bool = True

    @field_validator("peer_address", "client_url", "grpc_address")
    @classmethod
    def _port_in_range(cls, value: str | None) -> str | None:
        port = PORT.search(value or "")
        if port is not None and not 0 < int(port.group(1)) < 65536:
            raise ValueError("the port must be 1 to 65535")
        return value

    def as_peer(self) -> Peer:
        return Peer(self.id, self.peer_address, self.learner, self.client_url, self.grpc_address)


class ConfiguredMember(BaseModel):
    id: str
    peer_address: str
    voter: bool
    client_url: str | None
    grpc_address: str | None


class GroupConfiguration(BaseModel):
    """The group's members as a CONFIG_CHANGE entry (at `index`; -1: from the `peers` setting) sets them."""

    index: int
    version: int = Field(description="The configuration format's version")
    members: list[ConfiguredMember]
    committed: bool = Field(description="Whether the answering member knows the configuration committed")

    @classmethod
    def of(cls, answer: MembershipAnswer) -> GroupConfiguration:
        return cls.model_validate(answer.json())


class ErrorDetail(BaseModel):
    code: str = Field(description="DLedger's response code name, e.g. NOT_LEADER")
    message: str
    leader: str | None = Field(description="The leader's id, when known")


class ErrorBody(BaseModel):
    model_config = ConfigDict(json_schema_extra={"examples": [
        {"error": {"code": "NOT_LEADER", "message": "no leader is known; retry later", "leader": None}}]})

    error: ErrorDetail


class Health(BaseModel):
    status: str
    role: str | None = None
    leader: str | None = None


class ChartPoint(BaseModel):
    at_ms: int = Field(description="When, in milliseconds since the Unix epoch")
    committed_per_s: float = Field(description="Entries this member saw committed per second since the point before")
    latency_ms: float | None = Field(description="Mean commit latency of the appends this member answered since "
                                     "the point before; null when it answered none")


class ChartHistory(BaseModel):
    interval_s: float
    points: list[ChartPoint]
