"""Wire formats of the peer routes: JSON for control messages, binary for pushes.

A push body is a fixed header, the group and leader id, then the raw entries
exactly as stored, so a follower validates and copies them without decoding:

    type u8 | term i64 | commit_index i64 | first_index i64 | count i32 |
    pre_log_index i64 | pre_log_term i64 | chain_crc i64 (-1: none) |
    next_pos i64 (-1: none) | group_len u16 | leader_len u16 |
    group | leader_id | entries

Anything that does not decode raises PeerMessageError: the route answers 400
and the caller counts the call as failed, never as an answer.
"""

from __future__ import annotations

import dataclasses
import json
import struct
from enum import Enum
from functools import cache
from typing import Any, TypeVar, get_type_hints

from raft.messages import PushRequest, PushType

M = TypeVar("M")

PUSH_HEADER = struct.Struct(">BqqqiqqqqHH")
PUSH_TYPES = tuple(PushType)


class PeerMessageError(ValueError):
    """A peer message that does not decode: garbage, a wrong field, a wrong type."""


def encode_message(message: object) -> bytes:
    """A control message (vote, heartbeat, transfer, push response) as JSON."""
    fields = {}
    for f in dataclasses.fields(message):  # type: ignore[arg-type]
        value = getattr(message, f.name)
        fields[f.name] = value.value if isinstance(value, Enum) else value
    return json.dumps(fields, separators=(",", ":")).encode()


def decode_message(cls: type[M], data: bytes) -> M:
    try:
        fields = json.loads(data)
        if not isinstance(fields, dict):
            raise PeerMessageError(f"{cls.__name__}: expected a JSON object")
        values = {}
        for name, kind in _field_types(cls).items():
            if name in fields:
                values[name] = _convert(kind, fields[name], name)
        return cls(**values)
    except PeerMessageError:
        raise
    except (ValueError, TypeError) as exc:  # bad JSON, a missing field, an unknown enum value
        raise PeerMessageError(f"{cls.__name__}: {exc}") from None


@cache
def _field_types(cls: type) -> dict[str, Any]:
    hints = get_type_hints(cls)
    return {f.name: hints[f.name] for f in dataclasses.fields(cls)}


def _convert(kind: Any, value: object, name: str) -> object:
    if isinstance(kind, type) and issubclass(kind, Enum):
        return kind(value)
    if kind is bool and not isinstance(value, bool):
        raise PeerMessageError(f"{name} must be a boolean")
    if kind is int and (not isinstance(value, int) or isinstance(value, bool)):
        raise PeerMessageError(f"{name} must be an integer")
    if kind is str and not isinstance(value, str):
        raise PeerMessageError(f"{name} must be a string")
    return value


def encode_push(request: PushRequest) -> list[bytes]:
    """The push as body parts: the header, then the entries (copied out of the mapped file)."""
    group, leader = request.group.encode(), request.leader_id.encode()
    header = PUSH_HEADER.pack(
        PUSH_TYPES.index(request.type), request.term, request.commit_index, request.first_index,
        request.count, request.pre_log_index, request.pre_log_term,
        -1 if request.chain_crc is None else request.chain_crc,
        -1 if request.next_pos is None else request.next_pos, len(group), len(leader))
    return [header + group + leader, bytes(request.data)]


def decode_push(body: bytes) -> PushRequest:
    if len(body) < PUSH_HEADER.size:
        raise PeerMessageError("push: body shorter than its header")
    (kind, term, commit, first, count, pre_index, pre_term, chain, next_pos,
     group_len, leader_len) = PUSH_HEADER.unpack_from(body)
    if kind >= len(PUSH_TYPES) or count < 0:
        raise PeerMessageError("push: bad type or count")
    start = PUSH_HEADER.size
    end = start + group_len + leader_len
    if len(body) < end:
        raise PeerMessageError("push: body shorter than its ids")
    try:
        group = body[start:start + group_len].decode()
        leader = body[start + group_len:end].decode()
    except UnicodeDecodeError:
        raise PeerMessageError("push: ids are not UTF-8") from None
    return PushRequest(group, leader, term, PUSH_TYPES[kind], commit, first, count,
                       memoryview(body)[end:], pre_index, pre_term,
                       None if chain < 0 else chain, None if next_pos < 0 else next_pos)
