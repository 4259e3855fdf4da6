"""The peer port: one listener, and behind it two servers of the service `raftlog.peer.v1.Peer`.

A connection whose first SETTINGS frame carries REPLICATE_SETTING is a stream of one member's
to another (api.peer_stream): a leader's replication stream, or a follower's forwarding stream.
api.stream_server serves it on the event loop. Every other connection, the members' gRPC
channels (votes, heartbeats, fetches, read index, transfers, membership changes, status), is
spliced byte for byte to grpcio's server, which listens on a Unix socket in a directory only
this user can enter (one that a member killed without a clean stop leaves is removed by the
next member to start: sweep_abandoned_sockets). The choice is made on the HTTP/2 preface and
the SETTINGS frame that must follow it, which a client sends before it waits for anything: no
byte of either protocol is changed or answered on the way. Mutual TLS, when on, ends here for both.

At most `peer_connections_max` connections are open at once, and `connections_per_address_max`
from one address, counted from the moment one is accepted (this port accepts them itself, for that
reason), its TLS handshake included: one more is closed at once (api.connection_slots). The
handshake must end within ROUTE_TIMEOUT_S (and unauthenticated_idle_ms), and the preface and first
SETTINGS arrive within ROUTE_TIMEOUT_S of it. A connection on which no call or stream passed the
cluster secret (with no secret: none was made) within `unauthenticated_idle_ms` of its accept is
closed, whatever else it sends (PINGs): a stranger cannot hold the places members reconnect to.
Once used, a connection with no call, or a stream with no message, for `peer_idle_connection_ms`
is closed. gRPC's server takes at most `peer_calls_max` calls at once (beyond them:
RESOURCE_EXHAUSTED) and headers of at most `max_header_bytes`.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import shutil
import socket
import ssl
import tempfile
import time
from typing import Any

import grpc
import grpc.aio

from raftlog.api.connection_slots import CreditCalls, PortSlots, Slot, accepted
from raftlog.api.peer_client import PeerTls, channel_options, load_identity
from raftlog.api.peer_server import PeerService
from raftlog.api.peer_wire import GRPC, REPLICATE, route_of
from raftlog.api.splice import splice
from raftlog.api.stream_server import StreamConnection

log = logging.getLogger("raftlog.api.peer_server")

ROUTE_TIMEOUT_S = 10.0  # a connection that has not sent its preface and SETTINGS by then is closed
PEER_STREAMS_MAX = 256  # concurrent calls per gRPC connection
GRACE_S = 1.0  # at stop, calls under way get this long to finish
BACKLOG = 128
SOCKET_DIR_PREFIX = "raftlog-peer-"  # grpcio's socket's directory, under the system's temporary directory
ABANDONED_AFTER_S = 60.0  # a socket directory this old that no process serves was left by a member that died


class PeerPort:
    def __init__(self, service: PeerService, address: str | socket.socket, max_message_bytes: int,
                 tls: PeerTls | None = None) -> None:
        self.service = service
        self.address = address  # "host:port" ("[v6]:port"), or a socket bound to it
        self.max_message_bytes = max_message_bytes
        self.tls = tls
        self.limits = service.service.limits
        self.slots = PortSlots("peer", "peer_connections_max", self.limits.peer_connections_max, self.limits)
        self._tls_context: ssl.SSLContext | None = None
        self._dir = ""
        self._grpc: grpc.aio.Server | None = None
        self._listener: socket.socket | None = None
        self._accepting: asyncio.Future[None] | None = None
        self._streams: set[StreamConnection] = set()
        self._numbers = itertools.count()
        self.splicing: set[asyncio.Future[Any]] = set()
        service.peer_name = self.slots.peer_name

    async def start(self) -> None:
        """Listen; fails with OSError when the port is taken."""
        sweep_abandoned_sockets(tempfile.gettempdir())
        self._dir = tempfile.mkdtemp(prefix=SOCKET_DIR_PREFIX)  # 0700
        self._grpc = grpc_server(self.service, f"unix:{self._dir}/grpc", self.max_message_bytes,
                                 CreditCalls(self.slots.credit_name))
        await self._grpc.start()
        self._tls_context = None if self.tls is None else server_tls(self.tls)
        try:
            self._listener = self.address if isinstance(self.address, socket.socket) else await _listen(self.address)
            self._listener.setblocking(False)
        except BaseException:
            await self.stop(None)
            raise
        self._accepting = asyncio.ensure_future(self._accept())

    async def _accept(self) -> None:
        """Accept connections here, not in a loop.create_server: each counts from its accept, and its
        TLS handshake (connect_accepted_socket's) is under way while it counts."""
        assert self._listener is not None
        async for sock in accepted(self._listener, "peer"):
            slot = self.slots.admit(sock)
            if slot is None:
                continue
            connecting = asyncio.ensure_future(self._connect(sock, slot))
            self.splicing.add(connecting)
            connecting.add_done_callback(self.splicing.discard)

    async def _connect(self, sock: socket.socket, slot: Slot) -> None:
        handshake_s = min(ROUTE_TIMEOUT_S, self.slots.unauthenticated_s)
        try:
            await asyncio.get_running_loop().connect_accepted_socket(
                lambda: _Door(self, slot), sock, ssl=self._tls_context,
                ssl_handshake_timeout=handshake_s if self._tls_context else None)
        except (OSError, TimeoutError) as exc:  # a TLS handshake that failed or did not end in time
            log.info("peer port: TLS handshake with %s failed: %s", slot.peer, exc)
            sock.close()
            self.slots.ended(slot)

    async def stop(self, grace: float | None = GRACE_S) -> None:
        if self._accepting is not None:
            self._accepting.cancel()
        if self._listener is not None:
            self._listener.close()
        for pending in list(self.splicing):
            pending.cancel()
        for connection in list(self._streams):
            connection.close()
        if self._grpc is not None:
            await self._grpc.stop(grace)
        for transport in self.slots.transports():
            transport.abort()
        shutil.rmtree(self._dir, ignore_errors=True)

    async def wait_for_termination(self) -> None:
        assert self._grpc is not None
        await self._grpc.wait_for_termination()

    # -- connections ------------------------------------------------------------------------

    @property
    def open_connections(self) -> int:
        """Connections counted against peer_connections_max: from their accept to their end."""
        return self.slots.open

    # -- a connection, once it has said what it is ----------------------------------------

    def serve_stream(self, transport: Any, first_bytes: bytes, slot: Slot) -> None:
        connection = StreamConnection(self.service, slot.peer, self.max_message_bytes)
        self._streams.add(connection)

        def lost() -> None:
            self._streams.discard(connection)
            self.slots.ended(slot)

        connection.on_lost = lost
        connection.on_credited = lambda: self.slots.credit(slot)
        transport.set_protocol(connection)
        connection.connection_made(transport)
        connection.data_received(first_bytes)

    def splice(self, transport: Any, first_bytes: bytes, slot: Slot) -> None:
        """Join the connection to gRPC's server (api.splice): gRPC names the call's peer by the
        socket it comes from, so refused calls are logged with the real address, and a call that
        passes credits this connection."""
        name = f"{self._dir}/c{next(self._numbers)}"
        self.slots.named(slot, f"unix:{name}")
        splicing = asyncio.ensure_future(splice(transport, first_bytes, f"{self._dir}/grpc", name,
                                                lambda: self.slots.ended(slot)))
        self.splicing.add(splicing)
        splicing.add_done_callback(self.splicing.discard)


class _Door(asyncio.Protocol):
    """A new connection, until its first bytes say where it goes."""

    def __init__(self, port: PeerPort, slot: Slot) -> None:
        self.port = port
        self.slot = slot
        self._received = bytearray()
        self._transport: Any = None
        self._timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: Any) -> None:
        self._transport = transport
        self.port.slots.opened(self.slot, transport)
        self._timer = asyncio.get_running_loop().call_later(ROUTE_TIMEOUT_S, transport.abort)

    def data_received(self, data: bytes) -> None:
        self._received += data
        route = route_of(self._received)
        if route is None:
            return
        assert self._timer is not None
        self._timer.cancel()
        first_bytes = bytes(self._received)
        if route == REPLICATE:
            self.port.serve_stream(self._transport, first_bytes, self.slot)
        elif route == GRPC:
            self._transport.pause_reading()
            self.port.splice(self._transport, first_bytes, self.slot)
        else:
            log.info("peer port: %s sent something else than HTTP/2; closed", self.slot.peer)
            self._transport.abort()

    def connection_lost(self, exc: Exception | None) -> None:
        self.port.slots.ended(self.slot)
        if self._timer is not None:
            self._timer.cancel()


def sweep_abandoned_sockets(root: str, prefix: str = SOCKET_DIR_PREFIX) -> int:
    """Remove the socket directories of this user's members that died without a clean stop (SIGKILL,
    a power cut): older than ABANDONED_AFTER_S (a member starting now may not have bound its socket
    yet) and with no process listening on the socket. How many went.

    The socket lives under the temporary directory, not the member's data directory: a data
    directory's path can be longer than a Unix socket's (108 bytes), and a live socket in it breaks
    copying the directory (cp -r, shutil.copytree)."""
    removed, uid, now = 0, os.getuid(), time.time()
    with os.scandir(root) as entries:
        for entry in entries:
            if not entry.name.startswith(prefix) or not entry.is_dir(follow_symlinks=False):
                continue
            try:
                stat = entry.stat(follow_symlinks=False)
            except FileNotFoundError:  # another member starting at the same time swept it first
                continue
            if stat.st_uid != uid or now - stat.st_mtime < ABANDONED_AFTER_S or _served(f"{entry.path}/grpc"):
                continue
            shutil.rmtree(entry.path, ignore_errors=True)
            removed += 1
    return removed


def _served(path: str) -> bool:
    """Whether a process listens on the Unix socket at `path` (in doubt: yes)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        try:
            probe.connect(path)
        except (ConnectionRefusedError, FileNotFoundError):
            return False
        except OSError:
            return True
    return True


def grpc_server(service: PeerService, address: str, max_message_bytes: int,
                credit: CreditCalls | None = None) -> grpc.aio.Server:
    """gRPC's server for the peer service's unary calls, bound to `address` (fails if it cannot);
    `credit` sees the calls that passed the secret."""
    limits = service.service.limits
    options = [*channel_options(max_message_bytes),
               ("grpc.max_concurrent_streams", PEER_STREAMS_MAX),
               ("grpc.max_connection_idle_ms", limits.peer_idle_connection_ms),
               ("grpc.max_metadata_size", limits.max_header_bytes),
               ("grpc.absolute_max_metadata_size", limits.max_header_bytes),
               ("grpc.http2.min_ping_interval_without_data_ms", 1000),  # members ping every KEEPALIVE_MS
               ("grpc.http2.max_ping_strikes", 0)]
    server = grpc.aio.server(options=options, interceptors=(service.guard(), *([credit] if credit else [])),
                             maximum_concurrent_rpcs=limits.peer_calls_max)
    server.add_generic_rpc_handlers((service.handler(),))
    if server.add_insecure_port(address) == 0:
        raise OSError(f"cannot listen on {address}")
    return server


def server_tls(tls: PeerTls) -> ssl.SSLContext:
    """Mutual TLS: every member's certificate is signed by the group's CA; HTTP/2 by ALPN."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.verify_mode = ssl.CERT_REQUIRED
    context.load_verify_locations(cadata=tls.ca.decode())
    load_identity(context, tls)
    context.set_alpn_protocols(["h2"])
    return context


async def _listen(address: str) -> socket.socket:
    host, _, port = address.rpartition(":")
    family, kind, proto, _, where = (await asyncio.get_running_loop().getaddrinfo(
        host.strip("[]"), int(port), type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE))[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(where)
        sock.listen(BACKLOG)
    except BaseException:
        sock.close()
        raise
    return sock
