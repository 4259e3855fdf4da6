"""What LogService answers, typed: each travels to the edge as it is, and is mapped there once, for
REST (api.schemas, the models openapi.yaml documents), for public gRPC (api.grpc_api) and for the
peer protocol (api.peer_codec), so an answer forwarded through another member arrives the same."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import groupby
from typing import Any

from raftlog.raft.membership import Configuration
from raftlog.raft.topics import Topic


@dataclass(frozen=True, slots=True)
class AppendAnswer:
    """A committed append: its entries' indices, their term and positions, and the leader that took it."""

    first_index: int
    last_index: int
    term: int
    positions: Sequence[int]
    leader: str
    duplicate: bool = False  # a producer's retry: the entries were appended before, not now


@dataclass(frozen=True, slots=True)
class ProducerAnswer:
    """A producer session to append with (or just closed): its id and the epoch to use."""

    id: int
    epoch: int

    def json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, fields: dict[str, Any]) -> ProducerAnswer:
        """What `json` gave, back (a forwarded session change's answer); ValueError if it is not that."""
        try:
            return cls(int(fields["id"]), int(fields["epoch"]))
        except (KeyError, TypeError) as exc:
            raise ValueError(f"not a producer session: {exc}") from None


@dataclass(frozen=True, slots=True)
class ConsumerAnswer:
    """A named consumer's committed position (raft.consumers) as the answering member holds it."""

    name: str
    position: int  # the index of the last entry it processed: it resumes at position + 1
    metadata: str
    index: int  # the CONSUMER entry that committed it
    lag: int  # committed entries after the position, on the answering member
    lag_bytes: int | None  # their bytes (None: some were cleaned away)
    owner: str | None = None  # the caller that created it (None: none recorded, created below cluster version 1)
    retention_floor: bool = False  # retention keeps what it has not processed

    def json(self) -> dict[str, Any]:
        """Without `owner` when it has none and `retention_floor` when false: a member of the release
        before them reads a forwarded commit's answer back with only the fields it knows, and below
        cluster version 1, the only version such a member runs in, neither is ever set."""
        fields = dataclasses.asdict(self)
        if self.owner is None:
            del fields["owner"]
        if not self.retention_floor:
            del fields["retention_floor"]
        return fields

    @classmethod
    def from_json(cls, fields: dict[str, Any]) -> ConsumerAnswer:
        """What `json` gave, back (a forwarded commit's answer); ValueError if it is not that."""
        try:
            return cls(**fields)
        except TypeError as exc:
            raise ValueError(f"not a consumer: {exc}") from None


@dataclass(frozen=True, slots=True)
class MembershipAnswer:
    """A configuration, and whether the answering member knows it committed."""

    configuration: Configuration
    committed: bool

    def json(self) -> dict[str, Any]:
        """As the API shows it and `raftlog serve --join` reads it back (Configuration.decode_with_index)."""
        return {**json.loads(self.configuration.encode_with_index()), "committed": self.committed}

    @classmethod
    def from_json(cls, fields: dict[str, Any]) -> MembershipAnswer:
        """What `json` gave, back (a forwarded change's answer); ValueError if it is not that."""
        encoded = json.dumps({name: value for name, value in fields.items() if name != "committed"}).encode()
        return cls(Configuration.decode_with_index(encoded), fields.get("committed") is True)  # MembershipError


@dataclass(frozen=True, slots=True)
class TransferAnswer:
    """The target accepted and is taking leadership from `previous`."""

    leader: str
    previous: str

    def json(self) -> dict[str, Any]:
        return {"leader": self.leader, "previous": self.previous}

    @classmethod
    def from_json(cls, fields: dict[str, Any]) -> TransferAnswer:
        """What `json` gave, back (a forwarded transfer's answer); ValueError if it is not that."""
        leader, previous = fields.get("leader"), fields.get("previous")
        if not isinstance(leader, str) or not isinstance(previous, str):
            raise ValueError("a transfer's answer names the new leader and the previous one")
        return cls(leader, previous)


def topic_from_json(fields: dict[str, Any]) -> Topic:
    """What Topic.json gave, back (a forwarded topic change's answer); ValueError if it is not that."""
    try:
        return Topic(**{name: value for name, value in fields.items() if name != "perm"})
    except TypeError as exc:
        raise ValueError(f"not a topic: {exc}") from None


@dataclass(frozen=True, slots=True)
class MessageAnswer:
    """Where one message went: its topic, queue and queue offset, its entry's index and position."""

    topic: str
    topic_id: int
    queue: int
    queue_offset: int
    index: int
    pos: int
    duplicate: bool = False  # a producer's retry: appended before, not now


@dataclass(frozen=True, slots=True)
class MessagesAnswer:
    """A batch of messages committed in one queue of a topic, by `leader`: the first message's queue
    offset and index, each message's position (the next ones count up from the first)."""

    topic: str
    topic_id: int
    queue: int
    first_offset: int
    first_index: int
    term: int
    positions: Sequence[int]
    leader: str
    duplicate: bool = False  # a producer's retry: the messages were appended before, and these are theirs

    def messages(self) -> list[MessageAnswer]:
        return [MessageAnswer(self.topic, self.topic_id, self.queue, self.first_offset + i, self.first_index + i, pos,
                              self.duplicate) for i, pos in enumerate(self.positions)]


QueueOffset = tuple[int, int, int]  # (topic_id, queue, offset): a consumer group's in one queue


@dataclass(frozen=True, slots=True)
class GroupCommitted:
    """A consumer group's QUEUE_COMMIT entry as the leader wrote it (raft.group_offsets): every commit
    combined into it is answered with it."""

    group: str
    index: int  # the entry's
    offsets: tuple[QueueOffset, ...]  # offset -1: the queue's removed; none: the group removed

    def json(self) -> dict[str, Any]:
        return {"group": self.group, "index": self.index, "offsets": [list(offset) for offset in self.offsets]}

    @classmethod
    def from_json(cls, fields: dict[str, Any]) -> GroupCommitted:
        """What `json` gave, back (a forwarded commit's answer); ValueError if it is not that."""
        try:
            return cls(str(fields["group"]), int(fields["index"]),
                       tuple((int(t), int(q), int(o)) for t, q, o in fields["offsets"]))
        except (KeyError, TypeError) as exc:
            raise ValueError(f"not a consumer group's commit: {exc}") from None


@dataclass(frozen=True, slots=True)
class QueueLag:
    """A consumer group's offset in one queue, and how far the queue's committed end is past it."""

    topic: str
    topic_id: int
    queue: int
    offset: int  # the next offset the group reads there
    end: int  # the queue's next offset as of the answering member's commit index
    lag: int  # end - offset, at least 0


@dataclass(frozen=True, slots=True)
class GroupAnswer:
    """A consumer group as the answering member holds it: its offsets in the queues of live topics."""

    name: str
    owner: str  # the caller that created it
    index: int  # its last commit's entry
    queues: Sequence[QueueLag]  # by topic id and queue

    @property
    def lag(self) -> int:
        return sum(queue.lag for queue in self.queues)

    def by_topic(self) -> list[list[QueueLag]]:
        """Its queues, a list for each topic."""
        return [list(queues) for _, queues in groupby(self.queues, key=lambda queue: queue.topic_id)]


@dataclass(frozen=True, slots=True)
class DiskStatus:
    data_dir: str
    usage_ratio: float
    full: bool


@dataclass(frozen=True, slots=True)
class MemberStatus:
    """One member as the answering member sees it; None where the member did not answer."""

    id: str
    peer_url: str
    client_url: str | None
    grpc_address: str | None
    voter: bool
    role: str | None
    term: int | None
    end_index: int | None
    committed_index: int | None
    applied_index: int | None
    match_index: int | None
    lag: int | None
    lag_bytes: int | None
    inflight_bytes: int | None
    last_contact_ms: int | None
    rejoining: bool | None
    reachable: bool
    level: int | None  # the level it reports (raft.cluster_version); None: no answer, or a release before levels


@dataclass(frozen=True, slots=True)
class StatusAnswer:
    """The group as the answering member (`self_id`) sees it."""

    group: str
    self_id: str
    role: str
    term: int
    leader: str | None
    members: list[MemberStatus]
    configuration_index: int
    begin_index: int
    end_index: int
    committed_index: int
    applied_index: int
    uptime_s: float
    flush_mode: str
    disk: DiskStatus
    cluster_version: int

    def json(self) -> dict[str, Any]:
        """As the API shows it (its member is `self`)."""
        fields = dataclasses.asdict(self)
        return {"self" if name == "self_id" else name: value for name, value in fields.items()}
