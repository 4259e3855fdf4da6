"""The peer port's wire, as both ends speak it: the methods' names, how a connection says what it
is, gRPC's framing of messages, and the keepalive that tells a live member from a gone one.

Every connection is HTTP/2. One whose first SETTINGS frame carries REPLICATE_SETTING is one of
raftlog's own streams (api.peer_stream calls, api.stream_server serves); any other is grpcio's
(api.peer_port routes each by `route_of`). On both, a message is gRPC's: a 5-byte prefix (a
compressed flag, never set here, and a u32 big-endian length), then the protobuf message of
proto/raftlog/peer/v1/peer.proto (api.peer_codec); a call's outcome is in its trailers.
"""

from __future__ import annotations

from raftlog.api.peer_codec import PeerMessageError

SERVICE = "/raftlog.peer.v1.Peer/"  # the peer service's methods are SERVICE + name
REPLICATE_PATH = f"{SERVICE}Replicate".encode()  # a leader's pushes to a follower (a stream)
FORWARD_PATH = f"{SERVICE}Forward".encode()  # a follower's clients' appends to its leader (a stream)

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"  # every HTTP/2 connection's first bytes
FRAME_HEADER_SIZE = 9
SETTINGS_FRAME = 0x4
FIRST_FRAME_BYTES_MAX = 16_384  # every peer must accept a frame this big: a longer first SETTINGS is not HTTP/2
# An HTTP/2 setting no one has registered (receivers ignore unknown settings, RFC 9113 §6.5.2) in the
# first SETTINGS frame of a connection: the peer port serves its stream on h2. Below 0x100, as
# hyperframe writes setting ids of one byte.
REPLICATE_SETTING = 0xA6
REPLICATE, GRPC, NOT_HTTP2 = "replicate", "grpc", "not HTTP/2"  # where route_of sends a connection
FRAME_BYTES_MAX = 1 << 20  # HTTP/2 frames a peer may send us: a push in one or two (the default, 16 KiB, is 64)

KEEPALIVE_MS = 2000  # a ping on a connection quiet this long ...
KEEPALIVE_TIMEOUT_MS = 5000  # ... unanswered this long: the peer is gone, the connection closed
SILENT_PEER_S = (KEEPALIVE_MS + 2 * KEEPALIVE_TIMEOUT_MS) / 1000  # a served stream heard nothing this long: closed
PING_DATA = b"raftlog!"  # a PING frame carries 8 bytes

PREFIX_SIZE = 5  # gRPC's message prefix: a compressed flag and a u32 big-endian length
OK, INVALID_ARGUMENT, RESOURCE_EXHAUSTED, UNIMPLEMENTED, INTERNAL = 0, 3, 8, 12, 13  # gRPC status codes


class MessageTooLarge(PeerMessageError):
    """A gRPC message whose prefix announces more than the receiver takes."""


class CompressedMessage(PeerMessageError):
    """A gRPC message flagged compressed: no compression is agreed on the peer port."""


def grpc_prefix(size: int) -> bytes:
    """What goes before a gRPC message of `size` bytes: not compressed, and its length."""
    return b"\x00" + size.to_bytes(4, "big")


def take_message(received: bytearray, max_bytes: int | None = None) -> bytes | None:
    """The first whole gRPC message in `received`, taken out of it; None while it is not all there.
    One over `max_bytes` is refused by its prefix, before its bytes arrive."""
    if len(received) < PREFIX_SIZE:
        return None
    size = int.from_bytes(received[1:PREFIX_SIZE], "big")
    if max_bytes is not None and size > max_bytes:
        raise MessageTooLarge(f"a message of {size} bytes is over the limit of {max_bytes}")
    if len(received) < PREFIX_SIZE + size:
        return None
    if received[0]:
        raise CompressedMessage("a compressed message")
    message = bytes(received[PREFIX_SIZE:PREFIX_SIZE + size])
    del received[:PREFIX_SIZE + size]
    return message


def route_of(received: bytes | bytearray) -> str | None:
    """Where a connection goes, from its first bytes (REPLICATE, GRPC or NOT_HTTP2); None: not known yet."""
    head = bytes(received[:len(PREFACE)])
    if head != PREFACE[:len(head)]:
        return NOT_HTTP2
    start = len(PREFACE) + FRAME_HEADER_SIZE
    if len(received) < start:
        return None
    size = int.from_bytes(received[len(PREFACE):len(PREFACE) + 3], "big")
    if received[len(PREFACE) + 3] != SETTINGS_FRAME or size % 6 or size > FIRST_FRAME_BYTES_MAX:
        return NOT_HTTP2  # the preface is followed by a SETTINGS frame (RFC 9113 §3.4)
    if len(received) < start + size:
        return None
    for at in range(start, start + size, 6):
        if int.from_bytes(received[at:at + 2], "big") == REPLICATE_SETTING:
            return REPLICATE
    return GRPC
