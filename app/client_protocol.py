"""uvicorn's HTTP/1.1 protocol with bounds against slow and greedy clients.

uvicorn (httptools) waits forever for a request that never completes: a client
that opens a connection and sends nothing, or sends its headers a byte at a
time (slowloris), holds a connection and its memory as long as it likes; and
it takes any number of connections, and headers of any size. Here:
- at most `max_connections` connections at once: one more is answered 503 with
  Retry-After and closed, so open files stay bounded;
- a request's line, headers and body must all arrive within
  `request_read_timeout_ms` of its first byte (or of the connection opening):
  else 408 and the connection closes, or, when the route is already reading the
  body, the connection closes and the route sees the client gone;
- a request line and headers over `max_header_bytes` answer 431 and close: the
  parser is fed at most that many bytes of a header section, however they come.

An answer the client stops taking (a stream of the log, a large page) holds
the member's memory for as long as its connection stays: once the transport's
buffer is full, the client has `write_stall_s` (follow_stall_ms) to take some,
else the connection is cut and its buffer dropped. A route may cut its
connection at once through the `raftlog.abort` ASGI extension.

A request `below_asgi` takes (api.fast_path.BelowAsgi: the hottest ones, which
pass every check on their headers alone) is answered by what it returns, in
uvicorn's request cycle, in place of the ASGI app and its middleware layers.

Every write goes through CorkedTransport, so an answer's head and body leave
in one send: uvicorn writes them apart, a system call and a packet more for
every small answer.

The deadline runs only while the client is the one to act: not while a request
waits behind another on the same connection (uvicorn pauses reading until the
answer before it is out), and not once a request has fully arrived, so a long
answer (a read that follows the log) is not cut.

Who holds a connection, and how long (`rules`, api.connection_slots), when no
request is under way:
- at most `connections_per_address_max` connections from one address: one more
  is answered 503 with Retry-After and closed, as one over max_connections is;
- a connection no credited request came on within `unauthenticated_idle_ms` of
  its opening is closed, whatever else it sent; a credited request is one not
  for /healthz, /readyz or /metrics and not answered 401, 403 or 421 (its
  status is looked at only until the connection is credited);
- then it is closed `idle_connection_ms` after its last credited request: a
  probe now and then does not keep it (uvicorn's keep-alive timeout is the same
  time, counted from any answer).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, cast

from starlette.types import ASGIApp, Scope
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol, RequestResponseCycle

from raftlog.api.connection_slots import PROBE_PATHS, REFUSED_STATUSES, HoldRules, Tally, address_key
from raftlog.api.errors import RETRY_AFTER_S, ApiError
from raftlog.api.follow import ABORT_EXTENSION
from raftlog.raft.messages import Code

if TYPE_CHECKING:
    from uvicorn._types import ASGI3Application, ASGISendEvent  # uvicorn's own types (a private module: types only)

log = logging.getLogger("raftlog.server")

REFUSAL_LOG_INTERVAL_S = 1.0
CORK_BYTES_MAX = 64 * 1024  # held for the end of the turn; more is written at once
LINGER_S = 1.0  # after an answer that ends a connection, what the client still sends is read this long


def guarded_protocol(read_timeout_s: float, max_header_bytes: int, max_connections: int,
                     write_stall_s: float, below_asgi: Callable[[Scope], ASGIApp | None] | None = None,
                     rules: HoldRules | None = None) -> type[asyncio.Protocol]:
    """The protocol class to give uvicorn.Config(http=...); without `rules`, no bound per address
    and no clock on an idle connection but uvicorn's keep-alive."""
    refused_logged = [float("-inf")]  # when a refused connection was last logged
    over_address = Tally(logging.WARNING, "client port: refused %d connection(s), the latest from %s: "
                                          "connections_per_address_max open from its address")
    # probes make these routine on the client port: debug, not info as on the gRPC and peer ports
    unused = Tally(logging.DEBUG, "client port: closed %d connection(s), the latest from %s: no credited request "
                                  "within unauthenticated_idle_ms of its opening")

    class GuardedHttpProtocol(HttpToolsProtocol):
        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            # every write on the connection goes through the cork, so they keep their order and a close
            # (a shutdown, a slow client) sends what is held first
            super().connection_made(CorkedTransport(transport, self.loop))  # type: ignore[arg-type]
            self._deadline: asyncio.TimerHandle | None = None
            self._header_bytes = 0  # of the header section being received
            self._in_headers = True  # nothing has arrived yet: as slow as headers that do not come
            self._mid_message = False  # a request has begun and not fully arrived
            self._lingering = False  # answered and closing: what arrives is dropped
            self._parsed_header_bytes = 0  # of the request being parsed, as the parser hands them over
            self._oversized = False  # a request's headers passed the bound: what the parser still says is dropped
            self._stalled: asyncio.TimerHandle | None = None  # the client has not taken what was sent
            self._address: str | None = None  # counted in rules.addresses
            self._idle: asyncio.TimerHandle | None = None  # closes the connection at _close_at, if idle then
            self._close_at = 0.0  # a loop time; it only grows (the timer, once due, looks again)
            self._credited = False
            self._probe = True  # the request being answered credits nothing (until _start_asgi_task says)
            self._refused = False  # ... it was answered 401, 403 or 421
            if len(self.connections) > max_connections:
                now = self.loop.time()
                if now - refused_logged[0] >= REFUSAL_LOG_INTERVAL_S:  # a flood of them is one line a second
                    refused_logged[0] = now
                    log.warning("refusing connections: %d open (max_connections), the latest from %s",
                                len(self.connections) - 1, self._peer())
                self._answer_and_close(503, "Service Unavailable", Code.SERVER_BUSY,
                                       f"too many connections to this member (max_connections {max_connections})",
                                       retry=True)
                return
            if rules is not None:
                address = address_key(self.client[0]) if self.client else "?"
                if not rules.addresses.take(address):
                    over_address.note(self._peer())
                    self._answer_and_close(503, "Service Unavailable", Code.SERVER_BUSY,
                                           f"too many connections from {address} to this member "
                                           f"(connections_per_address_max {rules.addresses.per_address_max})",
                                           retry=True)
                    return
                self._address = address
                self._close_at = self.loop.time() + rules.unauthenticated_s
                self._rest()
            self._arm()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            self._hold()
            if self._address is not None:
                assert rules is not None
                rules.addresses.give(self._address)
                self._address = None
            self.resume_writing()
            super().connection_lost(exc)

        def pause_writing(self) -> None:
            """The transport's buffer is full: the client has this long to take some of it."""
            super().pause_writing()
            if self._stalled is None:
                self._stalled = self.loop.call_later(write_stall_s, self._reader_stalled)

        def resume_writing(self) -> None:
            super().resume_writing()
            if self._stalled is not None:
                self._stalled.cancel()
                self._stalled = None

        def _reader_stalled(self) -> None:
            self._stalled = None
            log.info("cut off the connection from %s: it took nothing of its answer for %.0f s (follow_stall_ms)",
                     self._peer(), write_stall_s)
            self.transport.abort()  # its unsent bytes dropped; the route's next send fails

        def data_received(self, data: bytes) -> None:
            """Header bytes are counted as they arrive, before the parser buffers them."""
            if self._lingering:
                return
            while data and self._in_headers and not self.transport.is_closing():
                room = max_header_bytes - self._header_bytes + 1  # one byte over says "too many"
                piece, data = data[:room], data[room:]
                self._header_bytes += len(piece)
                super().data_received(piece)
                if self._in_headers and self._header_bytes > max_header_bytes and not self.transport.is_closing():
                    self._answer_and_close(431, "Request Header Fields Too Large", Code.UNEXPECTED_ARGUMENT,
                                           f"the request line and headers are over max_header_bytes "
                                           f"({max_header_bytes})")
                    return
            if data and not self.transport.is_closing():
                super().data_received(data)

        def on_message_begin(self) -> None:
            if self._oversized:
                return
            self._parsed_header_bytes = 0
            self._in_headers = self._mid_message = True
            if not self._answering():  # else it waits its turn, reading paused: not the client's delay
                self._arm()
            super().on_message_begin()

        def on_url(self, url: bytes) -> None:
            self._count_parsed(len(url))
            if not self._oversized:
                super().on_url(url)

        def on_header(self, name: bytes, value: bytes) -> None:
            self._count_parsed(len(name) + len(value) + 4)  # ": " and CRLF
            if not self._oversized:
                super().on_header(name, value)

        def _count_parsed(self, size: int) -> None:
            """A request's line and headers, counted as the parser hands them over: a request pipelined
            behind another in one read reaches the parser uncounted by data_received."""
            self._parsed_header_bytes += size
            if self._parsed_header_bytes > max_header_bytes and not self._oversized:
                self._oversized = True  # the rest the parser says is dropped; answered after the answer before
                if not self._answering():
                    self._refuse_oversized()

        def _refuse_oversized(self) -> None:
            if not self.transport.is_closing():
                self._answer_and_close(431, "Request Header Fields Too Large", Code.UNEXPECTED_ARGUMENT,
                                       f"the request line and headers are over max_header_bytes ({max_header_bytes})")

        def on_body(self, body: bytes) -> None:
            if not self._oversized:
                super().on_body(body)

        def on_headers_complete(self) -> None:
            if self._oversized:
                return
            self._in_headers = False
            self._header_bytes = 0
            self.scope["extensions"] = {**self.scope.get("extensions", {}),
                                        ABORT_EXTENSION: {"abort": self.transport.abort}}  # an extension is a dict
            super().on_headers_complete()

        def on_message_complete(self) -> None:
            if self._oversized:
                return
            self._mid_message = False
            self._disarm()
            super().on_message_complete()

        def on_response_complete(self) -> None:
            if rules is not None and not self._probe and not self._refused:
                self._credited = True
                self._close_at = self.loop.time() + rules.idle_s
            self._probe, self._refused = True, False
            super().on_response_complete()  # the next request, if it waited, starts here
            if self._mid_message and not self.transport.is_closing():
                self._arm()  # the next request, which had to wait, now reads on
            if rules is not None and not self._mid_message and not self._answering():
                self._rest()
            if self._oversized:  # a request pipelined behind this one was too large
                self._refuse_oversized()

        def _start_asgi_task(self, cycle: RequestResponseCycle, app: ASGI3Application) -> None:
            """Run the request's cycle, with what `below_asgi` answers it by in place of the app (never
            in place of another: uvicorn's own refusals)."""
            if below_asgi is not None and app is self.app:
                below = below_asgi(cast(Scope, cycle.scope))  # uvicorn's typed scope is starlette's mapping
                if below is not None:
                    app = cast("ASGI3Application", below)
            self._probe = cycle.scope["path"] in PROBE_PATHS
            if rules is not None and not self._credited and not self._probe:
                self._note_refusal(cycle)
            super()._start_asgi_task(cycle, app)

        def _note_refusal(self, cycle: RequestResponseCycle) -> None:
            """Whether the answer refuses who sent the request (then it credits nothing)."""
            send = cycle.send

            async def noting(message: ASGISendEvent) -> None:
                if message["type"] == "http.response.start":
                    self._refused = message["status"] in REFUSED_STATUSES
                await send(message)

            cycle.send = noting  # type: ignore[method-assign]

        def _answering(self) -> bool:
            return self.cycle is not None and not self.cycle.response_complete

        def _arm(self) -> None:
            if self._deadline is None:
                self._deadline = self.loop.call_later(read_timeout_s, self._too_slow)

        def _disarm(self) -> None:
            if self._deadline is not None:
                self._deadline.cancel()
                self._deadline = None

        def _rest(self) -> None:
            """No request under way: the connection is closed at _close_at unless one is then. One
            timer serves many requests: due, it looks at _close_at again."""
            if self._idle is None and not self.transport.is_closing():
                self._idle = self.loop.call_later(max(self._close_at - self.loop.time(), 0.0), self._idle_over)

        def _hold(self) -> None:
            if self._idle is not None:
                self._idle.cancel()
                self._idle = None

        def _idle_over(self) -> None:
            self._idle = None
            if self.transport.is_closing() or self._mid_message or self._answering():
                return  # closed already, or a request is under way: its answer's end calls _rest
            if self.loop.time() < self._close_at:
                self._rest()  # a credited request since the timer was set
                return
            if not self._credited:
                unused.note(self._peer())
            self.transport.close()

        def _too_slow(self) -> None:
            self._deadline = None
            if self.transport.is_closing():
                return
            log.info("closing the connection from %s: a request did not arrive within request_read_timeout_ms "
                     "(%.0f ms)", self._peer(), read_timeout_s * 1000)
            if self._in_headers and not self._answering():
                self._answer_and_close(408, "Request Timeout", Code.UNEXPECTED_ARGUMENT,
                                       "the request did not arrive in time")
            else:
                self.transport.close()  # the route reading the body sees the client gone

        def _peer(self) -> str:
            return f"{self.client[0]}:{self.client[1]}" if self.client else "?"

        def _answer_and_close(self, status: int, reason: str, code: Code, message: str, retry: bool = False) -> None:
            """An answer in the API's error shape, written before any app runs, then the end."""
            body = json.dumps(ApiError(code, message).body()).encode()
            head = (f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\n"
                    f"content-length: {len(body)}\r\nconnection: close\r\n"
                    + (f"retry-after: {RETRY_AFTER_S}\r\n" if retry else "") + "\r\n").encode()
            self.transport.write(head + body)
            self._linger()

        def _linger(self) -> None:
            """Close without a reset that could overtake the answer (the kernel resets a connection
            closed with bytes unread): the write side ends first, what the client still sends is read
            and dropped, and the connection closes at the client's end or after LINGER_S."""
            self._disarm()
            if not self.transport.can_write_eof():  # TLS
                self.transport.close()
                return
            self._lingering = True
            self.transport.write_eof()
            self.loop.call_later(LINGER_S, self.transport.close)

    return GuardedHttpProtocol


class CorkedTransport:
    """A transport whose writes in one turn of the event loop leave in one send.

    uvicorn writes an answer's status line and headers, then its body, as two
    sends: two system calls and two packets for every small answer."""

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._loop = loop
        self._held: list[bytes] = []
        self._held_bytes = 0

    def write(self, data: bytes) -> None:
        if not self._held:
            self._loop.call_soon(self._release)
        self._held.append(data)
        self._held_bytes += len(data)
        if self._held_bytes >= CORK_BYTES_MAX:  # the transport's flow control sees big answers at once
            self._release()

    def close(self) -> None:
        self._release()
        self._transport.close()

    def write_eof(self) -> None:
        self._release()
        self._transport.write_eof()

    def is_closing(self) -> bool:  # asked several times a request: not through __getattr__
        return self._transport.is_closing()

    def _release(self) -> None:
        held, self._held, self._held_bytes = self._held, [], 0
        if held and not self._transport.is_closing():
            self._transport.write(b"".join(held))

    def __getattr__(self, name: str) -> object:
        return getattr(self._transport, name)
