"""Group commit: every caller that asks in one turn of the event loop shares one sync.

A hundred appends waiting for durability cost one round of fdatasync, not a
hundred: the first caller schedules a round at the end of the loop's current
turn, and callers arriving before it runs join it. The round runs inline, on
the event loop, as etcd's raft loop syncs inline: an fdatasync of a few pages
is short, and handing it to a thread and back cost more CPU and latency per
round than the sync itself (bench/ab.py, one connection). A round covers what
was written when it runs.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable


class GroupFlusher:
    def __init__(self, sync: Callable[[], None]) -> None:
        self._sync = sync
        self._next: asyncio.Future[None] | None = None
        self.rounds = 0  # syncs run so far, for metrics and tests

    async def flush(self) -> None:
        await asyncio.shield(self.next_round())  # a waiter cancelled does not cancel the others' round

    def next_round(self) -> asyncio.Future[None]:
        """The round that will cover what is written so far, scheduled if none is; shared by its
        waiters, so it is theirs to await or to add a callback to, never to cancel."""
        round_ = self._next
        if round_ is None:
            loop = asyncio.get_running_loop()
            round_ = self._next = loop.create_future()
            loop.call_soon(self._run)
        return round_

    def _run(self) -> None:
        round_, self._next = self._next, None
        if round_ is None:
            return
        self.rounds += 1
        try:
            self._sync()
        except Exception as exc:  # every waiter of the round sees the failure
            round_.set_exception(exc)
            round_.exception()  # a round whose waiters were all cancelled must not log it again when collected
        else:
            round_.set_result(None)

    def close(self) -> None:
        """Run a round still scheduled now: the store's files are about to close."""
        self._run()
