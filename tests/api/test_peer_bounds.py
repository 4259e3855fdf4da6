"""Bounds on the peer port against hostile peers and strangers (DESIGN, Security posture): connections
counted from their accept, TLS handshakes included; calls at once; the public API's calls drawing on
the member's one request budget; a replication stream's headers bounded and checked before its DATA;
a batch counted before it is decoded; and the leader's end of a stream holding no more of what a
follower sends than one answer."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import grpc
import grpc.aio
import h2.config
import h2.connection
import h2.errors
import h2.events
import h2.exceptions
import h2.settings
import pytest
from prometheus_client import CollectorRegistry, Counter

from raftlog.api import peer_pb2 as pb
from raftlog.api.auth import AuthFailures
from raftlog.api.limits import InflightBytes, RequestLimits, batch_entries
from raftlog.api.peer_client import PeerClient, PeerTls
from raftlog.api.peer_codec import encode_message, encode_push
from raftlog.api.peer_port import PeerPort
from raftlog.api.peer_server import PeerService
from raftlog.api.peer_wire import FORWARD_PATH, REPLICATE_PATH, REPLICATE_SETTING, grpc_prefix, take_message
from raftlog.app.launcher import free_ports
from raftlog.app.settings import SettingsError, load_settings
from raftlog.raft.config import Peer
from raftlog.raft.messages import Code, VoteRequest, VoteResponse, VoteResult
from raftlog.raft.transport import PeerUnavailable
from tests.api.test_peer_transport import MESSAGE_MAX, SECRET, AppendingService, FollowerNode, ForwardingService, push
from tests.e2e.peer_port import HandWrittenStream
from tests.pki import Pki

AUTHORIZED = (("authorization", f"Bearer {SECRET.decode()}"),)


class HeldVotes(FollowerNode):
    """Votes wait until the test lets them go: calls that stay under way."""

    def __init__(self) -> None:
        super().__init__()
        self.votes = asyncio.Event()
        self.started = asyncio.Event()

    async def handle_vote(self, request: VoteRequest) -> VoteResponse:
        self.started.set()
        await self.votes.wait()
        return VoteResponse(request.term, VoteResult.ACCEPT)


class Refusals:
    def __init__(self) -> None:
        self.counter = Counter("refused", "", ["port", "reason"], registry=CollectorRegistry())

    def count(self) -> float:
        return sum(s.value for m in self.counter.collect() for s in m.samples if s.name.endswith("_total"))


@contextlib.asynccontextmanager
async def peer_port(node: FollowerNode | None = None, tls: PeerTls | None = None, budget: InflightBytes | None = None,
                    refusals: Refusals | None = None, service: ForwardingService | None = None,
                    **limits: int) -> AsyncIterator[tuple[str, PeerPort]]:
    service = service or ForwardingService()
    service.limits = replace(ForwardingService.limits, **limits)  # type: ignore[misc]
    failures = AuthFailures((refusals or Refusals()).counter, "peer")
    peers = PeerService(node or FollowerNode(), service, SECRET, failures, budget)  # type: ignore[arg-type]
    (port,) = free_ports(1)
    server = PeerPort(peers, f"127.0.0.1:{port}", MESSAGE_MAX, tls)
    await server.start()
    try:
        yield f"127.0.0.1:{port}", server
    finally:
        await server.stop(None)


async def closed_by_server(reader: asyncio.StreamReader) -> bool:
    """Whether the server has closed this connection (it sends nothing first on the peer port)."""
    try:
        return await reader.read(1) == b""
    except ConnectionResetError:
        return True


# -- connections and calls -------------------------------------------------------------------


async def test_connections_count_from_their_accept_before_the_tls_handshake(tmp_path: Path) -> None:
    """Two strangers that never start their TLS handshake hold the two connections allowed: a third
    is closed at once; once they go, a member with a certificate gets through."""
    pki = Pki(tmp_path, "group")
    tls = PeerTls(Path(pki.ca_file).read_bytes(), Path(pki.key).read_bytes(), Path(pki.cert).read_bytes())
    async with peer_port(tls=tls, peer_connections_max=2) as (address, server):
        host, port = address.split(":")
        strangers = [await asyncio.open_connection(host, int(port)) for _ in range(2)]
        reader, writer = await asyncio.open_connection(host, int(port))
        assert await closed_by_server(reader)
        writer.close()
        assert server.open_connections == 2
        for _, stranger in strangers:
            stranger.close()
        while server.open_connections:  # the port sees them go on its next reads
            await asyncio.sleep(0.01)
        client = PeerClient("n1", [Peer("n1", "127.0.0.1:1"), Peer("n2", address)], rpc_timeout_ms=5000,
                            push_timeout_ms=5000, wait_timeout_ms=5000, max_message_bytes=MESSAGE_MAX,
                            max_batch_entries=1000,
                            secret=SECRET, tls=tls)
        try:
            answer = await client.vote("n2", VoteRequest("g", "n1", 1, -1, -1))
        finally:
            await client.close()
        assert answer.result is VoteResult.ACCEPT


async def test_calls_at_once_are_bounded() -> None:
    node = HeldVotes()
    async with peer_port(node, peer_calls_max=1) as (address, _), grpc.aio.insecure_channel(address) as channel:
        vote = channel.unary_unary("/raftlog.peer.v1.Peer/Vote")
        request = encode_message(VoteRequest("g", "n1", 1, -1, -1))
        held = asyncio.ensure_future(vote(request, metadata=AUTHORIZED))
        try:
            await node.started.wait()
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await vote(request, metadata=AUTHORIZED, timeout=10)  # (were it let in, it would wait too)
            assert refused.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
        finally:
            node.votes.set()
        await held
        await vote(request, metadata=AUTHORIZED)  # room again


async def test_forwarded_appends_draw_on_the_members_one_request_budget() -> None:
    """The budget REST's bodies are held in: while the client port holds it, a forwarded append is
    refused (nothing done, the stream goes on); Raft's own calls never wait on clients."""
    budget = InflightBytes(1000)
    rest = RequestLimits(None, max_inflight_requests=10, max_request_bytes=1000,  # type: ignore[arg-type]
                         max_followers=1, budget=budget)
    assert rest.budget is budget
    message = pb.AppendRequest(bodies=[b"x" * 200]).SerializeToString()
    async with peer_port(budget=budget) as (address, _), grpc.aio.insecure_channel(address) as channel:
        vote = channel.unary_unary("/raftlog.peer.v1.Peer/Vote")
        assert budget.take(900)  # a REST body being received
        refused = await forwarded(address, message)
        assert refused.error.code == Code.SERVER_BUSY.name and "max_inflight_body_bytes" in refused.error.message
        await vote(encode_message(VoteRequest("g", "n1", 1, -1, -1)), metadata=AUTHORIZED)
        budget.give(900)
        answer = await forwarded(address, message)
        assert answer.error.code == Code.WAIT_QUORUM_ACK_TIMEOUT.name  # it reached the service
    assert budget.held == 0


async def test_a_forwarded_batch_of_too_many_bodies_is_refused_before_it_is_decoded() -> None:
    """Counted on the wire up to max_batch_entries + 1: a batch of many more, cut by garbage after
    the first thousands, is refused as too large, not as garbage (protobuf never saw it)."""
    async with peer_port(max_batch_entries=10) as (address, _):
        answer = await forwarded(address, b"\x0a\x00" * 5000 + b"\xff\xff")
    assert answer.error.code == Code.UNEXPECTED_ARGUMENT.name
    assert "max_batch_entries" in answer.error.message


def test_a_batch_is_counted_no_further_than_asked() -> None:
    class Watched(bytes):
        reads = 0

        def __getitem__(self, at: Any) -> Any:
            Watched.reads += 1
            return super().__getitem__(at)

    data = Watched(b"\x0a\x00" * 1_000_000)
    assert batch_entries(data, 11) == 11
    assert Watched.reads < 100
    assert batch_entries(b"\x0a\x03abc\x10\x05\x0a\x81\x01" + bytes(129) + b"\x1d1234", 100) == 2  # fields skipped
    assert batch_entries(b"\x0a\x05ab", 100) == 1  # cut short: protobuf says what is wrong


@pytest.mark.parametrize("field", [b"\x08\x00", b"\x12\x00", b"\x15\x00\x00\x00\x00"])
def test_a_message_of_other_fields_is_too_many_at_once(field: bytes) -> None:
    """Audit A, L1: 64 MiB of two-byte fields that are no bodies were walked to the end in Python,
    10 to 16 s of the event loop; a batch has a few such fields, so past OTHER_FIELDS_MAX it stops."""
    class Watched(bytes):
        reads = 0

        def __getitem__(self, at: Any) -> Any:
            Watched.reads += 1
            return super().__getitem__(at)

    data = Watched((b"\x0a\x00" + field) * ((64 << 20) // (2 + len(field))))
    assert batch_entries(data, 10_001) == 10_001  # refused as too many: protobuf never builds its bodies
    assert Watched.reads < 1_000


@pytest.mark.parametrize("name", ["grpc_connections_max", "peer_connections_max", "peer_calls_max",
                                  "peer_outbox_bytes_max", "small_request_bytes_max"])
def test_the_bounds_are_checked_at_start(name: str) -> None:
    with pytest.raises(SettingsError, match=name):
        load_settings({name: 0})


# -- the replication stream --------------------------------------------------------------------


async def test_a_refused_replication_stream_is_reset_and_its_data_never_reaches_the_node() -> None:
    node = FollowerNode()
    refusals = Refusals()
    async with peer_port(node, refusals=refusals) as (address, _):
        stream = await HandWrittenStream.open(address, None)
        stream.send(encode_push(push(0)))
        events = await h2_events(stream)
    assert any(isinstance(e, h2.events.StreamReset) for e in events)  # the leader is told to stop sending
    assert dict(next(e for e in events if isinstance(e, h2.events.ResponseReceived)).headers)[b"grpc-status"] == b"16"
    assert node.pushes == [] and refusals.count() == 1


async def test_a_header_block_over_max_header_bytes_closes_the_connection_before_the_secret_is_read() -> None:
    """HEADERS and CONTINUATION frames are counted as they arrive: a block over max_header_bytes is a
    protocol error, whatever it would have carried (here: the right secret)."""
    node = FollowerNode()
    async with peer_port(node, max_header_bytes=4096) as (address, _):
        host, port = address.split(":")
        reader, writer = await asyncio.open_connection(host, int(port))
        leader = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True, header_encoding=None))
        leader.local_settings = h2.settings.Settings(client=True, initial_values={REPLICATE_SETTING: 1})
        leader.initiate_connection()
        leader.send_headers(1, [(b":method", b"POST"), (b":scheme", b"http"), (b":path", REPLICATE_PATH),
                                (b":authority", b"peer"), (b"content-type", b"application/grpc"),
                                (b"authorization", b"Bearer " + SECRET), (b"x-padding", b"x" * 8192)])
        writer.write(in_continuations(leader.data_to_send()))
        events: list[h2.events.Event] = []
        async with asyncio.timeout(10):
            while not any(isinstance(e, h2.events.ConnectionTerminated) for e in events):
                data = await reader.read(65_536)
                assert data, "closed without a GOAWAY"
                events += leader.receive_data(data)
        writer.close()
    terminated = next(e for e in events if isinstance(e, h2.events.ConnectionTerminated))
    assert terminated.error_code == h2.errors.ErrorCodes.PROTOCOL_ERROR
    assert node.pushes == []


async def test_a_peer_that_reads_no_answers_is_read_no_more_until_it_does() -> None:
    """Audit L4: a follower that sends 2,000 forwarded batches of 1,000 empty bodies (2 KB each,
    answered with about 3 KB of positions) and reads none of the answers. The leader's outbox stops
    at about peer_outbox_bytes_max (16 KiB here): it then takes no more messages and gives back no
    window, so the follower can send no more. Once it reads, the leader takes what waited, answers
    it in order, and ends the stream the follower ended meanwhile."""
    service = AppendingService()
    service.release.set()
    count, message = 2000, pb.AppendRequest(bodies=[b""] * 1000).SerializeToString()
    async with peer_port(service=service, peer_window_bytes=65_536, peer_outbox_bytes_max=16_384) as (address, _):
        stream = await HandWrittenStream.open(address, SECRET.decode(), FORWARD_PATH)
        unread = UnreadAnswers(stream)
        sent = await unread.send_until_shut(message, count)
        taken = len(service.batches)
        assert sent < count and taken < count // 4  # before: all 2,000 taken, their answers held
        stream.end()  # behind the messages that wait
        answers, status = await unread.read_to_the_end()
    assert status is grpc.StatusCode.OK
    assert len(answers) == sent == len(service.batches) > taken
    firsts = [pb.AppendResponse.FromString(a).first_index for a in answers]
    assert firsts == list(range(1, 1000 * sent, 1000))


class UnreadAnswers:
    """A forwarding stream's follower that reads the frames the leader sends (its window updates)
    but gives back no window for its answers, until it reads them all."""

    def __init__(self, stream: HandWrittenStream) -> None:
        self.stream = stream
        self.received = bytearray()  # answers' bytes, not yet given back
        self.unacknowledged = 0
        self.status: grpc.StatusCode | None = None

    async def send_until_shut(self, message: bytes, count: int) -> int:
        """Send up to `count` messages as the leader's window allows; how many went before it shut for
        good (two PINGs answered with the window still shut: nothing more comes)."""
        h2_, framed, sent = self.stream.h2, grpc_prefix(len(message)) + message, 0
        while sent < count:
            if h2_.local_flow_control_window(1) >= len(framed):
                self.stream.send_data(framed)
                sent += 1
                continue
            for _ in range(2):  # what the leader sent before the second answer includes all it will send
                await self.ping()
            if h2_.local_flow_control_window(1) < len(framed):
                return sent
        return sent

    async def ping(self) -> None:
        self.stream.h2.ping(b"budgets!")
        self.stream.writer.write(self.stream.h2.data_to_send())
        async with asyncio.timeout(10):
            while not any(isinstance(e, h2.events.PingAckReceived) for e in await self._events()):
                pass

    async def read_to_the_end(self) -> tuple[list[bytes], grpc.StatusCode | None]:
        """Every answer, the window given back as they come, and the stream's status."""
        answers = []
        async with asyncio.timeout(30):
            while self.status is None:
                self.stream.h2.acknowledge_received_data(self.unacknowledged, 1)
                self.unacknowledged = 0
                self.stream.writer.write(self.stream.h2.data_to_send())
                while (answer := take_message(self.received)) is not None:
                    answers.append(answer)
                await self._events()
        while (answer := take_message(self.received)) is not None:
            answers.append(answer)
        self.stream.writer.close()
        return answers, self.status

    async def _events(self) -> list[h2.events.Event]:
        data = await self.stream.reader.read(65_536)
        assert data, "the leader closed the connection"
        events = self.stream.h2.receive_data(data)
        for event in events:
            if isinstance(event, h2.events.DataReceived):
                self.received += event.data
                self.unacknowledged += event.flow_controlled_length
            elif isinstance(event, h2.events.TrailersReceived):
                status = int(dict(event.headers)[b"grpc-status"])
                self.status = next(c for c in grpc.StatusCode if c.value[0] == status)
        self.stream.writer.write(self.stream.h2.data_to_send())
        return events


async def test_an_answer_over_its_bound_breaks_the_leaders_stream() -> None:
    """A follower that announces a huge answer: the leader's end refuses it by its prefix (it would
    otherwise hold everything the follower sends until the answer is whole)."""
    async def follower(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        server = h2.connection.H2Connection(h2.config.H2Configuration(client_side=False, header_encoding=None))
        server.initiate_connection()
        writer.write(server.data_to_send())
        while data := await reader.read(65_536):
            for event in server.receive_data(data):
                if isinstance(event, h2.events.RequestReceived):
                    server.send_headers(event.stream_id, [(b":status", b"200"),
                                                          (b"content-type", b"application/grpc")])
                    server.send_data(event.stream_id, grpc_prefix(50 << 20) + bytes(1000))
            writer.write(server.data_to_send())

    listener = await asyncio.start_server(follower, "127.0.0.1", 0)
    port = listener.sockets[0].getsockname()[1]
    client = PeerClient("n1", [Peer("n1", "127.0.0.1:1"), Peer("n2", f"127.0.0.1:{port}")], rpc_timeout_ms=60_000,
                        push_timeout_ms=60_000, wait_timeout_ms=60_000, max_message_bytes=MESSAGE_MAX,
                        max_batch_entries=1000, secret=SECRET)
    try:
        stream = client.open_stream("n2")
        with pytest.raises(PeerUnavailable, match="over the limit"):
            await stream.send(push(0))
    finally:
        await client.close()
        listener.close()


# -- helpers -------------------------------------------------------------------------------------


def in_continuations(data: bytes) -> bytes:
    """A client's preface, SETTINGS and HEADERS, its HEADERS split into CONTINUATION frames of 1 KiB."""
    preface_and_settings = data[:24 + 9 + int.from_bytes(data[24:27], "big")]
    rest = data[len(preface_and_settings):]
    frames = []
    while rest:
        size = int.from_bytes(rest[:3], "big")
        frames.append(rest[:9 + size])
        rest = rest[9 + size:]
    headers = next(f for f in frames if f[3] == 0x1)
    block, stream_id = headers[9:], headers[5:9]
    pieces = [block[i:i + 1024] for i in range(0, len(block), 1024)]
    out = bytearray(preface_and_settings)
    for i, piece in enumerate(pieces):
        kind = 0x1 if i == 0 else 0x9
        flags = 0x4 if i == len(pieces) - 1 else 0
        out += len(piece).to_bytes(3, "big") + bytes([kind, flags]) + stream_id + piece
    return bytes(out)


async def forwarded(address: str, message: bytes) -> pb.AppendResponse:
    """The answer to one message on a forwarding stream of its own."""
    stream = await HandWrittenStream.open(address, SECRET.decode(), FORWARD_PATH)
    stream.send(message)
    stream.end()
    answers, status = await stream.outcome()
    assert status is grpc.StatusCode.OK and len(answers) == 1
    return pb.AppendResponse.FromString(answers[0])


async def h2_events(stream: HandWrittenStream) -> list[h2.events.Event]:
    """Everything the follower sends on `stream`'s connection until it closes it or goes quiet."""
    events: list[h2.events.Event] = []
    with contextlib.suppress(TimeoutError, ConnectionResetError):
        async with asyncio.timeout(5):
            while data := await stream.reader.read(65_536):
                try:
                    events += stream.h2.receive_data(data)
                except h2.exceptions.ProtocolError:
                    break
                if any(isinstance(e, h2.events.StreamReset | h2.events.ConnectionTerminated) for e in events):
                    break
    stream.writer.close()
    return events

