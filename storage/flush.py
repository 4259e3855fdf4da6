"""Group commit: every caller that arrives while a sync runs shares the next one.

A hundred appends waiting for durability cost one round of fdatasync, not a
hundred: the first caller starts a round; callers arriving before it starts
join it; callers arriving while it runs join the following round (their bytes
may have been written after the running round took its snapshot).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable


class GroupFlusher:
    def __init__(self, sync: Callable[[], Awaitable[None]]) -> None:
        self._sync = sync
        self._next: asyncio.Future[None] | None = None
        self._runner: asyncio.Task[None] | None = None
        self.rounds = 0  # syncs run so far, for metrics and tests

    async def flush(self) -> None:
        if self._next is None:
            self._next = asyncio.get_running_loop().create_future()
            if self._runner is None or self._runner.done():
                self._runner = asyncio.create_task(self._run(), name="raftlog-flush")
        await asyncio.shield(self._next)

    async def _run(self) -> None:
        while self._next is not None:
            round_, self._next = self._next, None
            self.rounds += 1
            try:
                await self._sync()
            except BaseException as exc:  # every waiter of the round sees the failure
                _fail(round_, exc if isinstance(exc, Exception) else RuntimeError("the flush was cancelled"))
                if not isinstance(exc, Exception):
                    self._cancel_next()
                    raise
            else:
                round_.set_result(None)

    def _cancel_next(self) -> None:
        if self._next is not None:
            _fail(self._next, RuntimeError("the flush was cancelled"))
            self._next = None

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner


def _fail(round_: asyncio.Future[None], exc: Exception) -> None:
    """Fail a round. Its waiters see the error; a round whose waiters were all cancelled
    (a store released mid-flush) must not log it again when collected."""
    round_.set_exception(exc)
    round_.exception()
