"""What delivery guarantees cost: appends with producer sessions against the same appends without.

    python bench/delivery_bench.py [--seconds 8] [--rounds 5] [--only batches] [--bytes-control] [--json]

One local 3-member cluster (flush_mode sync); each workload runs with and without a producer session,
in turn, for --rounds rounds: single appends of 100 bytes from 64 connections, and binary batches of
1000 bodies of 100 bytes from 16 connections, to the leader. wrk runs one thread per connection, each
thread a producer whose sequences follow each other (bench/wrk_produce.lua); the runs without a
session send the same requests, byte for byte but for the headers' names, which the members ignore:
wrk does the same work for both, and takes the same share of the two cores. Each figure is the median of its
rounds, and a change of CPU per entry is the figure that judges it (issue 29): the CPU time of all
three members (utime + stime, /proc/<pid>/stat) while the load runs, over the entries committed.
Targets (issue 31): at most +10% CPU per entry for single appends at 64 connections, at most +5% in
batches of 1000. --unsaturated adds single appends from 16 connections (no target): the leader's share of
the CPU shows where its core is the bottleneck. "paired" is the median of each round's ratio (a session
run over the plain run beside it), which the machine's drift over a run moves less than the ratio of the
two medians. `bench/compare.py` runs the same phase (2b) beside its etcd figures. --bytes-control adds,
in the batches' turns, plain batches whose bodies are a byte longer (101 bytes, as long as a session's
entries after a batch's first, which hold their distance back to it): what that byte alone costs, beside
what the session costs.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import statistics
import sys
import tempfile
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import httpx
from cluster_bench import BODY, wrk  # this folder's siblings: run as `python bench/delivery_bench.py`
from measure import committed_index, cpu_s, machine

from raftlog.api.bodies import encode_bodies
from raftlog.app.launcher import LocalCluster
from raftlog.storage.codec import DISTANCE_SIZE

WORKLOADS = {"single appends, 64 connections": (64, 1), "batches of 1000, 16 connections": (16, 1000)}
TARGETS = {"single appends, 64 connections": 0.10, "batches of 1000, 16 connections": 0.05}  # CPU overhead at most
UNSATURATED = {"single appends, 16 connections": (16, 1)}  # --unsaturated: where the leader has time to spare
# --bytes-control: as long as a session's entry in a batch (after its first, which holds the stamp)
CONTROL, CONTROL_BODY = "plain, +1 B", BODY + bytes(DISTANCE_SIZE)


def produce(leader: str, connections: int, entries: int, seconds: int, session: bool,
            body: bytes = BODY) -> dict[str, float]:
    """One wrk run: `connections` producers (or plain clients), `entries` bodies per request."""
    env = {"WRK_ENTRIES": str(entries), "WRK_PRODUCER_BASE": str(random.randrange(1 << 40))}  # new producers
    if not session:
        env["WRK_PLAIN"] = "1"
    url = f"{leader}/v1/entries"
    with tempfile.NamedTemporaryFile(prefix="raftlog-batch-") as batch:
        if entries > 1:
            batch.write(encode_bodies([body] * entries))
            batch.flush()
            env["WRK_BATCH_FILE"], url = batch.name, f"{url}/batch"
        return wrk(url, "wrk_produce.lua", seconds, env, connections=connections, threads=connections)


def metered(cluster: LocalCluster, leader: str, run: Callable[[], dict[str, float]]) -> dict[str, float]:
    """The run's entries/s and CPU µs per entry committed: all three members, and the leader's share."""
    pids = {m.client_url: m.process.pid for m in cluster.members.values() if m.process is not None}
    first, before, leader_before = committed_index(leader), cpu_s(list(pids.values())), cpu_s([pids[leader]])
    report = run()
    used, entries = cpu_s(list(pids.values())) - before, committed_index(leader) - first
    return {"eps": entries / report["duration_us"] * 1e6, "cpu_us": used * 1e6 / entries,
            "leader_cpu_us": (cpu_s([pids[leader]]) - leader_before) * 1e6 / entries,
            "p50_ms": report["p50_us"] / 1000, "p99_ms": report["p99_us"] / 1000}


def settled_leader(cluster: LocalCluster) -> str:
    """The leader's URL once 300 appends in a row went in: connections made, files warm, and the
    group past the elections of its first second (a leader can step down while its followers connect)."""
    with httpx.Client(timeout=30.0) as http:
        while True:
            leader = cluster.members[cluster.wait_leader()].client_url
            if all(http.post(f"{leader}/v1/entries", content=BODY).status_code == 201 for _ in range(300)):
                return leader


def idempotence(cluster: LocalCluster, seconds: int, rounds: int, log: Callable[[str], None],
                workloads: dict[str, tuple[int, int]] = WORKLOADS, bytes_control: bool = False) -> dict[str, Any]:
    """Each workload with and without sessions, taking turns; medians, and the CPU overhead."""
    leader = settled_leader(cluster)
    figures: dict[str, Any] = {}
    for name, (connections, entries) in workloads.items():
        kinds = ["plain", "session"] + ([CONTROL] if bytes_control and entries > 1 else [])
        runs: dict[str, list[dict[str, float]]] = {kind: [] for kind in kinds}
        for round_ in range(rounds):
            for kind in kinds[round_ % len(kinds):] + kinds[:round_ % len(kinds)]:  # each kind first in turn
                body = CONTROL_BODY if kind == CONTROL else BODY
                for _attempt in range(3):  # a run the group changed leaders in is not a measure: again
                    try:
                        report = metered(cluster, leader, partial(produce, leader, connections, entries, seconds,
                                                                  kind == "session", body))
                        break
                    except RuntimeError as exc:
                        log(f"  {name}, {kind}: refused appends, run again: {str(exc).splitlines()[-1]}")
                        leader = settled_leader(cluster)
                else:
                    raise RuntimeError(f"{name}: three runs in a row met refused appends")
                runs[kind].append(report)
                log(f"  {name}, {kind}: {report['eps']:,.0f} entries/s, {report['cpu_us']:,.2f} µs CPU per entry")
        medians = {kind: {key: statistics.median(r[key] for r in reports) for key in reports[0]}
                   for kind, reports in runs.items()}
        overhead, paired = (_overhead(runs, "session", key) for key in ("median", "paired"))
        target = TARGETS.get(name)
        figures[name] = {**medians, "cpu_overhead": overhead, "paired_overhead": paired, "target": target,
                         "met": None if target is None else overhead <= target}
        if CONTROL in runs:
            figures[name]["bytes_overhead"], figures[name]["bytes_paired_overhead"] = (
                _overhead(runs, CONTROL, key) for key in ("median", "paired"))
    return figures


def _overhead(runs: dict[str, list[dict[str, float]]], kind: str, how: str) -> float:
    """CPU per entry of `kind` over plain's: the ratio of the medians, or the median of each round's ratio."""
    if how == "median":
        return statistics.median(r["cpu_us"] for r in runs[kind]) / statistics.median(
            r["cpu_us"] for r in runs["plain"]) - 1
    return statistics.median(k["cpu_us"] / p["cpu_us"] - 1 for k, p in zip(runs[kind], runs["plain"], strict=True))


def print_table(figures: dict[str, Any], header: str) -> None:
    print(header)
    print(f"{'workload':<46}{'entries/s':>12}{'µs CPU/entry':>14}{'leader':>9}{'p99 ms':>9}{'CPU +':>9}"
          f"{'paired':>9}{'target':>9}  met")
    overheads = {"session": ("cpu_overhead", "paired_overhead"), CONTROL: ("bytes_overhead", "bytes_paired_overhead")}
    for name, figure in figures.items():
        for kind in ("plain", *(k for k in overheads if k in figure)):
            m = figure[kind]
            met = "" if figure["target"] is None or kind != "session" else \
                f"{figure['target']:>+9.0%}  {'yes' if figure['met'] else 'NO'}"
            extra = "".join(f"{figure[key]:>+9.1%}" for key in overheads.get(kind, ())) + met
            print(f"{name + ', ' + kind:<46}{m['eps']:>12,.0f}{m['cpu_us']:>14,.2f}{m['leader_cpu_us']:>9,.2f}"
                  f"{m['p99_ms']:>9,.2f}{extra}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--seconds", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--unsaturated", action="store_true",
                        help="also single appends from 16 connections, where the leader has time to spare")
    parser.add_argument("--bytes-control", action="store_true",
                        help="also plain batches of bodies a byte longer: what a session entry's byte costs")
    parser.add_argument("--only", help="only the workloads whose names hold this text (e.g. batches)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()
    if shutil.which("wrk") is None:
        raise SystemExit("wrk is not installed: `make compare` installs it")

    def log(line: str) -> None:
        print(line, flush=True, file=sys.stderr if args.json else sys.stdout)

    root = Path(tempfile.mkdtemp(prefix="raftlog-delivery-"))
    try:
        with LocalCluster(root, 3) as cluster:
            workloads = {**WORKLOADS, **UNSATURATED} if args.unsaturated else WORKLOADS
            figures = idempotence(cluster, args.seconds, args.rounds, log,
                                  {k: v for k, v in workloads.items() if args.only is None or args.only in k},
                                  args.bytes_control)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    result = {"machine": machine(), "seconds": args.seconds, "rounds": args.rounds, "idempotence": figures}
    if args.json:
        print(json.dumps(result))
    else:
        print_table(figures, f"\nproducer sessions on {machine()}: medians of {args.rounds} rounds of {args.seconds} s")


if __name__ == "__main__":
    main()
