"""The bounded fault runs of `make test`: fixed seeds, every kind of fault at least once over the two runs,
each shown to have taken effect, with writers of a topic by key beside the others; and short runs with a
bug planted that must catch it. `make chaos` runs every kind, for longer, and `make mutants` every
planted bug."""

from __future__ import annotations

import pytest

from tests.faults.nemesis import KINDS
from tests.faults.run import print_summary, run

# five members for the faults of the network's shape (a minority of two, a ring), three for the rest: those wait
# for their evidence (a scrub, a full disk, a member replaced), and five members would double their CPU
SHAPES = ["halves", "ring", "one_way", "isolate_leader", "kill_random", "pause_leader"]
REST = [kind for kind in KINDS if kind not in SHAPES]


@pytest.mark.faults
@pytest.mark.timeout(600)
@pytest.mark.parametrize(("seed", "nodes", "kinds"), [(1, 3, REST), (2, 5, SHAPES)])
def test_nothing_acknowledged_is_lost_under_faults(seed: int, nodes: int, kinds: list[str]) -> None:
    lines: list[str] = []
    summary = run(seed, 20, nodes, kinds=kinds, log=lines.append)
    print("\n".join(lines))
    print_summary(summary)
    for member, tail in summary.get("node_logs", {}).items():
        print(f"--- {member} ---\n{tail}")
    assert summary["acked"] > 100, "the workload made too little progress to judge"
    assert summary["messages_acked"] > 50, "the topic writers made too little progress to judge"
    assert all(summary["consume_queue_units"].values()), "a member's consume queues held nothing to judge"
    assert sum(v["ok"] for v in summary["read_availability"].values()) > 100, "too few reads answered to judge"
    assert summary["effective"] == summary["faults"], "a fault did nothing (its reason is among the violations)"
    assert summary["consumer_lives"] >= 3 and summary["consumer_commits"] > 10, "the consumer did too little to judge"
    assert not summary["violations"], f"replay: {summary['replay']}"


@pytest.mark.faults
@pytest.mark.timeout(300)
def test_a_bug_planted_in_every_node_is_caught() -> None:
    """The suite proves itself on real processes (`make mutants` runs every planted bug): a leader that
    acknowledges an append before a quorum holds it is caught in a short run, and every node process
    the run started, the restarted leader's too, said the bug was planted in it."""
    summary = run(1, 10, 3, kinds=["kill_leader"], mutant="acks-before-quorum")
    print_summary(summary)
    assert summary["planted"] >= 4, summary["violations"][:1]  # three members, and the killed leader again
    assert summary["lost"] + summary["stale_reads"] > 0, summary["violations"][:3]


@pytest.mark.faults
@pytest.mark.timeout(300)
def test_a_leader_that_gives_queue_offsets_from_its_committed_table_is_caught() -> None:
    """The topic writers' checks catch, on their own, a leader that takes a queue's next offset from its
    committed messages instead of its log's tail: a batch appended while another is uncommitted takes
    that one's offsets again, and the queues' offsets in the members' files are not contiguous."""
    summary = run(1, 10, 3, kinds=["kill_leader"], mutant="offsets-from-committed")
    print_summary(summary)
    assert summary["planted"] >= 4, summary["violations"][:1]
    assert summary["queue_gaps"] > 0, summary["violations"][:3]
