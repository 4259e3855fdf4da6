"""One run of the fault suite: a cluster, clients, a seeded schedule of faults, then the checker.

    python -m tests.faults --seconds 60 --seed 7 [--nodes 5] [--json] [--verbose]
"""

from __future__ import annotations

import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from app.launcher import SMALL_FILES
from storage.codec import iter_entries
from tests.faults.checker import Stored, Verdict, check, history_around
from tests.faults.harness import FaultCluster
from tests.faults.nemesis import KINDS, Nemesis
from tests.faults.workload import CommitWatcher, History, Reader, Writer

# 64 KiB data files: a run writes many, so damage lands both where recovery rescans and below
SETTINGS = {**SMALL_FILES, "data_file_size": 64 << 10, "max_entry_bytes": 16 << 10, "checkpoint_interval_ms": 200}
CONVERGE_S = 60.0


def run(seed: int, seconds: float, nodes: int = 3, *, root: Path | None = None, writers: int = 3, readers: int = 2,
        kinds: list[str] | None = None, log: Callable[[str], None] = lambda _: None) -> dict[str, Any]:
    """Run faults for about `seconds` and check the outcome; returns the summary."""
    rng = random.Random(seed)
    with tempfile.TemporaryDirectory(prefix="raftlog-faults-") as tmp:
        cluster = FaultCluster(root or Path(tmp), nodes, SETTINGS)
        history = History()
        try:
            cluster.start()
            cluster.wait_leader(60)
            urls = {m: member.client_url for m, member in cluster.members.items()}
            clients = ([Writer(f"w{i}", urls, history, seed * 100 + i) for i in range(writers)]
                       + [Reader(f"r{i}", urls, history, seed * 100 + 50 + i) for i in range(readers)])
            watcher = CommitWatcher(cluster)
            for thread in [*clients, watcher]:
                thread.start()
            nemesis = Nemesis(cluster, history, rng, log)
            kinds = list(kinds or KINDS)
            rng.shuffle(kinds)
            deadline = time.monotonic() + seconds
            turn = 0
            while time.monotonic() < deadline or turn < len(kinds):  # every kind at least once
                kind = kinds[turn % len(kinds)]
                turn += 1
                log(f"[{time.monotonic() - deadline + seconds:6.1f}s] {kind}")
                nemesis.apply(kind, rng.uniform(1.5, 3.5))
                time.sleep(rng.uniform(0.5, 1.5))
            for client in clients:
                client.stop()
            for client in clients:
                client.join(10)
            watcher.stop()
            watcher.join(5)
            logs = _converged_logs(cluster, log)
            verdict = check(history, logs, watcher.violations)
            for problem in nemesis.problems:
                verdict.note(problem)
            summary = _summary(seed, seconds, nodes, history, nemesis, verdict)
            if summary["violations"]:
                summary["node_logs"] = {m: cluster.tail(m, 60) for m in cluster.members}
                if verdict.suspects:
                    summary["history"] = history_around(history, verdict.suspects[0])
            return summary
        except BaseException:  # the harness itself failed: say why, whatever the verbosity
            for member_id in cluster.members:
                print(f"--- {member_id} log tail ---\n{cluster.tail(member_id, 40)}", file=sys.stderr)
            raise
        finally:
            cluster.stop()


def _converged_logs(cluster: FaultCluster, log: Callable[[str], None]) -> dict[str, list[Stored]]:
    """Wait until every member has committed the same log end, then read each member's own log."""
    for member_id, member in cluster.members.items():
        if not member.running:
            cluster.start_member(member_id)
    cluster.wait_leader(60)
    deadline = time.monotonic() + CONVERGE_S
    while True:
        said = [cluster.status(m) for m in cluster.members]
        ends = {(s["end_index"], s["committed_index"]) for s in said if s}
        if len(ends) == 1 and all(said) and len({e for pair in ends for e in pair}) == 1:
            break
        if time.monotonic() > deadline:
            raise TimeoutError(f"the members did not converge: {[(s or {}).get('self') for s in said]} {ends}")
        time.sleep(0.2)
    log(f"converged at index {ends.pop()[0]}")
    logs = {}
    with httpx.Client(timeout=30) as http:
        for member_id, member in cluster.members.items():
            answer = http.get(f"{member.client_url}/v1/entries", params={"start": 0, "consistency": "local"},
                              headers={"accept": "application/vnd.raftlog.entries"})
            answer.raise_for_status()
            entries = iter_entries(answer.content)
            logs[member_id] = [Stored(e.index, e.term, e.chain_crc, bytes(e.body)) for e in entries]
    return logs


def _summary(seed: int, seconds: float, nodes: int, history: History, nemesis: Nemesis,
             verdict: Verdict) -> dict[str, Any]:
    appends = [op for op in history.ops if op.kind == "append"]
    failovers = nemesis.failovers_ms
    return {
        "seed": seed, "seconds": seconds, "nodes": nodes,
        "ops": len(history.ops), "appends": len(appends),
        "reads": len(history.ops) - len(appends),
        "acked": verdict.acked,
        "unknown": sum(len(op.bodies) for op in appends if op.outcome == "unknown"),
        "failed": sum(len(op.bodies) for op in appends if op.outcome == "fail"),
        "lost": verdict.lost + verdict.misplaced, "duplicated": verdict.duplicated,
        "failed_present": verdict.failed_present, "divergent": verdict.divergent,
        "stale_reads": verdict.stale_reads, "wrong_reads": verdict.wrong_reads,
        "commit_fell": verdict.commit_fell,
        "faults": dict(sorted(nemesis.faults.items())),
        "failovers": len(failovers),
        "failover_ms_p50": round(statistics.median(failovers)) if failovers else None,
        "failover_ms_max": round(max(failovers)) if failovers else None,
        "violations": verdict.problems,
        "replay": f"python -m tests.faults --seed {seed} --seconds {seconds:g} --nodes {nodes} --verbose",
    }


def print_summary(summary: dict[str, Any], out: Any = sys.stdout) -> None:
    print(f"seed {summary['seed']}, {summary['nodes']} nodes, {summary['seconds']:g} s of faults", file=out)
    print(f"operations {summary['ops']:,} (appends {summary['appends']:,}, reads {summary['reads']:,}); "
          f"entries acknowledged {summary['acked']:,}, unknown {summary['unknown']:,}, "
          f"refused {summary['failed']:,}", file=out)
    print("faults: " + ", ".join(f"{k} {v}" for k, v in summary["faults"].items()), file=out)
    print(f"failovers {summary['failovers']}: median {summary['failover_ms_p50']} ms, worst "
          f"{summary['failover_ms_max']} ms", file=out)
    print(f"lost {summary['lost']}, duplicated {summary['duplicated']}, refused but present "
          f"{summary['failed_present']}, divergent {summary['divergent']}, stale reads {summary['stale_reads']}, "
          f"wrong reads {summary['wrong_reads']}, commit index fell {summary['commit_fell']}", file=out)
    if summary["violations"]:
        print("VIOLATIONS:", file=out)
        for v in summary["violations"]:
            print(f"  {v}", file=out)
        if summary.get("history"):
            print("history around the first:", file=out)
            for line in summary["history"]:
                print(f"  {line}", file=out)
        print(f"replay: {summary['replay']}", file=out)
    else:
        print("no violations", file=out)
