"""Deterministic simulation: seeded faults over 3- and 5-member clusters on a virtual clock.

Every seed must keep Raft's safety properties at every step (at most one
leader per term, committed entries identical everywhere and never lost,
acknowledged appends present, commit indexes never falling, every commit
durable on a quorum) and converge once the faults stop. A failure prints the
command that replays the seed. `python -m tests.sim --seeds 5000` runs more.
"""

from __future__ import annotations

import pytest

from tests.sim.scenarios import outage, run_failover, run_scenario
from tests.sim.vloop import run_virtual

THREE = range(1, 181)
FIVE = range(1001, 1041)


@pytest.mark.parametrize("seed", THREE)
def test_three_members(seed: int) -> None:
    outcome = run_scenario(seed)
    assert outcome.ok, f"{outcome.violations[:3]} converged={outcome.converged}; replay: {outcome.replay()}"
    assert outcome.committed > 0


@pytest.mark.parametrize("seed", FIVE)
def test_five_members(seed: int) -> None:
    outcome = run_scenario(seed, voters=5)
    assert outcome.ok, (f"{outcome.violations[:3]} converged={outcome.converged}; "
                        f"replay: python -m tests.sim --voters 5 --seed {seed} --verbose")


@pytest.mark.parametrize("seed", range(1, 11))
def test_a_killed_leader_is_replaced(seed: int) -> None:
    # the figure itself is measured by `python -m tests.sim --failover --seeds 200`
    assert run_failover(seed) > 0


OUTAGE_SEEDS = range(1, 31)


@pytest.mark.parametrize("disk", ["memory", "file"])
def test_a_power_outage_of_every_member_loses_nothing_acknowledged_in_sync_mode(disk: str) -> None:
    results = [run_virtual(outage(seed, "sync", disk=disk)) for seed in OUTAGE_SEEDS]
    assert sum(acked for acked, _ in results) > 500
    assert [lost for _, lost in results] == [0] * len(results)


@pytest.mark.parametrize("disk", ["memory", "file"])
def test_in_async_mode_a_power_outage_loses_what_was_acknowledged_since_the_last_flush(disk: str) -> None:
    """The price of flush_mode "async", as the README states it: the outage harness sees it."""
    results = [run_virtual(outage(seed, "async", disk=disk)) for seed in OUTAGE_SEEDS]
    acked, lost = sum(a for a, _ in results), sum(n for _, n in results)
    assert 0 < lost < acked * 0.05
