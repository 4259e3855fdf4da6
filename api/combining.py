"""Commits combined within an interval (named consumers' positions, consumer groups' offsets).

Plain commits of one name that reach a member within `interval_s` are merged into one ask and
written as one entry, and every caller gets the answer of that entry: a consumer committing after
every message costs the log one entry per interval, not one per message. One name's entries from
one member are written one after the other, in the order their commits arrived, so a later
position never lands before an earlier one. An ask that does not merge (the combined entry would
pass its bounds) ends the interval early and starts the next.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

A = TypeVar("A")  # an ask
R = TypeVar("R")  # the answer of its entry


@dataclass
class _Combined(Generic[A, R]):
    """The commits of one name waiting for their interval to end."""

    ask: A
    answer: asyncio.Future[R] = field(default_factory=lambda: asyncio.get_running_loop().create_future())


class CommitCombiner(Generic[A, R]):
    def __init__(self, interval_s: float, write: Callable[[A], Awaitable[R]],
                 merge: Callable[[A, A], A | None]) -> None:
        """`write`: one entry for an ask, once committed; `merge(combined, new)`: the ask that writes
        both (None: they do not fit in one entry)."""
        self.interval_s = interval_s
        self.write = write
        self.merge = merge
        self._combining: dict[str, _Combined[A, R]] = {}
        self._writing: dict[str, asyncio.Task[None]] = {}  # each name's latest write from this member

    async def commit(self, name: str, ask: A) -> R:
        """`ask`, written with the other plain commits of `name` within the interval (at once when the
        interval is 0)."""
        if self.interval_s <= 0:
            return await self.write(ask)
        combined = self._combining.get(name)
        if combined is not None:
            merged = self.merge(combined.ask, ask)
            if merged is None:
                self._interval_ended(name, combined)
                combined = None
            else:
                combined.ask = merged
        if combined is None:
            combined = self._combining[name] = _Combined(ask)
            combined.answer.add_done_callback(_retrieved)
            asyncio.get_running_loop().call_later(self.interval_s, self._interval_ended, name, combined)
        return await asyncio.shield(combined.answer)

    def _interval_ended(self, name: str, combined: _Combined[A, R]) -> None:
        if self._combining.get(name) is not combined:  # ended early: written already
            return
        del self._combining[name]
        previous = self._writing.get(name)
        task = asyncio.create_task(self._write_combined(combined, previous))
        self._writing[name] = task
        task.add_done_callback(lambda _: self._writing.pop(name, None) if self._writing.get(name) is task else None)

    async def _write_combined(self, combined: _Combined[A, R], previous: asyncio.Task[None] | None) -> None:
        if previous is not None:
            await asyncio.wait((previous,))  # one name's entries in the order their commits came
        try:
            combined.answer.set_result(await self.write(combined.ask))
        except Exception as exc:
            combined.answer.set_exception(exc)


def _retrieved(answer: asyncio.Future[R]) -> None:
    """Every caller may have left: the combined answer's error is then nobody's to read."""
    if not answer.cancelled():
        answer.exception()
