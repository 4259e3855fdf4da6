"""Waiting on events with a deadline: how every task here sleeps (no polling)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any

Clock = Callable[[], float]  # seconds on the event loop's clock, which the simulation drives


def loop_time() -> float:
    """Now, on the running event loop's clock: every deadline and age in raft/ and api/ reads it."""
    return asyncio.get_running_loop().time()


async def wait_event(event: asyncio.Event, timeout: float | None) -> bool:
    """Wait until `event` is set or `timeout` seconds pass (None: forever); True if set."""
    if timeout is not None and timeout <= 0:
        await asyncio.sleep(0)  # still a yield: a caller looping on a deadline cannot starve the loop
        return event.is_set()
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(timeout):
            await event.wait()
    return event.is_set()


def consume(future: asyncio.Future[Any]) -> None:
    """A done callback for a future whose outcome nobody may read: its error counts as seen, so it
    is not logged as "never retrieved" when collected."""
    if not future.cancelled():
        future.exception()


def log_if_died(task: asyncio.Task[Any], log: logging.Logger, member_id: str) -> None:
    """A done callback: a task of the member that died is said at once, not only found when the
    member's stop gathers it."""
    if not task.cancelled() and task.exception() is not None:
        log.error("%s: task %s died", member_id, task.get_coro(), exc_info=task.exception())


class Wakeup:
    """A flag that one task sleeps on, with a deadline: a dispatcher, the handler, the elector.

    asyncio.Event under asyncio.timeout costs a Timeout object, its rescheduling and a context
    exit on every sleep, and a dispatcher sleeps a few times per push: here a sleep is one future
    and one timer handle."""

    __slots__ = ("_set", "_waiter")

    def __init__(self) -> None:
        self._set = False
        self._waiter: asyncio.Future[None] | None = None

    def set(self) -> None:
        self._set = True
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def clear(self) -> None:
        self._set = False

    async def wait(self, timeout: float | None = None) -> bool:
        """Until set or `timeout` seconds pass (None: forever); True if set. A timeout of 0 or less
        still yields: a caller looping on a deadline cannot starve the loop."""
        if self._set:
            return True
        loop = asyncio.get_running_loop()
        if timeout is not None and timeout <= 0:
            await asyncio.sleep(0)
            return self._set
        assert self._waiter is None, "a second task sleeps on a Wakeup: the first would never wake"
        waiter = self._waiter = loop.create_future()
        timer = None if timeout is None else loop.call_later(timeout, _expire, waiter)
        try:
            await waiter
        finally:
            self._waiter = None
            if timer is not None:
                timer.cancel()
        return self._set


def _expire(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)


class Signal:
    """A broadcast that never loses a wake-up, for many waiters.

    A waiter takes `current()` before it checks its condition, then waits on
    that event; `fire()` sets it and starts a new one, so nothing is cleared
    under another waiter's feet.
    """

    def __init__(self) -> None:
        self._event = asyncio.Event()

    def current(self) -> asyncio.Event:
        return self._event

    def fire(self) -> None:
        self._event.set()
        self._event = asyncio.Event()
