"""The client port's connection protocol in a real uvicorn server on loopback, with a small app:
the read deadline spares requests waiting behind a slow answer, header bytes are bounded however
they arrive, connections beyond max_connections are refused, and, with HoldRules, beyond one
address's share, and only a credited request keeps a connection. (tests/e2e/test_limits.py and
test_connection_slots.py have the same bounds on a real node.)"""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import AsyncIterator
from typing import Any

import pytest
import uvicorn

from raftlog.api.connection_slots import AddressSlots, HoldRules
from raftlog.app.client_protocol import CORK_BYTES_MAX, CorkedTransport, guarded_protocol
from raftlog.app.launcher import free_ports
from raftlog.app.server import bind

DEADLINE_S = 0.3
UNUSED_S = 0.15  # unauthenticated_idle_ms, below the read deadline: a silent connection is closed, not answered 408
IDLE_S = 1.0  # idle_connection_ms
BIG_ANSWER_MB = 64


class Echo:
    """Answers each request with its body; /slow waits for `release` first."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.gone = asyncio.Event()

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        if scope["path"] == "/slow":
            await self.release.wait()
        if scope["path"] == "/refused":  # as a request without its token is answered
            await send({"type": "http.response.start", "status": 401, "headers": [(b"content-length", b"0")]})
            await send({"type": "http.response.body", "body": b""})
            return
        if scope["path"] == "/big":  # more than the socket buffers hold, then the end of the connection seen
            await send({"type": "http.response.start", "status": 200, "headers": []})
            for _ in range(BIG_ANSWER_MB):
                await send({"type": "http.response.body", "body": bytes(1 << 20), "more_body": True})
            if (await receive())["type"] == "http.disconnect":
                self.gone.set()
            return
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})


@contextlib.asynccontextmanager
async def serving(app: Echo, max_header_bytes: int = 4096, max_connections: int = 100,
                  rules: HoldRules | None = None) -> AsyncIterator[int]:
    (port,) = free_ports(1)
    sock = bind("127.0.0.1", port, "client")
    server = uvicorn.Server(uvicorn.Config(app, lifespan="off", log_level="warning",
                                           http=guarded_protocol(DEADLINE_S, max_header_bytes, max_connections,
                                                                 write_stall_s=DEADLINE_S, rules=rules)))
    task = asyncio.create_task(server.serve(sockets=[sock]))
    while not server.started:
        await asyncio.sleep(0.01)
    try:
        yield port
    finally:
        server.should_exit = True
        await task
        sock.close()


async def answer(reader: asyncio.StreamReader) -> tuple[int, dict[str, str], bytes]:
    head = (await reader.readuntil(b"\r\n\r\n")).decode()
    status = int(head.split(" ", 2)[1])
    headers = dict(re.findall(r"^([\w-]+): (.*?)\r$", head.lower(), re.MULTILINE))
    return status, headers, await reader.readexactly(int(headers["content-length"]))


async def test_a_request_waiting_behind_a_slow_answer_is_not_cut_off() -> None:
    app = Echo()
    async with serving(app) as port:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET /slow HTTP/1.1\r\nhost: x\r\n\r\n"
                     b"POST /echo HTTP/1.1\r\nhost: x\r\ncontent-length: 5\r\n\r\nab")
        await asyncio.sleep(3 * DEADLINE_S)  # the slow answer takes longer than the read deadline
        writer.write(b"cde")
        app.release.set()
        assert (await answer(reader))[0] == 200
        assert (await answer(reader))[::2] == (200, b"abcde")
        writer.close()


async def test_a_client_that_takes_nothing_of_its_answer_is_cut_off() -> None:
    """Without a write deadline the answer's unsent bytes, and the route, would wait for ever."""
    app = Echo()
    async with serving(app) as port:
        _, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET /big HTTP/1.1\r\nhost: x\r\n\r\n")  # and never read
        await asyncio.wait_for(app.gone.wait(), 20)
        writer.close()


async def test_a_header_sent_in_pieces_is_bounded() -> None:
    """One header value in 1000-byte writes, never ended: httptools would hold it all, uncounted,
    until its CRLF (and the read deadline would answer 408, not 431)."""
    async with serving(Echo(), max_header_bytes=4096) as port:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET / HTTP/1.1\r\nhost: x\r\nx-big: ")
        with contextlib.suppress(ConnectionError):
            for _ in range(8):
                writer.write(b"v" * 1000)
                await writer.drain()
        status, _, body = await asyncio.wait_for(answer(reader), 5)
        assert status == 431 and b"max_header_bytes (4096)" in body
        assert await reader.read() == b""
        writer.close()


class Paths(Echo):
    """Echo, noting the path of every request the app is handed."""

    def __init__(self) -> None:
        super().__init__()
        self.paths: list[str] = []

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            self.paths.append(scope["path"])
        await super().__call__(scope, receive, send)


@pytest.mark.parametrize("where", ["query", "header"])
async def test_a_request_pipelined_behind_a_body_in_one_read_is_bounded_too(where: str) -> None:
    """Audit A, N1: bytes after the first request's headers went to the parser uncounted, so a request
    pipelined behind a body in the same read reached the app with a header section of 150 KiB."""
    app = Paths()
    async with serving(app, max_header_bytes=4096) as port:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        big = b"v" * (150 << 10)
        second = (b"GET /b?" + big + b" HTTP/1.1\r\nhost: x\r\n\r\n" if where == "query"
                  else b"GET /b HTTP/1.1\r\nhost: x\r\nx-big: " + big + b"\r\n\r\n")
        body = bytes(80 << 10)
        writer.write(b"POST /a HTTP/1.1\r\nhost: x\r\ncontent-length: %d\r\n\r\n" % len(body) + body + second)
        with contextlib.suppress(ConnectionError):
            await writer.drain()
        first = await asyncio.wait_for(answer(reader), 5)
        assert first[0] == 200  # the first request is answered
        status, _, text = await asyncio.wait_for(answer(reader), 5)
        assert status == 431 and b"max_header_bytes (4096)" in text
        assert app.paths == ["/a"]  # the second never reached the app
        writer.close()


async def test_connections_beyond_the_limit_are_refused_with_retry_after() -> None:
    async with serving(Echo(), max_connections=3) as port:
        held = [await asyncio.open_connection("127.0.0.1", port) for _ in range(3)]
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        status, headers, body = await answer(reader)
        assert status == 503 and headers["retry-after"] == "1" and b"max_connections 3" in body
        assert await reader.read() == b""
        writer.close()
        held.pop()[1].close()
        while True:  # once the server has seen the close, a new connection is served
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(b"POST /echo HTTP/1.1\r\nhost: x\r\ncontent-length: 2\r\n\r\nok")
            status, _, body = await answer(reader)
            writer.close()
            if status == 200:
                break
        assert body == b"ok"
        for _, w in held:
            w.close()


async def test_one_address_holds_at_most_its_share() -> None:
    async with serving(Echo(), rules=HoldRules(AddressSlots(2), 30.0, 30.0)) as port:
        held = [await asyncio.open_connection("127.0.0.1", port) for _ in range(2)]
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        status, headers, body = await answer(reader)
        assert status == 503 and headers["retry-after"] == "1" and b"connections_per_address_max 2" in body
        writer.close()
        for _, w in held:
            w.close()


async def test_only_a_credited_request_keeps_a_connection() -> None:
    """Silent, a probe, a refused request: closed UNUSED_S after the connection opened, with no
    answer of its own; a credited request keeps it, until IDLE_S after the last one."""
    async def request(path: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter, int]:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(f"GET {path} HTTP/1.1\r\nhost: x\r\n\r\n".encode())
        return reader, writer, (await answer(reader))[0]

    async with serving(Echo(), rules=HoldRules(AddressSlots(10), UNUSED_S, IDLE_S)) as port:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        assert await asyncio.wait_for(reader.read(), 5) == b""  # no 408: closed before the read deadline
        writer.close()
        for path, status in (("/healthz", 200), ("/refused", 401)):
            reader, writer, answered = await request(path)
            assert answered == status
            assert await asyncio.wait_for(reader.read(), 5) == b""
            writer.close()
        reader, writer, answered = await request("/v1/cluster")
        assert answered == 200
        await asyncio.sleep(2 * UNUSED_S)
        writer.write(b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n")  # still open: answered
        assert (await answer(reader))[0] == 200
        assert await asyncio.wait_for(reader.read(), 5) == b""  # then closed, IDLE_S after the credited one
        writer.close()


class Recorded(asyncio.Transport):
    def __init__(self) -> None:
        super().__init__()
        self.sent: list[bytes] = []
        self.closed = False

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.sent.append(bytes(data))

    def close(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed


async def test_an_answer_written_in_pieces_in_one_turn_leaves_in_one_send() -> None:
    """uvicorn writes the head and the body apart; they go out together, and nothing is lost at close."""
    real = Recorded()
    corked = CorkedTransport(real, asyncio.get_running_loop())
    corked.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n")
    corked.write(b"ok")
    assert real.sent == []
    await asyncio.sleep(0)  # the end of the turn
    assert real.sent == [b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok"]
    corked.write(b"last words")
    corked.close()
    assert real.sent[1:] == [b"last words"] and real.closed


async def test_a_big_answer_is_not_held_back_from_flow_control() -> None:
    real = Recorded()
    corked = CorkedTransport(real, asyncio.get_running_loop())
    corked.write(b"x" * (CORK_BYTES_MAX - 1))
    assert real.sent == []
    corked.write(b"y")
    assert real.sent == [b"x" * (CORK_BYTES_MAX - 1) + b"y"]  # at once: the writer may be told to pause


async def test_pipelined_answers_and_a_closing_answer_arrive_whole() -> None:
    async with serving(Echo()) as port:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"POST /echo HTTP/1.1\r\nhost: x\r\ncontent-length: 3\r\n\r\nabc"
                     b"POST /echo HTTP/1.1\r\nhost: x\r\nconnection: close\r\ncontent-length: 3\r\n\r\ndef")
        assert (await answer(reader))[::2] == (200, b"abc")
        status, headers, body = await answer(reader)
        assert (status, headers["connection"], body) == (200, "close", b"def")
        assert await reader.read() == b""
        writer.close()
