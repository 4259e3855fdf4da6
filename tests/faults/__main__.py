"""python -m tests.faults [--seconds 60] [--seed N] [--nodes 3] [--json] [--verbose] [--mutant NAME]"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

from tests.faults.mutants import ALL
from tests.faults.nemesis import KINDS
from tests.faults.run import print_summary, run


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.faults", description="the fault-injection suite")
    parser.add_argument("--seconds", type=float, default=60.0, help="how long faults go on")
    parser.add_argument("--seed", type=int, default=None, help="the schedule's seed (default: random)")
    parser.add_argument("--nodes", type=int, default=3)
    parser.add_argument("--json", action="store_true", help="print the summary as one JSON object")
    parser.add_argument("--verbose", action="store_true", help="say each fault as it happens")
    parser.add_argument("--only", help=f"these kinds of fault, comma-separated (of {', '.join(KINDS)})")
    parser.add_argument("--keep", type=Path, help="keep the nodes' data and logs in this directory")
    parser.add_argument("--mutant", choices=sorted(ALL), help="plant this bug in every node process started")
    args = parser.parse_args()
    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    log = (lambda line: print(line, file=sys.stderr, flush=True)) if args.verbose else (lambda _: None)
    kinds = args.only.split(",") if args.only else None
    summary = run(seed, args.seconds, args.nodes, root=args.keep, kinds=kinds, mutant=args.mutant, log=log)
    if args.json:
        print(json.dumps(summary))
    else:
        print_summary(summary)
    return 1 if summary["violations"] else 0


if __name__ == "__main__":
    sys.exit(main())
