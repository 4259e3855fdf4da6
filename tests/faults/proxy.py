"""A TCP proxy per directed peer link, so the suite can cut, slow or half-break links without root.

Node A reaches node B's peer port only through the link A->B. Bytes that a
link must not carry are held, not dropped: a partition looks to both ends
like a network that has gone silent (their own timeouts fire), and when it
heals the held bytes flow on, as TCP would retransmit them. Each link has two
directions: `up` (what A sends, its requests) and `down` (B's answers).

A link can also be refused: its open connections are reset and new ones are
reset as they connect, as a host that is up but rejects the port does. Or
its open connections alone can be reset, as the death of a process does to
its connections: bytes held on them are dropped. Each direction counts what
it held or delayed, and each link the connections it refused, so a fault can
show that it took effect.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

CHUNK = 1 << 16


class Direction:
    """One direction of a link: open or held, with an optional delay per chunk."""

    def __init__(self) -> None:
        self.open = asyncio.Event()
        self.open.set()
        self.delay_s = 0.0
        self.held = 0  # chunks (and connections) that waited for this direction to open
        self.delayed = 0  # chunks sent late


class Link:
    def __init__(self, src: str, dst: str, target_port: int) -> None:
        self.src, self.dst = src, dst
        self.target_port = target_port
        self.port = 0
        self.up = Direction()
        self.down = Direction()
        self.refused = False
        self.refusals = 0  # connections reset at connect time, or while open, by `refused`
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._writers: set[asyncio.StreamWriter] = set()

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _serve(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            if self.refused:
                self.refusals += 1
                client_w.transport.abort()  # a reset, as from a port nobody listens on
                return
            if not self.up.open.is_set():
                self.up.held += 1
            await self.up.open.wait()  # a held link does not even let a connection through
            try:
                server_r, server_w = await asyncio.open_connection("127.0.0.1", self.target_port)
            except OSError:  # the target node is down: so is this connection
                return
            self._writers |= {client_w, server_w}
            try:
                await asyncio.gather(self._pump(client_r, server_w, self.up), self._pump(server_r, client_w, self.down))
            finally:
                self._writers -= {client_w, server_w}
                server_w.close()
        finally:
            client_w.close()
            self._tasks.discard(task)

    def refuse(self) -> None:
        """Reset every open connection of this link, and each new one until healed."""
        self.refused = True
        self.refusals += self.reset()

    def reset(self) -> int:
        """Reset every open connection of this link; returns how many sockets (two a connection) it reset."""
        writers = list(self._writers)
        for writer in writers:
            writer.transport.abort()
        return len(writers)

    @staticmethod
    async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, direction: Direction) -> None:
        try:
            while data := await reader.read(CHUNK):
                if not direction.open.is_set():
                    direction.held += 1
                await direction.open.wait()
                if writer.transport.is_closing():  # reset while it held these bytes: they are dropped
                    return
                if direction.delay_s:
                    direction.delayed += 1
                    await asyncio.sleep(direction.delay_s)
                writer.write(data)
                await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            with contextlib.suppress(OSError, RuntimeError):
                writer.write_eof()


class Network:
    """Every directed link between `ports`' members, served by one event loop in a thread of its own."""

    def __init__(self, peer_ports: dict[str, int]) -> None:
        self.members = list(peer_ports)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="fault-proxy", daemon=True)
        self._thread.start()
        self.links = {(a, b): Link(a, b, peer_ports[b]) for a in peer_ports for b in peer_ports if a != b}
        for link in self.links.values():
            self._call(link.start)

    def port(self, src: str, dst: str) -> int:
        return self.links[src, dst].port

    def close(self) -> None:
        for link in self.links.values():
            self._call(link.close)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)
        self._loop.close()

    # -- faults (each replaces the last: heal() first, then this) ------------------------------------

    def heal(self) -> None:
        def heal() -> None:
            for link in self.links.values():
                link.refused = False
                for d in (link.up, link.down):
                    d.open.set()
                    d.delay_s = 0.0
        self._run(heal)

    def effect(self) -> int:
        """What the links have done to traffic so far: chunks and connections held, delayed or refused."""
        return sum(link.up.held + link.down.held + link.up.delayed + link.down.delayed + link.refusals
                   for link in self.links.values())

    def partition(self, *groups: set[str]) -> None:
        """Members in different groups cannot reach each other, in either direction."""
        where = {m: i for i, g in enumerate(groups) for m in g}
        self._hold([(a, b) for a, b in self.links if where.get(a, -1) != where.get(b, -2)])

    def refuse(self, *groups: set[str]) -> None:
        """As `partition`, but connections between the groups are reset, not held."""
        where = {m: i for i, g in enumerate(groups) for m in g}

        def refuse() -> None:
            for (a, b), link in self.links.items():
                if where.get(a, -1) != where.get(b, -2):
                    link.refuse()
        self._run(refuse)

    def cut(self, pairs: list[tuple[str, str]]) -> None:
        """Cut these pairs of members apart, both ways (for rings and other shapes)."""
        self._hold([lk for a, b in pairs for lk in ((a, b), (b, a))])

    def lose(self, src: str, dst: str) -> None:
        """Everything src sends to dst is lost, whoever opened the connection; dst -> src still works."""
        self.hold([((src, dst), "up"), ((dst, src), "down")])

    def slow(self, pairs: list[tuple[str, str]], delay_s: float) -> None:
        def slow() -> None:
            for a, b in pairs:
                for link in (self.links[a, b], self.links[b, a]):
                    link.up.delay_s = link.down.delay_s = delay_s
        self._run(slow)

    def hold(self, directions: list[tuple[tuple[str, str], str]]) -> None:
        """Hold these directions, each a link's (src, dst) and "up" or "down", until healed."""
        assert all(name in ("up", "down") for _, name in directions)

        def hold() -> None:
            for key, name in directions:
                getattr(self.links[key], name).open.clear()
        self._run(hold)

    def reset(self, links: list[tuple[str, str]]) -> None:
        """Reset the open connections of these links, dropping what they held; new ones connect as before."""
        def reset() -> None:
            for key in links:
                self.links[key].reset()
        self._run(reset)

    def _hold(self, links: list[tuple[str, str]]) -> None:
        """Hold both directions of these links."""
        self.hold([(key, name) for key in links for name in ("up", "down")])

    def _run(self, fn: Callable[[], None]) -> None:
        done: Future[None] = Future()

        def call() -> None:
            try:
                fn()
                done.set_result(None)
            except BaseException as exc:  # pragma: no cover - reported to the caller
                done.set_exception(exc)
        self._loop.call_soon_threadsafe(call)
        done.result(5)

    def _call(self, coro_fn: Callable[[], Any]) -> None:
        asyncio.run_coroutine_threadsafe(coro_fn(), self._loop).result(10)
