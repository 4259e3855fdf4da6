"""Run one node: the public API on uvicorn (HTTP/1.1, or HTTPS) and the peer routes on hypercorn
(HTTP/2 cleartext with prior knowledge, or over mutual TLS), both in the node's one event loop (uvloop).

Both ports are bound before anything else starts, so a port in use fails at
once with one clear line. SIGTERM and SIGINT stop the node cleanly: servers
first, then consensus, then the files.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import resource
import signal
import socket
import ssl
from collections.abc import Iterator
from typing import Any

import h2.events
import h2.settings
import uvicorn
import uvloop
from hypercorn.asyncio import serve as hypercorn_serve
from hypercorn.config import Config as HypercornConfig
from hypercorn.protocol.h2 import H2Protocol

from app.client_protocol import guarded_protocol
from app.logs import configure_logging
from app.node import Node
from app.settings import NodeSettings, SettingsError
from storage import StorageError

log = logging.getLogger("raftlog.server")

PEER_KEEP_ALIVE_S = 75  # an idle peer connection is kept this long
CLIENT_KEEP_ALIVE_S = 75  # and a client's (load balancers keep theirs 60 s)
CLIENT_DRAIN_S = 5  # at stop, requests in flight get this long to finish
PEER_STREAMS_MAX = 256  # concurrent streams per peer connection: push_window_max and control calls
CLIENT_BACKLOG = 2048
PEER_WINDOW_BYTES = 64 << 20  # HTTP/2 flow-control window a peer may fill (pushes, forwarded appends)
DEFAULT_H2_WINDOW = 65_535
OPEN_FILES_RESERVE = 512  # beyond client connections: peer connections, data and index files, SQLite, logs


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
    """uvicorn without its own signal handling: the node owns SIGTERM/SIGINT."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


def widen_h2_windows() -> None:
    """Advertise HTTP/2 flow-control windows far above what a peer keeps in flight.

    hypercorn offers HTTP/2's default 64 KiB windows, and httpcore can deadlock
    when concurrent uploads on one connection wait for window: the stalled
    stream holds the connection's read lock until its timeout (httpx2 issue
    #1133). With windows larger than push_inflight_bytes_max no upload waits.
    """
    if getattr(H2Protocol.initiate, "widened", False):
        return
    initiate = H2Protocol.initiate

    async def initiate_wide(self: H2Protocol, headers: Any = None, settings: Any = None) -> None:
        self.connection.local_settings = h2.settings.Settings(client=False, initial_values={
            **dict(self.connection.local_settings), h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: PEER_WINDOW_BYTES})
        await initiate(self, headers, settings)
        self.connection.increment_flow_control_window(PEER_WINDOW_BYTES - DEFAULT_H2_WINDOW)
        await self._flush()

    initiate_wide.widened = True  # type: ignore[attr-defined]
    H2Protocol.initiate = initiate_wide  # type: ignore[method-assign]


def drop_data_of_closed_streams() -> None:
    """Let hypercorn drop request data that arrives for a stream it has already closed.

    hypercorn 0.17/0.18 look such a stream up unguarded (they guard the stream's end, not its data):
    the KeyError ends the whole peer connection, and Python 3.11's asyncio logs it as an error with a
    traceback. Data held up by a slow or partitioned network and let through once the stream was closed
    does this (found by the fault suite). The data is acknowledged, so the connection's window stays open.
    """
    if getattr(H2Protocol._handle_events, "guarded", False):
        return
    handle_events = H2Protocol._handle_events

    async def handle_known_streams(self: H2Protocol, events: list[h2.events.Event]) -> None:
        for event in events:  # one at a time: a stream opened by an event is known to the ones after it
            if isinstance(event, h2.events.DataReceived) and event.stream_id not in self.streams:
                self.connection.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
                await self._flush()
            else:
                await handle_events(self, [event])

    handle_known_streams.guarded = True  # type: ignore[attr-defined]
    H2Protocol._handle_events = handle_known_streams  # type: ignore[method-assign]


def peer_server_config(sock: socket.socket, settings: NodeSettings) -> HypercornConfig:
    """hypercorn against the pitfalls of long-lived HTTP/2 peer connections (DESIGN.md, Network);
    with mutual TLS when the settings give the peer certificates.

    hypercorn takes the socket over (and closes it when it stops).
    """
    widen_h2_windows()
    drop_data_of_closed_streams()
    config = HypercornConfig()
    config.bind = [f"fd://{sock.detach()}"]
    if settings.peer_tls_cert is not None:
        config.certfile, config.keyfile = str(settings.peer_tls_cert), str(settings.peer_tls_key)
        config.ca_certs = str(settings.peer_tls_ca)
        config.verify_mode = ssl.CERT_REQUIRED
        config.alpn_protocols = ["h2"]
    config.keep_alive_max_requests = 2**62  # default 1000: a peer connection would close every second
    config.keep_alive_timeout = PEER_KEEP_ALIVE_S
    config.read_timeout = PEER_KEEP_ALIVE_S  # a connection silent this long is closed, even mid-request
    config.h2_max_concurrent_streams = PEER_STREAMS_MAX
    config.h2_max_inbound_frame_size = 1 << 20
    config.accesslog = None
    config.loglevel = settings.log_level.upper()
    config.graceful_timeout = 1
    return config


def raise_open_files(connections: int) -> None:
    """Lift the soft limit on open files to the hard one: client connections, peer connections and
    the log's files share it. A limit too low for max_connections stops the start."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
    needed = connections + OPEN_FILES_RESERVE
    if soft != resource.RLIM_INFINITY and soft < needed:
        raise SettingsError(f"max_connections {connections} needs {needed} open files; the limit is {soft} "
                            f"(ulimit -n): lower max_connections or raise the limit")


async def serve(settings: NodeSettings) -> None:
    raise_open_files(settings.max_connections)
    client_sock = bind(settings.client_host, settings.client_port, "client")
    try:
        peer_sock = bind(*settings.peer_address, "peer")
    except SettingsError:
        client_sock.close()
        raise
    try:
        node = await Node.open(settings)
    except (OSError, StorageError) as exc:
        client_sock.close()
        peer_sock.close()
        raise SettingsError(f"cannot open the data dir {settings.data_dir}: {exc}") from None
    stop, peer_stop = asyncio.Event(), asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    limits = settings.api_limits()
    client = _Uvicorn(uvicorn.Config(
        node.public_asgi, log_level=settings.log_level, access_log=False, lifespan="off",
        timeout_keep_alive=CLIENT_KEEP_ALIVE_S, timeout_graceful_shutdown=CLIENT_DRAIN_S, server_header=False,
        http=guarded_protocol(limits.request_read_timeout_ms / 1000, limits.max_header_bytes, limits.max_connections),
        **settings.client_tls()))
    node.start()
    client_task = asyncio.create_task(client.serve(sockets=[client_sock]), name="client-server")
    peer_task = asyncio.create_task(hypercorn_serve(
        node.peer_asgi, peer_server_config(peer_sock, settings), shutdown_trigger=peer_stop.wait,
        mode="asgi"), name="peer-server")
    log.info("%s: client API %s, peer port %s:%d", settings.id, settings.client_url, *settings.peer_address)
    for warning in settings.cleartext_warnings():
        log.warning("%s", warning)
    try:
        stopping = asyncio.create_task(stop.wait())
        done, _ = await asyncio.wait([client_task, peer_task, stopping], return_when=asyncio.FIRST_COMPLETED)
        stopping.cancel()
        for task in done - {stopping}:
            task.result()  # a server that died raises here
    finally:
        # Drain client requests while consensus and the peer port still run (a forwarded append
        # waits for its quorum), then stop the peer port, then consensus and the files.
        client.should_exit = True
        await asyncio.gather(client_task, return_exceptions=True)
        peer_stop.set()
        loop.set_exception_handler(_quiet_cancelled_connection)
        await asyncio.gather(peer_task, return_exceptions=True)
        await node.stop()
        client_sock.close()
        log.info("%s stopped", settings.id)


def _quiet_cancelled_connection(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    """At shutdown hypercorn cancels the peer connections still open after its graceful timeout, pushes
    in flight included, and what that cancellation raises in a connection (a CancelledError, or h2's
    errors on a stream it already dropped) escapes to Python 3.11's asyncio.start_server, which logs it
    as an error with a traceback: a clean stop, not a fault, so it is logged at debug level. Anything
    else goes to the default handler."""
    if isinstance(context.get("exception"), asyncio.CancelledError) or "client_connected_cb" in context.get(
            "message", ""):
        log.debug("a peer connection closed at shutdown: %r", context.get("exception"))
        return
    loop.default_exception_handler(context)


def run(settings: NodeSettings) -> None:
    configure_logging(settings.log_level, settings.log_format, settings.id)
    uvloop.run(serve(settings))
