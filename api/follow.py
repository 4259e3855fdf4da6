"""Readers that follow the log: long-polls and streams that stay open, bounded in memory.

A follow stream sends each entry as it commits, as RocketMQ's long-polling
consumers and Kafka's fetch wait for data instead of polling. Committed
entries never change and every member serves them, so a stream on any member
goes on across a leader change; a member that stops ends its streams cleanly,
and the client resumes from the index after the last one it got.

Memory stays bounded however slow a consumer is: a stream holds at most one
chunk of `follow_chunk_bytes` of log beyond what its connection's buffer holds
(the server waits for the client to take what was sent before it reads more),
and the chunks of all streams together hold at most `follow_buffer_bytes_max`:
a stream whose next chunk would pass it waits until others are sent. A reader
that takes nothing for `follow_stall_ms` while a chunk waits for it is cut off
by the server (app.client_protocol), so stalled readers cannot hold that
buffer, and the others, for ever. A stream that does not follow is bounded the
same way, and so is a JSON page (LogPage): its rendered bytes count in the same
buffer while they are sent, and a page that would pass it is refused.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Protocol

from starlette.responses import JSONResponse, StreamingResponse
from starlette.types import Receive, Scope, Send

from raftlog.api.errors import error_response
from raftlog.api.limits import ByteBudget, busy

log = logging.getLogger("raftlog.api")

ABORTED_WAIT_S = 5.0  # for the server to see a cut connection gone
ABORT_EXTENSION = "raftlog.abort"  # scope["extensions"]: {"abort": cuts the request's connection} (app.client_protocol)

if TYPE_CHECKING:
    from raftlog.api.service import LogService, RawRead


class Followed(Protocol):
    """What a stream reads chunk by chunk: the committed log (`CommittedLog`), or a topic queue's
    messages (api.queue_reads), each at positions of its own (indices, queue offsets)."""

    def last(self) -> int:
        """The last position readable now."""

    async def read(self, at: int, last: int) -> RawRead:
        """Stored entries from position `at` up to `last` (at most follow_chunk_bytes of them, and
        possibly none), and the position after those read."""

    async def wait(self, at: int, timeout_s: float | None) -> bool:
        """Until position `at` is readable (True), at most `timeout_s`, or the member stops."""


class CommittedLog:
    """The log's committed entries, by index."""

    def __init__(self, service: LogService) -> None:
        self.service = service

    def last(self) -> int:
        return self.service.node.committed_index

    async def read(self, at: int, last: int) -> RawRead:
        service = self.service
        return await service.read_raw(at, min(service.node.committed_index, last) - at + 1, linearizable=False,
                                      max_bytes=service.limits.follow_chunk_bytes)

    async def wait(self, at: int, timeout_s: float | None) -> bool:
        return await self.service.await_entry(at, timeout_s)


async def committed_chunks(service: LogService, first: RawRead | None, start: int, last: int, *,
                           follow: bool, budget: ByteBudget, idle_s: float | None = None,
                           followed: Followed | None = None) -> AsyncIterator[list[memoryview] | None]:
    """Stored entries from position `start` up to `last` of `followed` (the committed log unless
    said), one chunk at a time; `first`, read before the answer's status went out, is the first
    chunk. Without `follow`, what was readable up to `last` when `first` was read; with it, every
    entry as it commits, until `last` or the member stops. None, every `idle_s` without an entry,
    lets the caller send a keepalive."""
    source = CommittedLog(service) if followed is None else followed
    index, raw = start, first
    while True:
        if raw is not None:
            size = sum(map(len, raw.chunks))
            await budget.take(size)
            try:
                yield raw.chunks
            finally:
                budget.give(size)
            index = raw.next
        if index > last or service.closing:
            return
        if source.last() >= index:
            raw = await source.read(index, last)
        elif not follow:
            return
        else:
            raw = None
            if not await source.wait(index, idle_s) and not service.closing:
                yield None


class LogStream(StreamingResponse):
    """A streamed answer of the log, one that follows it or not. It watches for the client leaving
    (an idle stream writes nothing that would notice), and cuts the connection when the stream fails
    after its 200 where the format has no room to say so, through the server's `raftlog.abort`
    extension. A client that takes nothing is the server's to cut (app.client_protocol)."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        streaming = asyncio.ensure_future(self.stream_response(send))
        leaving = asyncio.ensure_future(self.listen_for_disconnect(receive))
        try:
            await asyncio.wait((streaming, leaving), return_when=asyncio.FIRST_COMPLETED)
            error = None if not streaming.done() or streaming.cancelled() else streaming.exception()
            if error is not None:
                abort = scope.get("extensions", {}).get(ABORT_EXTENSION, {}).get("abort")
                if abort is None:
                    raise error
                log.warning("ended a stream of the log to %s: %s", _client(scope), error)
                abort()  # at once, its unsent bytes dropped: the reader sees the stream cut
                await asyncio.wait((leaving,), timeout=ABORTED_WAIT_S)  # the server sees it gone
        finally:
            for task in (streaming, leaving):
                task.cancel()
            await asyncio.gather(streaming, leaving, return_exceptions=True)
            await self.body_iterator.aclose()  # type: ignore[attr-defined]  # its chunk's budget is given back


class LogPage(JSONResponse):
    """A JSON page of the log, its rendered bytes held in the follow budget while they are sent (a
    page of range_bytes_max of log renders to several times that). A page that would pass the
    budget is not sent: 503 SERVER_BUSY with Retry-After, as any busy answer."""

    def __init__(self, content: object, budget: ByteBudget) -> None:
        super().__init__(content)
        self.budget = budget

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        size = len(self.body)
        if not self.budget.try_take(size):
            refusal = busy(f"log held for readers on this member is at follow_buffer_bytes_max "
                           f"({self.budget.max_bytes}); a page of {size} bytes would pass it")
            await error_response(refusal)(scope, receive, send)
            return
        try:
            await super().__call__(scope, receive, send)
        finally:
            self.budget.give(size)


def _client(scope: Scope) -> str:
    client = scope.get("client")
    return f"{client[0]}:{client[1]}" if client else "?"
