"""Peer transports, measured by the CPU each push message costs, client plus server.

    python bench/peer_bench.py [--entries 1] [--seconds 5] [--inflight 8] [--transports NAME,...] [--json]

For each transport two processes run on this machine, both on uvloop as a node does: a server that
decodes each push (api.peer_codec.decode_push) and answers a PushResponse (api.peer_codec's
encode_message, the size of a follower's answer), and a client that keeps --inflight pushes in flight
on one connection. A push is one APPEND of --entries entries, each a 48-byte stored header and a
100-byte body, encoded by api.peer_codec.encode_push; the client encodes every push and decodes every
answer, as a leader does. After a --warmup, the client counts the answers of --seconds and reads the
CPU time (user + system, all threads) both processes used over them: its own from getrusage, the
server's from /proc/<pid>/stat. Figures: messages answered per second, and CPU µs per message, client
plus server (and each apart).

Transports:
- httpx-hypercorn: an httpx AsyncClient (HTTP/2 with prior knowledge, one connection) POSTing each
  push as a request, its body in 64 KiB chunks, to hypercorn serving a tiny ASGI app, with the peer
  port's settings (wide flow-control windows, unlimited requests per connection): the peer
  transport before issue 18, kept here on its own (hypercorn is in the `bench` extra).
- grpc-unary: a grpc.aio unary call per push, bytes as they are (no serializer).
- grpc-stream: one grpc.aio bidirectional stream, one message per push, answers in order.
- raftlog-stream: the product's transport: api.peer_client.PeerClient's replication stream
  (open_stream, send) to api.peer_port's PeerPort, whose node only answers pushes. Skipped, with a
  line saying so, when this tree has no such stream. Since the 2026-11-25 evening the client drives
  h2's state machine on an asyncio protocol (api.peer_stream), where before it was a grpc.aio
  stream, as grpc-stream is; since the 2026-11-25 night the server does too (api.stream_server),
  where before gRPC's server served the stream.

Every process it starts is stopped at the end (and dies with it: PR_SET_PDEATHSIG).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ctypes
import json
import os
import resource
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import uvloop

from raftlog.api.peer_codec import decode_message, decode_push, encode_message, encode_push
from raftlog.raft.messages import Code, PushRequest, PushResponse, PushType
from raftlog.storage.codec import HEADER_SIZE

BODY_BYTES = 100
HOST = "127.0.0.1"
MESSAGE_BYTES_MAX = 64 << 20  # gRPC's message limit on both ends, far above the largest push measured
H2_WINDOW_BYTES = 64 << 20  # the peer port's HTTP/2 flow-control window (app/server.py before issue 18)
H2_DEFAULT_WINDOW_BYTES = 65_535
CHUNK_BYTES = 64 << 10  # the httpx peer client streamed push bodies in chunks of this size
GRPC_SERVICE = "raftlog.bench.Peer"
SERVER_READY_S = 30.0
DRIVE_TIMEOUT_S = 60.0  # beyond warm-up and measured seconds: a transport that stalls fails the run
STOP_TIMEOUT_S = 5.0
CLOCK_TICKS_S = os.sysconf("SC_CLK_TCK")
PR_SET_PDEATHSIG = 1


# -- the messages ----------------------------------------------------------------------------


def push_request(entries: int) -> PushRequest:
    """An APPEND of `entries` stored entries (header and 100-byte body each), as a leader sends it."""
    data = (bytes(HEADER_SIZE) + b"x" * BODY_BYTES) * entries
    return PushRequest("bench", "n1", 3, PushType.APPEND, 1000, first_index=1001, count=entries, data=data,
                       pre_log_index=1000, pre_log_term=3)


def push_bytes(request: PushRequest) -> bytes:
    """The push on the wire as this tree's codec encodes it: body parts (a binary header, then the
    entries) before issue 18, a protobuf message after, its bytes since."""
    encoded: Any = encode_push(request)
    if isinstance(encoded, list):
        return b"".join(encoded)
    return encoded if isinstance(encoded, bytes) else encoded.SerializeToString()


def push_answer(request: PushRequest) -> PushResponse:
    """A follower's answer to an APPEND it took whole."""
    end = request.first_index + request.count - 1
    return PushResponse(Code.SUCCESS, request.term, request.first_index, end_index=end, end_term=request.term,
                        ack_index=end)


def answer_bytes(body: bytes) -> bytes:
    return encode_message(push_answer(decode_push(body)))


def check_answer(data: bytes) -> None:
    assert decode_message(PushResponse, data).code == Code.SUCCESS


# -- the measured window ---------------------------------------------------------------------


def cpu_s(pid: int) -> float:
    """CPU seconds (user + system, all threads) a process has used, from /proc/<pid>/stat."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS_S  # utime and stime: fields 14 and 15 in proc(5)


def own_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


class Window:
    """The measured seconds, opened by the first answer after the warm-up and closed by the first
    answer after `seconds` more: the answers in it, and the CPU both processes used across it."""

    def __init__(self, server_pid: int, warmup_s: float, seconds: float) -> None:
        self.server_pid = server_pid
        self.seconds = seconds
        self.opens_at = time.monotonic() + warmup_s
        self.opened_at: float | None = None
        self.closed_at: float | None = None
        self.messages = 0
        self._cpu: tuple[float, float] = (0.0, 0.0)  # client, server at the opening; then their use

    @property
    def done(self) -> bool:
        return self.closed_at is not None

    def answered(self) -> None:
        now = time.monotonic()
        if self.opened_at is None:
            if now >= self.opens_at:
                self.opened_at = now
                self._cpu = (own_cpu_s(), cpu_s(self.server_pid))
        elif self.closed_at is None:
            self.messages += 1
            if now >= self.opened_at + self.seconds:
                self.closed_at = now
                self._cpu = (own_cpu_s() - self._cpu[0], cpu_s(self.server_pid) - self._cpu[1])

    def report(self) -> dict[str, float]:
        assert self.opened_at is not None and self.closed_at is not None
        return {"messages": self.messages, "seconds": self.closed_at - self.opened_at,
                "client_cpu_s": self._cpu[0], "server_cpu_s": self._cpu[1]}


# -- the transports: each a pair (serve until `stop`, drive until the window closes) ----------

Serve = Callable[[int, asyncio.Event], Awaitable[None]]
Drive = Callable[[int, PushRequest, int, Window], Awaitable[None]]


@dataclass(frozen=True)
class Transport:
    serve: Serve
    drive: Drive
    missing: Callable[[], str | None] = lambda: None  # why this tree cannot run it, if it cannot


async def hypercorn_serve(port: int, stop: asyncio.Event) -> None:
    from hypercorn.asyncio import serve
    from hypercorn.config import Config

    widen_h2_windows()
    config = Config()
    config.bind = [f"{HOST}:{port}"]
    config.keep_alive_max_requests = 2**62  # the peer port's: a connection never closes for its request count
    config.h2_max_concurrent_streams = 256
    config.h2_max_inbound_frame_size = 1 << 20
    config.accesslog = None
    config.loglevel = "WARNING"
    config.graceful_timeout = 1
    await serve(push_app, config, shutdown_trigger=stop.wait, mode="asgi")  # type: ignore[arg-type]


def widen_h2_windows() -> None:
    """hypercorn's HTTP/2 windows widened as the peer port did (64 KiB windows can stall httpcore's
    concurrent uploads)."""
    import h2.settings
    from hypercorn.protocol.h2 import H2Protocol

    initiate = H2Protocol.initiate

    async def initiate_wide(self: H2Protocol, headers: Any = None, settings: Any = None) -> None:
        self.connection.local_settings = h2.settings.Settings(client=False, initial_values={
            **dict(self.connection.local_settings), h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: H2_WINDOW_BYTES})
        await initiate(self, headers, settings)
        self.connection.increment_flow_control_window(H2_WINDOW_BYTES - H2_DEFAULT_WINDOW_BYTES)
        await self._flush()

    H2Protocol.initiate = initiate_wide  # type: ignore[method-assign]


async def push_app(scope: dict[str, Any], receive: Callable[[], Awaitable[dict[str, Any]]],
                   send: Callable[[dict[str, Any]], Awaitable[None]]) -> None:
    """POST /raft/push: the push's answer; lifespan events are acknowledged."""
    if scope["type"] == "lifespan":
        while (message := await receive())["type"] != "lifespan.shutdown":
            await send({"type": "lifespan.startup.complete"})
        await send({"type": "lifespan.shutdown.complete"})
        return
    parts = []
    while True:
        message = await receive()
        parts.append(message.get("body", b""))
        if not message.get("more_body"):
            break
    answer = answer_bytes(b"".join(parts))
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"application/octet-stream"), (b"content-length", b"%d" % len(answer))]})
    await send({"type": "http.response.body", "body": answer})


async def httpx_drive(port: int, request: PushRequest, inflight: int, window: Window) -> None:
    import httpx

    async with httpx.AsyncClient(base_url=f"http://{HOST}:{port}", http1=False, http2=True, timeout=30.0,
                                 limits=httpx.Limits(max_connections=1, max_keepalive_connections=1),
                                 trust_env=False) as http:
        async def pushes() -> None:
            while not window.done:
                response = await http.post("/raft/push", content=chunks(push_bytes(request)))
                response.raise_for_status()
                check_answer(response.content)
                window.answered()

        await asyncio.gather(*(pushes() for _ in range(inflight)))


async def chunks(body: bytes) -> AsyncIterator[bytes]:
    view = memoryview(body)
    for offset in range(0, len(view), CHUNK_BYTES):
        yield bytes(view[offset:offset + CHUNK_BYTES])


def grpc_options() -> list[tuple[str, int]]:
    return [("grpc.max_send_message_length", MESSAGE_BYTES_MAX), ("grpc.max_receive_message_length", MESSAGE_BYTES_MAX)]


async def grpc_serve(port: int, stop: asyncio.Event) -> None:
    import grpc
    import grpc.aio

    async def push(body: bytes, _context: grpc.aio.ServicerContext) -> bytes:
        return answer_bytes(body)

    async def pushes(bodies: AsyncIterator[bytes], _context: grpc.aio.ServicerContext) -> AsyncIterator[bytes]:
        async for body in bodies:
            yield answer_bytes(body)

    server = grpc.aio.server(options=grpc_options())
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(GRPC_SERVICE, {
        "Push": grpc.unary_unary_rpc_method_handler(push),  # no (de)serializers: bytes as they are
        "Pushes": grpc.stream_stream_rpc_method_handler(pushes)}),))
    if server.add_insecure_port(f"{HOST}:{port}") == 0:
        raise OSError(f"cannot listen on {HOST}:{port}")
    await server.start()
    await stop.wait()
    await server.stop(1.0)


async def grpc_unary_drive(port: int, request: PushRequest, inflight: int, window: Window) -> None:
    import grpc.aio

    async with grpc.aio.insecure_channel(f"{HOST}:{port}", options=grpc_options()) as channel:
        call = channel.unary_unary(f"/{GRPC_SERVICE}/Push", request_serializer=None, response_deserializer=None)

        async def pushes() -> None:
            while not window.done:
                check_answer(await call(push_bytes(request)))
                window.answered()

        await asyncio.gather(*(pushes() for _ in range(inflight)))


async def grpc_stream_drive(port: int, request: PushRequest, inflight: int, window: Window) -> None:
    import grpc.aio

    async with grpc.aio.insecure_channel(f"{HOST}:{port}", options=grpc_options()) as channel:
        call = channel.stream_stream(f"/{GRPC_SERVICE}/Pushes", request_serializer=None,
                                     response_deserializer=None)()
        slots = asyncio.Semaphore(inflight)

        async def write() -> None:
            while True:
                await slots.acquire()
                if window.done:
                    break
                await call.write(push_bytes(request))
            await call.done_writing()

        async def read() -> None:
            while (answer := await call.read()) is not grpc.aio.EOF:
                check_answer(answer)
                window.answered()
                slots.release()

        await asyncio.gather(write(), read())


def raftlog_stream_missing() -> str | None:
    try:
        from raftlog.api.peer_client import PeerClient
        from raftlog.api.peer_port import PeerPort  # noqa: F401
    except ImportError as exc:
        return f"this tree has no peer port with its own replication stream server ({exc})"
    if not hasattr(PeerClient, "open_stream"):
        return "this tree's PeerClient has no replication stream (open_stream)"
    return None


class PushOnlyNode:
    """What api.peer_server's PeerService asks of a node, answering pushes as the other servers do."""

    def take_push(self, request: PushRequest) -> asyncio.Future[PushResponse]:
        answer: asyncio.Future[PushResponse] = asyncio.get_running_loop().create_future()
        answer.set_result(push_answer(request))
        return answer

    async def handle_vote(self, request: Any) -> Any:
        raise NotImplementedError("the bench only pushes")

    handle_heartbeat = handle_transfer = handle_vote


async def raftlog_serve(port: int, stop: asyncio.Event) -> None:
    from raftlog.api.peer_port import PeerPort
    from raftlog.api.peer_server import PeerService

    service = PeerService(PushOnlyNode(), None, None)  # type: ignore[arg-type]  # no public API calls here
    server = PeerPort(service, f"{HOST}:{port}", MESSAGE_BYTES_MAX)
    await server.start()
    await stop.wait()
    await server.stop(1.0)


async def raftlog_drive(port: int, request: PushRequest, inflight: int, window: Window) -> None:
    from raftlog.api.peer_client import PeerClient
    from raftlog.raft.config import Peer

    client = PeerClient("n1", [Peer("n1", f"{HOST}:1"), Peer("n2", f"{HOST}:{port}")], rpc_timeout_ms=30_000,
                        push_timeout_ms=30_000, wait_timeout_ms=30_000, max_message_bytes=MESSAGE_BYTES_MAX,
                        max_batch_entries=1000)
    stream = client.open_stream("n2")

    async def pushes() -> None:
        while not window.done:
            response = await stream.send(request)
            assert response.code == Code.SUCCESS
            window.answered()

    try:
        await asyncio.gather(*(pushes() for _ in range(inflight)))
    finally:
        stream.close()
        await client.close()


TRANSPORTS = {
    "httpx-hypercorn": Transport(hypercorn_serve, httpx_drive),
    "grpc-unary": Transport(grpc_serve, grpc_unary_drive),
    "grpc-stream": Transport(grpc_serve, grpc_stream_drive),
    "raftlog-stream": Transport(raftlog_serve, raftlog_drive, raftlog_stream_missing),
}


# -- the child processes ---------------------------------------------------------------------


async def serving(name: str, port: int) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await TRANSPORTS[name].serve(port, stop)


async def driving(name: str, port: int, args: argparse.Namespace) -> dict[str, float]:
    window = Window(args.server_pid, args.warmup, args.seconds)
    drive = TRANSPORTS[name].drive(port, push_request(args.entries), args.inflight, window)
    await asyncio.wait_for(drive, args.warmup + args.seconds + DRIVE_TIMEOUT_S)
    return window.report()


def _die_with_parent() -> None:
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def child(role: str, name: str, port: int, args: argparse.Namespace) -> list[str]:
    command = [sys.executable, __file__, f"--{role}", name, "--port", str(port), "--entries", str(args.entries),
               "--inflight", str(args.inflight), "--seconds", str(args.seconds), "--warmup", str(args.warmup)]
    return command + (["--server-pid", str(args.server_pid)] if role == "drive" else [])


def wait_listening(port: int, server: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + SERVER_READY_S
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise RuntimeError(f"the server exited with {server.returncode}")
        with contextlib.suppress(OSError), socket.create_connection((HOST, port), timeout=1.0):
            return
        time.sleep(0.05)
    raise TimeoutError(f"nothing listens on {HOST}:{port} after {SERVER_READY_S} s")


def stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def measure(name: str, args: argparse.Namespace) -> dict[str, float]:
    """One transport: its server and its client in two fresh processes; the client's report."""
    from raftlog.app.launcher import free_ports

    port = free_ports(1)[0]
    server = subprocess.Popen(child("serve", name, port, args), stdout=subprocess.DEVNULL,
                              preexec_fn=_die_with_parent)
    try:
        wait_listening(port, server)
        args.server_pid = server.pid
        timeout = args.warmup + args.seconds + DRIVE_TIMEOUT_S + SERVER_READY_S
        out = subprocess.run(child("drive", name, port, args), capture_output=True, text=True, timeout=timeout,
                             preexec_fn=_die_with_parent)
        if out.returncode != 0:
            raise RuntimeError(f"{name}: the client failed:\n{out.stderr}")
        report: dict[str, float] = json.loads(out.stdout.splitlines()[-1])
    finally:
        stop(server)
    messages = report["messages"]
    return {"messages_per_s": messages / report["seconds"],
            "cpu_us_per_message": (report["client_cpu_s"] + report["server_cpu_s"]) * 1e6 / messages,
            "client_cpu_us_per_message": report["client_cpu_s"] * 1e6 / messages,
            "server_cpu_us_per_message": report["server_cpu_s"] * 1e6 / messages, **report}


# -- the report ------------------------------------------------------------------------------


def print_table(results: dict[str, dict[str, float]], args: argparse.Namespace) -> None:
    print(f"\npeer transports, pushes of {args.entries} entr{'y' if args.entries == 1 else 'ies'} of "
          f"{BODY_BYTES}-byte bodies, {args.inflight} in flight on one connection, {args.seconds} s each; "
          f"client and server in two processes on uvloop")
    print(f"{'transport':<18}{'messages/s':>12}{'CPU µs/message':>16}{'client':>10}{'server':>10}")
    for name, r in results.items():
        print(f"{name:<18}{r['messages_per_s']:>12,.0f}{r['cpu_us_per_message']:>16,.1f}"
              f"{r['client_cpu_us_per_message']:>10,.1f}{r['server_cpu_us_per_message']:>10,.1f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--entries", type=int, default=1, help="entries per push (100-byte bodies)")
    parser.add_argument("--seconds", type=float, default=5.0, help="measured seconds per transport")
    parser.add_argument("--warmup", type=float, default=1.0, help="seconds before the measured ones")
    parser.add_argument("--inflight", type=int, default=8, help="pushes in flight")
    parser.add_argument("--transports", default=",".join(TRANSPORTS), help="comma-separated, of: "
                        + ", ".join(TRANSPORTS))
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--serve", help=argparse.SUPPRESS)  # the children's roles
    parser.add_argument("--drive", help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--server-pid", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        uvloop.run(serving(args.serve, args.port))
        return
    if args.drive:
        print(json.dumps(uvloop.run(driving(args.drive, args.port, args))))
        return
    names = args.transports.split(",")
    unknown = set(names) - set(TRANSPORTS)
    if unknown:
        raise SystemExit(f"unknown transports: {', '.join(sorted(unknown))}")
    results: dict[str, dict[str, float]] = {}
    for name in names:
        missing = TRANSPORTS[name].missing()
        if missing is not None:
            print(f"{name}: not measured, skipped: {missing}", file=sys.stderr)
            continue
        results[name] = measure(name, args)
    if args.json:
        print(json.dumps({"entries": args.entries, "body_bytes": BODY_BYTES, "inflight": args.inflight,
                          "seconds": args.seconds, "transports": results}))
    else:
        print_table(results, args)


if __name__ == "__main__":
    main()
