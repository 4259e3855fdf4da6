"""A gate in front of each member's peer port, so an end-to-end test can hold what reaches a member.

Member A reaches member B's peer port only through B's gate (its own port it
binds itself). A gate relays the connections others open to its member, in two
directions: `requests` (what the others send) and `answers` (what the member
sends back). A held direction keeps its bytes, as a silent network would, and
lets them through when opened; `sever` resets every open connection and drops
what was held, as the death of the member's process does to its connections.
What a member opens itself goes through the other members' gates, so holding
one gate cuts a member off one way only: its leader cannot reach it, while it
can still reach its leader.

The relays run on one event loop in a thread of their own.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import threading
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path
from typing import Any, TypeVar

from app.launcher import LocalCluster, Member

CHUNK = 1 << 16
T = TypeVar("T")


class Gate:
    """One member's inbound peer connections: two directions, each open or held."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.port = 0
        self.requests = asyncio.Event()
        self.answers = asyncio.Event()
        self.requests.set()
        self.answers.set()
        self.held_answer_bytes = 0  # bytes of answers that waited for `answers` to open
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._tasks: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        self.sever()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    def sever(self) -> None:
        """Reset every relayed connection; held bytes are dropped (their sender is gone)."""
        for writer in list(self._writers):
            writer.transport.abort()

    async def _serve(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            try:
                server_r, server_w = await asyncio.open_connection("127.0.0.1", self.target_port)
            except OSError:  # the member is down: so is this connection
                client_w.transport.abort()
                return
            self._writers |= {client_w, server_w}
            try:
                await asyncio.gather(self._pump(client_r, server_w, self.requests, False),
                                     self._pump(server_r, client_w, self.answers, True))
            finally:
                self._writers -= {client_w, server_w}
                server_w.transport.abort()
        finally:
            client_w.transport.abort()
            self._tasks.discard(task)

    async def _pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, open_: asyncio.Event,
                    answers: bool) -> None:
        try:
            while data := await reader.read(CHUNK):
                if answers and not open_.is_set():
                    self.held_answer_bytes += len(data)
                await open_.wait()
                if writer.transport.is_closing():
                    return
                writer.write(data)
                await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            writer.transport.abort()


class GatedCluster(LocalCluster):
    """A LocalCluster whose members reach each other through the gates."""

    def __init__(self, data_root: Path, nodes: int = 3, **options: Any) -> None:
        super().__init__(data_root, nodes, **options)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="gates", daemon=True)
        self._thread.start()
        self.gates = {m.id: Gate(m.peer_port) for m in self.members.values()}
        self.paused: set[str] = set()
        for gate in self.gates.values():
            self._call(gate.start)

    def peers_for(self, member: Member) -> str:
        return ";".join(f"{m.id}-127.0.0.1:{m.peer_port if m is member else self.gates[m.id].port}"
                        for m in self.members.values())

    def stop(self) -> None:
        self.open_all()
        self.resume_all()
        try:
            super().stop()
        finally:
            for gate in self.gates.values():
                self._call(gate.close)
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(5)
            self._loop.close()

    # -- what a test does to members and gates ----------------------------------------------

    def pause(self, member_id: str) -> None:
        """SIGSTOP: the member is there (its ports accept connections) but does nothing."""
        process = self.members[member_id].process
        assert process is not None and process.poll() is None, f"{member_id} is not running"
        os.kill(process.pid, signal.SIGSTOP)
        self.paused.add(member_id)

    def resume_all(self) -> None:
        for member_id in sorted(self.paused):
            process = self.members[member_id].process
            if process is not None and process.poll() is None:
                os.kill(process.pid, signal.SIGCONT)
        self.paused.clear()

    def restore(self) -> str:
        """Undo whatever a test did: gates open, members resumed and running; returns the leader."""
        self.open_all()
        self.resume_all()
        for member_id, member in self.members.items():
            if not member.running:
                self.stop_member(member_id)  # reaps it, closes its log
                self.start_member(member_id)
        return self.wait_leader()

    def hold(self, member_id: str, *, requests: bool = True, answers: bool = True) -> None:
        gate = self.gates[member_id]
        self._run(lambda: [event.clear() for event, held in ((gate.requests, requests), (gate.answers, answers))
                           if held])

    def open_all(self) -> None:
        self._run(lambda: [e.set() for g in self.gates.values() for e in (g.requests, g.answers)])

    def sever(self, member_id: str) -> None:
        self._run(self.gates[member_id].sever)

    def held_answer_bytes(self, member_id: str) -> int:
        return self._run(lambda: self.gates[member_id].held_answer_bytes)

    def _call(self, coroutine: Callable[[], Any]) -> None:
        asyncio.run_coroutine_threadsafe(coroutine(), self._loop).result(10)

    def _run(self, fn: Callable[[], T]) -> T:
        done: Future[T] = Future()

        def call() -> None:
            try:
                done.set_result(fn())
            except BaseException as exc:  # pragma: no cover - handed to the caller
                done.set_exception(exc)

        self._loop.call_soon_threadsafe(call)
        return done.result(10)


@contextlib.contextmanager
def gated(root: Path, nodes: int = 3, **options: Any) -> Any:
    """A started GatedCluster with a leader; every process, gate and port closed afterwards."""
    cluster = GatedCluster(root, nodes, **options)
    try:
        cluster.start()
        cluster.wait_leader()
        yield cluster
    finally:
        cluster.stop()
