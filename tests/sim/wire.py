"""Messages between simulated members cross the wire as the real peer port carries them.

`round_trip` is the in-memory network's `wire` hook: every request and answer
is encoded with `api.peer_codec` (the protobuf messages of the peer port, a
push with its raw entries) and decoded again, so a field the codec drops or
mangles, or a follower that keeps a view into the leader's mapped file, shows
up in the simulation. Forwarded appends carry their bodies, and their answers come back, as the
peer port carries them.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from raftlog.api import peer_pb2
from raftlog.api.answers import AppendAnswer, ConsumerAnswer, ProducerAnswer
from raftlog.api.peer_codec import (
    append_answer_message,
    append_answer_share,
    append_request,
    consumer_commit_request,
    decode_message,
    decode_push,
    decode_push_response,
    encode_message,
    encode_push,
    encode_push_response,
    forwarded_append,
    forwarded_consumer_commit,
)
from raftlog.raft.consumers import ConsumerAsk
from raftlog.raft.messages import PushRequest, PushResponse


def round_trip(kind: str, message: Any) -> Any:
    if isinstance(message, PushRequest):
        return decode_push(encode_push(message))
    if isinstance(message, PushResponse):
        return decode_push_response(encode_push_response(message))
    if kind == "append" and isinstance(message, tuple):  # (bodies, producer, caller)
        return forwarded_append(append_request(*message))
    if kind == "change_session" and isinstance(message, tuple):  # (producer_id, caller, close)
        change = peer_pb2.SessionChange.FromString(peer_pb2.SessionChange(
            producer_id=message[0], caller=message[1], close=message[2]).SerializeToString())
        return change.producer_id, change.caller, change.close
    if isinstance(message, ProducerAnswer):
        return ProducerAnswer.from_json(json.loads(json.dumps(message.json())))
    if kind == "commit_consumer" and isinstance(message, ConsumerAsk):
        return forwarded_consumer_commit(consumer_commit_request(message).SerializeToString())
    if isinstance(message, ConsumerAnswer):  # JSON, as the peer port carries it
        return ConsumerAnswer.from_json(json.loads(json.dumps(message.json())))
    if isinstance(message, AppendAnswer):  # the leader's answer to a forwarded append, as the peer port maps it
        wire = append_answer_message(message).SerializeToString()
        return append_answer_share(peer_pb2.AppendResponse.FromString(wire), 0, len(message.positions))
    if isinstance(message, bytes | memoryview):  # a fetched entry, raw
        return bytes(message)
    if dataclasses.is_dataclass(message) and not isinstance(message, type):
        return decode_message(type(message), encode_message(message))
    return message  # the public API's answers between members: plain values or their ApiError
