"""The peer transport: wire formats, and a peer that is down, slow or answers garbage costs a
failed call (PeerUnavailable), never a crash; HTTP/2 connections outlive hypercorn's defaults."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import h2.connection
import h2.events
import pytest
from hypercorn.asyncio import serve

from api.errors import ApiError
from api.peer_client import RECONNECT_AFTER_S, PeerClient
from api.peer_codec import PeerMessageError, decode_message, decode_push, encode_message, encode_push
from app.launcher import free_ports
from app.server import bind, peer_server_config
from app.settings import load_settings
from raft.config import Peer
from raft.messages import (
    Code,
    HeartbeatRequest,
    HeartbeatResponse,
    PushRequest,
    PushResponse,
    PushType,
    TransferRequest,
    VoteRequest,
    VoteResponse,
    VoteResult,
)
from raft.transport import PeerUnavailable

ASGIApp = Callable[[dict[str, Any], Any, Any], Awaitable[None]]


@pytest.mark.parametrize("push_type", list(PushType))
def test_a_push_survives_the_wire(push_type: PushType) -> None:
    request = PushRequest("g", "n1", 7, push_type, 41, 40, 2, memoryview(b"raw entries \x00\xff"), 39, 6,
                          chain_crc=0xFFFFFFFF if push_type is PushType.COMPARE else None, next_pos=1234)
    decoded = decode_push(b"".join(encode_push(request)))
    assert bytes(decoded.data) == bytes(request.data)
    assert decoded == PushRequest(**{**{f: getattr(request, f) for f in request.__slots__}, "data": decoded.data})


@pytest.mark.parametrize("message", [
    VoteRequest("g", "n2", 3, 2, 10, taking_leadership=True), VoteResponse(3, VoteResult.REJECT_ALREADY_VOTED),
    HeartbeatRequest("g", "n1", 3, 9), HeartbeatResponse(Code.EXPIRED_TERM, 4),
    TransferRequest("g", "n1", 3, "n2"), PushResponse(Code.SUCCESS, 3, 5, 9, 3, ack_index=9),
])
def test_control_messages_survive_the_wire(message: object) -> None:
    assert decode_message(type(message), encode_message(message)) == message


@pytest.mark.parametrize(("cls", "data"), [
    (VoteResponse, b"not json"), (VoteResponse, b"[1, 2]"), (VoteResponse, b'{"term": 1, "result": "MAYBE"}'),
    (VoteResponse, b'{"term": "one", "result": "ACCEPT"}'), (VoteResponse, b'{"term": 1}'),
    (HeartbeatResponse, b'{"code": 999}'), (VoteRequest, b'{"group": "g", "leader_id": "n1", "term": true}'),
])
def test_garbage_messages_are_refused(cls: type, data: bytes) -> None:
    with pytest.raises(PeerMessageError):
        decode_message(cls, data)


@pytest.mark.parametrize("data", [b"", b"\x09" + bytes(80), b"\x00" * 60 + b"\xff\xff\xff\xff"])
def test_garbage_pushes_are_refused(data: bytes) -> None:
    with pytest.raises(PeerMessageError):
        decode_push(data)


async def running(app: ASGIApp) -> AsyncIterator[str]:
    (port,) = free_ports(1)
    sock = bind("127.0.0.1", port, "peer")
    stop = asyncio.Event()
    config = peer_server_config(sock, load_settings({"log_level": "warning"}))
    task = asyncio.create_task(serve(app, config, shutdown_trigger=stop.wait))
    try:
        yield f"127.0.0.1:{port}"
    finally:
        stop.set()
        await task


def client_for(address: str, timeout_ms: int = 300) -> PeerClient:
    return PeerClient("n1", [Peer("n1", "127.0.0.1:1"), Peer("n2", address)], rpc_timeout_ms=timeout_ms,
                      push_timeout_ms=timeout_ms, wait_timeout_ms=timeout_ms)


def answering(status: int, body: bytes, seen: list[dict[str, Any]] | None = None,
              hold: asyncio.Event | None = None) -> ASGIApp:
    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        while (await receive()).get("more_body"):
            pass
        if seen is not None:
            seen.append(scope)
        if hold is not None:
            await hold.wait()
        await send({"type": "http.response.start", "status": status, "headers": []})
        await send({"type": "http.response.body", "body": body})
    return app


CALLS = [
    lambda c: c.vote("n2", VoteRequest("g", "n1", 1, -1, -1)),
    lambda c: c.heartbeat("n2", HeartbeatRequest("g", "n1", 1)),
    lambda c: c.push("n2", PushRequest("g", "n1", 1, PushType.APPEND, -1, 0, 1, b"x" * 200_000)),
    lambda c: c.transfer("n2", TransferRequest("g", "n1", 1, "n2")),
]


@pytest.mark.parametrize("call", CALLS, ids=["vote", "heartbeat", "push", "transfer"])
@pytest.mark.parametrize(("status", "body"), [(200, b"garbage"), (200, b'{"code": "nope"}'), (500, b""),
                                              (404, b"{}")], ids=["not-json", "bad-field", "500", "404"])
async def test_a_peer_answering_garbage_is_a_failed_call(call: Any, status: int, body: bytes) -> None:
    seen: list[dict[str, Any]] = []
    async for address in running(answering(status, body, seen)):
        client = client_for(address)
        with pytest.raises(PeerUnavailable):
            await call(client)
        await client.close()
    assert seen and seen[0]["http_version"] == "2"  # prior-knowledge HTTP/2, no upgrade


@pytest.mark.parametrize("call", CALLS, ids=["vote", "heartbeat", "push", "transfer"])
async def test_a_peer_that_is_down_or_silent_is_a_failed_call(call: Any) -> None:
    (port,) = free_ports(1)
    down = client_for(f"127.0.0.1:{port}")
    with pytest.raises(PeerUnavailable):
        await call(down)
    await down.close()
    hold = asyncio.Event()
    async for address in running(answering(200, b"{}", hold=hold)):
        slow = client_for(address, timeout_ms=100)
        with pytest.raises(PeerUnavailable):
            await call(slow)
        hold.set()
        await slow.close()


async def test_a_connection_silent_for_seconds_is_replaced_and_the_peer_reached_again() -> None:
    """After a partition heals, a connection whose calls all timed out may stay wedged: one that has
    carried no answer for RECONNECT_AFTER_S is replaced."""
    hold = asyncio.Event()
    async for address in running(answering(200, encode_message(HeartbeatResponse(Code.SUCCESS, 1)), hold=hold)):
        client = client_for(address, timeout_ms=100)
        first, data = client._control["n2"], client._data["n2"]
        with pytest.raises(PeerUnavailable):
            await CALLS[1](client)
        assert client._control["n2"] is first  # silent for a moment only: same connections
        client._answered["n2", "control"] = time.monotonic() - RECONNECT_AFTER_S - 1
        with pytest.raises(PeerUnavailable):
            await CALLS[1](client)
        assert client._control["n2"] is not first
        assert client._data["n2"] is data  # the other connection is judged on its own answers
        hold.set()
        assert (await CALLS[1](client)).code is Code.SUCCESS
        await client.close()


async def test_one_peer_connection_carries_thousands_of_calls() -> None:
    """hypercorn closes a connection after keep_alive_max_requests (default 1000) unless raised."""
    seen: list[dict[str, Any]] = []
    async for address in running(answering(200, encode_message(HeartbeatResponse(Code.SUCCESS, 1)), seen)):
        client = client_for(address, timeout_ms=5000)
        for _ in range(1500):
            response = await client.heartbeat("n2", HeartbeatRequest("g", "n1", 1))
            assert response.code is Code.SUCCESS
        await client.close()
    assert len({tuple(scope["client"]) for scope in seen}) == 1


@pytest.mark.parametrize(("status", "body", "code", "http_status"), [
    (409, b'{"error": {"code": "FALL_BEHIND_TOO_MUCH", "message": "behind", "leader": "n2", "status": 409}}',
     "FALL_BEHIND_TOO_MUCH", 409),
    (409, b'{"error": {"code": "NOT_A_CODE", "message": "?", "status": 409}}', "NETWORK_ERROR", 502),
    (409, b'{"error": "flat"}', "NETWORK_ERROR", 502),
    (200, b"[]", "NETWORK_ERROR", 502),
    (500, b"{}", "NETWORK_ERROR", 502),
])
async def test_a_forwarded_call_answers_as_the_leader_did_or_as_a_network_error(
        status: int, body: bytes, code: str, http_status: int) -> None:
    async for address in running(answering(status, body)):
        client = client_for(address)
        with pytest.raises(ApiError) as caught:
            await client.transfer_leadership("n2", "n3")
        await client.close()
    assert caught.value.code.name == code and caught.value.status == http_status


async def test_concurrent_large_pushes_on_one_connection_all_complete() -> None:
    """With HTTP/2's default 64 KiB windows, httpcore can stall one of several concurrent
    uploads until its timeout (httpx2 issue #1133); the peer server's wide windows avoid it."""
    seen: list[dict[str, Any]] = []
    answer = encode_message(PushResponse(Code.SUCCESS, 1))
    async for address in running(answering(200, answer, seen)):
        client = client_for(address, timeout_ms=5000)

        async def pusher(worker: int, client: PeerClient = client) -> list[Code]:
            codes = []
            for i in range(25):  # one after another, overlapping the other workers' pushes
                request = PushRequest("g", "n1", 1, PushType.APPEND, -1, worker * 100 + i, 1, b"x" * (1 << 20))
                codes.append((await client.push("n2", request)).code)
            return codes

        results = await asyncio.gather(*(pusher(w) for w in range(4)))
        await client.close()
    assert results == [[Code.SUCCESS] * 25] * 4
    assert len(seen) == 100 and len({tuple(scope["client"]) for scope in seen}) == 1


async def test_data_for_a_stream_the_server_closed_is_dropped_and_the_connection_lives_on() -> None:
    """Request data that arrives after the server answered and closed its stream (held up by a slow or
    partitioned network) ended hypercorn's whole connection with a KeyError (found by the fault suite)."""
    async def early(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"answered before the body came"})

    async for address in running(early):
        conn, reader, writer, headers = await raw_h2(address)
        try:
            conn.send_headers(1, headers)  # the body is still to come
            writer.write(conn.data_to_send())
            await until_ended(conn, reader, writer, 1)
            conn.send_data(1, b"late", end_stream=True)
            conn.send_headers(3, headers, end_stream=True)
            writer.write(conn.data_to_send())
            await until_ended(conn, reader, writer, 3)  # the same connection answers the next request
        finally:
            writer.close()


async def until_ended(conn: h2.connection.H2Connection, reader: asyncio.StreamReader,
                      writer: asyncio.StreamWriter, stream_id: int) -> None:
    """Read the server's frames until it ends `stream_id`."""
    while True:
        data = await asyncio.wait_for(reader.read(65536), 5)
        assert data, "the server closed the connection"
        for event in conn.receive_data(data):
            if isinstance(event, h2.events.StreamEnded) and event.stream_id == stream_id:
                return
        writer.write(conn.data_to_send())


async def test_a_request_whose_headers_and_body_arrive_together_reaches_the_app_whole() -> None:
    """The guard for closed streams must not take the body of a stream its own headers open."""
    async def echo(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": body})

    async for address in running(echo):
        conn, reader, writer, headers = await raw_h2(address)
        try:
            conn.send_headers(1, headers)
            conn.send_data(1, b"the whole body", end_stream=True)
            writer.write(conn.data_to_send())  # one write: one read, one batch of events on the server
            received = b""
            while True:
                data = await asyncio.wait_for(reader.read(65536), 5)
                assert data, "the server closed the connection"
                events = conn.receive_data(data)
                received += b"".join(e.data for e in events if isinstance(e, h2.events.DataReceived))
                if any(isinstance(e, h2.events.StreamEnded) for e in events):
                    break
            assert received == b"the whole body"
        finally:
            writer.close()


async def raw_h2(address: str) -> tuple[h2.connection.H2Connection, asyncio.StreamReader, asyncio.StreamWriter,
                                        list[tuple[str, str]]]:
    """An HTTP/2 connection driven frame by frame, and the headers of a POST to the peer port."""
    host, port = address.split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    conn = h2.connection.H2Connection()
    conn.initiate_connection()
    return conn, reader, writer, [(":method", "POST"), (":path", "/raft/push"), (":scheme", "http"),
                                  (":authority", address)]
