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
answer (a read that follows the log) is not cut. Idle connections between
requests are uvicorn's keep-alive timeout's.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, cast

from starlette.types import ASGIApp, Scope
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol, RequestResponseCycle

from raftlog.api.errors import RETRY_AFTER_S, ApiError
from raftlog.api.follow import ABORT_EXTENSION
from raftlog.raft.messages import Code

if TYPE_CHECKING:
    from uvicorn._types import ASGI3Application  # uvicorn's own type of an app (a private module: types only)

log = logging.getLogger("raftlog.server")

REFUSAL_LOG_INTERVAL_S = 1.0
CORK_BYTES_MAX = 64 * 1024  # held for the end of the turn; more is written at once
LINGER_S = 1.0  # after an answer that ends a connection, what the client still sends is read this long


def guarded_protocol(read_timeout_s: float, max_header_bytes: int, max_connections: int,
                     write_stall_s: float, below_asgi: Callable[[Scope], ASGIApp | None] | None = None,
                     ) -> type[asyncio.Protocol]:
    """The protocol class to give uvicorn.Config(http=...)."""
    refused_logged = [float("-inf")]  # when a refused connection was last logged

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
            self._stalled: asyncio.TimerHandle | None = None  # the client has not taken what was sent
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
            self._arm()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
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
            self._in_headers = self._mid_message = True
            if not self._answering():  # else it waits its turn, reading paused: not the client's delay
                self._arm()
            super().on_message_begin()

        def on_headers_complete(self) -> None:
            self._in_headers = False
            self._header_bytes = 0
            self.scope["extensions"] = {**self.scope.get("extensions", {}),
                                        ABORT_EXTENSION: {"abort": self.transport.abort}}  # an extension is a dict
            super().on_headers_complete()

        def on_message_complete(self) -> None:
            self._mid_message = False
            self._disarm()
            super().on_message_complete()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if self._mid_message and not self.transport.is_closing():
                self._arm()  # the next request, which had to wait, now reads on

        def _start_asgi_task(self, cycle: RequestResponseCycle, app: ASGI3Application) -> None:
            """Run the request's cycle, with what `below_asgi` answers it by in place of the app (never
            in place of another: uvicorn's own refusals)."""
            if below_asgi is not None and app is self.app:
                below = below_asgi(cast(Scope, cycle.scope))  # uvicorn's typed scope is starlette's mapping
                if below is not None:
                    app = cast("ASGI3Application", below)
            super()._start_asgi_task(cycle, app)

        def _answering(self) -> bool:
            return self.cycle is not None and not self.cycle.response_complete

        def _arm(self) -> None:
            if self._deadline is None:
                self._deadline = self.loop.call_later(read_timeout_s, self._too_slow)

        def _disarm(self) -> None:
            if self._deadline is not None:
                self._deadline.cancel()
                self._deadline = None

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
