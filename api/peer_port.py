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

At most `peer_connections_max` connections are open at once, counted from the moment one is
accepted (this port accepts them itself, for that reason), its TLS handshake included: one more
is closed at once. The handshake must end within ROUTE_TIMEOUT_S, and the preface and first
SETTINGS arrive within ROUTE_TIMEOUT_S of it. gRPC's server takes at most `peer_calls_max` calls at once (beyond them:
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
from collections.abc import Callable
from typing import Any

import grpc
import grpc.aio

from raftlog.api.peer_client import PeerTls, channel_options, load_identity
from raftlog.api.peer_server import PeerService
from raftlog.api.peer_wire import GRPC, REPLICATE, route_of
from raftlog.api.stream_server import StreamConnection
from raftlog.raft.waiting import loop_time

log = logging.getLogger("raftlog.api.peer_server")

ROUTE_TIMEOUT_S = 10.0  # a connection that has not sent its preface and SETTINGS by then is closed
PEER_STREAMS_MAX = 256  # concurrent calls per gRPC connection
IDLE_CONNECTION_MS = 75_000  # a gRPC connection with no call for this long is closed
GRACE_S = 1.0  # at stop, calls under way get this long to finish
REFUSAL_LOG_INTERVAL_S = 1.0  # refused connections are logged at most this often
ACCEPT_RETRY_S = 0.1  # after a failed accept (out of open files), the next try waits this long
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
        self._tls_context: ssl.SSLContext | None = None
        self._refusal_logged = float("-inf")
        self._refused = 0  # connections refused since the last line about them
        self._dir = ""
        self._grpc: grpc.aio.Server | None = None
        self._listener: socket.socket | None = None
        self._accepting: asyncio.Future[None] | None = None
        self._handshaking: set[socket.socket] = set()  # accepted, TLS handshake under way
        self._connections: set[Any] = set()  # transports, to close at stop
        self._streams: set[StreamConnection] = set()
        self._names: dict[str, str] = {}  # gRPC's name of a spliced connection -> the peer's address
        self._numbers = itertools.count()
        self.splicing: set[asyncio.Future[None]] = set()
        service.peer_name = lambda peer: self._names.get(peer, peer)

    async def start(self) -> None:
        """Listen; fails with OSError when the port is taken."""
        sweep_abandoned_sockets(tempfile.gettempdir())
        self._dir = tempfile.mkdtemp(prefix=SOCKET_DIR_PREFIX)  # 0700
        self._grpc = grpc_server(self.service, f"unix:{self._dir}/grpc", self.max_message_bytes)
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
        loop = asyncio.get_running_loop()
        assert self._listener is not None
        while True:
            try:
                sock, _ = await loop.sock_accept(self._listener)
            except OSError as exc:  # out of open files, most likely: the backlog waits meanwhile
                log.warning("peer port: cannot accept a connection: %s", exc)
                await asyncio.sleep(ACCEPT_RETRY_S)
                continue
            if not self.admit(sock):
                continue
            connecting = asyncio.ensure_future(self._connect(sock))
            self.splicing.add(connecting)
            connecting.add_done_callback(self.splicing.discard)

    async def _connect(self, sock: socket.socket) -> None:
        try:
            await asyncio.get_running_loop().connect_accepted_socket(
                lambda: _Door(self), sock, ssl=self._tls_context,
                ssl_handshake_timeout=ROUTE_TIMEOUT_S if self._tls_context else None)
        except (OSError, TimeoutError) as exc:  # a TLS handshake that failed or did not end in time
            log.info("peer port: TLS handshake with %s failed: %s", _address(sock), exc)
            sock.close()
        finally:
            self._handshaking.discard(sock)  # counted now as its transport, if it got one

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
        for transport in list(self._connections):
            transport.abort()
        shutil.rmtree(self._dir, ignore_errors=True)

    async def wait_for_termination(self) -> None:
        assert self._grpc is not None
        await self._grpc.wait_for_termination()

    # -- connections ------------------------------------------------------------------------

    @property
    def open_connections(self) -> int:
        """Connections counted against peer_connections_max: from their accept to their end."""
        return len(self._connections) + len(self._handshaking)

    def admit(self, sock: socket.socket) -> bool:
        """Count a new connection in; False (closed, logged at most once a second) past peer_connections_max."""
        if self.open_connections < self.limits.peer_connections_max:
            self._handshaking.add(sock)
            return True
        self._refused += 1
        now = loop_time()
        if now - self._refusal_logged >= REFUSAL_LOG_INTERVAL_S:
            self._refusal_logged = now
            log.warning("peer port: refused %d connection(s), the latest from %s: %d open (peer_connections_max)",
                        self._refused, _address(sock), self.open_connections)
            self._refused = 0
        sock.close()
        return False

    # -- a connection, once it has said what it is ----------------------------------------

    def serve_stream(self, transport: Any, first_bytes: bytes) -> None:
        connection = StreamConnection(self.service, _peer(transport), self.max_message_bytes)
        self._streams.add(connection)

        def lost() -> None:
            self._streams.discard(connection)
            self._connections.discard(transport)

        connection.on_lost = lost
        transport.set_protocol(connection)
        connection.connection_made(transport)
        connection.data_received(first_bytes)

    async def splice(self, transport: Any, first_bytes: bytes) -> None:
        """Join the connection to gRPC's server, from a socket bound to a name of its own, which
        gRPC then gives as the call's peer: refused calls are logged with the real address."""
        name = f"{self._dir}/c{next(self._numbers)}"
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.bind(name)
            sock.setblocking(False)
            await asyncio.get_running_loop().sock_connect(sock, f"{self._dir}/grpc")
            os.unlink(name)  # the socket keeps its name
            upstream, _ = await asyncio.get_running_loop().create_unix_connection(lambda: _Pipe(transport), sock=sock)
        except OSError as exc:
            sock.close()
            log.warning("peer port: cannot reach the gRPC server: %s", exc)
            transport.abort()
            return
        self._names[f"unix:{name}"] = _peer(transport)

        def lost() -> None:
            self._connections.discard(transport)
            self._names.pop(f"unix:{name}", None)

        transport.set_protocol(_Pipe(upstream, on_lost=lost))
        upstream.write(first_bytes)
        transport.resume_reading()


class _Door(asyncio.Protocol):
    """A new connection, until its first bytes say where it goes."""

    def __init__(self, port: PeerPort) -> None:
        self.port = port
        self._received = bytearray()
        self._transport: Any = None
        self._timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: Any) -> None:
        self._transport = transport
        self.port._connections.add(transport)
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
            self.port.serve_stream(self._transport, first_bytes)
        elif route == GRPC:
            self._transport.pause_reading()
            splicing = asyncio.ensure_future(self.port.splice(self._transport, first_bytes))
            self.port.splicing.add(splicing)
            splicing.add_done_callback(self.port.splicing.discard)
        else:
            log.info("peer port: %s sent something else than HTTP/2; closed", _peer(self._transport))
            self._transport.abort()

    def connection_lost(self, exc: Exception | None) -> None:
        self.port._connections.discard(self._transport)
        if self._timer is not None:
            self._timer.cancel()


class _Pipe(asyncio.Protocol):
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


def sweep_abandoned_sockets(root: str) -> int:
    """Remove the socket directories of this user's members that died without a clean stop (SIGKILL,
    a power cut): older than ABANDONED_AFTER_S (a member starting now may not have bound its socket
    yet) and with no process listening on the socket. How many went.

    The socket lives under the temporary directory, not the member's data directory: a data
    directory's path can be longer than a Unix socket's (108 bytes), and a live socket in it breaks
    copying the directory (cp -r, shutil.copytree)."""
    removed, uid, now = 0, os.getuid(), time.time()
    with os.scandir(root) as entries:
        for entry in entries:
            if not entry.name.startswith(SOCKET_DIR_PREFIX) or not entry.is_dir(follow_symlinks=False):
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


def grpc_server(service: PeerService, address: str, max_message_bytes: int) -> grpc.aio.Server:
    """gRPC's server for the peer service's unary calls, bound to `address` (fails if it cannot)."""
    limits = service.service.limits
    options = [*channel_options(max_message_bytes),
               ("grpc.max_concurrent_streams", PEER_STREAMS_MAX),
               ("grpc.max_connection_idle_ms", IDLE_CONNECTION_MS),
               ("grpc.max_metadata_size", limits.max_header_bytes),
               ("grpc.absolute_max_metadata_size", limits.max_header_bytes),
               ("grpc.http2.min_ping_interval_without_data_ms", 1000),  # members ping every KEEPALIVE_MS
               ("grpc.http2.max_ping_strikes", 0)]
    server = grpc.aio.server(options=options, interceptors=(service.guard(),),
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


def _address(sock: socket.socket) -> str:
    try:
        peer = sock.getpeername()
    except OSError:
        return "?"
    return f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)


def _peer(transport: Any) -> str:
    peer = transport.get_extra_info("peername")
    return f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
