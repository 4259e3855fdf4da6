"""Run one node: the public API on uvicorn (HTTP/1.1, or HTTPS) and on gRPC (its own port), and
the peer port (HTTP/2, cleartext or mutual TLS), all in the node's one event loop (uvloop).

The client and peer ports are bound before anything else starts, and the gRPC
port is tried then (gRPC binds its own, once the node runs): a port in use
fails at once with one clear line. SIGTERM and SIGINT stop the node cleanly: servers
first, then consensus, then the files.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import math
import resource
import signal
import socket
from collections.abc import Iterator

import uvicorn
import uvloop

from raftlog.api.connection_slots import AddressSlots, HoldRules, accepted, address_key
from raftlog.api.peer_port import GRACE_S, PeerPort
from raftlog.app.client_protocol import guarded_protocol
from raftlog.app.logs import configure_logging
from raftlog.app.node import Node
from raftlog.app.settings import NodeSettings, SettingsError
from raftlog.storage import StorageError, codec

log = logging.getLogger("raftlog.server")

CLIENT_DRAIN_S = 5  # at stop, requests in flight get this long to finish
GC_THRESHOLDS = (10_000, 50, 100)  # gc.set_threshold: Python's are (700, 10, 10)
CLIENT_BACKLOG = 2048
OPEN_FILES_RESERVE = 512  # beyond client connections: peer connections, data and index files, SQLite, logs
REFUSAL_LOG_INTERVAL_S = 1.0  # refused connections are logged at most this often


def bind(host: str, port: int, what: str) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except (OSError, OverflowError) as exc:
        sock.close()
        reason = getattr(exc, "strerror", None) or str(exc)
        raise SettingsError(f"cannot listen on {host}:{port} for the {what} port: {reason}") from None
    sock.listen(CLIENT_BACKLOG)
    sock.set_inheritable(True)
    return sock


class _Uvicorn(uvicorn.Server):
    """uvicorn without its own signal handling: the node owns SIGTERM/SIGINT.

    With TLS, its connections are accepted here rather than by a loop.create_server, whose protocol
    sees a connection only once its handshake is done: each counts against max_connections from
    its accept, so connections that never finish their handshake cannot pile up beyond it, nor
    beyond `addresses`' bound per address. (Once the handshake is done, the protocol answers one
    over max_connections with 503, as without TLS.)
    """

    def __init__(self, config: uvicorn.Config, max_connections: int, addresses: AddressSlots | None = None) -> None:
        super().__init__(config)
        self.max_connections = max_connections
        self.addresses = addresses  # the protocol's count of its connections per address
        self._accepting: list[asyncio.Future[None]] = []
        self._handshaking: set[socket.socket] = set()
        self._handshaking_from: dict[str, int] = {}  # per address
        self._securing: set[asyncio.Future[None]] = set()  # handshakes under way
        self._refused_logged = float("-inf")

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        if self.config.ssl is None or not sockets:
            await super().startup(sockets)
            return
        await super().startup([])  # no listener of uvicorn's: they are accepted below
        self._accepting = [asyncio.ensure_future(self._accept(sock)) for sock in sockets]

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        for accepting in self._accepting:
            accepting.cancel()
        await super().shutdown(sockets)

    async def _accept(self, listener: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        config, state = self.config, self.server_state
        listener.setblocking(False)

        def protocol() -> asyncio.Protocol:  # as uvicorn's startup makes them
            return config.http_protocol_class(config=config, server_state=state,  # type: ignore[call-arg]
                                              app_state=self.lifespan.state)

        async def secure(sock: socket.socket, address: str) -> None:
            try:
                await loop.connect_accepted_socket(protocol, sock, ssl=config.ssl)
            except (OSError, TimeoutError) as exc:  # a handshake that failed or did not end in time
                log.debug("client port: TLS handshake failed: %s", exc)
                sock.close()
            finally:
                self._handshaking.discard(sock)
                self._handshaking_from[address] -= 1  # counted now by the protocol, if it got through
                if not self._handshaking_from[address]:
                    del self._handshaking_from[address]

        async for sock in accepted(listener, "client"):
            address = _address_of(sock)
            pending = self._handshaking_from.get(address, 0)
            why, held = None, len(self._handshaking) + len(state.connections)
            if held >= self.max_connections:
                why = f"{held} open or in their TLS handshake (max_connections)"
            elif self.addresses is not None and self.addresses.full(address, pending):
                why = f"{address} holds all it may (connections_per_address_max)"
            if why is not None:
                now = loop.time()
                if now - self._refused_logged >= REFUSAL_LOG_INTERVAL_S:
                    self._refused_logged = now
                    log.warning("refusing connections: %s", why)
                sock.close()
                continue
            self._handshaking.add(sock)
            self._handshaking_from[address] = pending + 1
            task = asyncio.ensure_future(secure(sock, address))
            self._securing.add(task)
            task.add_done_callback(self._securing.discard)


def _address_of(sock: socket.socket) -> str:
    try:
        return address_key(str(sock.getpeername()[0]))
    except OSError:
        return "?"


def raise_open_files(connections: int) -> None:
    """Lift the soft limit on open files to the hard one: client, gRPC and peer connections and the
    log's files share it. A limit too low for the ports' connections together stops the start."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
    needed = connections + OPEN_FILES_RESERVE
    if soft != resource.RLIM_INFINITY and soft < needed:
        raise SettingsError(f"max_connections + grpc_connections_max + peer_connections_max ({connections}) need "
                            f"{needed} open files; the limit is {soft} (ulimit -n): lower them or raise the limit")


def _tune_gc() -> None:
    """What start-up made (modules, the app, the node) lives as long as the process: frozen out of
    every collection. Requests make short-lived garbage without cycles, that reference counting frees,
    so the young generation is collected less often (GC_THRESHOLDS), and a full collection, which
    walks the whole heap, far less often: each one is a pause of every request in flight."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)


def codec_warnings() -> list[str]:
    """One line at start when the compiled batch codec is not there (the package was installed
    without a C compiler or zlib's headers): the Python reference serves, slower."""
    if codec.compiled is not None:
        return []
    return ["the compiled batch codec (storage/_codec.c) is not built: batches are encoded and checked in "
            "Python, at about 4 times the CPU per entry (reinstall with a C compiler and zlib's headers)"]


async def serve(settings: NodeSettings) -> None:
    limits = settings.api_limits()
    raise_open_files(limits.max_connections + limits.grpc_connections_max + limits.peer_connections_max)
    client_sock = bind(settings.client_host, settings.client_port, "client")
    try:
        peer_sock = bind(*settings.peer_address, "peer")
    except SettingsError:
        client_sock.close()
        raise
    try:
        bind(*settings.grpc_listen, "gRPC").close()  # gRPC binds it itself, once the node runs: free now?
    except SettingsError:
        client_sock.close()
        peer_sock.close()
        raise
    try:
        node = await Node.open(settings)
    except (OSError, StorageError) as exc:
        client_sock.close()
        peer_sock.close()
        raise SettingsError(f"cannot open the data dir {settings.data_dir}: {exc}") from None
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    limits = settings.api_limits()
    rules = HoldRules.client(limits)  # its keep-alive is uvicorn's too (rounded up: the protocol's clock is first)
    client = _Uvicorn(uvicorn.Config(
        node.public_asgi, log_level=settings.log_level, access_log=False, lifespan="off",
        timeout_keep_alive=math.ceil(limits.idle_connection_ms / 1000), timeout_graceful_shutdown=CLIENT_DRAIN_S,
        server_header=False,
        http=guarded_protocol(limits.request_read_timeout_ms / 1000, limits.max_header_bytes, limits.max_connections,
                              limits.follow_stall_ms / 1000, node.below_asgi.take, rules),
        **settings.client_proxies(), **settings.client_tls()), limits.max_connections, rules.addresses)
    host, port = settings.peer_address
    peer = PeerPort(node.peer_service, peer_sock, settings.peer_message_bytes_max(), settings.peer_tls())
    node.start()
    try:
        await peer.start()
    except (OSError, RuntimeError) as exc:  # gRPC's own server, on its private socket
        client_sock.close()
        peer_sock.close()
        await node.stop()
        raise SettingsError(f"cannot serve the peer port {host}:{port}: {exc}") from None
    try:
        grpc_api = node.grpc_api()
        await grpc_api.start()
    except (OSError, RuntimeError) as exc:  # gRPC binds its own port
        client_sock.close()
        await peer.stop(0)
        await node.stop()
        grpc_host, grpc_port = settings.grpc_listen
        raise SettingsError(f"cannot listen on {grpc_host}:{grpc_port} for the gRPC port: {exc}") from None
    client_task = asyncio.create_task(client.serve(sockets=[client_sock]), name="client-server")
    peer_task = asyncio.create_task(peer.wait_for_termination(), name="peer-server")
    log.info("%s: client API %s, gRPC API %s, peer port %s:%d", settings.id, settings.client_url,
             settings.grpc_address, *settings.peer_address)
    _tune_gc()
    for warning in [*settings.cleartext_warnings(), *codec_warnings()]:
        log.warning("%s", warning)
    try:
        stopping = asyncio.create_task(stop.wait())
        done, _ = await asyncio.wait([client_task, peer_task, stopping], return_when=asyncio.FIRST_COMPLETED)
        stopping.cancel()
        for task in done - {stopping}:
            task.result()  # a server that died raises here
    finally:
        # Drain client requests while consensus and the peer port still run (a forwarded append
        # waits for its quorum), then stop the peer port, then consensus and the files. Streams that
        # follow the log end first: they would hold the drain until its deadline.
        node.service.close()
        client.should_exit = True
        await asyncio.gather(client_task, grpc_api.stop(CLIENT_DRAIN_S), return_exceptions=True)
        await peer.stop(GRACE_S)
        await asyncio.gather(peer_task, return_exceptions=True)
        await node.stop()
        client_sock.close()
        log.info("%s stopped", settings.id)


def run(settings: NodeSettings) -> None:
    configure_logging(settings.log_level, settings.log_format, settings.id)
    uvloop.run(serve(settings))
