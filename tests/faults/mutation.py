"""The fault suite proves itself: each planted bug (tests.faults.mutants), a 60-second run per seed until
one flags it; the table of what it found (make mutants).

    python -m tests.faults.mutation [--seconds 60] [--only NAME,...] [--json]

A mutant is flagged when its run has a violation and every node process said the bug was planted.
The table starts with the control: the same seeds with no bug planted, which must pass (else a flag
on that seed means nothing). The bugs only a power loss or a schedule like the Raft paper's Figure 8
shows are left to the simulation (tests/sim/test_mutations.py), with the reason.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
from typing import Any

from tests.faults.mutants import ALL
from tests.faults.run import run

SEEDS = (1, 2)  # tried in turn, until one flags the mutant
SIMULATION_ONLY = {
    "acks-before-writing": "a follower's unwritten entries are lost only with its page cache (a power loss)",
    "commits-earlier-terms": "needs Figure 8's schedule of leaders (Raft paper, section 5.4.2)",
}


CONTROL = "none"


def try_mutant(name: str, seconds: float, seeds: tuple[int, ...] = SEEDS) -> dict[str, Any]:
    """Run the mutant on each seed until one flags it (the control: on every seed); the table's row."""
    tried = []
    for seed in seeds:
        summary = run(seed, seconds, mutant=None if name == CONTROL else name)
        planted = not any(v.startswith(f"mutant {name} not planted") for v in summary["violations"])
        tried.append({"seed": seed, "planted": planted, "acked": summary["acked"],
                      "violations": len(summary["violations"]), "first": summary["violations"][:3]})
        if summary["violations"] and planted:
            return {"mutant": name, "flagged": True, "seed": seed, "tried": tried}
    return {"mutant": name, "flagged": False, "seed": None, "tried": tried}


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.faults.mutation", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=60.0, help="each run's faults")
    parser.add_argument("--only", help="these mutants, comma-separated")
    parser.add_argument("--json", action="store_true", help="one JSON object per row")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # a run stopped from outside stops its nodes
    names = args.only.split(",") if args.only else [CONTROL, *ALL]
    rows = []
    for name in names:
        if name in SIMULATION_ONLY:
            row = {"mutant": name, "flagged": None, "seed": None, "tried": [], "simulation": SIMULATION_ONLY[name]}
        else:
            row = try_mutant(name, args.seconds)
        rows.append(row)
        print(json.dumps(row) if args.json else _line(row), flush=True)
    wrong = [row["mutant"] for row in rows if row["flagged"] is (row["mutant"] == CONTROL)]
    if wrong:
        print(f"not as expected: {', '.join(wrong)}", file=sys.stderr)
    return 1 if wrong else 0


def _line(row: dict[str, Any]) -> str:
    if row["flagged"] is None:
        return f"{row['mutant']:34} simulation only: {row['simulation']}"
    seeds = ", ".join(f"seed {t['seed']} ({t['violations']} violations)" for t in row["tried"])
    first = row["tried"][-1]["first"]
    verdict = f"flagged on seed {row['seed']}" if row["flagged"] else "not flagged"
    return f"{row['mutant']:34} {verdict}; {seeds}{': ' + first[0][:200] if first else ''}"


if __name__ == "__main__":
    sys.exit(main())
