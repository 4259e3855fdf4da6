"""Bounds on what clients can make a member hold: the API's limits (ApiLimits, settings
validated at start) and what holds clients to them.

ByteBudget bounds the log bytes that all follow streams hold unsent, and the
rendered JSON pages of the log being sent (a page that would pass it is refused
503, as a stream's chunk would wait). The client
port's RequestLimits (its `refusal` is one of api.request_checks' checks, its
middleware holds what the checks let in) bounds requests:
- at most `max_inflight_requests` requests at once; beyond, 503 SERVER_BUSY with
  Retry-After (health checks and metrics are exempt, so a busy member can still
  be watched);
- reads that wait for the log (`follow`, `wait_ms`) may stay open for long, so
  they count apart: at most `max_followers` at once, beyond them 503 too;
- a request body over `max_request_bytes` is refused with 413: at once when its
  Content-Length says so, else when the bytes received pass the limit;
- all bodies being received at once share `max_inflight_body_bytes`; a request
  that would pass it is refused with 503 SERVER_BUSY, so memory stays bounded
  however many large requests arrive together. The budget (InflightBytes) is one
  object per member: the gRPC port's calls (each AppendStream message until its
  append is answered) and the peer port's calls of the public API and forwarded
  appends draw on it too;
- a route whose body is small by nature (a consumer commit, a producer session,
  a membership change, a leadership transfer) checks its content type, then
  refuses with 413 a body over `small_request_bytes_max`, before or as it arrives:
  a reader cannot hold a large share of that budget through one.

Refusals raised while a route reads its body are ApiErrors: the routes' error
handlers answer them like any other. Slow clients are app.server's concern
(the connection protocol closes requests that do not arrive in time).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs

from starlette.types import ASGIApp, Receive, Scope, Send

from raftlog.api.auth import MESSAGES_SUFFIX, TOPICS_PATH
from raftlog.api.errors import ApiError, bad_request, too_large
from raftlog.api.request_checks import Refusal, RequestHead
from raftlog.raft.messages import Code
from raftlog.raft.waiting import Signal

EXEMPT_PATHS = frozenset({"/healthz", "/readyz", "/metrics"})
BODIES_KEY = 0x0A  # field 1, length-delimited: the key before each body of a batch's protobuf message
OTHER_FIELDS_MAX = 64  # a batch's fields besides its bodies (a producer's: four) are a few, even repeated
FOLLOWED_PATH = "/v1/entries"
SMALL_REQUEST_BYTES_MIN = 16 << 10  # a consumer commit: 1 KiB of metadata, each byte escaped (6 bytes)


@dataclass(frozen=True, slots=True)
class ApiLimits:
    max_entry_bytes: int = 4 << 20
    max_request_bytes: int = 64 << 20
    max_batch_entries: int = 10_000
    range_limit_max: int = 1000  # entries in one JSON page of a range read
    range_bytes_max: int = 4 << 20  # raw log bytes in one page or streamed chunk (at least one entry)
    read_wait_ms: int = 2500  # how long a linearizable read waits for the local log to catch up
    max_inflight_requests: int = 1024  # client requests at once; beyond, 503 SERVER_BUSY (health checks exempt)
    max_inflight_body_bytes: int = 256 << 20  # request body bytes held at once, all requests together
    request_read_timeout_ms: int = 30_000  # a request's line, headers and body must arrive within this
    max_header_bytes: int = 64 << 10  # a request's line and headers together
    max_connections: int = 1024  # client connections at once; one more is answered 503 and closed
    long_poll_max_ms: int = 60_000  # the longest wait_ms a read may ask for
    max_followers: int = 1024  # follow streams and long-polls at once (not counted in max_inflight_requests)
    follow_chunk_bytes: int = 256 << 10  # log bytes a follow stream reads at a time (at least one entry)
    follow_buffer_bytes_max: int = 64 << 20  # log bytes held by all follow streams' unsent chunks together
    follow_stall_ms: int = 30_000  # a client that takes nothing of an answer (a stream) this long is cut off
    grpc_connections_max: int = 1024  # gRPC port connections at once, counted from accept (TLS handshakes too)
    peer_connections_max: int = 1024  # peer port connections at once, counted from accept (TLS handshakes too)
    peer_calls_max: int = 1024  # peer port unary calls at once (votes, heartbeats, read index, ...)
    # api.connection_slots: who may hold a connection, and how long
    connections_per_address_max: int = 256  # each port's connections from one address (IPv6: its /64) at once
    unauthenticated_idle_ms: int = 5000  # a connection no credited request came on this long after its accept: closed
    idle_connection_ms: int = 75_000  # client port: closed this long after its last credited request (keep-alive)
    grpc_idle_connection_ms: int = 300_000  # gRPC port: a connection with no call this long is closed (GOAWAY)
    grpc_connection_age_ms: int = 3_600_000  # gRPC port: a connection this old takes no new call (GOAWAY)
    peer_idle_connection_ms: int = 75_000  # peer port: a connection with no call or stream message this long: closed
    peer_window_bytes: int = 8 << 20  # log a leader may push on a stream ahead of this member's reading
    peer_answers_ahead_max: int = 1024  # a stream's messages taken and not yet answered: then it reads no more
    append_stream_window_batches: int = 32  # batches of one gRPC AppendStream appended and not yet answered
    consumer_commit_interval_ms: int = 20  # a consumer's commits to one member within it make one entry (0: each)
    small_request_bytes_max: int = 64 << 10  # the body of a request small by nature: a commit, a producer, a member
    peer_outbox_bytes_max: int = 1 << 20  # answers a peer stream holds unread by its peer: then it takes no more

    def __post_init__(self) -> None:
        for name in ("grpc_connections_max", "peer_connections_max", "peer_calls_max", "peer_answers_ahead_max",
                     "append_stream_window_batches", "peer_outbox_bytes_max"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} {getattr(self, name)} must be at least 1")
        if self.small_request_bytes_max < SMALL_REQUEST_BYTES_MIN:
            raise ValueError(f"small_request_bytes_max {self.small_request_bytes_max} must be at least "
                             f"{SMALL_REQUEST_BYTES_MIN}: the largest consumer commit, JSON-escaped, must fit")
        if self.consumer_commit_interval_ms < 0:
            raise ValueError(f"consumer_commit_interval_ms {self.consumer_commit_interval_ms} must be at least 0")
        if not 65_535 <= self.peer_window_bytes < 1 << 31:
            raise ValueError(f"peer_window_bytes {self.peer_window_bytes} must be 65535 to 2 GiB (HTTP/2's bounds)")
        for name in ("connections_per_address_max", "unauthenticated_idle_ms", "idle_connection_ms",
                     "grpc_idle_connection_ms", "grpc_connection_age_ms", "peer_idle_connection_ms"):
            if not 1 <= getattr(self, name) < 1 << 31:  # gRPC's options are C ints
                raise ValueError(f"{name} {getattr(self, name)} must be 1 to 2^31 - 1")


class InflightBytes:
    """Request bytes held at once on all of a member's ports together (`max_inflight_body_bytes`):
    a request that would pass it is refused, not queued, so memory stays bounded."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.held = 0

    def take(self, size: int) -> bool:
        """Hold `size` more bytes; False (nothing held) when that would pass the bound."""
        if self.held + size > self.max_bytes:
            return False
        self.held += size
        return True

    def give(self, size: int) -> None:
        self.held -= size
        assert self.held >= 0

    def refusal(self) -> ApiError:
        return busy(f"request bodies in flight on this member are at max_inflight_body_bytes ({self.max_bytes})")


class RequestLimits:
    def __init__(self, app: ASGIApp, *, max_inflight_requests: int, max_request_bytes: int, max_followers: int,
                 budget: InflightBytes) -> None:
        self.app = app
        self.max_inflight_requests = max_inflight_requests
        self.max_followers = max_followers
        self.followers = 0
        self.max_request_bytes = max_request_bytes
        self.budget = budget  # shared with the gRPC and peer ports
        self.inflight_requests = 0

    @property
    def inflight_body_bytes(self) -> int:
        """What the member's ports hold together (the budget is shared)."""
        return self.budget.held

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Hold a request that passed the checks (`refusal` among them) while it runs."""
        if scope["type"] != "http" or scope["path"] in EXEMPT_PATHS:
            await self.app(scope, receive, send)
            return
        if _follows(scope):
            self.followers += 1
            try:
                await self.app(scope, receive, send)  # a GET: no body to count
            finally:
                self.followers -= 1
            return
        body = self.admit(receive)
        try:
            await self.app(scope, body, send)
        finally:
            self.release(body)

    def admit(self, receive: Receive) -> CountedBody:
        """A request let in (refusal() found nothing to refuse): counted in flight, and its body in
        the budget as it arrives, until release()."""
        self.inflight_requests += 1
        return CountedBody(receive, self.max_request_bytes, self.budget)

    def release(self, body: CountedBody) -> None:
        self.inflight_requests -= 1
        self.budget.give(body.held)

    def refusal(self, scope: Scope, head: RequestHead) -> Refusal | None:
        """Why a request is refused before its body is read (too many in flight or following, a
        Content-Length over the limit or not a number), or None: an api.request_checks check."""
        if scope["path"] in EXEMPT_PATHS:
            return None
        if _follows(scope):
            if self.followers >= self.max_followers:
                return Refusal(busy(f"{self.followers} reads follow the log on this member: max_followers"))
            return None
        if self.inflight_requests >= self.max_inflight_requests:
            return Refusal(busy(f"{self.inflight_requests} requests in flight on this member: max_inflight_requests"))
        length = head.content_length
        if length is not None:
            if not length.isdigit():
                return Refusal(bad_request(f"Content-Length {length[:40]!r} is not a number"))
            if len(length) > 19 or int(length) > self.max_request_bytes:
                return Refusal(too_large(f"the request body is over max_request_bytes ({self.max_request_bytes})"))
        return None


class CountedBody:
    """A request's receive, whose body bytes are held in the budget as they arrive: over
    max_request_bytes, or past the budget, the route's read raises the refusal."""

    def __init__(self, receive: Receive, max_request_bytes: int, budget: InflightBytes) -> None:
        self.receive = receive
        self.max_request_bytes = max_request_bytes
        self.budget = budget
        self.held = 0

    async def __call__(self) -> Any:
        message = await self.receive()
        size = len(message.get("body", b""))
        if size:
            if self.held + size > self.max_request_bytes:
                raise too_large(f"the request body is over max_request_bytes ({self.max_request_bytes})")
            if not self.budget.take(size):
                raise self.budget.refusal()
            self.held += size
        return message


def _follows(scope: Scope) -> bool:
    """A read that waits for entries to commit: a follow stream or a long-poll, of the log or of a
    topic's queue (/v1/topics/{name}/queues/{queue}/messages)."""
    path = scope["path"]
    if scope["method"] != "GET" or not (path == FOLLOWED_PATH or (path.startswith(TOPICS_PATH)
                                                                  and path.endswith(MESSAGES_SUFFIX))):
        return False
    query = parse_qs(scope["query_string"].decode("latin-1"))
    return "wait_ms" in query or query.get("follow", ["false"])[-1].lower() not in ("false", "0", "no", "off", "")


def busy(message: str) -> ApiError:
    """503 SERVER_BUSY with Retry-After: nothing was done, try again shortly."""
    return ApiError(Code.SERVER_BUSY, message)


def batch_entries(data: bytes, stop: int) -> int:
    """How many bodies a batch's protobuf bytes hold (field 1: raftlog.v1.AppendBatchRequest,
    raftlog.peer.v1.AppendRequest), counted no further than `stop`. Other
    fields are skipped as protobuf skips unknown ones, up to OTHER_FIELDS_MAX: past that the count
    is `stop` (64 MiB of two-byte fields walked here would hold the loop for seconds); bytes that
    do not parse end the count (protobuf then says what is wrong)."""
    count, at, end, others = 0, 0, len(data), 0
    try:
        while at < end and count < stop:
            if others > OTHER_FIELDS_MAX:  # no batch has that many: garbage, counted as too many to decode
                return stop
            if data[at] == BODIES_KEY:  # a body, its length in one or two bytes: the common case, inline
                low = data[at + 1]
                if low < 0x80:
                    at += 2 + low
                    count += 1
                    continue
                high = data[at + 2]
                if high < 0x80:
                    at += 3 + (low & 0x7F | high << 7)
                    count += 1
                    continue
            key, at = _varint_at(data, at)
            others += key != BODIES_KEY
            wire = key & 7
            if wire == 2:
                size, at = _varint_at(data, at)
                at += size
                count += key == BODIES_KEY
            elif wire == 0:
                at = _varint_at(data, at)[1]
            elif wire in (1, 5):
                at += 8 if wire == 1 else 4
            else:
                break
    except IndexError:  # cut short
        pass
    return count


def _varint_at(data: bytes, at: int) -> tuple[int, int]:
    """Protobuf's base-128 varint at `at`, and where the next field starts."""
    value = shift = 0
    while True:
        byte = data[at]
        value |= (byte & 0x7F) << shift
        at += 1
        if byte < 0x80:
            return value, at
        shift += 7
        if shift > 63:
            raise IndexError("a varint of more than 10 bytes")


class ByteBudget:
    """Bytes held at once by many tasks; one that would pass the bound waits (one alone always goes)."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.held = 0
        self._freed = Signal()

    async def take(self, size: int) -> None:
        while self.held and self.held + size > self.max_bytes:
            await self._freed.current().wait()
        self.held += size

    def try_take(self, size: int) -> bool:
        """Hold `size` more bytes now, as `take` would without waiting; False (nothing held) when it would wait."""
        if self.held and self.held + size > self.max_bytes:
            return False
        self.held += size
        return True

    def give(self, size: int) -> None:
        self.held -= size
        self._freed.fire()
