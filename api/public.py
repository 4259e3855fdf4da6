"""The public API on the client port: /v1 routes, health, metrics.

Bodies are bytes: raw (`application/octet-stream`, or any type but JSON) or
JSON with an `encoding`. Every error has one shape (api.errors) and its status
from one table; nothing is appended unless the whole request is valid.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable, Iterable
from importlib.metadata import version
from operator import attrgetter
from typing import Any

from fastapi import FastAPI, Path, Query, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.openapi.utils import get_openapi
from fastapi.responses import HTMLResponse, JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST
from pydantic import BaseModel
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match
from starlette.types import ASGIApp

from raftlog.api import group_schemas, schemas, topic_schemas
from raftlog.api.auth import SAFE_METHODS, AuthFailures, TokenCheck, Tokens, required_role
from raftlog.api.bodies import BATCH_CONTENT_TYPE
from raftlog.api.browser import PROBE_PATHS, BrowserGuard, GuardedHeaders, page_policy
from raftlog.api.delivery import install_delivery_routes
from raftlog.api.entry_handlers import COMPACT_JSON, OCTETS, EntryHandlers, ModelResponse, explain, record_json
from raftlog.api.errors import AnswerErrors, ApiError, api_error, bad_request, error_response
from raftlog.api.fast_path import INDEX_DIGITS_MAX, BelowAsgi, EntryFastPath, Messages
from raftlog.api.follow import LogPage, LogStream
from raftlog.api.limits import EXEMPT_PATHS, InflightBytes, RequestLimits
from raftlog.api.metrics import HISTORY_INTERVAL_S, SCRAPED_QUEUES, CountRequests, scraped_queues
from raftlog.api.read_plan import LogRead, Stream
from raftlog.api.request_checks import RequestCheck, RequestChecks
from raftlog.api.schemas import (
    CONSISTENCY,
    Appended,
    BatchAppended,
    ChartHistory,
    ClusterStatus,
    Consistency,
    EntryOut,
    EntryPage,
    ErrorBody,
    GroupConfiguration,
    Health,
    NewBatch,
    NewEntry,
    NewMember,
    Transferred,
    TransferTarget,
)
from raftlog.raft.messages import Code
from raftlog.raft.producers import EPOCH_MAX, PRODUCER_ID_MAX, SEQUENCE_MAX
from raftlog.storage.record import Record

SWAGGER_SOURCES = "https://cdn.jsdelivr.net https://fastapi.tiangolo.com"  # /docs' scripts, styles and icon
NDJSON = "application/x-ndjson"
ENTRIES_CONTENT_TYPE = "application/vnd.raftlog.entries"
SSE = "text/event-stream"
SSE_KEEPALIVE_S = 15.0  # a comment line on an idle event stream, so proxies keep it open
DEFAULT_PAGE = 100
SCHEMA_MODULES = (schemas, topic_schemas, group_schemas)  # the models of request bodies parsed by hand
STREAM_CONTENT = {NDJSON: {"schema": {"$ref": "#/components/schemas/EntryOut"}}, SSE: {"schema": {"type": "string"}},
                  ENTRIES_CONTENT_TYPE: {"schema": {"type": "string", "format": "binary"}}}  # a read's streams

MEMBER_ID = Path(min_length=1, max_length=64, examples=["n4"], description="The member's id")

DESCRIPTION = """\
raftlog is a Raft-replicated, append-only log (DLedger's protocol). Append entries to any
member; read committed entries back by index from any member.

Every error answers `{"error": {"code", "message", "leader"}}` where `code` is DLedger's
response code name (or raftlog's own UNAUTHENTICATED, PERMISSION_DENIED, SERVER_BUSY, ...).
Statuses: 400 bad input (UNEXPECTED_ARGUMENT, REQUEST_WITH_EMPTY_BODYS, UNKNOWN_MEMBER), 401
UNAUTHENTICATED, 403 PERMISSION_DENIED or ORIGIN_NOT_ALLOWED (a state-changing request from a page
of another origin), 404 INDEX_OUT_OF_RANGE / UNKNOWN_MEMBER, 408 a request that did not arrive
within request_read_timeout_ms, 409 FALL_BEHIND_TOO_MUCH or a membership change refused
(MEMBER_EXISTS, ALREADY_VOTER, LAST_VOTER, CHANGE_IN_FLIGHT, LEARNER_BEHIND, QUORUM_AT_RISK,
SECRET_REQUIRED), 410 INDEX_LESS_THAN_LOCAL_BEGIN (cleaned), 413 too large (UNEXPECTED_ARGUMENT),
415 unsupported content type, 421 HOST_NOT_ALLOWED (on plaintext, a Host header that is not one of
the member's names), 431 headers over max_header_bytes, 500 INTERNAL_ERROR (with an incident id the
member's log has) / DISK_ERROR, 502 NETWORK_ERROR (the leader did not answer a forwarded call: the
outcome is unknown), 503 NOT_LEADER / LEADER_PENDING_FULL / LEADER_TRANSFERRING / SERVER_BUSY with
`Retry-After` (nothing was done), 504 WAIT_QUORUM_ACK_TIMEOUT / TERM_CHANGED / TIMEOUT (the entry
may still commit), 507 DISK_FULL.

When the member has API tokens, every route but the health checks, metrics and documentation
needs `Authorization: Bearer <token>` of a role that may call it (see each route).
"""

ERROR_TEXT = {
    400: "Bad input: malformed JSON, a wrong encoding, an empty batch or body, a bad parameter",
    401: "UNAUTHENTICATED: no bearer token, or an unknown one (the member has tokens)",
    403: "PERMISSION_DENIED: the token's role may not call this route (or move this consumer, or set its "
         "retention_floor); ORIGIN_NOT_ALLOWED: a state-changing request from a page of another origin",
    404: "INDEX_OUT_OF_RANGE: the index is not committed; UNKNOWN_MEMBER: no member has this id; "
         "CONSUMER_NOT_FOUND: no consumer of this name (or it expired)",
    409: "The transfer target is too far behind (FALL_BEHIND_TOO_MUCH) or the transfer failed; a membership change "
         "refused: MEMBER_EXISTS, ALREADY_VOTER, LAST_VOTER, CHANGE_IN_FLIGHT, LEARNER_BEHIND, QUORUM_AT_RISK, "
         "SECRET_REQUIRED; a producer's append refused: OUT_OF_ORDER_SEQUENCE (its sequence skips ahead: the "
         "message says which comes next), PRODUCER_FENCED (a newer epoch of the producer appended); a consumer's "
         "commit refused: CONSUMER_CONFLICT (its expected position is not the consumer's), CONSUMERS_FULL "
         "(consumers_max, or the owner's consumers_per_name_max), CONSUMER_POSITION_PAST_END (past the log's end)",
    410: "INDEX_LESS_THAN_LOCAL_BEGIN: the entry was cleaned away",
    413: "An entry over max_entry_bytes, or a request over max_request_bytes (small ones: small_request_bytes_max)",
    415: "A content type this route does not take",
    421: "HOST_NOT_ALLOWED: the Host header is not a name this member answers to (allowed_hosts)",
    500: "INTERNAL_ERROR or DISK_ERROR: a fault on this member",
    502: "NETWORK_ERROR: the leader did not answer a forwarded call",
    503: "No leader (NOT_LEADER), too many pending appends, a transfer in progress, or too many requests, request "
         "bytes or log for readers held on this member (SERVER_BUSY); nothing was done; see Retry-After",
    504: "WAIT_QUORUM_ACK_TIMEOUT or TERM_CHANGED: the outcome is unknown, the entry may still commit; "
         "TIMEOUT: a read or transfer did not finish in time",
    507: "DISK_FULL",
}


def errors(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """The error responses of a route, 500 included (any route can meet a fault)."""
    return {s: {"model": ErrorBody, "description": ERROR_TEXT[s]} for s in sorted({*statuses, 500})}


PRODUCER_PARAMETERS = [
    {"name": "X-Raftlog-Producer-Id", "in": "header", "required": False,
     "schema": {"type": "integer", "minimum": 0, "maximum": PRODUCER_ID_MAX},
     "description": "A producer session (POST /v1/producers hands one out): with X-Raftlog-Sequence, a retry of a "
                    "batch already in the log is answered with its original entries (duplicate: true), not "
                    "appended again"},
    {"name": "X-Raftlog-Producer-Epoch", "in": "header", "required": False,
     "schema": {"type": "integer", "minimum": 0, "maximum": EPOCH_MAX},
     "description": "The producer's epoch (0 when not sent); appends of a lower epoch are refused once a higher "
                    "one appended"},
    {"name": "X-Raftlog-Sequence", "in": "header", "required": False,
     "schema": {"type": "integer", "minimum": 0, "maximum": SEQUENCE_MAX},
     "description": "The first entry's sequence in the session; each entry takes the next"},
]


def body_content(json_model: type[BaseModel], raw_type: str, raw_text: str, raw_example: str) -> dict[str, Any]:
    """An OpenAPI request body taking JSON or raw bytes (parsed by hand, so FastAPI cannot infer it), and
    the headers of a producer session."""
    return {"parameters": PRODUCER_PARAMETERS, "requestBody": {"required": True, "content": {
        "application/json": {"schema": {"$ref": f"#/components/schemas/{json_model.__name__}"}},
        raw_type: {"schema": {"type": "string", "format": "binary", "description": raw_text},
                   "example": raw_example}}}}


def create_public_app(handlers: EntryHandlers) -> FastAPI:
    """The public API's routes, documented. Serve it behind `serve_public`, which counts requests
    and answers the hottest forms without FastAPI's per-request work."""
    app = FastAPI(title="raftlog", version=version("raftlog"), description=DESCRIPTION,
                  docs_url=None, redoc_url=None, generate_unique_id_function=lambda route: route.name)
    _install_error_handlers(app)
    _install_docs(app)
    service, metrics = handlers.service, handlers.metrics
    limits = service.limits

    @app.post("/v1/entries", status_code=201, tags=["entries"], summary="Append one entry",
              responses={201: {"model": Appended, "description": "Committed"},
                         **errors(400, 409, 413, 502, 503, 504, 507)},
              openapi_extra=body_content(NewEntry, OCTETS, "The entry's body, byte for byte", "hello"))
    async def append_entry(request: Request) -> JSONResponse:
        return await handlers.append_one(request)

    @app.post("/v1/entries/batch", status_code=201, tags=["entries"], summary="Append a batch, all or nothing",
              responses={201: {"model": BatchAppended, "description": "All committed"},
                         **errors(400, 409, 413, 415, 502, 503, 504, 507)},
              openapi_extra=body_content(NewBatch, BATCH_CONTENT_TYPE,
                                         "Entries as a sequence of u32 big-endian length + body bytes",
                                         "\\x00\\x00\\x00\\x01a\\x00\\x00\\x00\\x01b"))
    async def append_batch(request: Request) -> JSONResponse:
        return await handlers.append_batch(request)

    @app.get("/v1/entries/{index}", tags=["entries"], summary="Read one committed entry",
             responses={200: {"model": EntryOut, "description": "The entry; with `Accept: application/"
                              "octet-stream` its raw body, metadata in X-Raftlog-* headers",
                              "content": {OCTETS: {"schema": {"type": "string", "format": "binary"}}}},
                        **errors(400, 404, 410, 502, 503, 504)})
    async def get_entry(request: Request, index: int = Path(ge=0, examples=[42]),
                        consistency: Consistency = CONSISTENCY) -> Response:
        return await handlers.get_one(index, consistency == "linearizable", request.headers.get("accept", ""))

    @app.get("/v1/entries", tags=["entries"], summary="Read consecutive committed entries, or follow the log",
             responses={200: {"model": EntryPage, "description": (
                 "A page of entries; with `Accept: application/x-ndjson` a stream of entries, one JSON object "
                 "per line; with `Accept: text/event-stream` server-sent events, `id:` the index, `data:` the "
                 f"entry as JSON; with `Accept: {ENTRIES_CONTENT_TYPE}` the entries as stored (DLedger's format: "
                 "a 48-byte big-endian header, then the body), for bulk readers. A stream that fails after its "
                 "200 (its next entry was cleaned away) ends with an error line, or an `error` event"),
                              "content": STREAM_CONTENT},
                        **errors(400, 404, 410, 502, 503, 504)})
    async def read_entries(request: Request, start: int | None = Query(None, ge=0, description=(
                               "The first index to read (default 0)"), examples=[0]),
                           pos: int | None = Query(None, ge=0, description=(
                               "Or the first entry's byte position, as an append answered it: 400 when no "
                               "entry starts there, 404 beyond the committed log, 410 when cleaned away"),
                                                   examples=[6216]),
                           limit: int | None = Query(None, ge=1, description=(
                               f"At most this many entries (JSON: default {DEFAULT_PAGE}, at most "
                               f"{limits.range_limit_max}; streams: default all committed, or no end when "
                               "following)"), examples=[100]),
                           consistency: Consistency = CONSISTENCY,
                           follow: bool = Query(False, description=(
                               "Streams only: stay open and send each entry as it commits (a tail). The stream "
                               "ends after `limit` entries, or when the member stops: resume from the index "
                               "after the last one received (server-sent events: the browser's Last-Event-ID "
                               "does it)")),
                           wait_ms: int = Query(0, ge=0, le=limits.long_poll_max_ms, description=(
                               "Long-poll: when nothing at or after the start is committed yet, wait up to "
                               "this long and answer as soon as an entry commits"), examples=[30000]),
                           consumer: str | None = Query(None, description=(
                               "A named consumer: read on from the entry after its committed position (from "
                               "`start` when it has none; PUT /v1/consumers/{name} commits one)"),
                                                        examples=["billing"]),
                           control: bool = Query(False, description=(
                               "Also the bookkeeping entries (types consumer: named consumers' commits; "
                               "producer_session: sessions opened and closed; cluster_version; topic: changes "
                               "to the topic catalog; queue_commit: consumer groups' offsets), which reads of "
                               "data skip; the stored format always has them")),
                           ) -> Response:
        stream = stream_kind(request, follow)
        if (start is not None and pos is not None) or (consumer is not None and pos is not None):
            raise bad_request("give start or pos, not both; consumer or pos, not both")
        resumed = last_event_id(request, stream)
        if resumed is not None:  # an EventSource reconnecting: on from the entry after the last it got
            start, pos, consumer = resumed + 1, None, None
        read = LogRead(start=start, pos=pos, consumer=consumer, limit=limit or 0, control=control, follow=follow,
                       linearizable=consistency == "linearizable", wait_s=wait_ms / 1000)
        if stream is not None:
            planned = await handlers.reads.stream(read, idle_s=SSE_KEEPALIVE_S if stream == SSE else None)
            return streamed(planned, stream, {"X-Raftlog-Committed-Index": str(planned.end)})
        page = await handlers.reads.page(read, min(limit or DEFAULT_PAGE, limits.range_limit_max))
        return LogPage({"entries": [record_json(r) for r in page.records], "next": page.next,
                        "committed_index": page.committed}, service.follow_budget)

    install_delivery_routes(app, handlers, errors)

    @app.get("/v1/cluster", tags=["cluster"], summary="Cluster and member status",
             responses={200: {"model": ClusterStatus, "description": "As this member sees it"}})
    async def cluster() -> JSONResponse:
        return ModelResponse(ClusterStatus.of(await service.cluster_status()))

    @app.get("/v1/cluster/history", tags=["cluster"], summary="The last five minutes of the admin page's charts",
             responses={200: {"model": ChartHistory, "description": "One point a second, oldest first"}})
    async def history() -> JSONResponse:
        return JSONResponse({"interval_s": HISTORY_INTERVAL_S, "points": list(metrics.history)})

    @app.post("/v1/cluster/leader", tags=["cluster"], summary="Transfer leadership",
              responses={200: {"model": Transferred, "description": "The target leads"},
                         **errors(400, 409, 415, 502, 503, 504)},
              openapi_extra={"requestBody": {"required": True, "content": {"application/json": {
                  "schema": {"$ref": "#/components/schemas/TransferTarget"}}}}})
    async def transfer(request: Request) -> JSONResponse:
        target = await handlers.read_json(request, TransferTarget)
        return ModelResponse(Transferred.of(await service.transfer_leadership(target.target)))

    @app.get("/v1/cluster/members", tags=["cluster"], summary="The group's configuration",
             responses={200: {"model": GroupConfiguration, "description": "The configuration in force on this "
                              "member: the latest in its log, committed or not"}})
    async def members() -> JSONResponse:
        return ModelResponse(GroupConfiguration.of(service.members()))

    @app.post("/v1/cluster/members", status_code=201, tags=["cluster"], summary="Add a member (a learner)",
              responses={201: {"model": GroupConfiguration, "description": "The new configuration, committed"},
                         **errors(400, 409, 415, 502, 503, 504)},
              openapi_extra={"requestBody": {"required": True, "content": {"application/json": {
                  "schema": {"$ref": "#/components/schemas/NewMember"}}}}})
    async def add_member(request: Request) -> JSONResponse:
        new = await handlers.read_json(request, NewMember)
        return ModelResponse(GroupConfiguration.of(await service.change_membership("add", new.id, new.as_peer())),
                             status_code=201)

    @app.post("/v1/cluster/members/{member_id}/promote", tags=["cluster"], summary="Promote a learner to voter",
              responses={200: {"model": GroupConfiguration, "description": "The new configuration, committed"},
                         **errors(400, 404, 409, 502, 503, 504)})
    async def promote_member(member_id: str = MEMBER_ID) -> JSONResponse:
        return ModelResponse(GroupConfiguration.of(await service.change_membership("promote", member_id)))

    @app.delete("/v1/cluster/members/{member_id}", tags=["cluster"], summary="Remove a member",
                responses={200: {"model": GroupConfiguration, "description": "The new configuration, committed"},
                           **errors(400, 404, 409, 502, 503, 504)})
    async def remove_member(member_id: str = MEMBER_ID) -> JSONResponse:
        return ModelResponse(GroupConfiguration.of(await service.change_membership("remove", member_id)))

    @app.get("/healthz", tags=["health"], summary="The process is up", response_model=Health)
    async def healthz() -> dict[str, Any]:
        return {"status": "ok"}

    @app.get("/readyz", tags=["health"], summary="Has a leader and has caught up with it",
             responses={200: {"model": Health}, 503: {"model": Health, "description": "Not ready"}})
    async def readyz() -> JSONResponse:
        node = service.node
        ready = node.caught_up
        return JSONResponse({"status": "ready" if ready else "not ready", "role": node.role.value,
                             "leader": node.leader_id}, status_code=200 if ready else 503)

    @app.get("/metrics", tags=["health"], summary="Prometheus metrics",
             responses={200: {"content": {"text/plain": {"schema": {"type": "string"}}},
                              "description": "Prometheus text format"}, **errors(400)})
    async def prometheus(queue: list[str] = SCRAPED_QUEUES) -> Response:
        return Response(metrics.exposition(scraped_queues(queue)), media_type=CONTENT_TYPE_LATEST)

    app.openapi = lambda: _openapi(app)  # type: ignore[method-assign]
    return app


def serve_public(app: FastAPI, handlers: EntryHandlers, tokens: Tokens | None, *,
                 budget: InflightBytes, allowed_hosts: Iterable[str] | None, allowed_origins: Iterable[str] = (),
                 plaintext: bool = True, messages: Messages | None = None) -> tuple[ASGIApp, BelowAsgi]:
    """What the client port serves: the ASGI app (the request counter, the guarded headers, the
    checks: Host and Origin, the token when there are tokens, the limits; then the limits holding
    request bodies in `budget`, the member's ports' one, and `app` behind the fast path), and the
    hot requests' answers below ASGI, under the same checks and counters."""
    service, metrics = handlers.service, handlers.metrics
    fast_path = EntryFastPath(app, handlers, messages)
    limits = service.limits
    bounded = RequestLimits(fast_path, max_inflight_requests=limits.max_inflight_requests,
                            max_request_bytes=limits.max_request_bytes,
                            max_followers=limits.max_followers, budget=budget)
    metrics.watch_limits(lambda: bounded.inflight_requests, lambda: bounded.inflight_body_bytes,
                         lambda: bounded.followers, lambda: service.follow_budget.held)
    checks: list[RequestCheck] = [BrowserGuard(allowed_hosts, allowed_origins, plaintext=plaintext)]
    if tokens is not None:
        checks.append(TokenCheck(tokens, lambda scope: next(
            (r for r in app.routes if r.matches(scope)[0] is Match.FULL), None)))
    checks.append(bounded.refusal)
    checked = RequestChecks(bounded, checks, AuthFailures(metrics.auth_failures, "client"))
    return CountRequests(GuardedHeaders(checked), metrics), BelowAsgi(fast_path, checked, bounded,
                                                                      metrics.http_requests)


def _openapi(app: FastAPI) -> dict[str, Any]:
    """The generated schema, plus the request models the routes parse by hand: their openapi_extra
    names each by a `$ref` that FastAPI leaves dangling, so every dangling name is looked up in
    SCHEMA_MODULES' models, in order (no list of names to keep up to date); one that still resolves to
    nothing raises."""
    if app.openapi_schema is None:
        prefix = "#/components/schemas/"

        def named(document: dict[str, Any]) -> set[str]:  # the components the document's `$ref`s name
            return {part.split('"', 1)[0] for part in json.dumps(document).split(f'"$ref": "{prefix}')[1:]}

        schema = get_openapi(title=app.title, version=app.version, description=app.description,
                             routes=app.routes)
        components = schema.setdefault("components", {}).setdefault("schemas", {})
        for name in sorted(named(schema) - components.keys()):
            model = next(found for module in SCHEMA_MODULES if (found := getattr(module, name, None)) is not None)
            defs = model.model_json_schema(ref_template=prefix + "{model}")
            components.update(defs.pop("$defs", {}))
            components[name] = defs
        components.pop("HTTPValidationError", None)
        components.pop("ValidationError", None)
        schema["components"]["securitySchemes"] = {"token": {
            "type": "http", "scheme": "bearer",
            "description": "An API token (settings `tokens`, `tokens_file`) when the member has tokens: "
                           "reader (GET routes), writer (appends and reads), admin (everything)"}}
        for path, methods in schema["paths"].items():
            for method, operation in methods.items():
                responses = operation["responses"]
                responses.pop("422", None)
                role = required_role(method.upper(), path)
                if role is not None:
                    operation["security"] = [{"token": []}]
                    operation["description"] = (operation.get("description", "") + "\n\nNeeds a token of the "
                                                f"`{role.name.lower()}` role or higher, when the member has "
                                                "tokens.").strip()
                    responses.update({str(s): _error_response(s) for s in (401, 403)})
                if path not in EXEMPT_PATHS:
                    responses.setdefault("503", _error_response(503))
                if path not in PROBE_PATHS:  # api.browser: a Host that is none of the member's names
                    responses.setdefault("421", _error_response(421))
                if method.upper() not in SAFE_METHODS:  # ... and a page of another origin
                    responses.setdefault("403", _error_response(403))
                if method == "post":
                    responses.setdefault("413", _error_response(413))
        dangling = named(schema) - components.keys()
        assert not dangling, f"$refs to no component: {sorted(dangling)}"
        app.openapi_schema = schema
    return app.openapi_schema


def _install_docs(app: FastAPI) -> None:
    """Swagger UI at /docs, as FastAPI serves it, with a Content-Security-Policy that lets its scripts
    and styles load from their CDN and run its own inline script."""
    html = bytes(get_swagger_ui_html(openapi_url="/openapi.json", title=f"{app.title} - Swagger UI").body).decode()
    headers = {"Content-Security-Policy": page_policy(html, sources=SWAGGER_SOURCES)}

    @app.get("/docs", include_in_schema=False)
    async def docs() -> HTMLResponse:
        return HTMLResponse(html, headers=headers)


def _methods_of(request: Request, literal_only: bool = False) -> set[str]:
    """The methods of every route whose path is the request's (with `literal_only`, of routes
    without path parameters)."""
    scope = {**request.scope, "method": "GET"}
    return {method for route in request.app.routes if getattr(route, "methods", None)
            and not (literal_only and route.param_convertors) and route.matches(scope)[0] is not Match.NONE
            for method in route.methods}


def _not_allowed(request: Request) -> JSONResponse:
    """405 with an Allow header naming every method of the path (Starlette names only the first route's)."""
    allowed = _methods_of(request, literal_only=True) or _methods_of(request)  # a literal path wins
    response = error_response(ApiError(Code.UNSUPPORTED, f"{request.method} is not a method of {request.url.path}",
                                       status=405))
    response.headers["Allow"] = ", ".join(sorted(allowed))
    return response


def _error_response(status: int) -> dict[str, Any]:
    return {"description": ERROR_TEXT[status],
            "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorBody"}}}}


def stream_kind(request: Request, follow: bool) -> str | None:
    """The stream a read's Accept asks for: NDJSON, SSE or the stored format (None: a JSON page, which
    cannot follow)."""
    accept = request.headers.get("accept", "")
    kind = next((kind for kind in (NDJSON, SSE, ENTRIES_CONTENT_TYPE) if kind in accept), None)
    if follow and kind is None:
        raise bad_request(f"follow needs a stream: Accept {NDJSON}, {SSE} or {ENTRIES_CONTENT_TYPE}")
    return kind


def last_event_id(request: Request, kind: str | None) -> int | None:
    """The position (an index, a queue offset) of the last event an EventSource got before it
    reconnected: its Last-Event-ID (None: not a reconnection)."""
    resumed = request.headers.get("last-event-id") if kind == SSE else None
    if resumed is None:
        return None
    if not (resumed.isascii() and resumed.isdigit() and len(resumed) <= INDEX_DIGITS_MAX):
        raise bad_request(f"Last-Event-ID {resumed[:40]!r} is not an index")
    return int(resumed)


def streamed(stream: Stream, kind: str, headers: dict[str, str],
             event_id: Callable[[Record], int] = attrgetter("index")) -> LogStream:
    """A stream's answer; each server-sent event's id is `event_id` of its record (the log's: its index)."""
    return LogStream(_rendered(stream, kind, event_id), media_type=kind, headers={
        **headers, "Cache-Control": "no-store", "X-Accel-Buffering": "no"})  # a proxy (nginx) passes each entry on


async def _rendered(stream: Stream, kind: str, event_id: Callable[[Record], int]) -> AsyncIterator[bytes]:
    """A stream's bytes. An error after the 200 (the next entry was cleaned away under a slow reader)
    ends an NDJSON stream with an error line and an event stream with an `error` event; the stored
    format has no room for one: its connection is cut, so the reader sees the stream unfinished."""
    try:
        async for chunk in stream.chunks:
            if chunk is None:
                if kind == SSE:
                    yield b": keepalive\n\n"
            elif kind == NDJSON:
                yield b"".join(json.dumps(record_json(r)).encode() + b"\n" for r in stream.records(chunk))
            elif kind == SSE:  # one event per entry: its index (or offset) as the event id, the entry as JSON
                yield b"".join(b"id: %d\ndata: %s\n\n" % (event_id(r), json.dumps(record_json(r)).encode())
                               for r in stream.records(chunk))
            else:
                yield b"".join(chunk)
    except ApiError as exc:
        if kind == ENTRIES_CONTENT_TYPE:
            raise
        error = COMPACT_JSON.encode(exc.body()).encode()
        yield error + b"\n" if kind == NDJSON else b"event: error\ndata: " + error + b"\n\n"


def _install_error_handlers(app: FastAPI) -> None:
    async def on_api_error(_request: Request, exc: Exception) -> JSONResponse:
        return error_response(api_error(exc))

    async def on_validation(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, RequestValidationError)
        literal = _methods_of(request, literal_only=True)
        if literal and request.method not in literal:  # GET /v1/entries/batch: not an index, a route
            return _not_allowed(request)
        return error_response(bad_request(explain(exc.errors())))

    async def on_http(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, StarletteHTTPException)
        if exc.status_code == 405:
            return _not_allowed(request)
        return error_response(ApiError(Code.UNSUPPORTED, str(exc.detail), status=exc.status_code))

    app.add_exception_handler(ApiError, on_api_error)
    app.add_exception_handler(RequestValidationError, on_validation)
    app.add_exception_handler(StarletteHTTPException, on_http)
    app.add_middleware(AnswerErrors)  # any other exception: api_error's
