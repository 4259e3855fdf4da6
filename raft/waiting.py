"""Waiting on events with a deadline: how every task here sleeps (no polling)."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any


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
