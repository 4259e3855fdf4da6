"""Who may call what: client tokens with roles on the client port, the cluster secret on the peer port.

Client port: `Authorization: Bearer <token>`; each token has a role, and each
role includes the ones below it (admin > writer > reader). Health checks,
metrics, the API's documentation and the admin page's HTML are open (the page
asks for a token before it reads anything). Peer port: every `/raft/*` call
carries the cluster secret the same way. A call without valid proof answers
401 (no or unknown credentials) or 403 (a role too low), is counted in
`raftlog_auth_failures` and logged, never with the token, and goes no further.

Tokens are looked up by their SHA-256 digest, and the secret is compared with
`hmac.compare_digest`: neither comparison's time depends on how much of a
guess was right.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from enum import IntEnum
from typing import Any

from starlette.types import ASGIApp, Receive, Scope, Send

from api.errors import ApiError, error_response
from raft.messages import Code

log = logging.getLogger("raftlog.auth")

TOKEN_CHARS_MIN = 16  # shorter tokens are refused at start: they can be guessed
OPEN_PATHS = frozenset({"/", "/healthz", "/readyz", "/metrics", "/docs", "/openapi.json"})
SAFE_METHODS = frozenset({"GET", "HEAD"})
WRITE_PATHS = frozenset({"/v1/entries", "/v1/entries/batch"})


class Role(IntEnum):
    """A token's role; a higher role may do everything a lower one may."""

    READER = 1  # GET routes
    WRITER = 2  # appends, and reads
    ADMIN = 3  # leadership transfer, the admin page's actions, and everything else


class TokenError(ValueError):
    """A tokens file or variable that cannot be used; the message names the line, never the token."""


@dataclass(frozen=True)
class Tokens:
    """The accepted client tokens, by the SHA-256 digest of each."""

    roles: dict[bytes, Role]

    @classmethod
    def parse(cls, text: str, source: str) -> Tokens:
        """`role:token` entries, one per line or comma-separated; blank lines and `#` comments skipped."""
        roles: dict[bytes, Role] = {}
        for number, line in enumerate(text.replace(",", "\n").splitlines(), 1):
            line = line.split("#", 1)[0].strip()
            if not line:
                continue
            role_name, sep, token = line.partition(":")
            where = f"{source}, entry {number}"
            try:
                role = Role[role_name.strip().upper()]
            except KeyError:
                raise TokenError(f"{where}: expected role:token with a role of reader, writer or admin") from None
            token = token.strip()
            if not sep or len(token) < TOKEN_CHARS_MIN:
                raise TokenError(f"{where}: the token must have at least {TOKEN_CHARS_MIN} characters")
            roles[_digest(token.encode())] = role
        return cls(roles)

    @classmethod
    def merge(cls, parts: Iterable[Tokens]) -> Tokens:
        roles: dict[bytes, Role] = {}
        for part in parts:
            roles.update(part.roles)
        return cls(roles)

    def role_of(self, token: bytes) -> Role | None:
        return self.roles.get(_digest(token))


def required_role(method: str, path: str) -> Role | None:
    """The least role a public request needs; None: open to anyone."""
    if method in SAFE_METHODS:
        return None if path in OPEN_PATHS else Role.READER
    if method == "POST" and path in WRITE_PATHS:
        return Role.WRITER
    return Role.ADMIN


def bearer(scope: Scope) -> bytes | None:
    """The credentials of an `Authorization: Bearer ...` header, if any."""
    for name, value in scope["headers"]:
        if name == b"authorization":
            scheme, _, credentials = value.partition(b" ")
            return credentials.strip() if scheme.lower() == b"bearer" else None
    return None


class AuthFailures:
    """Counts and logs refused calls (the metric lives in api.metrics.NodeMetrics)."""

    def __init__(self, counter: Any, port: str) -> None:
        self.counter = counter
        self.port = port

    async def refuse(self, scope: Scope, receive: Receive, send: Send, error: ApiError, reason: str) -> None:
        self.counter.labels(self.port, reason).inc()
        client = scope.get("client")
        log.warning("%s port: refused %s %s from %s: %s", self.port, scope["method"], scope["path"],
                    f"{client[0]}:{client[1]}" if client else "?", reason)
        response = error_response(error)
        if error.status == 401:
            response.headers["WWW-Authenticate"] = 'Bearer realm="raftlog"'
        await response(scope, receive, send)


class ClientAuth:
    """ASGI middleware of the client port: a token of a high enough role, or a 401/403.

    A request no route takes (`routed` says which do) goes on without a token to its
    404 or 405: the routes are public in openapi.yaml, and nothing answers it. (Routing
    is asked only of a request about to be refused: a scan of the routes costs more
    than the token check.)
    """

    def __init__(self, app: ASGIApp, tokens: Tokens, failures: AuthFailures,
                 routed: Callable[[Scope], bool]) -> None:
        self.app = app
        self.tokens = tokens
        self.failures = failures
        self.routed = routed

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            needed = required_role(scope["method"], scope["path"])
            token = None if needed is None else bearer(scope)
            role = None if token is None else self.tokens.role_of(token)
            if needed is not None and (role is None or role < needed) and self.routed(scope):
                if role is None:
                    reason = "missing" if token is None else "invalid"
                    message = "no bearer token" if token is None else "the bearer token is not valid"
                    await self.failures.refuse(scope, receive, send, ApiError(Code.UNAUTHENTICATED, message),
                                               reason)
                    return
                if role < needed:
                    await self.failures.refuse(scope, receive, send, ApiError(
                        Code.PERMISSION_DENIED, f"{scope['method']} {scope['path']} needs the "
                        f"{needed.name.lower()} role; this token is a {role.name.lower()}"), "forbidden")
                    return
        await self.app(scope, receive, send)


class PeerAuth:
    """ASGI middleware of the peer port: every call carries the cluster secret, or is refused."""

    def __init__(self, app: ASGIApp, secret: bytes, failures: AuthFailures) -> None:
        self.app = app
        self.secret = secret
        self.failures = failures

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            given = bearer(scope)
            if given is None or not hmac.compare_digest(given, self.secret):
                reason = "missing" if given is None else "invalid"
                code = Code.UNAUTHENTICATED if given is None else Code.PERMISSION_DENIED
                await self.failures.refuse(scope, receive, send, ApiError(
                    code, "a peer call needs the cluster secret" if given is None else "wrong cluster secret"),
                    reason)
                return
        await self.app(scope, receive, send)


def _digest(token: bytes) -> bytes:
    return hashlib.sha256(token).digest()
