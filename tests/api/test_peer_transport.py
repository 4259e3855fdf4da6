"""The peer transport on gRPC: wire formats, the replication stream, and a peer that is down,
silent, cut off mid-stream, hostile or answers garbage costs a failed call (PeerUnavailable),
never a crash."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import grpc
import grpc.aio
import pytest
from prometheus_client import CollectorRegistry, Counter

from raftlog.api import peer_client, stream_server
from raftlog.api import peer_pb2 as pb
from raftlog.api.answers import AppendAnswer
from raftlog.api.auth import AuthFailures
from raftlog.api.errors import ApiError
from raftlog.api.forward_stream import FORWARDS_AHEAD_MAX
from raftlog.api.limits import ApiLimits
from raftlog.api.peer_client import PeerClient
from raftlog.api.peer_codec import (
    PUSH_TYPES,
    PeerMessageError,
    decode_message,
    decode_push,
    encode_message,
    encode_push,
)
from raftlog.api.peer_port import PeerPort
from raftlog.api.peer_server import PeerService
from raftlog.api.peer_wire import FORWARD_PATH, REPLICATE_PATH, grpc_prefix
from raftlog.app.launcher import free_ports
from raftlog.raft.config import Peer
from raftlog.raft.messages import (
    Code,
    HeartbeatRequest,
    HeartbeatResponse,
    PushRequest,
    PushResponse,
    PushType,
    TransferRequest,
    TransferResponse,
    VoteRequest,
    VoteResponse,
    VoteResult,
)
from raftlog.raft.transport import PeerUnavailable
from tests.e2e.peer_port import HandWrittenStream
from tests.faults.proxy import Link

SECRET = b"a-cluster-secret-of-enough-length"
MESSAGE_MAX = 4 << 20


@pytest.mark.parametrize("push_type", list(PushType))
def test_a_push_survives_the_wire(push_type: PushType) -> None:
    request = PushRequest("g", "n1", 7, push_type, 41, 40, 2, memoryview(b"raw entries \x00\xff"), 39, 6,
                          chain_crc=0xFFFFFFFF if push_type is PushType.COMPARE else None, next_pos=1234)
    decoded = decode_push(encode_push(request))
    assert bytes(decoded.data) == bytes(request.data)
    assert decoded == PushRequest(**{**{f: getattr(request, f) for f in request.__slots__}, "data": decoded.data})


def test_a_snapshot_install_carries_every_table_and_the_first_three_in_their_own_fields() -> None:
    """A release before `tables` reads the producer and consumer tables and the cluster version from
    their own fields; every later table travels by name."""
    tables = {"producers": b"p", "consumers": b"c", "cluster_version": b"v", "topics": b"t"}
    request = PushRequest("g", "n1", 7, PushType.INSTALL_SNAPSHOT, 41, -1, 0, memoryview(b""), 39, 6, tables=tables)
    proto = pb.PushRequest.FromString(encode_push(request))
    assert (proto.producers, proto.consumers, proto.cluster_version, dict(proto.tables)) == (b"p", b"c", b"v",
                                                                                             {"topics": b"t"})
    assert decode_push(encode_push(request)).tables == tables


@pytest.mark.parametrize("size", [0, 1, 127, 128, 16_383, 16_384, 1 << 20])
def test_a_push_is_what_protobuf_reads(size: int) -> None:
    """encode_push writes the entries after the other fields itself, with their length as a varint
    of one to three bytes here: protobuf reads the message it would have written."""
    data = bytes(range(256)) * (size // 256) + bytes(size % 256)
    request = PushRequest("g", "n1", 7, PushType.APPEND, 41, 40, 2, memoryview(data), 39, 6)
    assert pb.PushRequest.FromString(encode_push(request)) == pb.PushRequest(
        group="g", leader_id="n1", term=7, type=PUSH_TYPES.index(PushType.APPEND), commit_index=41, first_index=40,
        count=2, data=data, pre_log_index=39, pre_log_term=6)


@pytest.mark.parametrize("message", [
    VoteRequest("g", "n2", 3, 2, 10, taking_leadership=True), VoteResponse(3, VoteResult.REJECT_ALREADY_VOTED),
    HeartbeatRequest("g", "n1", 3, 9), HeartbeatResponse(Code.EXPIRED_TERM, 4),
    TransferRequest("g", "n1", 3, "n2"), PushResponse(Code.SUCCESS, 3, 5, 9, 3, ack_index=9),
])
def test_control_messages_survive_the_wire(message: object) -> None:
    assert decode_message(type(message), encode_message(message)) == message


@pytest.mark.parametrize(("cls", "data"), [
    (VoteResponse, b"\xff\xff\xff"),  # not protobuf
    (VoteResponse, b"\x12\x05MAYBE"),  # a result raft has no name for
    (HeartbeatResponse, b"\x08\xe7\x07"),  # code 999
    (PushResponse, b"\x08"),  # cut inside a field
])
def test_garbage_messages_are_refused(cls: type, data: bytes) -> None:
    with pytest.raises(PeerMessageError):
        decode_message(cls, data)


@pytest.mark.parametrize("data", [b"\xff\xff", b"\x20\x09", b"\x38\x7f" + b"\x38" + b"\xff" * 9 + b"\x01"])
def test_garbage_pushes_are_refused(data: bytes) -> None:
    """Not protobuf, an unknown push type, a negative count."""
    with pytest.raises(PeerMessageError):
        decode_push(data)


class FollowerNode:
    """What the peer port hands calls to: answers pushes in the order it handled them."""

    def __init__(self) -> None:
        self.pushes: list[PushRequest] = []
        self.hold: asyncio.Event | None = None
        self.state = type("State", (), {"is_leader": True})()
        self.leader_id = "n2"

    def take_push(self, request: PushRequest) -> asyncio.Future[PushResponse]:
        self.pushes.append(request)
        return asyncio.ensure_future(self._answer(request))

    async def _answer(self, request: PushRequest) -> PushResponse:
        if self.hold is not None:
            await self.hold.wait()
        return PushResponse(Code.SUCCESS, request.term, request.first_index, request.last_index)

    async def handle_vote(self, request: VoteRequest) -> VoteResponse:
        return VoteResponse(request.term, VoteResult.ACCEPT)

    async def handle_heartbeat(self, request: HeartbeatRequest) -> HeartbeatResponse:
        return HeartbeatResponse(Code.SUCCESS, request.term)

    async def handle_transfer(self, request: TransferRequest) -> TransferResponse:
        return TransferResponse(Code.SUCCESS, request.term)

    async def handle_fetch(self, request: Any) -> bytes:
        return b""


class ForwardingService:
    limits = ApiLimits()

    async def append_forwarded(self, bodies: list[bytes], producer: Any = None, caller: str = "") -> AppendAnswer:
        raise ApiError(Code.WAIT_QUORUM_ACK_TIMEOUT, "no quorum in time", "n2")


class AppendingService(ForwardingService):
    """A leader's service that appends each batch as it comes (entry i at position 100 * i), once
    `release` is set."""

    def __init__(self) -> None:
        self.log: list[bytes] = []
        self.batches: list[int] = []  # the entries of each
        self.arrived = asyncio.Event()
        self.release = asyncio.Event()

    async def append_forwarded(self, bodies: list[bytes], producer: Any = None, caller: str = "") -> AppendAnswer:
        first = len(self.log) + 1
        self.log += bodies
        self.batches.append(len(bodies))
        self.arrived.set()
        await self.release.wait()
        last = first + len(bodies) - 1
        return AppendAnswer(first, last, 3, [100 * i for i in range(first, last + 1)], "n2")


async def serving(node: FollowerNode, secret: bytes | None = SECRET,
                  service: ForwardingService | None = None) -> AsyncIterator[str]:
    (port,) = free_ports(1)
    address = f"127.0.0.1:{port}"
    failures = AuthFailures(Counter("refused", "", ["port", "reason"], registry=CollectorRegistry()), "peer")
    server = PeerPort(PeerService(node, service or ForwardingService(), secret, failures),  # type: ignore[arg-type]
                      address, MESSAGE_MAX)
    await server.start()
    try:
        yield address
    finally:
        await server.stop(None)


@pytest.fixture
async def follower() -> AsyncIterator[tuple[FollowerNode, str]]:
    node = FollowerNode()
    async for address in serving(node):
        yield node, address


def client_for(address: str, timeout_ms: int = 500, secret: bytes | None = SECRET) -> PeerClient:
    return PeerClient("n1", [Peer("n1", "127.0.0.1:1"), Peer("n2", address)], rpc_timeout_ms=timeout_ms,
                      push_timeout_ms=timeout_ms, wait_timeout_ms=timeout_ms, max_message_bytes=MESSAGE_MAX,
                      max_batch_entries=1000,
                      secret=secret)


@contextlib.asynccontextmanager
async def through_link(address: str) -> AsyncIterator[tuple[Link, PeerClient]]:
    """A client whose connections to `address` run through a link the test can hold."""
    link = Link("n1", "n2", int(address.rsplit(":", 1)[1]))
    await link.start()
    client = client_for(f"127.0.0.1:{link.port}")
    try:
        yield link, client
    finally:
        link.up.open.set()
        link.down.open.set()
        await client.close()
        await link.close()


def silence(link: Link) -> None:
    """The peer goes silent: nothing reaches it, so no ping is answered."""
    link.up.open.clear()
    link.down.open.clear()


def push(first: int, size: int = 100) -> PushRequest:
    return PushRequest("g", "n1", 1, PushType.APPEND, -1, first, 1, bytes(size))


async def test_pushes_on_one_stream_are_handled_and_answered_in_order(follower: tuple[FollowerNode, str]) -> None:
    node, address = follower
    client = client_for(address, timeout_ms=5000)  # the last of 2000 waits for all before it
    try:
        stream = client.open_stream("n2")
        answers = [stream.send(push(i, 100 + i % 7)) for i in range(2000)]  # sent without waiting
        responses = await asyncio.gather(*answers)
        assert [r.index for r in responses] == list(range(2000))
        assert [p.first_index for p in node.pushes] == list(range(2000))
        assert [len(p.data) for p in node.pushes] == [100 + i % 7 for i in range(2000)]
        assert not stream.broken
    finally:
        await client.close()


async def test_a_stream_cut_mid_push_fails_every_push_on_it_and_a_new_one_works(
        follower: tuple[FollowerNode, str]) -> None:
    node, address = follower
    link = Link("n1", "n2", int(address.rsplit(":", 1)[1]))
    await link.start()
    client = client_for(f"127.0.0.1:{link.port}", timeout_ms=5000)
    try:
        stream = client.open_stream("n2")
        assert (await stream.send(push(0))).code is Code.SUCCESS
        node.hold = asyncio.Event()  # pushes arrive and wait: their answers are due when the link dies
        waiting = [stream.send(push(i, 300_000)) for i in range(1, 6)]
        while not node.pushes[1:]:
            await asyncio.sleep(0.01)
        assert link.reset() > 0
        for answer in waiting:
            with pytest.raises(PeerUnavailable):
                await answer
        assert stream.broken
        node.hold.set()
        again = client.open_stream("n2")
        assert (await again.send(push(6))).index == 6
    finally:
        await client.close()
        await link.close()


async def test_a_silent_peer_breaks_the_stream_when_an_answer_is_overdue(
        follower: tuple[FollowerNode, str]) -> None:
    node, address = follower
    node.hold = asyncio.Event()
    client = client_for(address, timeout_ms=300)
    try:
        stream = client.open_stream("n2")
        started = asyncio.get_running_loop().time()
        with pytest.raises(PeerUnavailable, match="no answer within 300 ms"):
            await stream.send(push(0))
        assert asyncio.get_running_loop().time() - started < 5
        assert stream.broken
        with pytest.raises(PeerUnavailable):
            await stream.send(push(1))  # a broken stream takes no more
    finally:
        node.hold.set()
        await client.close()


async def test_keepalive_finds_a_peer_gone_silent(follower: tuple[FollowerNode, str],
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """A connection whose peer stops answering, with no call under way, is closed by keepalive."""
    monkeypatch.setattr(peer_client, "KEEPALIVE_MS", 1000)
    monkeypatch.setattr(peer_client, "KEEPALIVE_TIMEOUT_MS", 500)
    _, address = follower
    async with through_link(address) as (link, client):
        await client.vote("n2", VoteRequest("g", "n1", 1, -1, -1))
        channel = client._channels["n2"]
        assert channel.get_state() is grpc.ChannelConnectivity.READY
        silence(link)
        state = channel.get_state()
        async with asyncio.timeout(10):
            while state is grpc.ChannelConnectivity.READY:
                await channel.wait_for_state_change(state)
                state = channel.get_state()
        assert link.up.held > 0  # the pings were held back


async def test_calls_without_the_cluster_secret_are_refused_and_reach_nothing(
        follower: tuple[FollowerNode, str], caplog: pytest.LogCaptureFixture) -> None:
    node, address = follower
    async with grpc.aio.insecure_channel(address) as channel:
        vote = channel.unary_unary("/raftlog.peer.v1.Peer/Vote")
        request = encode_message(VoteRequest("g", "n1", 1, -1, -1))
        with pytest.raises(grpc.aio.AioRpcError) as missing:
            await vote(request)
        with pytest.raises(grpc.aio.AioRpcError) as wrong:
            await vote(request, metadata=(("authorization", "Bearer wrong-secret-of-enough-length"),))
        assert missing.value.code() is grpc.StatusCode.UNAUTHENTICATED
        assert wrong.value.code() is grpc.StatusCode.PERMISSION_DENIED
    for secret, status in ((None, grpc.StatusCode.UNAUTHENTICATED),
                           ("wrong-secret-of-enough-length", grpc.StatusCode.PERMISSION_DENIED)):
        for path, message in ((REPLICATE_PATH, encode_push(push(0))),
                              (FORWARD_PATH, pb.AppendRequest(bodies=[b"x"]).SerializeToString())):
            stream = await HandWrittenStream.open(address, secret, path)
            stream.send(message)
            assert await stream.outcome() == ([], status)
    client = client_for(address, secret=b"wrong-secret-of-enough-length")
    try:
        with pytest.raises(PeerUnavailable, match="PERMISSION_DENIED"):
            await client.vote("n2", VoteRequest("g", "n1", 1, -1, -1))
        with pytest.raises(PeerUnavailable):
            await client.open_stream("n2").send(push(0))
        with pytest.raises(ApiError, match="wrong cluster secret") as forwarded:
            await client.forward_append("n2", [b"x"])
        assert forwarded.value.code is Code.NETWORK_ERROR
    finally:
        await client.close()
    assert node.pushes == []
    refused = [r.getMessage() for r in caplog.records if "refused" in r.getMessage()]
    assert refused and all("from 127.0.0.1:" in line for line in refused)  # the caller, not a socket of ours


async def test_garbage_on_the_stream_ends_it_with_a_protocol_error_and_the_port_serves_on(
        follower: tuple[FollowerNode, str]) -> None:
    node, address = follower
    stream = await HandWrittenStream.open(address, SECRET.decode())
    stream.send(encode_push(push(0)))
    stream.send(b"\xff\xff\xff garbage")
    answers, status = await stream.outcome()
    assert [decode_message(PushResponse, a).index for a in answers] == [0]  # the good one is answered
    assert status is grpc.StatusCode.INVALID_ARGUMENT
    stream = await HandWrittenStream.open(address, SECRET.decode())
    stream.send_data(grpc_prefix(MESSAGE_MAX + 1) + b"\x07" * 100)  # refused by its prefix alone
    assert await stream.outcome() == ([], grpc.StatusCode.RESOURCE_EXHAUSTED)
    stream = await HandWrittenStream.open(address, SECRET.decode())
    stream.writer.write(b"\x00\x00\x04\x07\x00\x00\x00\x00\x01 bad")  # a GOAWAY on a stream: not HTTP/2
    assert await stream.outcome() == ([], None)
    reader, writer = await asyncio.open_connection(*address.split(":"))
    writer.write(b"GET / HTTP/1.1\r\nHost: n2\r\n\r\n")
    assert await reader.read() == b""  # not HTTP/2: closed
    writer.close()
    metadata = (("authorization", f"Bearer {SECRET.decode()}"),)
    async with grpc.aio.insecure_channel(address) as channel:
        vote = channel.unary_unary("/raftlog.peer.v1.Peer/Vote")
        with pytest.raises(grpc.aio.AioRpcError) as garbage:
            await vote(b"\xff\xff", metadata=metadata)
        assert garbage.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert [p.first_index for p in node.pushes] == [0]
    client = client_for(address)
    try:
        assert (await client.vote("n2", VoteRequest("g", "n1", 1, -1, -1))).result is VoteResult.ACCEPT
        assert (await client.open_stream("n2").send(push(1))).code is Code.SUCCESS
    finally:
        await client.close()


async def test_a_replication_stream_gone_silent_is_closed_by_the_follower(
        follower: tuple[FollowerNode, str], monkeypatch: pytest.MonkeyPatch) -> None:
    """A leader pings a quiet stream; one that stops (its machine died) holds nothing here for long."""
    monkeypatch.setattr(stream_server, "SILENT_PEER_S", 0.3)
    _, address = follower
    stream = await HandWrittenStream.open(address, SECRET.decode())
    stream.send(encode_push(push(0)))
    answers, status = await stream.outcome()  # nothing more is sent, not even the pings
    assert len(answers) == 1 and status is None


async def test_a_peer_answering_garbage_is_a_failed_call() -> None:
    async def garbage(_request: Any, _context: Any) -> bytes:
        return b"\xff\xff\xff"

    async def garbage_stream(requests: AsyncIterator[bytes], _context: Any) -> AsyncIterator[bytes]:
        async for _ in requests:
            yield b"\xff\xff\xff"

    server = grpc.aio.server(options=[("grpc.http2.min_ping_interval_without_data_ms", 1000)])
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("raftlog.peer.v1.Peer", {
        "Vote": grpc.unary_unary_rpc_method_handler(garbage),
        "Replicate": grpc.stream_stream_rpc_method_handler(garbage_stream)}),))
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    client = client_for(f"127.0.0.1:{port}")
    try:
        with pytest.raises(PeerUnavailable):
            await client.vote("n2", VoteRequest("g", "n1", 1, -1, -1))
        stream = client.open_stream("n2")
        with pytest.raises(PeerUnavailable):
            await stream.send(push(0))
        assert stream.broken
    finally:
        await client.close()
        await server.stop(None)


async def test_a_peer_that_is_down_is_a_failed_call() -> None:
    (port,) = free_ports(1)
    client = client_for(f"127.0.0.1:{port}", timeout_ms=300)
    try:
        with pytest.raises(PeerUnavailable):
            await client.heartbeat("n2", HeartbeatRequest("g", "n1", 1))
        with pytest.raises(PeerUnavailable):
            await client.open_stream("n2").send(push(0))
        with pytest.raises(ApiError) as forwarded:
            await client.forward_append("n2", [b"x"])
        assert forwarded.value.code is Code.NETWORK_ERROR
    finally:
        await client.close()


async def test_a_forwarded_call_answers_as_the_leader_did(follower: tuple[FollowerNode, str]) -> None:
    _, address = follower
    client = client_for(address)
    try:
        with pytest.raises(ApiError) as refused:
            await client.forward_append("n2", [b"x"])
        assert (refused.value.code, refused.value.status, refused.value.leader) == (
            Code.WAIT_QUORUM_ACK_TIMEOUT, 504, "n2")
    finally:
        await client.close()


async def test_appends_forwarded_meanwhile_go_to_the_leader_as_one_message_and_each_gets_its_own_answer() -> None:
    """While FORWARDS_AHEAD_MAX messages are on their way, the appends a member takes wait, and go
    together; each client's answer names its own entries and their positions."""
    service = AppendingService()
    async for address in serving(FollowerNode(), service=service):
        client = client_for(address, timeout_ms=5000)
        try:
            ahead = []
            for i in range(FORWARDS_AHEAD_MAX):
                ahead.append(asyncio.ensure_future(client.forward_append("n2", [b"ahead-%d" % i])))
                await service.arrived.wait()
                service.arrived.clear()
            sent = [[b"later-%d-%d" % (i, j) for j in range(i % 3 + 1)] for i in range(30)]
            later = []
            for bodies in sent:  # one turn of the loop each
                later.append(asyncio.ensure_future(client.forward_append("n2", bodies)))
                await asyncio.sleep(0)
            service.release.set()
            answers = await asyncio.gather(*ahead, *later)
        finally:
            await client.close()
    assert service.batches == [1] * FORWARDS_AHEAD_MAX + [sum(map(len, sent))]
    for bodies, answer in zip(sent, answers[FORWARDS_AHEAD_MAX:], strict=True):
        first, last = answer.first_index, answer.last_index
        assert service.log[first - 1:last] == bodies
        assert answer.positions == [100 * i for i in range(first, last + 1)]
        assert (answer.term, answer.leader) == (3, "n2")


async def test_a_forwarded_message_keeps_to_the_leaders_batch_limit() -> None:
    service = AppendingService()
    service.release.set()
    async for address in serving(FollowerNode(), service=service):
        client = client_for(address, timeout_ms=5000)  # max_batch_entries=1000
        try:
            answers = await asyncio.gather(*(client.forward_append("n2", [b"%d" % i] * 400) for i in range(3)))
        finally:
            await client.close()
    assert service.batches == [800, 400]
    assert [(a.first_index, a.last_index) for a in answers] == [(1, 400), (401, 800), (801, 1200)]


async def test_a_push_wider_than_the_followers_window_goes_through(follower: tuple[FollowerNode, str]) -> None:
    """The stream writes within the follower's HTTP/2 flow-control window and sends the rest as the
    follower grants more."""
    node, address = follower
    client = client_for(address, timeout_ms=5000)
    pushes = ApiLimits().peer_window_bytes // (1 << 20) + 4
    try:
        stream = client.open_stream("n2")
        answers = [stream.send(push(i, 1 << 20)) for i in range(pushes)]
        assert [r.index for r in await asyncio.gather(*answers)] == list(range(pushes))
        assert [len(p.data) for p in node.pushes] == [1 << 20] * pushes
    finally:
        await client.close()


async def test_keepalive_breaks_a_replication_stream_whose_peer_went_silent(
        follower: tuple[FollowerNode, str], monkeypatch: pytest.MonkeyPatch) -> None:
    """With no push under way no answer is overdue: the stream's own pings find the silence."""
    monkeypatch.setattr(peer_client, "KEEPALIVE_MS", 200)
    monkeypatch.setattr(peer_client, "KEEPALIVE_TIMEOUT_MS", 300)
    _, address = follower
    async with through_link(address) as (link, client):
        stream = client.open_stream("n2")
        assert (await stream.send(push(0))).code is Code.SUCCESS
        silence(link)
        async with asyncio.timeout(10):
            while not stream.broken:
                await asyncio.sleep(0.05)
        assert link.up.held > 0  # the ping was held back
        with pytest.raises(PeerUnavailable, match="no answer to a ping"):
            await stream.send(push(1))
