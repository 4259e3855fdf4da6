"""The public gRPC port against hostile clients, on a member in this process: the token is checked
from the call's metadata before the message is read; a batch is counted before it is decoded; the
bytes of appends draw on the member's one request budget; connections are bounded from their
accept, and per address, and one on which no call passed is closed soon (DESIGN, Security posture)."""

from __future__ import annotations

import asyncio
import socket
from dataclasses import replace
from types import SimpleNamespace

import grpc
import grpc.aio
import pytest
from google.rpc import error_details_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_status import rpc_status

from raftlog.api import log_pb2 as pb
from raftlog.api.grpc_api import GrpcApi
from raftlog.app.launcher import free_ports
from raftlog.app.node import Node
from tests.api.conftest import WRITER

AS_WRITER = (("authorization", f"Bearer {WRITER}"),)
APPEND_BATCH = "/raftlog.v1.Log/AppendBatch"


def reason(error: grpc.aio.AioRpcError) -> tuple[grpc.StatusCode, str]:
    status = rpc_status.from_call(error)  # type: ignore[arg-type]
    assert status is not None, "the status carries details"
    info = error_details_pb2.ErrorInfo()
    assert status.details[0].Unpack(info)
    return error.code(), info.reason


async def refused(address: str, message: bytes, metadata: tuple[tuple[str, str], ...] = ()) -> tuple[
        grpc.StatusCode, str]:
    async with grpc.aio.insecure_channel(address) as channel:
        with pytest.raises(grpc.aio.AioRpcError) as error:
            await channel.unary_unary(APPEND_BATCH)(message, metadata=metadata)
    return reason(error.value)


def refusals(node: Node, reason: str) -> float:
    return node.metrics.auth_failures.labels("grpc", reason)._value.get()  # type: ignore[no-any-return]


async def test_a_call_without_a_token_is_refused_before_its_message_is_decoded(node: Node, grpc_port: str) -> None:
    """Garbage that no protobuf decoder takes: without a token the answer is about the token (the
    bytes were never decoded), counted as a refusal; with one, about the garbage."""
    assert await refused(grpc_port, b"\xff\xff\xff") == (grpc.StatusCode.UNAUTHENTICATED, "UNAUTHENTICATED")
    assert await refused(grpc_port, b"\xff\xff\xff", (("authorization", "Bearer not-a-token-0123456789"),)) == (
        grpc.StatusCode.UNAUTHENTICATED, "UNAUTHENTICATED")
    assert refusals(node, "missing") == 1 and refusals(node, "invalid") == 1
    assert await refused(grpc_port, b"\xff\xff\xff", AS_WRITER) == (grpc.StatusCode.INVALID_ARGUMENT,
                                                                    "UNEXPECTED_ARGUMENT")


async def test_a_batch_stops_at_max_batch_entries_plus_one(node: Node, grpc_port: str) -> None:
    """The bodies are counted on the wire: a batch of one too many, cut by garbage after them, is
    refused as too large (protobuf, which would have refused the garbage, never saw it)."""
    limit = node.service.limits.max_batch_entries
    assert await refused(grpc_port, b"\x0a\x00" * (limit + 1) + b"\xff\xff", AS_WRITER) == (
        grpc.StatusCode.RESOURCE_EXHAUSTED, "UNEXPECTED_ARGUMENT")
    async with grpc.aio.insecure_channel(grpc_port) as channel:
        batch = pb.AppendBatchRequest(bodies=[b"x"] * limit).SerializeToString()
        answer = pb.AppendBatchResponse.FromString(await channel.unary_unary(APPEND_BATCH)(batch, metadata=AS_WRITER))
    assert answer.last_index - answer.first_index == limit - 1


async def test_appends_draw_on_the_members_one_request_budget(node: Node, grpc_port: str) -> None:
    budget = node.request_bytes
    batch = pb.AppendBatchRequest(bodies=[b"x" * 100]).SerializeToString()
    assert budget.take(budget.max_bytes - 50)  # held by another port's requests
    try:
        assert await refused(grpc_port, batch, AS_WRITER) == (grpc.StatusCode.UNAVAILABLE, "SERVER_BUSY")
    finally:
        budget.give(budget.max_bytes - 50)
    async with grpc.aio.insecure_channel(grpc_port) as channel:
        await channel.unary_unary(APPEND_BATCH)(batch, metadata=AS_WRITER)
    assert budget.held == 0


async def test_connections_are_bounded_from_their_accept(node: Node) -> None:
    """Two connections that never send a byte (a TLS or HTTP/2 handshake not begun) hold the two
    allowed; a third gets nowhere until they go."""
    service = SimpleNamespace(limits=replace(node.service.limits, grpc_connections_max=2), node=node.raft)
    (port,) = free_ports(1)
    api = GrpcApi(service, node.handlers, None, None, f"127.0.0.1:{port}")  # type: ignore[arg-type]
    await api.start()
    silent = [socket.create_connection(("127.0.0.1", port)) for _ in range(2)]
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            health = health_pb2_grpc.HealthStub(channel)
            with pytest.raises(grpc.aio.AioRpcError) as refused_call:
                await health.Check(health_pb2.HealthCheckRequest(), timeout=5)
            assert refused_call.value.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)
            for sock in silent:
                sock.close()
            answer = await health.Check(health_pb2.HealthCheckRequest(), wait_for_ready=True, timeout=30)
            assert answer.status == health_pb2.HealthCheckResponse.SERVING
    finally:
        for sock in silent:
            sock.close()
        await api.stop(None)  # type: ignore[arg-type]


async def test_a_connection_no_call_passed_on_is_closed_and_one_address_holds_its_share(node: Node) -> None:
    """A connection that sends the HTTP/2 preface and nothing else is closed unauthenticated_idle_ms
    after its accept; one on which a call of raftlog.v1.Log passed stays; with two connections from
    127.0.0.1 held, a third is closed at once."""
    node.service.limits = replace(node.service.limits, unauthenticated_idle_ms=300, connections_per_address_max=2)
    (port,) = free_ports(1)
    api = GrpcApi(node.service, node.handlers, None, None, f"127.0.0.1:{port}")
    await api.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            await channel.unary_unary("/raftlog.v1.Log/Cluster")(b"", timeout=10)
            silent = socket.create_connection(("127.0.0.1", port))
            silent.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00")
            silent.setblocking(False)
            with socket.create_connection(("127.0.0.1", port)) as third:
                third.setblocking(False)
                assert await asyncio.wait_for(_ended(third), 10) == 0  # closed at once: nothing from gRPC
            assert await asyncio.wait_for(_ended(silent), 10) > 0  # gRPC's SETTINGS, then the end
            silent.close()
            assert channel.get_state() is grpc.ChannelConnectivity.READY  # its connection stayed
            await channel.unary_unary("/raftlog.v1.Log/Cluster")(b"", timeout=10)
    finally:
        await api.stop(None)  # type: ignore[arg-type]


async def _ended(sock: socket.socket) -> int:
    """The bytes a socket gets until the other end closes it (reset or not)."""
    received, loop = 0, asyncio.get_running_loop()
    try:
        while data := await loop.sock_recv(sock, 65_536):
            received += len(data)
    except ConnectionResetError:
        pass
    return received
