"""What the hottest public routes do: single appends, batches (JSON or binary) and single gets.

One EntryHandlers per member serves the FastAPI routes, the answers below ASGI
(api.fast_path) and the gRPC API's appends, so that they read bodies, count
metrics and answer alike. The JSON bodies' common forms are read here without a
pydantic model per entry; anything else goes through the documented models
(api.schemas), whose errors are the answer.
"""

from __future__ import annotations

import base64
import binascii
import json
import time
from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import Request, Response
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ValidationError
from starlette.requests import ClientDisconnect

from raftlog.api.answers import AppendAnswer
from raftlog.api.auth import LOCAL_CALLER, caller_name
from raftlog.api.bodies import BATCH_CONTENT_TYPE, BatchFormatError, BatchTooLargeError, decode_bodies
from raftlog.api.consumers import ConsumerCommits
from raftlog.api.errors import ApiError, bad_request, too_large
from raftlog.api.metrics import NodeMetrics
from raftlog.api.read_plan import LogRead, LogReads
from raftlog.api.schemas import Appended, BatchAppended, NewBatch, NewEntry
from raftlog.api.service import LogService
from raftlog.raft.messages import Code
from raftlog.raft.producers import Sequenced
from raftlog.storage.record import Record

OCTETS = "application/octet-stream"
SUCCESS = (Code.SUCCESS.name,)  # the label of a committed append
ERRORS_SHOWN_MAX = 10  # problems named in one 400; the rest are counted
STRINGS_PER_ENTRY_MAX = 4  # a NewEntry's keys and values: "body", its text, "encoding", its name
COMPACT_JSON = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":"))  # as JSONResponse
ASCII_JSON = json.JSONEncoder(separators=(",", ":"))  # for headers, which are Latin-1
PRODUCER_HEADERS = {b"x-raftlog-producer-id": "id", b"x-raftlog-producer-epoch": "epoch",
                    b"x-raftlog-sequence": "sequence"}  # a producer session's (its bounds: LogService.check_bodies)


class EntryHandlers:
    """What the hottest routes do (appends, one or a batch, and gets), shared by their FastAPI routes
    and by api.fast_path."""

    def __init__(self, service: LogService, metrics: NodeMetrics, consumers: ConsumerCommits) -> None:
        self.service = service
        self.consumers = consumers  # the consumer routes' (api.delivery, api.grpc_api)
        self.reads = LogReads(service, consumers, service.node.topics.name_of)  # REST's and gRPC's
        self.metrics = metrics
        self.limits = service.limits

    @staticmethod
    async def read_body(request: Request, bytes_max: int | None = None) -> bytes:
        """The whole body; api.limits.RequestLimits bounds its size as it arrives (and `bytes_max`, a
        small route's bound: 413 past it). Read from the ASGI messages themselves: Request.stream's
        generator costs more than a small body's copy."""
        parts, size = [], 0
        while True:
            message = await request.receive()
            if message["type"] == "http.disconnect":
                raise ClientDisconnect()
            parts.append(message.get("body", b""))
            if bytes_max is not None and (size := size + len(parts[-1])) > bytes_max:
                raise _over_small_bound(request, bytes_max)
            if not message.get("more_body", False):
                return parts[0] if len(parts) == 1 else b"".join(parts)

    async def read_json(self, request: Request, model: type[BaseModel]) -> Any:
        """The body of a route that takes only JSON, a small one, as `model`. Another content type is
        refused before the body is read: a page on another site can send text/plain without a CORS
        preflight, and a reader's upload must not hold the writers' budget while it is judged."""
        if not is_json(request):
            raise not_json(request)
        return parse_model(model, await self.read_small_body(request))

    async def read_small_body(self, request: Request) -> bytes:
        """The whole body of a route whose bodies are small by nature: 413 past small_request_bytes_max,
        at once when Content-Length says so, else as soon as the bytes received pass it (the limits
        answer 413/503 for the request's size and the member's budget as for any body)."""
        limit = self.limits.small_request_bytes_max
        length = next((v for k, v in request.scope["headers"] if k == b"content-length"), None)
        if length is not None and length.isdigit() and (len(length) > 19 or int(length) > limit):
            raise _over_small_bound(request, limit)
        return await self.read_body(request, limit)

    async def appending(self, bodies_of: Callable[[], Awaitable[list[bytes]]], producer: Sequenced | None = None,
                        caller: str = LOCAL_CALLER) -> AppendAnswer:
        metrics = self.metrics
        started = time.perf_counter()
        try:
            bodies = await bodies_of()
            answer = await self.service.append(bodies, producer, caller)
        except ApiError as exc:
            metrics.append_requests.inc((exc.code.name,))
            raise
        metrics.append_requests.inc(SUCCESS)
        metrics.appended_entries.inc(amount=len(bodies))
        metrics.appended_bytes.inc(amount=sum(map(len, bodies)))
        metrics.commit_latency.observe(time.perf_counter() - started)
        return answer

    async def append_one(self, request: Request) -> JSONResponse:
        async def bodies() -> list[bytes]:
            data = await self.read_body(request)
            if is_json(request):
                return [decode_body(parse_model(NewEntry, data))]
            return [data]

        answer = await self.appending(bodies, producer_of(request), caller_name(request.scope))
        return ModelResponse(Appended.of(answer), status_code=201)

    async def append_batch(self, request: Request) -> JSONResponse:
        async def bodies() -> list[bytes]:
            json_body = is_json(request)
            if not json_body and content_type(request) != BATCH_CONTENT_TYPE:  # refused before the body is read
                raise ApiError(Code.UNEXPECTED_ARGUMENT, f"a batch is application/json or {BATCH_CONTENT_TYPE}",
                               status=415)
            data = await self.read_body(request)
            if json_body:
                return json_batch_bodies(data, self.limits.max_batch_entries)
            try:
                return decode_bodies(data, self.limits.max_batch_entries)
            except BatchTooLargeError as exc:
                raise too_large(str(exc)) from None
            except BatchFormatError as exc:
                raise bad_request(str(exc)) from None

        return ModelResponse(BatchAppended.of(await self.appending(bodies, producer_of(request),
                                                                   caller_name(request.scope))), status_code=201)

    async def get_one(self, index: int, linearizable: bool, accept: str) -> Response:
        return record_response(await self.reads.one(LogRead(start=index, linearizable=linearizable)), accept)


def record_response(record: Record, accept: str) -> Response:
    """One record's answer: JSON, or with an Accept of octet-stream its raw body and X-Raftlog-* headers."""
    if OCTETS in accept:
        return Response(record.body, media_type=OCTETS, headers=record_headers(record))
    return JSONResponse(record_json(record))


def record_json(record: Record) -> dict[str, Any]:
    """A record for JSON readers: the body as UTF-8 text when it is valid UTF-8, else base64; the producer
    session that appended it, if one did, and a message's topic fields."""
    try:
        text, encoding = record.body.decode("utf-8"), "utf-8"
    except UnicodeDecodeError:
        text, encoding = base64.b64encode(record.body).decode("ascii"), "base64"
    fields: dict[str, Any] = {"index": record.index, "term": record.term, "pos": record.pos, "type": record.type,
                              "body": text, "encoding": encoding, "body_crc": record.body_crc}
    if record.producer is not None:
        fields["producer"] = {"id": record.producer.producer_id, "epoch": record.producer.epoch,
                              "sequence": record.producer.sequence}
    if record.topic_id is not None:
        fields["topic_id"] = record.topic_id
        if record.topic is not None:
            fields["topic"] = record.topic
        fields.update(queue=record.queue, queue_offset=record.queue_offset, keys=record.keys, tags=record.tags,
                      properties=record.properties)
    return fields


def record_headers(record: Record) -> dict[str, str]:
    """What an entry's raw body comes with: its record in X-Raftlog-* headers (keys, tags and properties
    as ASCII JSON)."""
    headers = {"X-Raftlog-Index": str(record.index), "X-Raftlog-Term": str(record.term),
               "X-Raftlog-Pos": str(record.pos), "X-Raftlog-Type": record.type,
               "X-Raftlog-Body-Crc": str(record.body_crc)}
    if record.producer is not None:
        headers.update({"X-Raftlog-Producer-Id": str(record.producer.producer_id),
                        "X-Raftlog-Producer-Epoch": str(record.producer.epoch),
                        "X-Raftlog-Sequence": str(record.producer.sequence)})
    if record.topic_id is not None:
        headers["X-Raftlog-Topic-Id"] = str(record.topic_id)
        if record.topic is not None:
            headers["X-Raftlog-Topic"] = record.topic
        headers.update({"X-Raftlog-Queue": str(record.queue), "X-Raftlog-Queue-Offset": str(record.queue_offset),
                        "X-Raftlog-Keys": ASCII_JSON.encode(record.keys),
                        "X-Raftlog-Tags": ASCII_JSON.encode(record.tags),
                        "X-Raftlog-Properties": ASCII_JSON.encode(record.properties)})
    return headers


class ModelResponse(JSONResponse):
    """An answer's model (api.schemas) as compact JSON, in pydantic's own encoder."""

    def render(self, content: Any) -> bytes:
        return content.model_dump_json().encode()


def content_type(request: Request) -> str:
    """The media type, from the raw headers (Request.headers builds a multi-dict first)."""
    for name, value in request.scope["headers"]:
        if name == b"content-type":
            return value.decode("latin-1").split(";")[0].strip().lower()
    return ""


def producer_of(request: Request) -> Sequenced | None:
    """The producer session an append names in its X-Raftlog-Producer-Id, -Producer-Epoch (0 if not
    given) and X-Raftlog-Sequence headers (None: it names none); 400 if they do not add up."""
    fields: dict[str, int] = {}
    for name, value in request.scope["headers"]:
        if name in PRODUCER_HEADERS:
            if not value.isdigit() or len(value) > 20:  # a u64 has at most 20 digits
                raise bad_request(f"{name.decode()} must be a whole number below 2^64")
            fields[PRODUCER_HEADERS[name]] = int(value)
    if not fields:
        return None
    if "id" not in fields or "sequence" not in fields:
        raise bad_request("a producer's append names its X-Raftlog-Producer-Id and X-Raftlog-Sequence")
    return Sequenced(fields["id"], fields.get("epoch", 0), fields["sequence"])


def is_json(request: Request) -> bool:
    kind = content_type(request)
    return kind == "application/json" or kind.endswith("+json")


def _over_small_bound(request: Request, limit: int) -> ApiError:
    return too_large(f"{request.url.path} takes at most {limit} bytes (small_request_bytes_max)")


def not_json(request: Request) -> ApiError:
    """415 for a route that takes only JSON."""
    return ApiError(Code.UNEXPECTED_ARGUMENT, f"{request.url.path} takes application/json", status=415)


def parse_model(model: type[Any], data: bytes | dict[str, Any]) -> Any:
    """A request's model from its JSON (or, from gRPC, its fields); 400 with every problem named."""
    try:
        return model.model_validate_json(data) if isinstance(data, bytes) else model.model_validate(data)
    except ValidationError as exc:
        raise bad_request(f"{model.__name__}: {explain(exc.errors())}") from None


def json_batch_bodies(data: bytes, max_entries: int) -> list[bytes]:
    """The bodies of a JSON batch. The common form is read by `plain_batch_bodies`, without a
    pydantic model per entry (they cost a third of the leader's CPU per appended entry); anything
    else, an error above all, by the NewBatch model, whose answer stays the route's."""
    check_json_values(data, max_entries)
    bodies = plain_batch_bodies(data)
    if bodies is None:
        return [decode_body(e) for e in parse_model(NewBatch, data).entries]
    return bodies


def check_json_values(data: bytes, max_entries: int) -> None:
    """413 for a JSON batch that holds more than `max_entries` entries, before it is decoded: 64 MiB of
    `{"body":""}` would be millions of objects. A batch of n entries has at most 3n + 1 objects,
    arrays and commas outside its strings, and 4n + 1 strings. Counted with its strings' first (at
    least as many), and only when that passes the bound, again without them.

    Every step is a pass of bytes methods, linear in the body: escaped backslashes, then escaped
    quotes, are dropped (a run of backslashes in a string starts an escape, so pairs go first), which
    leaves only the quotes that open and close strings; their count bounds the pieces to split."""
    bound = 3 * max_entries + 1
    if data.count(b"{") + data.count(b"[") + data.count(b",") <= bound:
        return
    unescaped = data.replace(b"\\\\", b"").replace(b'\\"', b"")
    if unescaped.count(b'"') <= 2 * (STRINGS_PER_ENTRY_MAX * max_entries + 1):
        outside = unescaped.split(b'"')[::2]
        if sum(p.count(b"{") + p.count(b"[") + p.count(b",") for p in outside) <= bound:
            return
    raise too_large(f"the batch holds more values than {max_entries} entries (max_batch_entries) can")


def plain_batch_bodies(data: bytes) -> list[bytes] | None:
    """The bodies of `{"entries": [{"body": str, "encoding"?: "utf-8" | "base64"}, ...]}` in strict
    UTF-8 JSON with valid bodies, as NewBatch and `decode_body` would read them; None for anything
    else (NewBatch then answers it: its errors, in its order)."""
    try:
        batch = json.loads(data.decode(), parse_int=no_number, parse_float=no_number, parse_constant=no_number)
    except (ValueError, RecursionError):  # not UTF-8, not JSON or a number (ValueError), or nested too deep
        return None
    if type(batch) is not dict or len(batch) != 1 or type(entries := batch.get("entries")) is not list:
        return None
    bodies = []
    try:
        for entry in entries:
            if type(entry) is not dict or type(body := entry.get("body")) is not str:
                return None
            encoding = entry.get("encoding", "utf-8")
            if len(entry) != 1 + ("encoding" in entry):  # extra="forbid"
                return None
            if encoding == "utf-8":
                bodies.append(body.encode())
            elif encoding == "base64":
                bodies.append(base64.b64decode(body, validate=True))
            else:
                return None
    except ValueError:  # a lone surrogate (UnicodeEncodeError), or not base64: NewBatch and decode_body say so
        return None
    return bodies


def no_number(text: str) -> Any:
    """The common form holds no numbers: one ends its reading before int() parses it (a 4,300-digit
    number costs int() 80 µs; a 64 MiB body of them, seconds). NewBatch then says what is wrong."""
    raise ValueError(f"a number, {text[:20]}")


def decode_body(entry: NewEntry) -> bytes:
    if entry.encoding == "utf-8":
        return entry.body.encode()
    try:
        return base64.b64decode(entry.body, validate=True)
    except (binascii.Error, ValueError):  # ValueError: characters beyond ASCII
        raise bad_request("body is not valid base64") from None


def explain(errors: Any) -> str:
    """The first ERRORS_SHOWN_MAX problems, and how many more there are."""
    shown = "; ".join(f"{'.'.join(str(p) for p in e.get('loc', ())) or 'body'}: {e.get('msg')}"
                      for e in errors[:ERRORS_SHOWN_MAX])
    return shown + (f"; and {len(errors) - ERRORS_SHOWN_MAX} more" if len(errors) > ERRORS_SHOWN_MAX else "")
