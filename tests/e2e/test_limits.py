"""The client port's limits on a real node: requests and body bytes in flight (503 SERVER_BUSY with
Retry-After), request and header sizes (413, 431), and slow clients (408, closed), with the node
serving others all along."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import socket
from collections.abc import Iterator

import h2.config
import h2.connection
import h2.events
import httpx
import pytest

from raftlog.api.peer_port import PEER_STREAMS_MAX
from raftlog.app.launcher import SMALL_FILES, LocalCluster
from tests.processes import eventually, metric, serving

LIMITS = {"max_inflight_requests": 3, "max_request_bytes": 1000, "max_inflight_body_bytes": 1500,
          "max_header_bytes": 4096, "max_entry_bytes": 1000, "request_read_timeout_ms": 30_000}
SLOW = {"request_read_timeout_ms": 700}


def one_node(tmp_path_factory: pytest.TempPathFactory, settings: dict[str, object]) -> Iterator[LocalCluster]:
    yield from serving(tmp_path_factory.mktemp("limits"), 1, settings={**SMALL_FILES, **settings})


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    yield from one_node(tmp_path_factory, LIMITS)


@pytest.fixture(scope="module")
def strict_node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    yield from one_node(tmp_path_factory, SLOW)


def port(cluster: LocalCluster) -> int:
    return cluster.members["n1"].client_port


async def started_append(cluster: LocalCluster, length: int, sent: bytes
                         ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """An append whose body has only partly arrived: the node holds it in flight."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port(cluster))
    writer.write(b"POST /v1/entries HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/octet-stream\r\n"
                 b"content-length: %d\r\n\r\n%s" % (length, sent))
    await writer.drain()
    return reader, writer


async def answer_of(reader: asyncio.StreamReader) -> tuple[int, bytes]:
    head = await reader.readuntil(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    length = int(re.search(rb"content-length: (\d+)", head, re.IGNORECASE).group(1))  # type: ignore[union-attr]
    return status, await reader.readexactly(length)


async def wait_for_gauge(cluster: LocalCluster, name: str, value: float) -> None:
    url = cluster.members["n1"].client_url
    await asyncio.to_thread(eventually, lambda: metric(url, name) == value, f"{name} == {value}")


async def test_requests_in_flight_beyond_the_limit_get_503_with_retry_after(node: LocalCluster) -> None:
    held = [await started_append(node, 10, b"12345") for _ in range(3)]
    await wait_for_gauge(node, "raftlog_inflight_requests", 3)
    async with httpx.AsyncClient(base_url=node.members["n1"].client_url) as client:
        busy = await client.get("/v1/cluster")
        assert busy.status_code == 503 and busy.json()["error"]["code"] == "SERVER_BUSY"
        assert busy.headers["retry-after"] == "1"
        assert (await client.get("/readyz")).status_code == 200  # health checks are exempt
        for reader, writer in held:
            writer.write(b"67890")
            assert (await answer_of(reader))[0] == 201
            writer.close()
        await wait_for_gauge(node, "raftlog_inflight_requests", 0)
        assert (await client.get("/v1/cluster")).status_code == 200


async def test_body_bytes_in_flight_are_bounded_across_requests(node: LocalCluster) -> None:
    first = await started_append(node, 1000, b"a" * 800)
    await wait_for_gauge(node, "raftlog_inflight_body_bytes", 800)
    second = await started_append(node, 1000, b"b" * 800)  # 1600 > max_inflight_body_bytes
    status, body = await answer_of(second[0])
    assert status == 503 and b"SERVER_BUSY" in body
    first[1].write(b"a" * 200)
    assert (await answer_of(first[0]))[0] == 201
    for _, writer in (first, second):
        writer.close()
    await wait_for_gauge(node, "raftlog_inflight_body_bytes", 0)


async def test_readers_uploads_of_the_wrong_type_hold_none_of_the_writers_budget(node: LocalCluster) -> None:
    """Audit M5: four slow uploads of text/plain to the routes a reader may call, each declaring 1,000
    bytes and sending 300, would hold 1,200 of the 1,500-byte budget, and a writer's 800-byte append
    would get 503. Each is refused 415 before its body is read, and the writer is served."""
    uploads = []
    for path in (b"PUT /v1/consumers/billing", b"PUT /v1/consumers/audit", b"POST /v1/producers",
                 b"POST /v1/producers"):
        reader, writer = await asyncio.open_connection("127.0.0.1", port(node))
        writer.write(path + b" HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: text/plain\r\n"
                     b"content-length: 1000\r\n\r\n" + b"p" * 300)
        uploads.append((reader, writer))
    for reader, _ in uploads:
        status, body = await asyncio.wait_for(answer_of(reader), 10)  # without the other 700 bytes
        assert status == 415 and b"application/json" in body
    async with httpx.AsyncClient(base_url=node.members["n1"].client_url) as client:
        assert (await client.post("/v1/entries", content=b"w" * 800)).status_code == 201
    for _, writer in uploads:
        writer.close()
    await wait_for_gauge(node, "raftlog_inflight_body_bytes", 0)


async def test_oversized_requests_get_413_before_or_while_they_arrive(node: LocalCluster) -> None:
    async with httpx.AsyncClient(base_url=node.members["n1"].client_url) as client:
        end = (await client.get("/v1/cluster")).json()["end_index"]
        declared = await client.post("/v1/entries", content=b"x" * 1001)
        assert declared.status_code == 413

        async def chunks():  # no Content-Length: chunked, counted as it arrives
            for _ in range(11):
                yield b"y" * 100

        streamed = await client.post("/v1/entries/batch", content=chunks(),
                                     headers={"content-type": "application/json"})
        assert streamed.status_code == 413 and streamed.json()["error"]["code"] == "UNEXPECTED_ARGUMENT"
        transfer = await client.post("/v1/cluster/leader", content=b" " * 2000,
                                     headers={"content-type": "application/json"})
        assert transfer.status_code == 413  # every route, not only appends
        streamed_transfer = await client.post("/v1/cluster/leader", content=chunks(),
                                              headers={"content-type": "application/json"})
        assert streamed_transfer.status_code == 413  # counted as it arrives on that route too
        assert (await client.get("/v1/cluster")).json()["end_index"] == end


async def test_headers_over_the_limit_get_431(node: LocalCluster) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port(node))
    writer.write(b"GET /v1/cluster HTTP/1.1\r\nhost: 127.0.0.1\r\n" + b"x-padding: " + b"p" * 5000 + b"\r\n\r\n")
    status, body = await answer_of(reader)
    assert status == 431 and b"max_header_bytes" in body
    assert await reader.read() == b""  # closed
    writer.close()


async def test_slow_clients_are_cut_off_and_cannot_hold_the_node(strict_node: LocalCluster) -> None:
    """Slowloris: headers a byte at a time, a silent connection, a body that stalls."""
    opened = [await asyncio.open_connection("127.0.0.1", port(strict_node)) for _ in range(30)]
    silent = opened.pop()
    stalled = await started_append(strict_node, 100, b"part")

    async def trickle(writer: asyncio.StreamWriter) -> None:
        writer.write(b"GET /v1/cluster HTTP/1.1\r\n")
        for i in range(100):
            await asyncio.sleep(0.05)  # a slow client is what this test is about
            if writer.is_closing():
                return
            writer.write(b"x-slow-%d: 1\r\n" % i)

    trickles = [asyncio.create_task(trickle(writer)) for _, writer in opened]
    async with httpx.AsyncClient(base_url=strict_node.members["n1"].client_url) as client:
        for i in range(5):  # served meanwhile
            assert (await client.post("/v1/entries", content=b"served %d" % i)).status_code == 201
    for reader, _ in opened:
        status, body = await asyncio.wait_for(answer_of(reader), 10)
        assert status == 408 and b"did not arrive in time" in body
        with contextlib.suppress(ConnectionResetError):  # then closed: an end, or a reset (unread bytes queued)
            assert await reader.read() == b""
    assert (await asyncio.wait_for(answer_of(silent[0]), 10))[0] == 408
    assert await asyncio.wait_for(stalled[0].read(), 10) == b""  # the stalled body: closed
    for task in trickles:
        await task
    for _, writer in [*opened, silent, stalled]:
        writer.close()
    await wait_for_gauge(strict_node, "raftlog_inflight_requests", 0)


async def test_one_connection_is_served_one_request_at_a_time(node: LocalCluster) -> None:
    """HTTP/1.1: pipelined requests wait their turn (reading paused), answered in order."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port(node))
    writer.write(b"".join(b"POST /v1/entries HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/octet-stream\r\n"
                          b"content-length: 5\r\n\r\np%04d" % i for i in range(4)))
    answers = [await answer_of(reader) for _ in range(4)]
    writer.close()
    assert [status for status, _ in answers] == [201] * 4
    indices = [json.loads(body)["index"] for _, body in answers]
    assert indices == list(range(indices[0], indices[0] + 4))  # each committed before the next was read


def test_the_peer_port_bounds_streams_per_connection(node: LocalCluster) -> None:
    """HTTP/2: the peer port tells every connection how many streams it may open at once."""
    connection = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    connection.initiate_connection()
    with socket.create_connection(("127.0.0.1", node.members["n1"].peer_port), timeout=5) as sock:
        sock.sendall(connection.data_to_send())
        events = []
        while not any(isinstance(e, h2.events.RemoteSettingsChanged) for e in events):
            events += connection.receive_data(sock.recv(65536))
    assert connection.remote_settings.max_concurrent_streams == PEER_STREAMS_MAX == 256
