"""Read index rounds shared by the reads that arrive together (api.shared_rounds.SharedRounds): many reads
cost one round, and no read is answered by a round that began before it asked."""

from __future__ import annotations

import asyncio

import pytest

from raftlog.api.shared_rounds import SharedRounds


class Rounds:
    """A round that waits for the test to end it, and answers its own number."""

    def __init__(self) -> None:
        self.started = 0
        self.release: list[asyncio.Event] = []
        self.began = asyncio.Event()

    async def round(self) -> int:
        self.started += 1
        number = self.started
        release = asyncio.Event()
        self.release.append(release)
        self.began.set()
        await release.wait()
        if number == 99:
            raise RuntimeError("round failed")
        return number


async def test_reads_that_arrive_together_share_one_round_and_later_ones_the_next() -> None:
    rounds = Rounds()
    shared = SharedRounds(rounds.round)
    first = [asyncio.ensure_future(shared()) for _ in range(100)]
    await rounds.began.wait()
    rounds.began.clear()
    later = [asyncio.ensure_future(shared()) for _ in range(50)]  # round 1 is out: they wait for round 2
    await asyncio.sleep(0)
    assert rounds.started == 1
    rounds.release[0].set()
    assert await asyncio.gather(*first) == [1] * 100
    await rounds.began.wait()
    assert rounds.started == 2
    rounds.release[1].set()
    assert await asyncio.gather(*later) == [2] * 50


async def test_a_failed_round_fails_its_reads_and_the_next_round_runs() -> None:
    rounds = Rounds()
    rounds.started = 98  # the next round is number 99, which fails
    shared = SharedRounds(rounds.round)
    failing = [asyncio.ensure_future(shared()) for _ in range(3)]
    await rounds.began.wait()
    rounds.release[0].set()
    for read in failing:
        with pytest.raises(RuntimeError, match="round failed"):
            await read
    rounds.began.clear()
    again = asyncio.ensure_future(shared())
    await rounds.began.wait()
    rounds.release[1].set()
    assert await again == 100
