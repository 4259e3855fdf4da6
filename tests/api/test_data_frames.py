"""api.data_frames: the DATA of a peer stream read beside h2 gives what h2 alone gives, however the
bytes are cut on the way; its flow control holds the other end to the window given, as h2 does."""

from __future__ import annotations

import h2.config
import h2.connection
import h2.events
import h2.exceptions
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from raftlog.api.data_frames import DEFAULT_WINDOW, DataFrames

HEADERS = [(b":method", b"POST"), (b":scheme", b"http"), (b":path", b"/raftlog.peer.v1.Peer/Replicate"),
           (b":authority", b"peer"), (b"content-type", b"application/grpc")]


def server() -> h2.connection.H2Connection:
    return h2.connection.H2Connection(h2.config.H2Configuration(client_side=False, header_encoding=None))


def client_bytes(steps: list[tuple[str, int]]) -> bytes:
    """What a client sends: the preface, a stream's HEADERS, then `steps` (DATA plain or padded, a
    ping, a window update), the stream's end."""
    client = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True, header_encoding=None))
    client.initiate_connection()
    client.send_headers(1, HEADERS)
    for number, (kind, size) in enumerate(steps):
        body = bytes([number % 256]) * size
        if kind == "data":
            client.send_data(1, body)
        elif kind == "padded":
            client.send_data(1, body, pad_length=size % 7)
        elif kind == "ping":
            client.ping(b"%08d" % number)
        else:
            client.increment_flow_control_window(size + 1)
    client.send_data(1, b"last", end_stream=True)
    return client.data_to_send()


def h2_alone(data: bytes) -> tuple[bytes, list[type]]:
    conn = server()
    events = conn.receive_data(data)
    return (b"".join(e.data for e in events if isinstance(e, h2.events.DataReceived)),
            [type(e) for e in events if not isinstance(e, h2.events.DataReceived | h2.events.WindowUpdated)])


def beside_h2(pieces: list[bytes]) -> tuple[bytes, list[type]]:
    conn = server()
    frames = DataFrames(conn, server=True, inbound_window=DEFAULT_WINDOW)
    taken, kinds = bytearray(), []

    def on_event(event: h2.events.Event) -> None:
        if isinstance(event, h2.events.RequestReceived):
            frames.opened(event.stream_id)
        if isinstance(event, h2.events.DataReceived):
            taken.extend(event.data)
        elif not isinstance(event, h2.events.WindowUpdated):
            kinds.append(type(event))

    for piece in pieces:
        frames.receive(piece, taken.extend, on_event)
    return bytes(taken), kinds


STEPS = st.lists(st.tuples(st.sampled_from(["data", "padded", "ping", "window"]), st.integers(0, 3000)),
                 max_size=12)


@settings(max_examples=150, deadline=None)
@given(STEPS, st.lists(st.integers(1, 4000), max_size=8))
def test_the_same_data_and_events_as_h2_alone_however_the_bytes_are_cut(steps: list[tuple[str, int]],
                                                                        cuts: list[int]) -> None:
    data = client_bytes(steps)
    pieces, at = [], 0
    for cut in cuts:
        pieces.append(data[at:at + cut])
        at += cut
    pieces.append(data[at:])
    assert beside_h2(pieces) == h2_alone(data)


def opened_stream(window: int = DEFAULT_WINDOW) -> DataFrames:
    conn = server()
    frames = DataFrames(conn, server=True, inbound_window=window)
    frames.receive(client_bytes([])[:-13],  # all but the last DATA frame ("last", END_STREAM)
                   lambda data: None, lambda event: frames.opened(1)
                   if isinstance(event, h2.events.RequestReceived) else None)
    assert frames.stream_id == 1
    return frames


def data_frame(size: int, stream_id: int = 1) -> bytes:
    return size.to_bytes(3, "big") + b"\x00\x00" + stream_id.to_bytes(4, "big") + bytes(size)


def window_update(stream_id: int, increment: int) -> bytes:
    return b"\x00\x00\x04\x08\x00" + stream_id.to_bytes(4, "big") + increment.to_bytes(4, "big")


def test_data_beyond_the_window_given_is_a_protocol_error() -> None:
    frames = opened_stream(window=1000)
    frames.receive(data_frame(600), lambda data: None, lambda event: None)
    with pytest.raises(h2.exceptions.FlowControlError):
        frames.receive(data_frame(600), lambda data: None, lambda event: None)


def test_the_window_given_back_lets_the_other_end_send_on_without_end() -> None:
    """A quarter of the window taken is given back in WINDOW_UPDATE frames for the stream and its
    connection; a stream may carry any number of windows' worth (h2 never counts them)."""
    frames = opened_stream(window=1000)
    updates = b""
    for _ in range(100):
        frames.receive(data_frame(300), lambda data: None, lambda event: None)
        updates += frames.give_back(300)
    assert updates.count(window_update(0, 300)) == 100 and updates.count(window_update(1, 300)) == 100


def test_window_updates_open_the_way_out_and_are_bounded() -> None:
    frames = opened_stream()
    while frames.room():  # the windows, all taken
        frames.data_header(frames.room())
    frames.receive(window_update(0, 5000), lambda data: None, lambda event: None)
    assert frames.room() == 0  # the stream's window is still shut
    frames.receive(window_update(1, 7000), lambda data: None, lambda event: None)
    assert frames.room() == 5000
    with pytest.raises(h2.exceptions.ProtocolError):
        frames.receive(window_update(1, 0), lambda data: None, lambda event: None)
    with pytest.raises(h2.exceptions.FlowControlError):  # (an error ends the connection: a new one)
        opened_stream().receive(window_update(0, (1 << 31) - 1), lambda data: None, lambda event: None)


def test_a_frame_over_the_largest_size_is_refused_by_its_header() -> None:
    frames = opened_stream()
    with pytest.raises(h2.exceptions.ProtocolError):
        frames.receive(data_frame(frames.h2.max_inbound_frame_size + 1)[:100], lambda data: None,
                       lambda event: None)
