"""The bounded fault runs of `make test`: fixed seeds, every kind of fault at least once over the two runs,
each shown to have taken effect; `make chaos` runs every kind, for longer."""

from __future__ import annotations

import pytest

from tests.faults.nemesis import KINDS
from tests.faults.run import print_summary, run


@pytest.mark.faults
@pytest.mark.timeout(600)
@pytest.mark.parametrize(("seed", "nodes", "kinds"), [(1, 3, KINDS[0::2]), (2, 5, KINDS[1::2])])
def test_nothing_acknowledged_is_lost_under_faults(seed: int, nodes: int, kinds: list[str]) -> None:
    lines: list[str] = []
    summary = run(seed, 30, nodes, kinds=kinds, log=lines.append)
    print("\n".join(lines))
    print_summary(summary)
    for member, tail in summary.get("node_logs", {}).items():
        print(f"--- {member} ---\n{tail}")
    assert summary["acked"] > 100, "the workload made too little progress to judge"
    assert sum(v["ok"] for v in summary["read_availability"].values()) > 100, "too few reads answered to judge"
    assert summary["effective"] == summary["faults"], "a fault did nothing (its reason is among the violations)"
    assert not summary["violations"], f"replay: {summary['replay']}"
