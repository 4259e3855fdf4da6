"""An asyncio event loop on a virtual clock: time jumps to the next timer when nothing is ready.

Runs are deterministic for a given seed as long as the code under test does
all its work on the loop (the simulation gives stores an inline executor),
and a minute of cluster time takes as long as the work in it, not a minute.
"""

from __future__ import annotations

import asyncio
import selectors
from concurrent.futures import Executor, Future
from typing import Any


class _VirtualSelector:
    """Wraps the loop's selector: instead of blocking for `timeout`, advance the clock."""

    def __init__(self, selector: selectors.BaseSelector, loop: VirtualTimeLoop) -> None:
        self._selector = selector
        self._loop = loop

    def select(self, timeout: float | None = None) -> list[Any]:
        ready = self._selector.select(0)
        if ready or timeout == 0:
            return ready
        if timeout is None:
            raise RuntimeError("simulation deadlock: nothing is scheduled and nothing can happen")
        self._loop.advance(timeout)
        return []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._selector, name)


SPIN_LIMIT = 2_000_000  # loop iterations without the clock moving: a livelock


class VirtualTimeLoop(asyncio.SelectorEventLoop):
    def __init__(self) -> None:
        self._virtual_now = 0.0
        self._still = 0
        super().__init__(_VirtualSelector(selectors.DefaultSelector(), self))  # type: ignore[arg-type]

    def time(self) -> float:
        return self._virtual_now

    def advance(self, seconds: float) -> None:
        self._virtual_now += seconds
        self._still = 0

    def _run_once(self) -> None:
        self._still += 1
        if self._still > SPIN_LIMIT:
            raise RuntimeError(f"livelock: {SPIN_LIMIT} steps at t={self._virtual_now:.3f} "
                               "without the clock moving")
        super()._run_once()  # type: ignore[misc]


class InlineExecutor(Executor):
    """Runs submitted work at once on the calling thread: no real-time threads in a simulation."""

    def submit(self, fn: Any, /, *args: Any, **kwargs: Any) -> Future[Any]:
        future: Future[Any] = Future()
        try:
            future.set_result(fn(*args, **kwargs))
        except BaseException as exc:
            future.set_exception(exc)
        return future


def run_virtual(coro: Any) -> Any:
    """Run `coro` on a fresh virtual-time loop; leftover tasks are cancelled, as asyncio.run does."""
    loop = VirtualTimeLoop()
    try:
        return loop.run_until_complete(coro)
    finally:
        leftovers = asyncio.all_tasks(loop)
        for task in leftovers:
            task.cancel()
        loop.run_until_complete(_settle(leftovers))
        loop.close()


async def _settle(tasks: set[asyncio.Task[Any]]) -> None:
    await asyncio.gather(*tasks, return_exceptions=True)
