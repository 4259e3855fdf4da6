"""The simulation's checks, each shown to catch the bug it is there for: a bug planted in the
raft code (monkeypatched for one test), and the seed or scenario that finds it.

These are the planted bugs of issue 17 that the fault suite missed (or that left it without a
verdict), and the service layer's, which the simulation never ran before; `python -m tests.sim`
scans seeds for them with `--mutant NAME`.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from tests.raft.test_node import stable
from tests.sim.cluster import SimCluster, run_until
from tests.sim.figure8 import figure8
from tests.sim.mutants import MUTANTS
from tests.sim.scenarios import diverged_follower, run_scenario, stale_leader
from tests.sim.vloop import run_virtual


def plant(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    owner, attribute, bug = MUTANTS[name]
    monkeypatch.setattr(owner, attribute, bug(getattr(owner, attribute)))


@pytest.mark.parametrize(("name", "seed", "voters", "found"), [
    ("acks-before-quorum", 2, 3, "found nothing, but it was acknowledged"),
    ("acks-before-writing", 2, 3, "durable on only"),
    ("reads-local-commit-index", 1, 3, "found nothing, but it was acknowledged"),
    ("ends-ranges-at-local-commit-index", 5, 3, "found nothing, but it was acknowledged"),
    ("retries-forwarded-appends", 21, 3, "is in the log twice"),
    ("forgets-producers", 1, 3, "UNKNOWN_PRODUCER"),  # with owners, sessions are opened: forgotten, they refuse
    ("forgets-saved-consumers", 1, 3, "consumer positions differ"),
    ("offsets-from-committed", 2, 3, "messages from offset"),  # a new batch takes an uncommitted one's offsets
    ("dispatches-uncommitted", 3, 3, "holds the unit"),  # a truncated message's unit, then another's
    ("keeps-queues-past-the-log", 1, 3, "messages from offset"),  # damage cut the log: the offsets run on
])
def test_a_random_schedule_catches(monkeypatch: pytest.MonkeyPatch, name: str, seed: int, voters: int,
                                   found: str) -> None:
    plant(monkeypatch, name)
    outcome = run_scenario(seed, voters=voters)
    assert any(found in v for v in outcome.violations), f"{name} on seed {seed}: {outcome.violations[:3]}"


def test_a_member_that_forgets_its_vote_lets_two_followers_standing_at_once_both_lead(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Followers that lose their leader together each stand in the next term at a random moment. With the
    link between them slow both ways, each is asked after it stood and before it hears its own answers: each
    keeps its vote for itself, and neither wins that round; a member that forgets its vote grants the
    other's, and both lead. (A follower stands in a term of its own, so a random schedule seldom lines two
    candidates up like this.)"""
    async def stand_together() -> tuple[list[str], bool]:
        cluster = SimCluster(seed=5)
        try:
            leader = await stable(cluster)
            followers = {n.config.self_id for n in cluster.running if n is not leader}
            deliver = cluster.network.deliver

            async def slow_link(source: str, target: str, kind: str, request: Any,
                                timeout_s: float | None = None) -> Any:
                slow = {source, target} == followers
                if slow:  # each stands before the other's request arrives, is asked before its answers come back,
                    # and wins before the other's first heartbeat
                    await asyncio.sleep(0.1)
                answer = await deliver(source, target, kind, request, timeout_s)
                if slow:
                    await asyncio.sleep(0.1)
                return answer

            cluster.network.deliver = slow_link  # type: ignore[method-assign]
            await cluster.crash(leader.config.self_id)
            await run_until(cluster, lambda: bool(cluster.violations) or cluster.leader() is not None, 3.0)
            await run_until(cluster, lambda: bool(cluster.violations), 1.0)  # a second leader, if there is one
            return cluster.violations, cluster.leader() is not None
        finally:
            await cluster.stop()

    assert run_virtual(stand_together()) == ([], True)  # one leader, and one only
    plant(monkeypatch, "votes-twice")
    violations, _ = run_virtual(stand_together())
    assert any("two leaders in term" in v for v in violations), violations[:3]


def test_a_follower_that_skips_truncation_ends_the_run_with_a_verdict(monkeypatch: pytest.MonkeyPatch) -> None:
    """The fault suite's harness crashed on it after 306 s without a verdict; here it is a liveness violation."""
    assert run_virtual(diverged_follower(1)) == []
    plant(monkeypatch, "skips-truncation")
    violations = run_virtual(diverged_follower(1))
    assert any("liveness: no convergence" in v for v in violations)


def test_figure8_catches_commits_of_earlier_terms_by_counting(monkeypatch: pytest.MonkeyPatch) -> None:
    """Raft paper, section 5.4.2. The wrong commit is found by the checkers, or, when it reached the
    followers before the new leader overwrites it, by their refusal to truncate a committed entry."""
    assert run_virtual(figure8()) == ([], True)
    plant(monkeypatch, "commits-earlier-terms")
    violations, _ = run_virtual(figure8())
    assert any("committed a different entry" in v or "lost committed entry" in v
               or "asked to truncate committed entries" in v for v in violations), violations[:3]


def test_a_stale_leader_refuses_the_read_and_the_append() -> None:
    violations, answered = run_virtual(stale_leader(1))
    assert violations == [] and answered == 0


def test_a_read_index_without_its_heartbeat_round_reads_stale(monkeypatch: pytest.MonkeyPatch) -> None:
    plant(monkeypatch, "reads-without-confirming")
    violations, _ = run_virtual(stale_leader(1))
    assert any("found nothing, but it was acknowledged" in v for v in violations)
