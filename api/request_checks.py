"""What every request on the client port must pass before a route or a hot answer runs: one list.

The ASGI middleware (`RequestChecks`) and the answers below ASGI
(api.fast_path.BelowAsgi) iterate the same list, in the same order, on the same
headers, so a check added to it holds on both ways in. A check reads the
request's scope and its `RequestHead` (the few headers checks read, the first
of each, taken in one pass) and says why it refuses, or None. Checks only
decide: what they let in is counted, budgeted and answered by the layers below.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from starlette.types import ASGIApp, Receive, Scope, Send

from raftlog.api.errors import ApiError, error_response

HEAD_FIELDS = {b"host": "host", b"origin": "origin", b"authorization": "authorization",
               b"content-length": "content_length", b"content-type": "content_type"}


@dataclass(slots=True)
class RequestHead:
    """The headers the checks read, the first of each: a repeated header cannot make two checks see
    two values."""

    host: bytes | None = None
    origin: bytes | None = None
    authorization: bytes | None = None
    content_length: bytes | None = None
    content_type: bytes | None = None

    @classmethod
    def of(cls, scope: Scope) -> RequestHead:
        head = cls()
        for name, value in scope["headers"]:
            field = HEAD_FIELDS.get(name)
            if field is not None and getattr(head, field) is None:
                setattr(head, field, value)
        return head


@dataclass(frozen=True, slots=True)
class Refusal:
    """A request refused before its route runs: the answer, and the reason it is counted and logged
    under in raftlog_auth_failures (None: a refusal of load, not of who is asking)."""

    error: ApiError
    reason: str | None = None


RequestCheck = Callable[[Scope, RequestHead], "Refusal | None"]


class Failures(Protocol):
    """Where refusals of who is asking are counted and logged (api.auth.AuthFailures)."""

    async def refuse(self, scope: Scope, receive: Receive, send: Send, error: ApiError, reason: str) -> None: ...


class RequestChecks:
    """ASGI middleware: each check of `checks` in turn, the first refusal answered. `checks` is the
    list BelowAsgi iterates too."""

    def __init__(self, app: ASGIApp, checks: list[RequestCheck], failures: Failures) -> None:
        self.app = app
        self.checks = checks
        self.failures = failures

    def refusal(self, scope: Scope, head: RequestHead) -> Refusal | None:
        for check in self.checks:
            refused = check(scope, head)
            if refused is not None:
                return refused
        return None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            refused = self.refusal(scope, RequestHead.of(scope))
            if refused is not None:
                if refused.reason is None:
                    await error_response(refused.error)(scope, receive, send)
                else:
                    await self.failures.refuse(scope, receive, send, refused.error, refused.reason)
                return
        await self.app(scope, receive, send)
