"""The hottest public requests, answered in plain ASGI ahead of FastAPI.

A single append costs the leader about 0.6 ms of CPU, and py-spy showed half
of it in FastAPI and Starlette: middleware, routing, dependency solving.
`POST /v1/entries`, `POST /v1/entries/batch` (JSON or binary) and
`GET /v1/entries/{index}` (with no query string but `consistency`) are
answered here by the same `EntryHandlers` methods their FastAPI routes call,
with the same answers and errors; every other request, and anything unusual
about these (a bad index, another parameter), goes on to FastAPI, which also
documents the routes in openapi.yaml.

This sits inside the request counter, the limits and the token check
(api.public.serve_public), so those apply here as to FastAPI's routes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.routing import Match
from starlette.types import ASGIApp, Receive, Scope, Send

from api.errors import api_error, error_response

if TYPE_CHECKING:
    from api.public import EntryHandlers

ENTRIES = "/v1/entries"
BATCH = "/v1/entries/batch"
ENTRY_PREFIX = "/v1/entries/"
CONSISTENCY = {b"": True, b"consistency=linearizable": True, b"consistency=local": False}
INDEX_DIGITS_MAX = 18  # longer numbers go to FastAPI, whose validation answers them


class EntryFastPath:
    def __init__(self, app: ASGIApp, handlers: EntryHandlers) -> None:
        self.app = app
        self.handlers = handlers
        self._routes: dict[str, Any] = {}  # path template -> FastAPI's route, for the request counter

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            path, method = scope["path"], scope["method"]
            if method == "POST" and path == ENTRIES:
                self._route(scope, ENTRIES)
                await self._answer(self.handlers.append_one(Request(scope, receive)), scope, receive, send)
                return
            if method == "POST" and path == BATCH:
                self._route(scope, BATCH)
                await self._answer(self.handlers.append_batch(Request(scope, receive)), scope, receive, send)
                return
            if method == "GET" and path.startswith(ENTRY_PREFIX):
                digits = path[len(ENTRY_PREFIX):]
                linearizable = CONSISTENCY.get(scope["query_string"])
                plain = digits.isdigit() and digits.isascii() and len(digits) <= INDEX_DIGITS_MAX
                if plain and linearizable is not None:
                    self._route(scope, ENTRY_PREFIX + "{index}")
                    accept = next((v.decode("latin-1") for k, v in scope["headers"] if k == b"accept"), "")
                    await self._answer(self.handlers.get_one(int(digits), linearizable, accept), scope, receive,
                                       send)
                    return
        await self.app(scope, receive, send)

    @staticmethod
    async def _answer(handling: Any, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            response = await handling
        except Exception as exc:  # every error has one shape, as in FastAPI's handlers (api_error logs
            response = error_response(api_error(exc))  # an unexpected one with its incident id)
        await response(scope, receive, send)

    def _route(self, scope: Scope, template: str) -> None:
        """Name the route as FastAPI would, for CountRequests' labels."""
        route = self._routes.get(template)
        if route is None:
            router = getattr(self.app, "router", None)
            route = next((r for r in getattr(router, "routes", ()) if getattr(r, "path", None) == template
                          and r.matches({**scope, "type": "http"})[0] is Match.FULL), None)
            self._routes[template] = route
        scope["route"] = route
