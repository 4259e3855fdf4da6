"""The peer port's long-lived streams on h2, each one HTTP/2 stream on a connection of its own,
driven by h2's state machine on an asyncio protocol, their DATA frames read and written beside it
(api.data_frames): the replication stream
(raft.transport.PushStream, to a follower's Replicate method) and the forwarding stream
(api.forward_stream, a follower's appends to its leader's Forward method).

gRPC's own stream hands every message between its core's threads and the event loop; here the
leader writes and reads the socket from its event loop alone, for half the CPU per message
(`python bench/peer_bench.py --transports grpc-stream,raftlog-stream`). The wire is gRPC's (a
5-byte prefix per message, the outcome in trailers). The connection announces itself in its first
SETTINGS frame (REPLICATE_SETTING), and the other member's peer port serves it on h2 as well
(api.stream_server), with the cluster secret and mutual TLS of every peer call.

Messages are written in the order they are sent, within the other end's flow-control window;
the answers, read in the same order, settle them. What the other end sends is held only until it
makes a whole answer (at most `answer_bytes_max`), and its flow-control window is given back as
answers are taken, so a peer cannot make this member hold more than one window of its bytes.

The stream breaks, failing every message on it, on a lost or refused connection, an answer
overdue by `timeout_s`, a connection silent for KEEPALIVE_TIMEOUT_MS after a ping, the stream's
end (its grpc-status says why), or anything that does not parse: an HTTP/2 protocol error or an
answer that does not decode (or is over `answer_bytes_max`).
"""

from __future__ import annotations

import asyncio
import ssl
from collections import deque
from collections.abc import Callable
from typing import Any, Protocol, cast

import h2.config
import h2.connection
import h2.events
import h2.exceptions
import h2.settings
import hyperframe.frame

from raftlog.api.data_frames import DEFAULT_WINDOW, DataFrames
from raftlog.api.peer_codec import PeerMessageError, decode_push_response, encode_push
from raftlog.api.peer_wire import PING_DATA, REPLICATE_PATH, REPLICATE_SETTING, grpc_prefix, take_message
from raftlog.raft.messages import PushRequest, PushResponse
from raftlog.raft.transport import PeerUnavailable, fail_push

PUSH_ANSWER_BYTES_MAX = 1024  # a push's answer is a few varints: a longer message breaks the stream


def _frame_repr(frame: hyperframe.frame.Frame) -> str:
    """h2 formats every frame it receives for its trace log, whether anyone logs or not, and
    hyperframe's repr of a DATA frame serializes its whole body to show the first bytes: a copy of
    every push (a megabyte, for a batch's) and 5% of a follower's CPU at one producer. The kind
    and the stream say enough."""
    return f"{type(frame).__name__}(stream_id={frame.stream_id}, {len(getattr(frame, 'data', b''))} bytes)"


hyperframe.frame.Frame.__repr__ = _frame_repr  # type: ignore[method-assign]


class StreamOwner(Protocol):
    """What a peer stream asks of the client that opened it (api.peer_client.PeerClient): the
    call's credentials, its clocks, and where answers and failures are reported."""

    metadata: tuple[tuple[str, str], ...]
    keepalive_s: float
    keepalive_timeout_s: float
    push_timeout_s: float
    wait_timeout_s: float
    on_push: Callable[[str, float, int], None] | None

    def answered(self, peer_id: str) -> None: ...

    def failed(self, peer_id: str, what: str, exc: Exception) -> str: ...


class H2CallStream(asyncio.Protocol):
    """One gRPC bidirectional call: messages out in order, answers in the same order settle them
    (`_settle`, of the stream's kind)."""

    path: bytes
    method: str

    def __init__(self, client: StreamOwner, peer_id: str, address: str, tls: ssl.SSLContext | None, *,
                 timeout_s: float, answer_bytes_max: int) -> None:
        host, _, port = address.rpartition(":")
        self.client = client
        self.peer_id = peer_id
        self.timeout_s = timeout_s  # an answer overdue by this long breaks the stream
        self.answer_bytes_max = answer_bytes_max
        self._loop = asyncio.get_running_loop()
        self._h2 = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True, header_encoding=None))
        announce = cast(dict[h2.settings.SettingCodes, int], {REPLICATE_SETTING: 1})  # h2 sends one it does not know
        self._h2.local_settings = h2.settings.Settings(client=True, initial_values=announce)
        self._headers = [
            (b":method", b"POST"), (b":scheme", b"https" if tls else b"http"),
            (b":path", self.path), (b":authority", address.encode()),
            (b"content-type", b"application/grpc"), (b"te", b"trailers"), (b"user-agent", b"raftlog"),
            *((name.encode(), value.encode()) for name, value in client.metadata)]
        self._frames = DataFrames(self._h2, server=False, inbound_window=DEFAULT_WINDOW)
        self._control = b""  # WINDOW_UPDATE frames to send
        self._transport: Any = None  # once connected; uvloop's transports are not asyncio.Transport's
        self._stream_id = 1
        self._outbox: deque[bytes | memoryview] = deque()  # messages, framed, the other end's window has not taken
        self._waiting: deque[tuple[asyncio.Future[Any], float, int]] = deque()  # (answer, sent, bytes)
        self._received = bytearray()
        self._unacknowledged = 0  # bytes received on the stream whose window is not given back yet
        self._broken: str | None = None
        self._overdue: asyncio.TimerHandle | None = None
        self._heard = self._loop.time()  # when the follower last sent anything
        self._pinged: float | None = None  # when a ping went unanswered so far
        self._keepalive = self._loop.call_later(client.keepalive_s, self._check_alive)
        self._connecting = asyncio.ensure_future(self._connect(host.strip("[]"), int(port), tls))  # [IPv6]

    @property
    def broken(self) -> bool:
        return self._broken is not None

    def _put(self, message: bytes, size: int) -> asyncio.Future[Any]:
        """Send `message` behind those sent before it; its answer, once `_settle` has it (`size`: the
        bytes it carries, for metrics)."""
        answer: asyncio.Future[Any] = self._loop.create_future()
        if self._broken is not None:
            fail_push(answer, f"{self.peer_id} {self.method}: {self._broken}")
            return answer
        self._outbox.append(grpc_prefix(len(message)))
        self._outbox.append(message)
        now = self._loop.time()
        self._waiting.append((answer, now, size))
        if self._overdue is None:
            self._overdue = self._loop.call_at(now + self.timeout_s, self._check_overdue)
        self._write()
        return answer

    def _decode(self, answer: bytes) -> Any:
        """An answer, as its message's future gets it (PeerMessageError: it does not decode)."""
        raise NotImplementedError

    def _answered(self, sent: float, size: int) -> None:
        """A message sent at `sent` (the loop's time), of `size` bytes, was answered."""

    def close(self, reason: str = "closed") -> None:
        if self._broken is not None:
            return
        self._broken = reason
        for timer in (self._overdue, self._keepalive):
            if timer is not None:
                timer.cancel()
        self._connecting.cancel()
        if self._transport is not None:
            self._transport.abort()
        for answer, _sent, _size in self._waiting:
            fail_push(answer, f"{self.peer_id} {self.method}: {reason}")
        self._waiting.clear()
        self._outbox.clear()

    # -- asyncio.Protocol --------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport
        self._h2.initiate_connection()  # answers are small and taken at once: the default window holds them
        self._h2.send_headers(self._stream_id, self._headers)
        self._frames.opened(self._stream_id)
        self._write()

    def data_received(self, data: bytes) -> None:
        if self._broken is not None:
            return
        self._heard = self._loop.time()
        self._pinged = None
        try:
            self._frames.receive(data, self._data, self._on)
        except (h2.exceptions.ProtocolError, PeerMessageError) as exc:
            self._break(exc)
            return
        self._write()

    def connection_lost(self, exc: Exception | None) -> None:
        self._break(exc or PeerUnavailable("the connection closed"))

    # -- the stream --------------------------------------------------------------------

    async def _connect(self, host: str, port: int, tls: ssl.SSLContext | None) -> None:
        try:
            await self._loop.create_connection(lambda: self, host, port, ssl=tls,
                                               server_hostname=host if tls else None)
        except OSError as exc:  # refused, unreachable, a TLS handshake that failed
            self._break(exc)

    def _data(self, data: bytes) -> None:
        """DATA of the stream (api.data_frames)."""
        self._control += self._frames.give_back(self._taken(data, len(data)))

    def _taken(self, data: bytes, counted: int) -> int:
        """Answers from `data` (`counted` bytes of the window); how many bytes the window may take
        back: what is still held, part of an answer, is not given back."""
        self._unacknowledged += counted
        self._take(data)
        taken = max(self._unacknowledged - len(self._received), 0)
        self._unacknowledged -= taken
        return taken

    def _on(self, event: h2.events.Event) -> None:
        if isinstance(event, h2.events.DataReceived):  # one h2 read: padded, or the last of the stream
            taken = self._taken(event.data, event.flow_controlled_length)
            if taken:
                self._h2.acknowledge_received_data(taken, event.stream_id)
        elif isinstance(event, h2.events.RemoteSettingsChanged):
            pass  # _write, after the events, sends what the wider window allows
        elif isinstance(event, h2.events.ResponseReceived):
            headers = dict(event.headers)
            if headers.get(b":status") != b"200":
                raise PeerMessageError(f"HTTP status {headers.get(b':status')!r}")
            if b"grpc-status" in headers:  # a refusal answers with its status at once (no secret, a wrong one)
                self._ended(headers)
        elif isinstance(event, h2.events.TrailersReceived):
            self._ended(dict(event.headers))
        elif isinstance(event, h2.events.StreamEnded | h2.events.StreamReset | h2.events.ConnectionTerminated):
            self._break(PeerUnavailable(f"the stream ended ({type(event).__name__})"))

    def _ended(self, trailers: dict[bytes, bytes]) -> None:
        reason = (trailers.get(b"grpc-message") or b"the follower ended the stream").decode(errors="replace")
        self._break(PeerUnavailable(f"grpc-status {trailers.get(b'grpc-status', b'?').decode()}: {reason}"))

    def _take(self, data: bytes) -> None:
        """Answers, each a gRPC message, settle the oldest messages."""
        received = self._received
        received += data
        while (message := take_message(received, self.answer_bytes_max)) is not None:
            if not self._waiting:
                raise PeerMessageError("an answer to no message")
            response = self._decode(message)
            answer, sent, size = self._waiting.popleft()
            self.client.answered(self.peer_id)
            self._answered(sent, size)
            if not answer.done():
                answer.set_result(response)

    def _write(self) -> None:
        """Send what h2 has, and what the follower's windows take of the outbox."""
        if self._transport is None or self._broken is not None:
            return
        out: list[bytes | memoryview] = [self._h2.data_to_send(), self._control]
        self._control = b""
        self._frames.take_outbox(self._outbox, out)
        data = b"".join(out)
        if data:
            self._transport.write(data)

    def _check_overdue(self) -> None:
        self._overdue = None
        if not self._waiting:
            return
        due = self._waiting[0][1] + self.timeout_s
        if self._loop.time() >= due:
            self.close(f"no answer within {self.timeout_s * 1000:.0f} ms")
        else:
            self._overdue = self._loop.call_at(due, self._check_overdue)

    def _check_alive(self) -> None:
        """A ping on a connection quiet for keepalive_s; no answer to it in keepalive_timeout_s breaks it."""
        now = self._loop.time()
        if self._pinged is not None and now - self._pinged >= self.client.keepalive_timeout_s:
            self.close(f"no answer to a ping within {self.client.keepalive_timeout_s * 1000:.0f} ms")
            return
        if self._pinged is None and self._transport is not None and now - self._heard >= self.client.keepalive_s:
            self._pinged = now
            self._h2.ping(PING_DATA)
            self._write()
        self._keepalive = self._loop.call_later(self.client.keepalive_s, self._check_alive)

    def _break(self, exc: Exception) -> None:
        if self._broken is None:
            self.close(self.client.failed(self.peer_id, self.method, exc))


class H2PushStream(H2CallStream):
    """raft.transport.PushStream: pushes to a follower's Replicate method."""

    path, method = REPLICATE_PATH, "Replicate"

    def __init__(self, client: StreamOwner, peer_id: str, address: str, tls: ssl.SSLContext | None) -> None:
        super().__init__(client, peer_id, address, tls, timeout_s=client.push_timeout_s,
                         answer_bytes_max=PUSH_ANSWER_BYTES_MAX)

    def send(self, request: PushRequest) -> asyncio.Future[PushResponse]:
        return self._put(encode_push(request), len(request.data))  # the entries are copied now

    def _decode(self, answer: bytes) -> PushResponse:
        return decode_push_response(answer)

    def _answered(self, sent: float, size: int) -> None:
        if self.client.on_push is not None:
            self.client.on_push(self.peer_id, self._loop.time() - sent, size)
