"""DATA frames of a peer stream read and written here, every other frame by h2.

h2 makes objects of every frame (the frame, its flags, its padding), runs each through its state
machines and hands back events: at one producer, where every push and every answer is a frame of
its own, that was about a fifth of a follower's CPU and as much of the leader's. A long-lived peer
stream has one HTTP/2 stream on its connection (api.peer_stream, api.stream_server), and all but a
few of its frames are DATA of that stream: those are cut out of the bytes here, 9 bytes of header
read in place, and their flow control kept here, on both sides. h2 still reads and answers every
other frame (SETTINGS, PING, WINDOW_UPDATE, HEADERS, RST_STREAM, GOAWAY), and the DATA frames that
need its judgement: padded ones, those that end the stream, those of another stream, those that
come inside a header block. It always gets whole frames, so it buffers nothing between calls; a
frame over the largest size is refused by its header, before its bytes are held.

Flow control (RFC 9113 §6.9) of the stream and its connection is kept here alone: WINDOW_UPDATE
frames are read and written here too, as h2, which never sees the DATA, would count its windows
past their bound. What the other end sends beyond the window given is a protocol error, as h2
would raise; the window is given back as the owner says it has taken the bytes (`give_back`).
What is sent stays within the other end's windows (`room`).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

import h2.connection
import h2.events
import h2.exceptions
import h2.settings

FRAME_HEADER = 9
DATA, HEADERS, PUSH_PROMISE, WINDOW_UPDATE, CONTINUATION = 0x0, 0x1, 0x5, 0x8, 0x9
END_STREAM, END_HEADERS, PADDED = 0x1, 0x4, 0x8
PREFACE_BYTES = 24  # a client's connection preface, before its first frame
DEFAULT_WINDOW = 65_535
WINDOW_MAX = (1 << 31) - 1


class DataFrames:
    """One connection's frames, split between the caller (its stream's DATA) and h2 (the rest)."""

    def __init__(self, h2_: h2.connection.H2Connection, *, server: bool, inbound_window: int) -> None:
        self.h2 = h2_
        self.stream_id: int | None = None  # the stream whose DATA is read and written here, once it is open
        self.reading = False  # its DATA is still taken here: the other end has not ended it
        self._buffer = bytearray()
        self._preface_left = PREFACE_BYTES if server else 0
        self._in_header_block = False  # HEADERS without END_HEADERS seen: CONTINUATION must follow
        self._inbound_window = inbound_window  # what the other end may still send on the stream
        self._inbound_initial = inbound_window
        self._to_give_back = 0
        self._outbound_window = DEFAULT_WINDOW  # the stream's, as the other end's settings and updates say
        self._connection_window = DEFAULT_WINDOW

    # -- reading -------------------------------------------------------------------------

    def receive(self, data: bytes, on_data: Callable[[bytes], None],
                on_event: Callable[[h2.events.Event], None]) -> None:
        """Cut `data` into frames: the open stream's plain DATA payloads to `on_data`, in order with
        the events h2 makes of the other frames (to `on_event`). Raises h2's ProtocolError."""
        if self._preface_left:
            preface, data = data[:self._preface_left], data[self._preface_left:]
            self._preface_left -= len(preface)
            self._to_h2(preface, on_event)
        buffer = self._buffer
        buffer += data
        max_size = self.h2.max_inbound_frame_size
        at = at_h2 = 0  # where the next frame starts; the first byte not yet read by h2 or here
        end = len(buffer)
        while end - at >= FRAME_HEADER:
            length = int.from_bytes(buffer[at:at + 3], "big")
            if length > max_size:  # refused by its header (h2 would buffer it whole first)
                raise h2.exceptions.FrameTooLargeError(f"a frame of {length} bytes, over {max_size}")
            if end - at < FRAME_HEADER + length:
                break
            kind, flags = buffer[at + 3], buffer[at + 4]
            stream_id = int.from_bytes(buffer[at + 5:at + 9], "big") & 0x7FFF_FFFF
            if (kind == DATA and stream_id == self.stream_id and self.reading
                    and not flags & (END_STREAM | PADDED) and not self._in_header_block):
                if at > at_h2:
                    self._to_h2(bytes(buffer[at_h2:at]), on_event)
                if length > self._inbound_window:
                    raise h2.exceptions.FlowControlError(
                        f"a DATA frame of {length} bytes on a window of {self._inbound_window}")
                self._inbound_window -= length
                if length:
                    on_data(bytes(buffer[at + FRAME_HEADER:at + FRAME_HEADER + length]))
                at += FRAME_HEADER + length
                at_h2 = at
                continue
            if kind == WINDOW_UPDATE and length == 4 and stream_id in (0, self.stream_id) and not self._in_header_block:
                if at > at_h2:
                    self._to_h2(bytes(buffer[at_h2:at]), on_event)
                self._window_updated(stream_id, int.from_bytes(buffer[at + 9:at + 13], "big") & 0x7FFF_FFFF)
                at += FRAME_HEADER + length
                at_h2 = at
                continue
            if kind in (HEADERS, PUSH_PROMISE, CONTINUATION):
                self._in_header_block = not flags & END_HEADERS
            at += FRAME_HEADER + length
        if at > at_h2:
            self._to_h2(bytes(buffer[at_h2:at]), on_event)
        del buffer[:at]

    def _to_h2(self, data: bytes, on_event: Callable[[h2.events.Event], None]) -> None:
        for event in self.h2.receive_data(data):
            if isinstance(event, h2.events.RemoteSettingsChanged):
                self._settings_changed(event)
            on_event(event)

    def _window_updated(self, stream_id: int, increment: int) -> None:
        if increment == 0:
            raise h2.exceptions.ProtocolError("a WINDOW_UPDATE of 0")
        if stream_id == 0:
            self._connection_window += increment
        else:
            self._outbound_window += increment
        if max(self._connection_window, self._outbound_window) > WINDOW_MAX:
            raise h2.exceptions.FlowControlError(f"a window over {WINDOW_MAX} bytes")

    def _settings_changed(self, event: h2.events.RemoteSettingsChanged) -> None:
        """SETTINGS_INITIAL_WINDOW_SIZE moves the open stream's window by its change."""
        changed = event.changed_settings.get(h2.settings.SettingCodes.INITIAL_WINDOW_SIZE)
        if changed is not None:
            self._outbound_window += changed.new_value - (changed.original_value or DEFAULT_WINDOW)

    def give_back(self, size: int) -> bytes:
        """`size` bytes of the stream's DATA are taken: the other end may send as many more. The
        WINDOW_UPDATE frames to write, once a quarter of the window is due (else nothing)."""
        self._to_give_back += size
        if self._to_give_back < self._inbound_initial // 4 or self.stream_id is None:
            return b""
        give, self._to_give_back = self._to_give_back, 0
        self._inbound_window += give
        increment = give.to_bytes(4, "big")
        return b"".join((b"\x00\x00\x04\x08\x00\x00\x00\x00\x00", increment,
                         b"\x00\x00\x04\x08\x00", self.stream_id.to_bytes(4, "big"), increment))

    # -- writing -------------------------------------------------------------------------

    def opened(self, stream_id: int) -> None:
        """The stream is open both ways: its DATA is read and written here from now on."""
        self.stream_id = stream_id
        self.reading = True
        self._outbound_window = self.h2.remote_settings.initial_window_size
        self._inbound_window = self._inbound_initial

    def room(self) -> int:
        """How many bytes of DATA may go now: the windows' and the largest frame's bound."""
        return min(self._outbound_window, self._connection_window, self.h2.max_outbound_frame_size)

    def data_header(self, size: int) -> bytes:
        """The header of a DATA frame of the open stream carrying `size` bytes (at most room()),
        whose bytes follow it; the windows are taken."""
        self._outbound_window -= size
        self._connection_window -= size
        assert self.stream_id is not None
        return size.to_bytes(3, "big") + b"\x00\x00" + self.stream_id.to_bytes(4, "big")

    def take_outbox(self, outbox: deque[bytes | memoryview], out: list[bytes | memoryview]) -> int:
        """Move what the windows allow of `outbox` (in order) onto `out` as DATA frames, as few as
        the largest frame allows; how many bytes of it moved."""
        moved = 0
        while outbox and (room := self.room()) > 0:
            parts: list[bytes | memoryview] = []
            size = 0
            while outbox and size < room:
                head = outbox[0]
                if size + len(head) <= room:
                    parts.append(outbox.popleft())
                    size += len(head)
                else:
                    cut = room - size
                    head = memoryview(head)
                    parts.append(head[:cut])
                    outbox[0] = head[cut:]
                    size = room
            out.append(self.data_header(size))
            out.extend(parts)
            moved += size
        return moved
