"""The serving end of the peer port's long-lived streams, on h2: one HTTP/2 connection carrying
one stream, driven by h2's state machine on the event loop, its DATA frames read and written beside
it (api.data_frames). A follower serves its leader's
`Replicate` stream (the leader's end is api.peer_stream.H2PushStream); a leader serves its
followers' `Forward` streams, their clients' appends (api.forward_stream). Each is a method of
PeerService (`stream_method`): how a message is taken, how its answer is written.

gRPC's server hands every message between its core's threads and the loop, twice per push; here
the push is read, handed to the node and answered from the loop alone, for about half the CPU per
message and fewer thread wake-ups on the way of every acknowledgement
(`python bench/peer_bench.py --transports raftlog-stream`). The wire is gRPC's: a 5-byte prefix per
message, the outcome in trailers (grpc-status, grpc-message).

Each message goes to the node as it arrives (a follower's handler orders pushes by index); the
answers go back in the order the messages came, within the window the other end gives. Answers it
leaves unread wait in an outbox of at most about `peer_outbox_bytes_max`: past it, the stream takes
no more of its messages and gives back none of its window, so the other end must stop sending
(HTTP/2 flow control) until it reads; what it sent meanwhile is taken, in order, once it has.
The stream needs the cluster secret, when there is one. A message that does not decode ends the
stream with INVALID_ARGUMENT, one over the message limit with RESOURCE_EXHAUSTED, after the answers
to what came before; an HTTP/2 protocol error closes the connection. Neither reaches the node. A
connection silent for SILENT_PEER_S (the member at the other end pings a quiet stream every
KEEPALIVE_MS) is closed: that member is gone.

The secret is checked on the stream's HEADERS, before any of its DATA is taken: a refused stream
is answered (trailers only), reset, and what it still sends is dropped. Its header block may not
pass `max_header_bytes`, neither as sent (HEADERS and CONTINUATION frames together) nor decoded
(MAX_HEADER_LIST_SIZE): more is a protocol error, and the connection closes. The first stream that
passes makes the connection a member's (`on_credited`: api.peer_port closes one that none passed
within unauthenticated_idle_ms); it is then closed, with a GOAWAY, once no stream opens or sends a
message for `peer_idle_connection_ms` (PINGs do not count).
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import h2.config
import h2.connection
import h2.errors
import h2.events
import h2.exceptions
import h2.frame_buffer
import h2.settings
from hyperframe.frame import HeadersFrame

from raftlog.api.data_frames import DataFrames
from raftlog.api.peer_codec import PeerMessageError
from raftlog.api.peer_wire import (
    FRAME_BYTES_MAX,
    INTERNAL,
    INVALID_ARGUMENT,
    OK,
    PREFIX_SIZE,
    RESOURCE_EXHAUSTED,
    SILENT_PEER_S,
    UNIMPLEMENTED,
    CompressedMessage,
    MessageTooLarge,
    grpc_prefix,
    take_message,
)

if TYPE_CHECKING:
    from raftlog.api.peer_server import PeerService, StreamMethod

log = logging.getLogger("raftlog.api.peer_server")


class BoundedFrameBuffer(h2.frame_buffer.FrameBuffer):
    """h2's frame buffer, but a header block (HEADERS and its CONTINUATION frames) of more than
    `max_bytes` is a protocol error as it arrives: h2 alone gathers up to 64 frames of
    FRAME_BYTES_MAX before it decodes a block and bounds what it decodes to."""

    def __init__(self, max_bytes: int) -> None:
        super().__init__(server=True)
        self.max_bytes = max_bytes

    def _update_header_buffer(self, f: Any) -> Any:
        frame = super()._update_header_buffer(f)
        gathered = self._headers_buffer or ([frame] if isinstance(frame, HeadersFrame) else [])
        if sum(len(part.data) for part in gathered) > self.max_bytes:
            raise h2.exceptions.ProtocolError(f"a header block over {self.max_bytes} bytes (max_header_bytes)")
        return frame


class StreamConnection(asyncio.Protocol):
    def __init__(self, service: PeerService, peer: str, max_message_bytes: int) -> None:
        self.service = service
        self.peer = peer
        self.max_message_bytes = max_message_bytes
        self._loop = asyncio.get_running_loop()
        limits = service.service.limits
        header_bytes = limits.max_header_bytes
        self.window_bytes = limits.peer_window_bytes
        self.answers_ahead_max = limits.peer_answers_ahead_max
        self.outbox_bytes_max = limits.peer_outbox_bytes_max
        config = h2.config.H2Configuration(client_side=False, header_encoding=None)
        self._h2 = h2.connection.H2Connection(config)
        self._h2.local_settings = h2.settings.Settings(client=False, initial_values={
            h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS: 1,
            h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: self.window_bytes,
            h2.settings.SettingCodes.MAX_FRAME_SIZE: FRAME_BYTES_MAX,
            h2.settings.SettingCodes.MAX_HEADER_LIST_SIZE: header_bytes})
        self._h2.max_inbound_frame_size = FRAME_BYTES_MAX  # h2 took it from its default settings
        self._h2.decoder.max_header_list_size = header_bytes  # ... and this, until the leader acknowledges ours
        self._h2.incoming_buffer = BoundedFrameBuffer(header_bytes)
        self._frames = DataFrames(self._h2, server=True, inbound_window=self.window_bytes)
        self._control = b""  # WINDOW_UPDATE frames to send
        self._transport: Any = None
        self._stream_id: int | None = None
        self._method: StreamMethod | None = None  # the open stream's
        self._received = bytearray()
        self._answers: deque[asyncio.Future[Any]] = deque()  # in the order the messages came
        self._outbox: deque[bytes | memoryview] = deque()  # answers, framed, the leader's windows have not taken
        self._outbox_bytes = 0
        # DATA not taken while the outbox is full, with h2's count of it where h2 read it (None: api.data_frames)
        self._withheld: list[tuple[bytes, int | None]] = []
        self._ended_meanwhile = False  # the other end ended the stream behind DATA that waits
        self._ending: tuple[int, str] | None = None  # the status to end with once the answers are out
        self._paused = False
        self._heard = self._loop.time()
        self._silence = self._loop.call_later(SILENT_PEER_S, self._check_silence)
        self.on_lost: Callable[[], None] | None = None
        self.on_credited: Callable[[], None] | None = None  # a stream passed the secret: the connection is a member's
        self.idle_s = limits.peer_idle_connection_ms / 1000
        self._used = self._heard  # when a stream last opened or sent a message (PINGs do not count)
        self._idle: asyncio.TimerHandle | None = None

    # -- asyncio.Protocol --------------------------------------------------------------

    def connection_made(self, transport: Any) -> None:
        self._transport = transport
        self._h2.initiate_connection()
        self._h2.increment_flow_control_window(self.window_bytes - 65_535)  # the connection's own window
        self._flush()

    def data_received(self, data: bytes) -> None:
        self._heard = self._loop.time()
        try:
            self._frames.receive(data, self._data, self._on)
        except h2.exceptions.ProtocolError as exc:
            log.warning("peer stream from %s: HTTP/2 protocol error: %s", self.peer, exc)
            self._h2.close_connection(h2.errors.ErrorCodes.PROTOCOL_ERROR)
            self._flush()
            self._transport.close()
            return
        self._flush()

    def connection_lost(self, exc: Exception | None) -> None:
        self._silence.cancel()
        if self._idle is not None:
            self._idle.cancel()
        self._stream_id = None
        self._answers.clear()  # the node's handling runs on (PeerService._handling); nobody waits for it
        if self.on_lost is not None:
            self.on_lost()

    def close(self) -> None:
        """At stop: tell the leader the connection goes (GOAWAY), and go."""
        if self._transport is not None and not self._transport.is_closing():
            self._h2.close_connection()
            self._flush()
            self._transport.close()

    # -- the stream --------------------------------------------------------------------

    def _data(self, data: bytes) -> None:
        """DATA of the open stream (api.data_frames): its window is given back at once, as the
        bounds on what is held are peer_answers_ahead_max's, unless the outbox is full (then the
        DATA waits, its window with it)."""
        if self._ending is None and self._withholding():
            self._withheld.append((data, None))
            return
        self._control += self._frames.give_back(len(data))
        if self._ending is None:
            self._take(data)

    def _withholding(self) -> bool:
        """Whether the stream's DATA waits: the other end leaves its answers unread (or DATA waits already)."""
        return bool(self._withheld) or self._outbox_bytes > self.outbox_bytes_max

    def _take_withheld(self, stream_id: int) -> None:
        """The outbox drained: the DATA that waited is taken, in order, and its window given back."""
        withheld, self._withheld = self._withheld, []
        for data, h2_length in withheld:
            if h2_length is None:
                self._control += self._frames.give_back(len(data))
            else:
                self._h2.acknowledge_received_data(h2_length, stream_id)
            if self._ending is None:
                self._take(data)
        if self._ended_meanwhile:
            self._ended_meanwhile = False
            self._end(OK, "")

    def _on(self, event: h2.events.Event) -> None:
        if isinstance(event, h2.events.RequestReceived):
            self._open(event.stream_id, dict(event.headers))
        elif isinstance(event, h2.events.DataReceived):  # one h2 read: padded, or the last of the stream
            ours = event.stream_id == self._stream_id and self._ending is None
            if ours and self._withholding():
                self._withheld.append((event.data, event.flow_controlled_length))
                return
            self._h2.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
            if ours:
                self._take(event.data)
        elif isinstance(event, h2.events.StreamEnded):
            if event.stream_id == self._stream_id:
                self._frames.reading = False
                if self._withheld:
                    self._ended_meanwhile = True  # ended once what waits is taken
                else:
                    self._end(OK, "")  # the peer is done: answer what it sent, then the trailers
        elif isinstance(event, h2.events.StreamReset):
            if event.stream_id == self._stream_id:
                self._stream_id = self._frames.stream_id = None
                self._answers.clear()
                self._withheld.clear()
                if self._paused:
                    self._paused = False
                    self._transport.resume_reading()
        elif isinstance(event, h2.events.ConnectionTerminated):
            self._transport.close()

    def _open(self, stream_id: int, headers: dict[bytes, bytes]) -> None:
        """One stream at a time (MAX_CONCURRENT_STREAMS; h2 refuses a second as a protocol error)."""
        method = self.service.stream_method(headers.get(b":path", b""))
        if method is None:
            self._refuse(stream_id, UNIMPLEMENTED, "this connection serves Replicate and Forward alone")
            return
        refusal = self.service.refusal(headers.get(b"authorization"), method.name, self.peer)
        if refusal is not None:
            self._refuse(stream_id, int(refusal[0].value[0]), refusal[1])
            return
        self._stream_id, self._method, self._ending = stream_id, method, None
        self._received.clear()
        self._outbox.clear()
        self._outbox_bytes = 0
        self._withheld.clear()
        self._ended_meanwhile = False
        self._h2.send_headers(stream_id, [(b":status", b"200"), (b"content-type", b"application/grpc")])
        self._frames.opened(stream_id)
        self._used = self._loop.time()
        if self._idle is None:  # the first stream: a member's connection, closed once it goes unused
            self._idle = self._loop.call_later(self.idle_s, self._check_idle)
            if self.on_credited is not None:
                self.on_credited()

    def _refuse(self, stream_id: int, status: int, message: str) -> None:
        """A trailers-only answer, as gRPC ends a call it refuses; the stream is reset, so the leader
        sends nothing more on it (what is already on its way is dropped)."""
        self._h2.send_headers(stream_id, [(b":status", b"200"), (b"content-type", b"application/grpc"),
                                          *_status(status, message)], end_stream=True)
        stream = self._h2.streams.get(stream_id)
        if stream is not None and not stream.closed:
            self._h2.reset_stream(stream_id, h2.errors.ErrorCodes.NO_ERROR)

    def _take(self, data: bytes) -> None:
        """Each whole message to the node now, its answer in line behind the others'."""
        self._used = self._loop.time()
        received, take = self._received, self._method.take  # type: ignore[union-attr]  # a stream is open
        received += data
        try:
            while (message := take_message(received, self.max_message_bytes)) is not None:
                answer = take(message)
                self._answers.append(answer)
                answer.add_done_callback(self._answered)
        except MessageTooLarge as exc:
            self._end(RESOURCE_EXHAUSTED, str(exc))
        except CompressedMessage as exc:
            self._end(UNIMPLEMENTED, str(exc))
        except PeerMessageError as exc:
            self._end(INVALID_ARGUMENT, str(exc))
        if len(self._answers) >= self.answers_ahead_max and not self._paused:
            self._paused = True  # the node is behind: read no more until it catches up
            self._transport.pause_reading()

    def _answered(self, _answer: asyncio.Future[Any]) -> None:
        """Send every answer at the head of the line that is ready."""
        answers, outbox, encode = self._answers, self._outbox, self._method.encode  # type: ignore[union-attr]
        while answers and answers[0].done():
            answer = answers.popleft()
            if answer.cancelled() or answer.exception() is not None:
                answers.clear()
                self._end(INTERNAL, "a message failed on this member")  # PeerService logs why
                break
            message = encode(answer.result())
            outbox.append(grpc_prefix(len(message)))
            outbox.append(message)
            self._outbox_bytes += PREFIX_SIZE + len(message)
        if self._paused and len(answers) < self.answers_ahead_max:
            self._paused = False
            self._transport.resume_reading()
        self._flush()

    def _end(self, status: int, message: str) -> None:
        """The stream ends with `status` once the answers before it are out; nothing more is read."""
        if self._ending is None:
            self._ending = (status, message)
            self._received.clear()
            self._withheld.clear()

    def _flush(self) -> None:
        """Send what h2 has, the answers the leader's windows take, and the trailers once all are out."""
        stream_id, h2_ = self._stream_id, self._h2
        out: list[bytes | memoryview] = [h2_.data_to_send(), self._control]
        self._control = b""
        if stream_id is not None:
            self._outbox_bytes -= self._frames.take_outbox(self._outbox, out)
            if self._withheld and self._outbox_bytes <= self.outbox_bytes_max:
                self._take_withheld(stream_id)
                out += (self._control, h2_.data_to_send())
                self._control = b""
            if self._ending is not None and not self._answers and not self._outbox:
                self._stream_id = self._frames.stream_id = None
                h2_.send_headers(stream_id, _status(*self._ending), end_stream=True)
                out.append(h2_.data_to_send())
        data = b"".join(out)
        if data and self._transport is not None:
            self._transport.write(data)

    def _check_idle(self) -> None:
        unused = self._loop.time() - self._used
        if unused >= self.idle_s:
            log.debug("peer stream from %s: no message for %.0f s (peer_idle_connection_ms), closed", self.peer, unused)
            self.close()
            return
        self._idle = self._loop.call_later(self.idle_s - unused, self._check_idle)

    def _check_silence(self) -> None:
        quiet = self._loop.time() - self._heard
        if quiet >= SILENT_PEER_S:
            log.info("peer stream from %s: silent for %.0f s, closed", self.peer, quiet)
            self._transport.abort()
            return
        self._silence = self._loop.call_later(SILENT_PEER_S - quiet, self._check_silence)


def _status(status: int, message: str) -> list[tuple[bytes, bytes]]:
    """How a gRPC call ends: its status, and why when there is something to say."""
    headers = [(b"grpc-status", str(status).encode())]
    if message:
        headers.append((b"grpc-message", message.encode()))
    return headers
