"""A connection accepted on a port, joined byte for byte to grpcio's server on a Unix socket.

A port that accepts its connections itself (api.peer_port, api.grpc_port) counts each from its
accept and decides which to keep; the ones it keeps are spliced to gRPC's server, which listens on
a socket in a directory only this user can enter. Each is joined from a socket bound to a name of
its own, which gRPC then gives as the call's peer: the port maps it back to the real address for
the logs, and credits that connection when a call on it passes (api.connection_slots).
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
from collections.abc import Callable
from typing import Any

log = logging.getLogger("raftlog.api.splice")


class Pipe(asyncio.Protocol):
    """Bytes from one connection to the other; reading stops while the other cannot take them."""

    def __init__(self, to: Any, on_lost: Callable[[], None] | None = None) -> None:
        self.to = to
        self.on_lost = on_lost

    def data_received(self, data: bytes) -> None:
        self.to.write(data)

    def eof_received(self) -> None:
        self.to.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self.to.close()
        if self.on_lost is not None:
            self.on_lost()

    def pause_writing(self) -> None:  # this connection's own buffer is full: read no more from the other
        self.to.pause_reading()

    def resume_writing(self) -> None:
        self.to.resume_reading()


class Paused(asyncio.Protocol):
    """A connection read no further until it is spliced; `on_lost` if it goes first. What came
    meanwhile waits in `received` (uvloop reads once after connection_made, paused or not)."""

    def __init__(self, on_made: Callable[[Any], None], on_lost: Callable[[], None]) -> None:
        self.on_made = on_made
        self.on_lost = on_lost
        self.received = bytearray()
        self._transport: Any = None

    def connection_made(self, transport: Any) -> None:
        self._transport = transport
        transport.pause_reading()
        self.on_made(transport)

    def data_received(self, data: bytes) -> None:
        self.received += data
        self._transport.pause_reading()

    def connection_lost(self, exc: Exception | None) -> None:
        self.on_lost()


async def splice(transport: Any, first_bytes: bytes | bytearray, server: str, name: str,
                 on_lost: Callable[[], None]) -> bool:
    """Join `transport`, its reading paused, to gRPC's server listening at the Unix socket `server`,
    from a socket bound to `name`; `first_bytes`, read from it already (up to the join: Paused's
    `received`), go first, and `on_lost` is called when it ends. False: not joined (the server
    could not be reached, and the connection is aborted; or it went meanwhile), and its
    protocol's own connection_lost is the end."""
    loop = asyncio.get_running_loop()
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.bind(name)
        sock.setblocking(False)
        await loop.sock_connect(sock, server)
        os.unlink(name)  # the socket keeps its name
        upstream, _ = await loop.create_unix_connection(lambda: Pipe(transport), sock=sock)
    except OSError as exc:
        sock.close()
        log.warning("cannot reach the gRPC server at %s: %s", server, exc)
        transport.abort()
        return False
    if transport.is_closing():  # the caller went while the server was reached
        upstream.close()
        return False
    transport.set_protocol(Pipe(upstream, on_lost=on_lost))
    if first_bytes:
        upstream.write(bytes(first_bytes))
    transport.resume_reading()
    return True
