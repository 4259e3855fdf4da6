"""The binary batch format: a sequence of u32 big-endian length + body bytes.

Used by `POST /v1/entries/batch` with content type BATCH_CONTENT_TYPE and by a
follower forwarding appends to its leader.
"""

from __future__ import annotations

from collections.abc import Sequence

BATCH_CONTENT_TYPE = "application/vnd.raftlog.batch"
LENGTH_SIZE = 4


class BatchFormatError(ValueError):
    """A binary batch whose lengths do not add up to its size."""


def encode_bodies(bodies: Sequence[bytes]) -> bytes:
    parts = []
    for body in bodies:
        parts.append(len(body).to_bytes(LENGTH_SIZE, "big"))
        parts.append(body)
    return b"".join(parts)


def decode_bodies(data: bytes) -> list[bytes]:
    bodies = []
    view = memoryview(data)
    offset = 0
    while offset < len(view):
        if offset + LENGTH_SIZE > len(view):
            raise BatchFormatError(f"batch: a length prefix is cut off at byte {offset}")
        size = int.from_bytes(view[offset:offset + LENGTH_SIZE], "big")
        offset += LENGTH_SIZE
        if offset + size > len(view):
            raise BatchFormatError(f"batch: body {len(bodies)} claims {size} bytes, "
                                   f"{len(view) - offset} remain")
        bodies.append(bytes(view[offset:offset + size]))
        offset += size
    return bodies
