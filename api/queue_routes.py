"""The public routes that read a topic's queues (api.queue_reads): each queue's offsets, one message by
queue offset, and a page, long-poll or stream of a queue, rendered as the log's reads are (api.public)."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Path, Query, Request
from fastapi.responses import JSONResponse, Response

from raftlog.api.entry_handlers import OCTETS, EntryHandlers, ModelResponse, record_json, record_response
from raftlog.api.errors import bad_request
from raftlog.api.follow import LogPage
from raftlog.api.public import (
    DEFAULT_PAGE,
    ENTRIES_CONTENT_TYPE,
    ERROR_TEXT,
    SSE,
    SSE_KEEPALIVE_S,
    STREAM_CONTENT,
    last_event_id,
    stream_kind,
    streamed,
)
from raftlog.api.queue_reads import QueueRead, QueueReads
from raftlog.api.queue_schemas import MessagePage, QueueList
from raftlog.api.schemas import CONSISTENCY, Consistency, EntryOut, ErrorBody
from raftlog.api.topic_routes import TOPIC_ERRORS
from raftlog.api.topic_schemas import TOPIC_NAME, TOPIC_NAME_TEXT
from raftlog.api.topics import TAGS_MAX
from raftlog.storage.message import QUEUE_MAX
from raftlog.storage.record import Record

# What the queue reads' statuses mean beside what the topic routes' do
QUEUE_ERRORS = {
    400: "Bad input: a bad parameter, a malformed group name, a Last-Event-ID that is not an offset",
    403: "PERMISSION_DENIED: the token's role may not read; TOPIC_NOT_READABLE: the topic's perm refuses reads",
    404: "TOPIC_NOT_FOUND: no topic of this name, or no such queue in it; INDEX_OUT_OF_RANGE: no committed message "
         "at this offset yet",
    410: "INDEX_LESS_THAN_LOCAL_BEGIN: retention took the offset; the message names the queue's first offset kept",
}
READ_STATUSES = (400, 403, 404, 410, 502, 503, 504)
TAG_QUERY = Query([], max_length=TAGS_MAX, description=(
    "Only messages that carry this tag; repeated: any of them. Filtered on the member, by the tag hash in the "
    "queue's units, then exactly"))


def errors(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """The error answers of a queue read, 500 included."""
    return {status: {"model": ErrorBody, "description": QUEUE_ERRORS.get(status, TOPIC_ERRORS.get(
        status, ERROR_TEXT[status]))} for status in sorted({*statuses, 500})}


def queue_offset(record: Record) -> int:
    """A queue read's event id: the message's queue offset."""
    assert record.queue_offset is not None
    return record.queue_offset


def install_queue_routes(app: FastAPI, handlers: EntryHandlers, reads: QueueReads) -> None:
    limits = handlers.limits
    name_path = Path(max_length=127, pattern=TOPIC_NAME, examples=["orders"], description=TOPIC_NAME_TEXT)
    queue_path = Path(ge=0, lt=QUEUE_MAX, examples=[3], description="The queue's number in its topic, from 0")
    group_text = ("A consumer group: read on from its committed offset in this queue (from `offset` when it has "
                  "none, else from the queue's first)")

    @app.get("/v1/topics/{name}/queues", tags=["topics"], summary="A topic's queues and their offsets",
             responses={200: {"model": QueueList, "description": "Each queue's first kept and next offsets, as this "
                              "member holds them under the read's consistency"}, **errors(400, 404, 502, 503, 504)})
    async def list_queues(name: str = name_path, consistency: Consistency = CONSISTENCY,
                          group: str | None = Query(None, description="A consumer group: its offset and lag in each "
                                                    "queue too", examples=["billing"])) -> JSONResponse:
        return ModelResponse(QueueList.of(await reads.queues(name, group, consistency == "linearizable")))

    @app.get("/v1/topics/{name}/queues/{queue}/messages/{offset}", tags=["topics"],
             summary="Read one message by its queue offset",
             responses={200: {"model": EntryOut, "description": "The message; with `Accept: application/octet-stream` "
                              "its raw body, its record in X-Raftlog-* headers",
                              "content": {OCTETS: {"schema": {"type": "string", "format": "binary"}}}},
                        **errors(*READ_STATUSES)})
    async def get_message(request: Request, name: str = name_path, queue: int = queue_path,
                          offset: int = Path(ge=0, examples=[12]), consistency: Consistency = CONSISTENCY) -> Response:
        read = QueueRead(name, queue, offset=offset, linearizable=consistency == "linearizable")
        return record_response(await reads.one(read), request.headers.get("accept", ""))

    @app.get("/v1/topics/{name}/queues/{queue}/messages", tags=["topics"],
             summary="Read a queue's committed messages by queue offset, or follow it",
             responses={200: {"model": MessagePage, "description": (
                 "A page of messages; with `Accept: application/x-ndjson` a stream of them, one JSON object per "
                 "line; with `Accept: text/event-stream` server-sent events, `id:` the queue offset, `data:` the "
                 f"message as JSON; with `Accept: {ENTRIES_CONTENT_TYPE}` their entries as stored, back to back. A "
                 "stream that fails after its 200 (retention took its next offset) ends with an error line, or an "
                 "`error` event"),
                              "content": STREAM_CONTENT},
                        **errors(*READ_STATUSES)})
    async def read_messages(request: Request, name: str = name_path, queue: int = queue_path,
                            offset: int | None = Query(None, ge=0, description=(
                                "The first queue offset to read (default: the queue's first kept)"), examples=[0]),
                            group: str | None = Query(None, description=group_text, examples=["billing"]),
                            consumer: str | None = Query(None, description=(
                                "The same as group, as /v1/entries names a reader that resumes")),
                            limit: int | None = Query(None, ge=1, description=(
                                f"At most this many offsets read (JSON: default {DEFAULT_PAGE}, at most "
                                f"{limits.range_limit_max}; streams: default all committed, or no end when "
                                "following); a tag filter's skipped messages count"), examples=[100]),
                            tag: list[str] = TAG_QUERY,
                            consistency: Consistency = CONSISTENCY,
                            follow: bool = Query(False, description=(
                                "Streams only: stay open and send each message as it commits. Resume from the "
                                "offset after the last one received (server-sent events: Last-Event-ID does it)")),
                            wait_ms: int = Query(0, ge=0, le=limits.long_poll_max_ms, description=(
                                "Long-poll: when the queue has no message at or after the start yet (or none that "
                                "passes the tag filter), wait up to this long for one"), examples=[30000]),
                            ) -> Response:
        stream = stream_kind(request, follow)
        if group is not None and consumer is not None and group != consumer:
            raise bad_request("group and consumer name the same reader: give one")
        read = QueueRead(name, queue, offset=offset, group=group or consumer, limit=limit or 0, tags=tuple(tag),
                         linearizable=consistency == "linearizable", follow=follow, wait_s=wait_ms / 1000)
        resumed = last_event_id(request, stream)
        if resumed is not None:  # an EventSource reconnecting: on from the offset after the last it got
            read = QueueRead(name, queue, offset=resumed + 1, limit=read.limit, tags=read.tags,
                             linearizable=read.linearizable, follow=follow, wait_s=read.wait_s)
        if stream is not None:
            planned = await reads.stream(read, idle_s=SSE_KEEPALIVE_S if stream == SSE else None)
            return streamed(planned, stream, {"X-Raftlog-Next-Offset": str(planned.end + 1)}, queue_offset)
        page = await reads.page(read, min(limit or DEFAULT_PAGE, limits.range_limit_max))
        return LogPage({"messages": [record_json(r) for r in page.records], "next_offset": page.next,
                        "committed_index": page.committed}, handlers.service.follow_budget)
