"""What a call of the public gRPC API may hold while it is served: api.grpc_api.CallGuard bounds
every call it lets through with these.

A call's message draws its bytes from the member's request budget (InflightBytes, shared with the
client and peer ports) from its decoding to the call's end; each message of an AppendStream, until
its append is done. A batch's bodies are counted on the wire, up to max_batch_entries + 1, before
protobuf builds an object for each. A message refused here reaches the method as a Refused, and
the call ends with its error: a full budget is UNAVAILABLE SERVER_BUSY, as on REST (an
AppendStream's, after the answers to the batches before it).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import grpc
import grpc.aio
from google.protobuf.message import DecodeError

from raftlog.api import log_pb2 as pb
from raftlog.api.errors import ApiError, bad_request, too_large
from raftlog.api.limits import InflightBytes, batch_entries

Abort = Callable[[grpc.aio.ServicerContext, ApiError], Awaitable[None]]  # ends a call with the error's status
Decode = Callable[[bytes], Any]


class Refused:
    """What the decoder gives the method instead of a request: the call ends with `error`."""

    __slots__ = ("error",)

    def __init__(self, error: ApiError) -> None:
        self.error = error


class Held:
    """What AppendStream gets for a message whose bytes the budget holds until `release` (called
    once its append is done, answered or not)."""

    __slots__ = ("budget", "request", "size")

    def __init__(self, request: pb.AppendBatchRequest, size: int, budget: InflightBytes) -> None:
        self.request = request
        self.size = size
        self.budget = budget

    def release(self, _done: object = None) -> None:
        self.budget.give(self.size)


def decoder(decode: Decode, batch: bool, max_batch_entries: int) -> Decode:
    """`decode`, for a message that is not refused first: a batch of too many bodies, or garbage."""
    stop = max_batch_entries + 1

    def deserialize(raw: bytes) -> Any:
        if batch and len(raw) >= 2 * stop and batch_entries(raw, stop) >= stop:  # a body takes 2 bytes or more
            return Refused(too_large(f"over {max_batch_entries} entries in one batch: max_batch_entries"))
        try:
            return decode(raw)
        except DecodeError:
            return Refused(bad_request("the message does not decode"))

    return deserialize


def bounded(handler: Any, budget: InflightBytes, decode: Decode, abort: Abort,
            streams: bool = False) -> grpc.RpcMethodHandler:
    """A call of one message (`streams`: answered by a stream of them) whose bytes are held in the
    budget from its decoding to its end."""
    held = 0
    behaviour = handler.unary_stream if streams else handler.unary_unary

    def deserialize(raw: bytes) -> Any:
        nonlocal held
        if not budget.take(len(raw)):
            return Refused(budget.refusal())
        held = len(raw)
        return decode(raw)

    async def bounded(request: Any, context: grpc.aio.ServicerContext) -> Any:
        try:  # reached from deserialize without a pause: what it took is given back here
            if isinstance(request, Refused):
                await abort(context, request.error)
            return await behaviour(request, context)
        finally:
            budget.give(held)

    if streams:
        return handler._replace(request_deserializer=deserialize, unary_stream=bounded)
    return handler._replace(request_deserializer=deserialize, unary_unary=bounded)


def streamed(handler: Any, budget: InflightBytes, decode: Decode) -> grpc.RpcMethodHandler:
    """AppendStream, each of whose messages' bytes is held in the budget from its decoding until its
    append is done (the method gives them back: Held.release)."""

    def deserialize(raw: bytes) -> Any:
        if not budget.take(len(raw)):
            return Refused(budget.refusal())
        request = decode(raw)
        if isinstance(request, Refused):
            budget.give(len(raw))
            return request
        return Held(request, len(raw), budget)

    return handler._replace(request_deserializer=deserialize)
