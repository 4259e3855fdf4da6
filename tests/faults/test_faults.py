"""The bounded fault run of `make test`: fixed seeds, every kind of fault at least once per run, each
shown to have taken effect; `make chaos` runs longer."""

from __future__ import annotations

import pytest

from tests.faults.run import print_summary, run


@pytest.mark.faults
@pytest.mark.timeout(600)
@pytest.mark.parametrize(("seed", "nodes"), [(1, 3), (2, 5)])
def test_nothing_acknowledged_is_lost_under_faults(seed: int, nodes: int, capsys: pytest.CaptureFixture[str]) -> None:
    lines: list[str] = []
    summary = run(seed, 30, nodes, log=lines.append)
    print("\n".join(lines))
    print_summary(summary)
    for member, tail in summary.get("node_logs", {}).items():
        print(f"--- {member} ---\n{tail}")
    assert summary["acked"] > 100, "the workload made too little progress to judge"
    assert sum(v["ok"] for v in summary["read_availability"].values()) > 100, "too few reads answered to judge"
    assert summary["effective"] == summary["faults"], "a fault did nothing (its reason is among the violations)"
    assert not summary["violations"], f"replay: {summary['replay']}"
