"""The public gRPC port's listener: connections are accepted here and spliced, byte for byte, to
grpcio's server (api.grpc_api), which listens on a Unix socket in a directory only this user can
enter. TLS, when on, passes through: grpcio's server does it, as on its own port.

grpcio accepts its connections itself and bounds them only all together, and its one idle time
(max_connection_idle) closes a connection that never made a call no sooner than one between calls. So
each connection is accepted here, counted from its accept against `grpc_connections_max` and
`connections_per_address_max` (one more is closed at once), and closed unless a call of
raftlog.v1.Log passes the token check on it within `unauthenticated_idle_ms` of its accept
(api.connection_slots: CreditCalls is the server's last interceptor). A credited connection is
grpcio's to close: `grpc_idle_connection_ms` with no call, `grpc_connection_age_ms` after it
opened (GOAWAY; calls under way finish, so a follow stream is never cut).

The splice costs CPU on every call: its bytes pass through the event loop each way, two reads
and two writes more for a small unary call. It is what a bound per address costs while grpcio
offers no way to hand it a connection accepted elsewhere.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import shutil
import socket
import tempfile
from typing import Any

from raftlog.api.connection_slots import PortSlots, Slot, accepted
from raftlog.api.limits import ApiLimits
from raftlog.api.peer_port import sweep_abandoned_sockets
from raftlog.api.splice import Paused, splice

log = logging.getLogger("raftlog.api.grpc")

SOCKET_DIR_PREFIX = "raftlog-grpc-"  # grpcio's socket's directory, under the system's temporary directory
BACKLOG = 2048


class GrpcPort:
    """Binds `address` ("host:port", "[v6]:port") at once: OSError when it is taken."""

    def __init__(self, address: str, limits: ApiLimits) -> None:
        self.slots = PortSlots("gRPC", "grpc_connections_max", limits.grpc_connections_max, limits)
        self._listener = _listen(address)
        sweep_abandoned_sockets(tempfile.gettempdir(), SOCKET_DIR_PREFIX)
        self._dir = tempfile.mkdtemp(prefix=SOCKET_DIR_PREFIX)  # 0700
        self._numbers = itertools.count()
        self._accepting: asyncio.Future[None] | None = None
        self._splicing: set[asyncio.Future[Any]] = set()

    @property
    def server_address(self) -> str:
        """Where grpcio's server listens."""
        return f"unix:{self._dir}/grpc"

    def start(self) -> None:
        self._accepting = asyncio.ensure_future(self._accept())

    def stop_accepting(self) -> None:
        if self._accepting is not None:
            self._accepting.cancel()
        self._listener.close()

    def close(self) -> None:
        """After grpcio's server stopped: what is left goes."""
        self.stop_accepting()
        for splicing in list(self._splicing):
            splicing.cancel()
        for transport in self.slots.transports():
            transport.abort()
        shutil.rmtree(self._dir, ignore_errors=True)

    async def _accept(self) -> None:
        async for sock in accepted(self._listener, "gRPC"):
            slot = self.slots.admit(sock)
            if slot is not None:
                self._keep(asyncio.ensure_future(self._splice(sock, slot)))

    async def _splice(self, sock: socket.socket, slot: Slot) -> None:
        loop = asyncio.get_running_loop()
        paused = Paused(lambda made: self.slots.opened(slot, made), lambda: self.slots.ended(slot))
        try:
            transport, _ = await loop.connect_accepted_socket(lambda: paused, sock)
        except OSError as exc:
            log.info("gRPC port: cannot take the connection from %s: %s", slot.peer, exc)
            sock.close()
            self.slots.ended(slot)
            return
        name = f"{self._dir}/c{next(self._numbers)}"
        self.slots.named(slot, f"unix:{name}")
        await splice(transport, paused.received, f"{self._dir}/grpc", name, lambda: self.slots.ended(slot))

    def _keep(self, splicing: asyncio.Future[Any]) -> None:
        self._splicing.add(splicing)
        splicing.add_done_callback(self._splicing.discard)


def _listen(address: str) -> socket.socket:
    host, _, port = address.rpartition(":")
    host = host.strip("[]")
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, int(port)))
        sock.listen(BACKLOG)
        sock.setblocking(False)
    except BaseException:
        sock.close()
        raise
    return sock
