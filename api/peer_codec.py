"""Raft's messages on the peer port: the dataclasses of raft.messages as the protobuf messages
of proto/raftlog/peer/v1/peer.proto (generated into api/peer_pb2.py), field for field.

A push carries the raw entries exactly as stored, so a follower validates and
copies them without decoding. Anything that does not decode, or holds a value
raft has no name for, raises PeerMessageError: the peer gets a protocol error
and the call fails, never a crash.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from enum import Enum, IntEnum
from typing import Any, TypeVar, cast, get_type_hints

from google.protobuf.message import DecodeError, Message

from raftlog.api import peer_pb2 as pb
from raftlog.api.answers import AppendAnswer, MessagesAnswer
from raftlog.raft.consumers import ConsumerAsk
from raftlog.raft.group_offsets import GroupAsk, QueueAsk
from raftlog.raft.messages import (
    Code,
    FetchRequest,
    HeartbeatRequest,
    HeartbeatResponse,
    PushRequest,
    PushResponse,
    PushType,
    TransferRequest,
    TransferResponse,
    VoteRequest,
    VoteResponse,
)
from raftlog.raft.producers import Sequenced
from raftlog.raft.topic_appends import MessageBatch
from raftlog.raft.topics import CHANGEABLE
from raftlog.storage import message as stored

M = TypeVar("M")
FIELD_TYPES: dict[type, dict[str, Any]] = {}  # _field_types's, by message class

PUSH_TYPES = tuple(PushType)  # in the order of the proto's enum
PUSH_DATA_TAG = bytes([pb.PushRequest.DATA_FIELD_NUMBER << 3 | 2])  # PushRequest.data, length-delimited
PROTO_OF: dict[type, type[Message]] = {
    VoteRequest: pb.VoteRequest, VoteResponse: pb.VoteResponse,
    HeartbeatRequest: pb.HeartbeatRequest, HeartbeatResponse: pb.HeartbeatResponse,
    TransferRequest: pb.TransferRequest, TransferResponse: pb.TransferResponse,
    FetchRequest: pb.FetchRequest, PushResponse: pb.PushResponse,
}


class PeerMessageError(ValueError):
    """A peer message that does not decode: garbage, a wrong field, an unknown value."""


def encode_message(message: object) -> bytes:
    """A control message (vote, heartbeat, transfer, fetch, push answer) as protobuf bytes."""
    fields = {}
    for name in _field_types(type(message)):
        value = getattr(message, name)
        fields[name] = value.name if isinstance(value, Enum) and not isinstance(value, IntEnum) else value
    return PROTO_OF[type(message)](**fields).SerializeToString()


def decode_message(cls: type[M], data: bytes) -> M:
    try:
        proto = PROTO_OF[cls].FromString(data)
        return cls(**{name: _convert(kind, getattr(proto, name)) for name, kind in _field_types(cls).items()})
    except (DecodeError, ValueError, KeyError) as exc:  # garbage, an unknown code or enum name
        raise PeerMessageError(f"{cls.__name__}: {exc}") from None


def _field_types(cls: type) -> dict[str, Any]:
    """A message dataclass's fields and their types, worked out once per class (get_type_hints is slow)."""
    types = FIELD_TYPES.get(cls)
    if types is None:
        hints = get_type_hints(cls)
        types = FIELD_TYPES[cls] = {f.name: hints[f.name] for f in dataclasses.fields(cls)}
    return types


def _convert(kind: Any, value: Any) -> object:
    if isinstance(kind, type) and issubclass(kind, IntEnum):
        return kind(value)
    if isinstance(kind, type) and issubclass(kind, Enum):
        return kind[value]
    return value


OWN_FIELD_TABLES = ("producers", "consumers", "cluster_version")  # the tables a push had fields for before `tables`


def encode_push(request: PushRequest) -> bytes:
    """The push as its protobuf bytes. The entries are copied once, from the mapped file into the
    message, after the other fields (a message's fields may come in any order): protobuf's own
    serialisation would copy them twice more."""
    head = pb.PushRequest(
        group=request.group, leader_id=request.leader_id, term=request.term,
        type=cast(pb.PushType, PUSH_TYPES.index(request.type)), commit_index=request.commit_index,
        first_index=request.first_index, count=request.count,
        pre_log_index=request.pre_log_index, pre_log_term=request.pre_log_term,
        chain_crc=request.chain_crc, next_pos=request.next_pos,
        **{name: data for name, data in request.tables.items() if name in OWN_FIELD_TABLES},
        tables={name: data for name, data in request.tables.items() if name not in OWN_FIELD_TABLES},
    ).SerializeToString()
    size = len(request.data)
    if not size:  # as protobuf writes an empty bytes field: not at all
        return head
    return b"".join((head, PUSH_DATA_TAG, _varint(size), request.data))


def _varint(value: int) -> bytes:
    """Protobuf's base-128 varint of a non-negative int."""
    out = bytearray()
    while value > 0x7F:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def decode_push(data: bytes) -> PushRequest:
    try:
        proto = pb.PushRequest.FromString(data)
    except DecodeError as exc:
        raise PeerMessageError(f"push: {exc}") from None
    if not 0 <= proto.type < len(PUSH_TYPES) or proto.count < 0:
        raise PeerMessageError("push: bad type or count")
    return PushRequest(proto.group, proto.leader_id, proto.term, PUSH_TYPES[proto.type], proto.commit_index,
                       proto.first_index, proto.count, proto.data, proto.pre_log_index, proto.pre_log_term,
                       proto.chain_crc if proto.HasField("chain_crc") else None,
                       proto.next_pos if proto.HasField("next_pos") else None,
                       {**{name: getattr(proto, name) for name in OWN_FIELD_TABLES if getattr(proto, name)},
                        **proto.tables})


def encode_push_response(response: PushResponse) -> bytes:
    """A push's answer, field by field: one per push on the hot path, where the generic
    encode_message costs five times as much."""
    return pb.PushResponse(code=response.code, term=response.term, index=response.index,
                           end_index=response.end_index, end_term=response.end_term, x_term=response.x_term,
                           x_index=response.x_index, ack_index=response.ack_index).SerializeToString()


def decode_push_response(data: bytes) -> PushResponse:
    try:
        proto = pb.PushResponse.FromString(data)
        return PushResponse(Code(proto.code), proto.term, proto.index, proto.end_index, proto.end_term,
                            proto.x_term, proto.x_index, proto.ack_index)
    except (DecodeError, ValueError) as exc:
        raise PeerMessageError(f"PushResponse: {exc}") from None


# -- the public API's answers between members (a forwarded append answered by the leader) ----------

def append_answer_message(answer: AppendAnswer) -> pb.AppendResponse:
    return pb.AppendResponse(first_index=answer.first_index, last_index=answer.last_index, term=answer.term,
                             positions=answer.positions, leader=answer.leader, duplicate=answer.duplicate)


def append_request(bodies: Sequence[bytes], producer: Sequenced | None, caller: str = "") -> bytes:
    """A forwarded message: many clients' bodies, or one producer's batch alone, with its caller."""
    if producer is None:
        return pb.AppendRequest(bodies=bodies).SerializeToString()
    return pb.AppendRequest(bodies=bodies, producer_id=producer.producer_id, producer_epoch=producer.epoch,
                            sequence=producer.sequence, caller=caller).SerializeToString()


def forwarded_append(message: bytes) -> tuple[list[bytes], Sequenced | None, str]:
    """What append_request sent (DecodeError if it is not a message)."""
    request = pb.AppendRequest.FromString(message)
    producer = (Sequenced(request.producer_id, request.producer_epoch, request.sequence)
                if request.HasField("producer_id") else None)
    return list(request.bodies), producer, request.caller


def consumer_commit_request(ask: ConsumerAsk) -> pb.ConsumerCommit:
    """A consumer's commit, forwarded to the leader."""
    return pb.ConsumerCommit(name=ask.name, position=ask.position, metadata=ask.metadata, expected=ask.expected,
                             caller=ask.caller, retention_floor=ask.floor)


def forwarded_consumer_commit(message: bytes) -> ConsumerAsk:
    """What consumer_commit_request sent (DecodeError if it is not a message)."""
    request = pb.ConsumerCommit.FromString(message)
    return ConsumerAsk(request.name, request.position, request.metadata,
                       request.expected if request.HasField("expected") else None, request.caller,
                       request.retention_floor if request.HasField("retention_floor") else None)


def group_commit_request(ask: GroupAsk) -> pb.GroupCommit:
    """A consumer group's commit (or removal), forwarded to the leader."""
    return pb.GroupCommit(group=ask.group, caller=ask.caller, remove=ask.remove, queues=[
        pb.QueueCommit(topic_id=q.topic_id, queue=q.queue, offset=q.offset, expected=q.expected) for q in ask.queues])


def forwarded_group_commit(message: bytes) -> GroupAsk:
    """What group_commit_request sent (DecodeError if it is not a message)."""
    request = pb.GroupCommit.FromString(message)
    return GroupAsk(request.group, [QueueAsk(q.topic_id, q.queue, q.offset, q.expected if q.HasField("expected")
                                             else None) for q in request.queues], request.caller, request.remove)


def append_answer_share(message: pb.AppendResponse, offset: int, count: int) -> AppendAnswer:
    """One client's part of the leader's answer to a forwarded batch: its `count` entries from `offset`."""
    first = message.first_index + offset
    return AppendAnswer(first, first + count - 1, message.term, list(message.positions[offset:offset + count]),
                        message.leader, message.duplicate)


# -- topics (raft.topics) and their messages (raft.topic_appends), through the leader -------------

def topic_change_request(op: str, name: str, fields: Mapping[str, Any], caller: str) -> pb.TopicChange:
    """A topic change, forwarded to the leader: only the fields it sets."""
    return pb.TopicChange(op=op, name=name, caller=caller, **{f: v for f, v in fields.items() if f in CHANGEABLE})


def forwarded_topic_change(message: bytes) -> tuple[str, str, dict[str, Any], str]:
    """What topic_change_request sent: (op, name, fields, caller) (DecodeError if it is not a message)."""
    request = pb.TopicChange.FromString(message)
    fields = {name: getattr(request, name) for name in CHANGEABLE if request.HasField(name)}
    return request.op, request.name, fields, request.caller


def messages_request(batch: MessageBatch, caller: str, producer: Sequenced | None) -> pb.MessagesRequest:
    """A batch of messages, forwarded to the leader: each body after its keys, tags and properties, in
    a MESSAGE entry's own form (its header all zeros), which storage.message reads back."""
    request = pb.MessagesRequest(messages=[stored.encode_message(0, 0, 0, meta.encode(), 0, body)
                                           for body, meta in zip(batch.bodies, batch.metas, strict=True)],
                                 topic=batch.topic, queue=batch.queue, caller=caller)
    if producer is not None:
        request.producer_id, request.producer_epoch, request.sequence = producer
    return request


def forwarded_messages(message: bytes) -> tuple[MessageBatch, str, Sequenced | None]:
    """What messages_request sent: the batch, its caller and its producer (DecodeError, or
    MessageFormatError for a message that storage.message does not read)."""
    request = pb.MessagesRequest.FromString(message)
    bodies, metas = [], []
    for raw in request.messages:
        decoded = stored.decode_message(memoryview(raw))
        bodies.append(bytes(decoded.body))
        metas.append(stored.Meta.of(decoded.keys, decoded.tags, decoded.properties))
    producer = (Sequenced(request.producer_id, request.producer_epoch, request.sequence)
                if request.HasField("producer_id") else None)
    return (MessageBatch(request.topic, bodies, metas, request.queue if request.HasField("queue") else None),
            request.caller, producer)


def messages_answer_message(answer: MessagesAnswer) -> pb.MessagesResponse:
    return pb.MessagesResponse(topic=answer.topic, topic_id=answer.topic_id, queue=answer.queue,
                               first_offset=answer.first_offset, first_index=answer.first_index, term=answer.term,
                               positions=answer.positions, leader=answer.leader, duplicate=answer.duplicate)


def messages_answer(message: pb.MessagesResponse) -> MessagesAnswer:
    return MessagesAnswer(message.topic, message.topic_id, message.queue, message.first_offset, message.first_index,
                          message.term, list(message.positions), message.leader, message.duplicate)
