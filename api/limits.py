"""Bounds on what clients can make a member hold: requests and request bytes in flight.

ASGI middleware of the client port, outside everything else but the request
counter:
- at most `max_inflight_requests` requests at once; beyond, 503 SERVER_BUSY with
  Retry-After (health checks and metrics are exempt, so a busy member can still
  be watched);
- reads that wait for the log (`follow`, `wait_ms`) may stay open for long, so
  they count apart: at most `max_followers` at once, beyond them 503 too;
- a request body over `max_request_bytes` is refused with 413: at once when its
  Content-Length says so, else when the bytes received pass the limit;
- all bodies being received at once share `max_inflight_body_bytes`; a request
  that would pass it is refused with 503 SERVER_BUSY, so memory stays bounded
  however many large requests arrive together.

Refusals raised while a route reads its body are ApiErrors: the routes' error
handlers answer them like any other. Slow clients are app.server's concern
(the connection protocol closes requests that do not arrive in time).
"""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qs

from starlette.types import ASGIApp, Receive, Scope, Send

from api.errors import ApiError, bad_request, error_response, too_large
from raft.messages import Code

EXEMPT_PATHS = frozenset({"/healthz", "/readyz", "/metrics"})
FOLLOWED_PATH = "/v1/entries"


class RequestLimits:
    def __init__(self, app: ASGIApp, *, max_inflight_requests: int, max_request_bytes: int,
                 max_inflight_body_bytes: int, max_followers: int) -> None:
        self.app = app
        self.max_inflight_requests = max_inflight_requests
        self.max_followers = max_followers
        self.followers = 0
        self.max_request_bytes = max_request_bytes
        self.max_inflight_body_bytes = max_inflight_body_bytes
        self.inflight_requests = 0
        self.inflight_body_bytes = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in EXEMPT_PATHS:
            await self.app(scope, receive, send)
            return
        if _follows(scope):
            if self.followers >= self.max_followers:
                await error_response(busy(f"{self.followers} reads follow the log on this member: "
                                          "max_followers"))(scope, receive, send)
                return
            self.followers += 1
            try:
                await self.app(scope, receive, send)  # a GET: no body to count
            finally:
                self.followers -= 1
            return
        refusal = self._refusal(scope)
        if refusal is not None:
            await error_response(refusal)(scope, receive, send)
            return
        self.inflight_requests += 1
        held = 0

        async def counted_receive() -> Any:
            nonlocal held
            message = await receive()
            size = len(message.get("body", b""))
            if size:
                if held + size > self.max_request_bytes:
                    raise too_large(f"the request body is over max_request_bytes ({self.max_request_bytes})")
                if self.inflight_body_bytes + size > self.max_inflight_body_bytes:
                    raise busy(f"request bodies in flight on this member are at max_inflight_body_bytes "
                               f"({self.max_inflight_body_bytes})")
                held += size
                self.inflight_body_bytes += size
            return message

        try:
            await self.app(scope, counted_receive, send)
        finally:
            self.inflight_requests -= 1
            self.inflight_body_bytes -= held

    def _refusal(self, scope: Scope) -> ApiError | None:
        if self.inflight_requests >= self.max_inflight_requests:
            return busy(f"{self.inflight_requests} requests in flight on this member: max_inflight_requests")
        for name, value in scope["headers"]:
            if name == b"content-length":
                if not value.isdigit():
                    return bad_request(f"Content-Length {value[:40]!r} is not a number")
                if len(value) > 19 or int(value) > self.max_request_bytes:
                    return too_large(f"the request body is over max_request_bytes ({self.max_request_bytes})")
        return None


def _follows(scope: Scope) -> bool:
    """A read that waits for entries to commit: a follow stream or a long-poll."""
    if scope["method"] != "GET" or scope["path"] != FOLLOWED_PATH:
        return False
    query = parse_qs(scope["query_string"].decode("latin-1"))
    return "wait_ms" in query or query.get("follow", ["false"])[-1].lower() not in ("false", "0", "no", "off", "")


def busy(message: str) -> ApiError:
    """503 SERVER_BUSY with Retry-After: nothing was done, try again shortly."""
    return ApiError(Code.SERVER_BUSY, message)
