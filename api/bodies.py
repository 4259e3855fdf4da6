"""The binary batch format: a sequence of u32 big-endian length + body bytes.

Used by `POST /v1/entries/batch` with content type BATCH_CONTENT_TYPE and by a
follower forwarding appends to its leader.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

from raftlog.storage.codec import compiled

BATCH_CONTENT_TYPE = "application/vnd.raftlog.batch"
LENGTH = struct.Struct(">I")
LENGTH_SIZE = LENGTH.size


class BatchFormatError(ValueError):
    """A binary batch whose lengths do not add up to its size."""


class BatchTooLargeError(BatchFormatError):
    """A binary batch of more entries than the caller takes."""


def encode_bodies(bodies: Sequence[bytes]) -> bytes:
    parts = []
    for body in bodies:
        parts.append(len(body).to_bytes(LENGTH_SIZE, "big"))
        parts.append(body)
    return b"".join(parts)


def decode_bodies(data: bytes, max_entries: int | None = None) -> list[bytes]:
    """The bodies of a binary batch: a slice of `data` each. Reading stops at the entry after
    `max_entries`: 64 MiB of empty bodies would be 16 million. Split by the compiled codec where
    it is built; a batch it refuses, the reference below words why."""
    data = bytes(data)  # the same object when it is bytes already
    if compiled is not None:
        bodies: list[bytes] | None = compiled.split_bodies(data, -1 if max_entries is None else max_entries)
        if bodies is not None:
            return bodies
    return reference_decode(data, max_entries)


def reference_decode(data: bytes, max_entries: int | None = None) -> list[bytes]:
    """decode_bodies in Python (lengths read in place, no view per entry)."""
    bodies: list[bytes] = []
    unpack_from = LENGTH.unpack_from
    end = len(data)
    offset = 0
    while offset < end:
        if len(bodies) == max_entries:
            raise BatchTooLargeError(f"batch: more than {max_entries} entries (max_batch_entries)")
        if offset + LENGTH_SIZE > end:
            raise BatchFormatError(f"batch: a length prefix is cut off at byte {offset}")
        (size,) = unpack_from(data, offset)
        offset += LENGTH_SIZE
        if offset + size > end:
            raise BatchFormatError(f"batch: body {len(bodies)} claims {size} bytes, "
                                   f"{end - offset} remain")
        bodies.append(data[offset:offset + size])
        offset += size
    return bodies
