"""The hottest public requests, answered without FastAPI, and for most clients without ASGI.

A single append costs the leader a few hundred µs of CPU, and py-spy showed
much of it in the frameworks: FastAPI's routing and dependency solving, then
at 64 connections about a fifth of the leader in the middleware layers
(request counter, Host and Origin checks, limits, token check), each a
coroutine and a wrapped `send` per request.

`POST /v1/entries`, `POST /v1/entries/batch` (JSON or binary),
`GET /v1/entries/{index}` (with no query string but `consistency`) and a topic's
`POST /v1/topics/{name}/messages` (with no query string) are hot
(`EntryFastPath.match`). They are answered by the same `EntryHandlers`
methods their FastAPI routes call, with the same answers and errors; anything
unusual about them (a bad index, another parameter) goes on to FastAPI, which
also documents the routes in openapi.yaml. Two ways in:

- `BelowAsgi`: the connection protocol (app.client_protocol) asks it about
  each request before uvicorn runs the ASGI app. The ASGI stack's list of
  checks (api.request_checks) runs on the headers first; a request any of them
  refuses, or whose client and scheme a trusted proxy's headers rewrite
  (uvicorn's ProxyHeadersMiddleware), goes the ASGI way, which answers it. The others are
  answered here, counted and held in the limits, their answers carrying the
  headers BrowserGuard adds.
- `EntryFastPath`: the same answers inside the ASGI stack (api.public.serve_public),
  for what went the ASGI way and for ASGI callers (tests).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Match
from starlette.types import ASGIApp, Receive, Scope, Send

from raftlog.api.browser import guarded_headers
from raftlog.api.entry_handlers import EntryHandlers
from raftlog.api.errors import api_error, error_response
from raftlog.api.limits import RequestLimits
from raftlog.api.request_checks import RequestChecks, RequestHead

ENTRIES = "/v1/entries"
BATCH = "/v1/entries/batch"
ENTRY_PREFIX = "/v1/entries/"
TOPICS_PREFIX, MESSAGES_SUFFIX = "/v1/topics/", "/messages"
MESSAGES = TOPICS_PREFIX + "{name}" + MESSAGES_SUFFIX
CONSISTENCY = {b"": True, b"consistency=linearizable": True, b"consistency=local": False}
INDEX_DIGITS_MAX = 18  # longer numbers go to FastAPI, whose validation answers them
PROXY_HEADERS = frozenset({b"x-forwarded-for", b"x-forwarded-proto"})  # what ProxyHeadersMiddleware reads

Handling = Callable[[Request], Awaitable[Response]]
Messages = Callable[..., Awaitable[Response]]  # (request, name=topic)


class EntryFastPath:
    def __init__(self, app: ASGIApp, handlers: EntryHandlers, messages: Messages | None = None) -> None:
        """`messages`: what answers a topic's appends (api.topic_routes.MessageAppends)."""
        self.app = app
        self.handlers = handlers
        self.messages = messages
        self._routes: dict[str, Any] = {}  # path template -> FastAPI's route, for the request counter

    def match(self, scope: Scope) -> tuple[str, Handling] | None:
        """A hot request's route template and what answers it; None: FastAPI's to answer."""
        path, method = scope["path"], scope["method"]
        if method == "POST":
            if path == ENTRIES:
                return ENTRIES, self.handlers.append_one
            if path == BATCH:
                return BATCH, self.handlers.append_batch
            if path.startswith(TOPICS_PREFIX) and path.endswith(MESSAGES_SUFFIX) and not scope["query_string"] \
                    and self.messages is not None:
                name = path[len(TOPICS_PREFIX):-len(MESSAGES_SUFFIX)]
                if name and "/" not in name:
                    return MESSAGES, partial(self.messages, name=name)
        elif method == "GET" and path.startswith(ENTRY_PREFIX):
            digits = path[len(ENTRY_PREFIX):]
            linearizable = CONSISTENCY.get(scope["query_string"])
            if linearizable is not None and digits.isdigit() and digits.isascii() and len(digits) <= INDEX_DIGITS_MAX:
                accept = next((v.decode("latin-1") for k, v in scope["headers"] if k == b"accept"), "")
                return ENTRY_PREFIX + "{index}", partial(self._get, int(digits), linearizable, accept)
        return None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        hot = self.match(scope) if scope["type"] == "http" else None
        if hot is None:
            await self.app(scope, receive, send)
            return
        template, handling = hot
        self._route(scope, template)
        response = await answer(handling, Request(scope, receive))
        await response(scope, receive, send)

    async def _get(self, index: int, linearizable: bool, accept: str, request: Request) -> Response:
        return await self.handlers.get_one(index, linearizable, accept)

    def _route(self, scope: Scope, template: str) -> None:
        """Name the route as FastAPI would, for CountRequests' labels."""
        route = self._routes.get(template)
        if route is None:
            router = getattr(self.app, "router", None)
            route = next((r for r in getattr(router, "routes", ()) if getattr(r, "path", None) == template
                          and r.matches({**scope, "type": "http"})[0] is Match.FULL), None)
            self._routes[template] = route
        scope["route"] = route


class BelowAsgi:
    """Answers hot requests from the connection protocol, before an ASGI call exists: `take(scope)`
    gives the ASGI callable that answers it, or None for the app uvicorn serves. A request that any
    of `checks` (the ASGI stack's own list) refuses goes that way, which answers the refusal."""

    def __init__(self, fast_path: EntryFastPath, checks: RequestChecks, limits: RequestLimits,
                 requests: Any) -> None:
        self.fast_path = fast_path
        self.checks = checks
        self.limits = limits
        self.requests = requests  # NodeMetrics.http_requests, CountRequests' counter

    def take(self, scope: Scope) -> ASGIApp | None:
        hot = self.fast_path.match(scope)
        if hot is None:
            return None
        for name, _ in scope["headers"]:
            if name in PROXY_HEADERS:  # from trusted_proxies, they rewrite the scope: uvicorn's middleware does
                return None
        if self.checks.refusal(scope, RequestHead.of(scope)) is not None:
            return None
        return partial(self._answer, *hot)

    async def _answer(self, template: str, handling: Handling, scope: Scope, receive: Receive, send: Send) -> None:
        body = self.limits.admit(receive)
        status = 500  # as CountRequests counts an answer that never started
        try:
            response = await answer(handling, Request(scope, body))
            status = response.status_code
            await send({"type": "http.response.start", "status": status,
                        "headers": guarded_headers(response.raw_headers)})
            await send({"type": "http.response.body", "body": response.body})
        finally:
            self.limits.release(body)
            self.requests.inc((template, scope["method"], str(status)))


async def answer(handling: Handling, request: Request) -> Response:
    """The handler's answer, or its error's: every error has one shape, as in FastAPI's handlers
    (api_error logs an unexpected one with its incident id)."""
    try:
        return await handling(request)
    except Exception as exc:
        return error_response(api_error(exc))
