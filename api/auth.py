"""Who may call what: client tokens with roles on the client port, the cluster secret on the peer port.

Client port: `Authorization: Bearer <token>`; each token has a role, and each
role includes the ones below it (admin > writer > consumer > reader). A
consumer token moves (commits, removes) only the named consumers its name
covers (`consumer_refusal`): the consumer of its name, and those whose names
start with its name and a dot; a writer moves any, and only an admin sets a
consumer's retention-floor flag. Health checks,
metrics, the API's documentation and the admin page's HTML are open (the page
asks for a token before it reads anything). Peer port: every gRPC call
carries the cluster secret the same way, in its metadata (api.peer_server). A
call without valid proof answers 401 (no or unknown token) or 403 (a role too
low), on the peer port UNAUTHENTICATED (no secret) or PERMISSION_DENIED (a wrong one),
is counted in `raftlog_auth_failures` and logged (at most one line a second
per port and reason, never with the credentials), and goes no further.

Tokens are looked up by their SHA-256 digest, and the secret's digest is
compared with `hmac.compare_digest`: neither comparison's time depends on how
much of a guess was right, nor on the secret's length.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import logging
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any

from starlette.types import Receive, Scope, Send

from raftlog.api.errors import ApiError, error_response
from raftlog.api.log_throttle import LogThrottle, since_last
from raftlog.api.request_checks import Refusal, RequestHead
from raftlog.raft.messages import Code

log = logging.getLogger("raftlog.auth")

TOKEN_CHARS_MIN = 16  # shorter tokens are refused at start: they can be guessed
OPEN_PATHS = frozenset({"/", "/healthz", "/readyz", "/metrics", "/docs", "/openapi.json"})
SAFE_METHODS = frozenset({"GET", "HEAD"})
WRITE_PATHS = frozenset({"/v1/entries", "/v1/entries/batch", "/v1/producers"})
CONSUMERS_PATH = "/v1/consumers/"
PRODUCERS_PATH = "/v1/producers/"
TOPICS_PATH = "/v1/topics/"
GROUPS_PATH = "/v1/groups/"  # POST .../offsets and DELETE: the consumer groups a consumer token's name covers
MESSAGES_SUFFIX = "/messages"  # a topic's messages: POST appends them


class Role(IntEnum):
    """A token's role; a higher role may do everything a lower one may."""

    READER = 1  # GET routes
    CONSUMER = 2  # reads, and moving the named consumers its name covers
    WRITER = 3  # appends (a topic's messages too), moving any named consumer, and reads
    ADMIN = 4  # the topic catalog, leadership transfer, the admin page's actions, a consumer's retention floor, ...


class TokenError(ValueError):
    """A tokens file or variable that cannot be used; the message names the line, never the token."""


@dataclass(frozen=True, slots=True)
class Caller:
    """Who a token says is calling: its role, and its name (a producer session's owner)."""

    role: Role
    name: str


LOCAL_CALLER = "local"  # the name of every caller of a member without tokens: all trusted alike
LOCAL = Caller(Role.ADMIN, LOCAL_CALLER)  # every caller of a member without tokens
CALLER_NAME = re.compile(r"[A-Za-z0-9._@-]{1,64}")
CONSUMER_NAME = re.compile(r"[A-Za-z0-9._-]{1,64}")  # a consumer token's: a consumer's name (raft.consumers)
DIGEST_NAME_PREFIX = "token-"  # a token listed without a name is named by its digest's first hex digits
DIGEST_NAME_CHARS = 12
CALLER_KEY = "raftlog.caller"  # where TokenCheck leaves the Caller in a request's scope


@dataclass(frozen=True)
class Tokens:
    """The accepted client tokens, by the SHA-256 digest of each."""

    callers: dict[bytes, Caller] = field(repr=False)

    @classmethod
    def parse(cls, text: str, source: str, *, lines: bool) -> Tokens:
        """`role:name:token` (or `role:token`, named by its digest) entries: one per line with `#`
        comment lines (`lines`, a file), or comma-separated (a setting). A token is printable ASCII
        without spaces or commas, of TOKEN_CHARS_MIN or more; a name is 1 to 64 letters, digits,
        '.', '_', '@' or '-'. Several tokens may share a name (a rotation): they are one caller."""
        callers: dict[bytes, Caller] = {}
        entries = text.splitlines() if lines else text.split(",")
        for number, entry in enumerate(entries, 1):
            entry = entry.strip()
            if not entry or (lines and entry.startswith("#")):
                continue
            role_name, name, token = token_entry(entry)
            where = f"{source}, {'line' if lines else 'entry'} {number}"
            try:
                role = Role[role_name.strip().upper()]
            except KeyError:
                raise TokenError(f"{where}: expected role:name:token with a role of reader, consumer, writer or "
                                 "admin") from None
            if role is Role.CONSUMER and CONSUMER_NAME.fullmatch(name) is None:
                raise TokenError(f"{where}: a consumer token's name is the consumer it moves (and those named "
                                 "NAME.*): 1 to 64 letters, digits, '.', '_' or '-'")
            token = token.strip()
            if not is_credential(token) or "," in token:
                raise TokenError(f"{where}: a token is {TOKEN_CHARS_MIN} or more printable ASCII characters, "
                                 "without spaces or commas")
            digest = _digest(token.encode())
            caller = Caller(role, name or DIGEST_NAME_PREFIX + digest.hex()[:DIGEST_NAME_CHARS])
            if callers.setdefault(digest, caller) != caller:
                raise TokenError(f"{where}: this token is listed before with another role or name")
        return cls(callers)

    @classmethod
    def merge(cls, parts: Iterable[Tokens]) -> Tokens:
        callers: dict[bytes, Caller] = {}
        for part in parts:
            callers.update(part.callers)
        return cls(callers)

    def caller_of(self, token: bytes) -> Caller | None:
        return self.callers.get(_digest(token))

    def role_of(self, token: bytes) -> Role | None:
        caller = self.callers.get(_digest(token))
        return None if caller is None else caller.role


def token_entry(entry: str) -> tuple[str, str, str]:
    """The role, name ("" for the form without one) and token of a `role:name:token` or `role:token`
    entry (a token may hold colons: a name is one only where CALLER_NAME takes it)."""
    role, _, rest = entry.partition(":")
    name, named, token = rest.partition(":")
    return (role, name, token) if named and CALLER_NAME.fullmatch(name) else (role, "", rest)


def is_credential(value: str) -> bool:
    """Long enough not to be guessed, and fit for an HTTP header as it is."""
    return len(value) >= TOKEN_CHARS_MIN and value.isascii() and value.isprintable() and " " not in value


def is_loopback(host: str) -> bool:
    """A host only this machine reaches: security may be off there, and only there."""
    host = host.strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a name other than localhost may resolve anywhere


def required_role(method: str, path: str) -> Role | None:
    """The least role a public request needs; None: open to anyone."""
    if method in SAFE_METHODS:
        return None if path in OPEN_PATHS else Role.READER
    if method == "POST" and (path in WRITE_PATHS or (path.startswith(TOPICS_PATH) and path.endswith(MESSAGES_SUFFIX))):
        return Role.WRITER
    if method == "DELETE" and path.startswith(PRODUCERS_PATH):  # its owner's own session
        return Role.WRITER
    if method in ("PUT", "DELETE") and path.startswith(CONSUMERS_PATH):  # the consumers its name covers
        return Role.CONSUMER
    if method in ("POST", "DELETE") and path.startswith(GROUPS_PATH):  # the groups its name covers
        return Role.CONSUMER
    return Role.ADMIN


def bearer_credentials(authorization: bytes | None) -> bytes | None:
    """The credentials of an authorization value `Bearer ...` (a header, gRPC metadata), if any."""
    if authorization is None:
        return None
    scheme, _, credentials = authorization.partition(b" ")
    return credentials.strip() if scheme.lower() == b"bearer" else None


def refusal(tokens: Tokens, token: bytes | None, needed: Role, call: str) -> tuple[str, ApiError] | None:
    """Why `call` with `token` is refused (the reason counted, the error answered), or None: the
    client port's and the gRPC port's one rule."""
    return caller_refusal(None if token is None else tokens.caller_of(token), token is not None, needed, call)


def caller_refusal(caller: Caller | None, given: bool, needed: Role, call: str) -> tuple[str, ApiError] | None:
    """`refusal`, for the caller a token named (None: no token `given`, or an unknown one)."""
    if caller is not None and caller.role >= needed:
        return None
    if caller is None:
        if not given:
            return "missing", ApiError(Code.UNAUTHENTICATED, "no bearer token")
        return "invalid", ApiError(Code.UNAUTHENTICATED, "the bearer token is not valid")
    role = ("the writer role, or a consumer token of the consumer's name" if needed is Role.CONSUMER
            else f"the {needed.name.lower()} role")
    return "forbidden", ApiError(Code.PERMISSION_DENIED, f"{call} needs {role}; this token is a "
                                                         f"{caller.role.name.lower()}")


def caller_of(scope: Scope) -> Caller:
    """The caller of a request the checks let in (LOCAL on a member without tokens)."""
    caller: Caller = scope.get(CALLER_KEY, LOCAL)
    return caller


def caller_name(scope: Scope) -> str:
    """The name of the caller of a request the checks let in (LOCAL_CALLER on a member without tokens)."""
    return caller_of(scope).name


def consumer_refusal(caller: Caller, name: str, floor: bool | None) -> ApiError | None:
    """Why `caller` may not move (commit, remove) the named consumer `name`, or set its retention-floor
    flag (`floor` not None), or None: a writer or admin moves any, a consumer token those its name
    covers (its own name, and its name followed by a dot and anything), and only an admin sets the flag."""
    if floor is not None and caller.role < Role.ADMIN:
        return ApiError(Code.PERMISSION_DENIED, f"only an admin sets a consumer's retention_floor; this token is "
                                                f"a {caller.role.name.lower()}")
    if caller.role >= Role.WRITER or (caller.role is Role.CONSUMER and covers(caller.name, name)):
        return None
    if caller.role is Role.CONSUMER:
        return ApiError(Code.PERMISSION_DENIED, f"a consumer token named {caller.name!r} moves the consumer "
                                                f"{caller.name!r} and those named {caller.name}.*, not {name!r}")
    return ApiError(Code.PERMISSION_DENIED, f"moving a consumer needs the writer role, or a consumer token of its "
                                            f"name; this token is a {caller.role.name.lower()}")


def covers(token_name: str, consumer: str) -> bool:
    """Whether a consumer token named `token_name` moves the consumer `consumer`."""
    return consumer == token_name or (consumer.startswith(token_name) and consumer[len(token_name)] == ".")


class AuthFailures:
    """Counts and logs refused calls (the metric lives in api.metrics.NodeMetrics); the log at most
    once a second per reason, with how many were not logged, so a flood of bad calls cannot fill
    the disk."""

    def __init__(self, counter: Any, port: str) -> None:
        self.counter = counter
        self.port = port
        self._throttle = LogThrottle()  # a line a second per reason

    async def refuse(self, scope: Scope, receive: Receive, send: Send, error: ApiError, reason: str) -> None:
        client = scope.get("client")
        self.note(reason, f"{scope['method']} {scope['path']!r}", f"{client[0]}:{client[1]}" if client else "?")
        response = error_response(error)
        if error.status == 401:
            response.headers["WWW-Authenticate"] = 'Bearer realm="raftlog"'
        await response(scope, receive, send)

    def note(self, reason: str, call: str, peer: str) -> None:
        """Count a refused call, and log it unless a line for `reason` went out less than a second ago."""
        self.counter.labels(self.port, reason).inc()
        held_back = self._throttle.admit(reason)
        if held_back is not None:
            log.warning("%s port: refused %s from %s: %s%s", self.port, call, peer, reason, since_last(held_back))


class TokenCheck:
    """The client port's token check (an api.request_checks check): a token of a high enough role,
    or a 401/403.

    A request no route takes (`route_of` finds the one that does) goes on without a token
    to its 404 or 405: the routes are public in openapi.yaml, and nothing answers it.
    (Routing is asked only of a request about to be refused: a scan of the routes costs
    more than the token check. The route found names the refusal in the request counter.)
    """

    def __init__(self, tokens: Tokens, route_of: Callable[[Scope], Any]) -> None:
        self.tokens = tokens
        self.route_of = route_of

    def __call__(self, scope: Scope, head: RequestHead) -> Refusal | None:
        token = bearer_credentials(head.authorization)
        caller = None if token is None else self.tokens.caller_of(token)
        if caller is not None:
            scope[CALLER_KEY] = caller  # for the route: a producer session's owner, a consumer's rights
        needed = required_role(scope["method"], scope["path"])
        if needed is None:
            return None
        refused = caller_refusal(caller, token is not None, needed, f"{scope['method']} {scope['path']}")
        if refused is None:
            return None
        route = self.route_of(scope)
        if route is None:
            return None
        scope["route"] = route
        reason, error = refused
        return Refusal(error, reason)


def secret_digest(secret: bytes) -> bytes:
    """What a cluster secret is compared by: equal digests, in constant time (hmac.compare_digest)."""
    return _digest(secret)


def is_secret(given: bytes, digest: bytes) -> bool:
    return hmac.compare_digest(_digest(given), digest)


def _digest(token: bytes) -> bytes:
    return hashlib.sha256(token).digest()
