"""Messages between simulated members cross the wire as the real peer port carries them.

`round_trip` is the in-memory network's `wire` hook: every request and answer
is encoded with `api.peer_codec` (JSON for control messages, the binary push
format with its raw entries) and decoded again, so a field the codec drops or
mangles, or a follower that keeps a view into the leader's mapped file, shows
up in the simulation. Forwarded appends carry their bodies as the batch codec does.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from api.bodies import decode_bodies, encode_bodies
from api.peer_codec import decode_message, decode_push, encode_message, encode_push
from raft.messages import PushRequest


def round_trip(kind: str, message: Any) -> Any:
    if isinstance(message, PushRequest):
        return decode_push(b"".join(encode_push(message)))
    if kind == "append" and isinstance(message, list):
        return decode_bodies(encode_bodies(message))
    if isinstance(message, bytes | memoryview):  # a fetched entry, raw
        return bytes(message)
    if dataclasses.is_dataclass(message) and not isinstance(message, type):
        return decode_message(type(message), encode_message(message))
    return message  # the public API's answers between members: plain values or their ApiError
