"""uvicorn's HTTP/1.1 protocol with deadlines and a header bound, against slow and greedy clients.

uvicorn (httptools) waits forever for a request that never completes: a client
that opens a connection and sends nothing, or sends its headers a byte at a
time (slowloris), holds a connection and its memory as long as it likes; and
headers are collected without a bound. Here:
- a request's line, headers and body must all arrive within
  `request_read_timeout_ms` of its first byte (or of the connection opening):
  else 408 and the connection closes, or, when the route is already reading the
  body, the connection closes and the route sees the client gone;
- a request line and headers over `max_header_bytes` answer 431 and close.

Once a request has fully arrived its deadline is off: a long answer (a read
that follows the log) is not cut. Idle connections between requests are
uvicorn's keep-alive timeout's.
"""

from __future__ import annotations

import asyncio
import json
import logging

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from raft.messages import Code

log = logging.getLogger("raftlog.server")


def guarded_protocol(read_timeout_s: float, max_header_bytes: int) -> type[asyncio.Protocol]:
    """The protocol class to give uvicorn.Config(http=...)."""

    class GuardedHttpProtocol(HttpToolsProtocol):
        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._deadline: asyncio.TimerHandle | None = None
            self._header_bytes = 0
            self._in_headers = True  # nothing has arrived yet: as slow as headers that do not come
            self._too_large = False
            self._arm()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

        def on_message_begin(self) -> None:
            self._header_bytes = 0
            self._in_headers = True
            self._arm()
            super().on_message_begin()

        def on_url(self, url: bytes) -> None:
            self._count(len(url))
            super().on_url(url)

        def on_header(self, name: bytes, value: bytes) -> None:
            self._count(len(name) + len(value))
            super().on_header(name, value)

        def on_headers_complete(self) -> None:
            self._in_headers = False
            super().on_headers_complete()

        def on_message_complete(self) -> None:
            self._disarm()
            super().on_message_complete()

        def send_400_response(self, msg: str) -> None:
            """uvicorn's answer to a parser error; headers over the bound are this protocol's error."""
            if self._too_large:
                self._answer_and_close(431, "Request Header Fields Too Large",
                                       f"the request line and headers are over max_header_bytes ({max_header_bytes})")
            else:
                super().send_400_response(msg)

        def _count(self, size: int) -> None:
            self._header_bytes += size
            if self._header_bytes > max_header_bytes:
                self._too_large = True
                raise ValueError("headers over max_header_bytes")  # stops the parser: send_400_response

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
            client = f"{self.client[0]}:{self.client[1]}" if self.client else "?"
            log.info("closing the connection from %s: a request did not arrive within request_read_timeout_ms "
                     "(%.0f ms)", client, read_timeout_s * 1000)
            if self._in_headers:
                self._answer_and_close(408, "Request Timeout", "the request did not arrive in time")
            else:
                self.transport.close()  # the route reading the body sees the client gone

        def _answer_and_close(self, status: int, reason: str, message: str) -> None:
            body = json.dumps({"error": {"code": Code.UNEXPECTED_ARGUMENT.name, "message": message,
                                         "leader": None}}).encode()
            head = (f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\n"
                    f"content-length: {len(body)}\r\nconnection: close\r\n\r\n").encode()
            self.transport.write(head + body)
            self.transport.close()

    return GuardedHttpProtocol

