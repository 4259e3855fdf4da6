"""Calls shared by the callers that arrive together: read index rounds (api.service), as etcd
batches its read index requests."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

from raftlog.raft.waiting import consume

T = TypeVar("T")


class SharedRounds(Generic[T]):
    """Calls of `round` shared by the callers that arrive while one is out. A caller joins the next
    round to start, never one already out, whose answer may predate the caller: so every answer is
    from a round that began after its caller asked (etcd batches read index requests so)."""

    def __init__(self, round_: Callable[[], Awaitable[T]]) -> None:
        self._round = round_
        self._next: asyncio.Future[T] | None = None  # the round the next callers join
        self._out: asyncio.Future[T] | None = None  # the round being run
        self._tasks: set[asyncio.Task[None]] = set()

    async def __call__(self) -> T:
        if self._next is None:
            self._next = asyncio.get_running_loop().create_future()
            self._next.add_done_callback(consume)  # its callers may all have left
            task = asyncio.ensure_future(self._run(self._next))
            self._tasks.add(task)  # held: the loop keeps only weak references to tasks
            task.add_done_callback(self._tasks.discard)
        return await asyncio.shield(self._next)

    async def _run(self, future: asyncio.Future[T]) -> None:
        while self._out is not None:  # one round at a time
            await asyncio.wait((self._out,))
        self._next, self._out = None, future
        try:
            future.set_result(await self._round())
        except Exception as exc:
            future.set_exception(exc)
        except asyncio.CancelledError:
            future.cancel()
            raise
        finally:
            self._out = None
