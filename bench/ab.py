"""Two trees of raftlog (and etcd) taking turns in one run: is a change cheaper per append?

    python bench/ab.py --old /tmp/raftlog-old [--new .] [--workload single] [--connections 1]
                       [--seconds 8] [--rounds 5] [--etcd] [--json]

A change is judged by CPU per entry (issue 29): the CPU time of all three
member processes (utime + stime, /proc/<pid>/stat) while the load runs, over
the entries the leader committed meanwhile. Each tree's 3-member cluster runs
at the same time as the other's (and etcd's, with --etcd); every round runs
the workload once on each, in turn, so both see the same machine. Figures are
medians over the rounds.

Workloads:
- single: wrk, --connections connections, POST /v1/entries of 100 bytes, to the leader
  (etcd: POST /v3/kv/put, a new key each time);
- forward: the same, to a follower (etcd: to a follower);
- batch: binary batches of 1000 bodies of 100 bytes, wrk with 16 connections, to the leader
  (etcd: transactions of 128 puts);
- read: wrk, linearizable GET /v1/entries/{i} of committed entries from a follower, CPU per read
  (raftlog only).

`--old` is a checkout of another commit (`git worktree add /tmp/raftlog-old HEAD~1`); its members
run with that checkout first on their path, on this virtualenv.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
from collections.abc import Callable
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import httpx
from cluster_bench import BODY, wrk, wrk_batches  # this folder's siblings: run as `python bench/ab.py`
from compare import ETCD_TXN_OPS_MAX
from etcd_cluster import EtcdCluster, b64
from measure import committed_index, cpu_s, machine, rate

from raftlog.app.launcher import LocalCluster

BATCH = 1000
BATCH_CLIENTS = 16


class Contender:
    """One system under test: its processes, and how to load it."""

    def __init__(self, pids: Callable[[], dict[str, int]], leader_id: str, leader: str, follower: str,
                 committed: Callable[[], int] | None) -> None:
        self.pids, self.leader_id, self.leader, self.follower = pids, leader_id, leader, follower
        self.committed = committed  # the leader's commit index (raftlog); etcd's entries are its client's count

    def load(self, workload: str, connections: int, seconds: int) -> dict[str, float]:
        target = self.follower if workload == "forward" else self.leader
        etcd = self.committed is None
        pids = self.pids()
        before = {member: cpu_s([pid]) for member, pid in pids.items()}
        first = self.committed() if self.committed else 0
        if workload == "read":
            report = wrk(self.follower, "wrk_get.lua", seconds, {"WRK_MAX_INDEX": str(first)},
                         connections=connections)
            entries = int(report["requests"])
            report = {"eps": rate(report), "p50_ms": report["p50_us"] / 1000, "p99_ms": report["p99_us"] / 1000}
        elif workload == "batch":
            report = wrk_batches(target, min(BATCH, ETCD_TXN_OPS_MAX) if etcd else BATCH, seconds, BATCH_CLIENTS,
                                 etcd=etcd)
            entries = int(report["entries"])
            report = {"eps": report["entries"] / report["duration_us"] * 1e6}
        else:
            script, env = ("wrk_etcd_put.lua", {"WRK_VALUE_B64": b64(BODY)}) if etcd else ("wrk_append.lua", {})
            url = target if etcd else f"{target}/v1/entries"
            report = wrk(url, script, seconds, env, connections=connections)
            entries = int(report["requests"])
            report = {"eps": rate(report), "p50_ms": report["p50_us"] / 1000, "p99_ms": report["p99_us"] / 1000}
        used = {member: cpu_s([pid]) - before[member] for member, pid in pids.items()}
        if self.committed is not None and workload != "read":
            entries = self.committed() - first
        report["cpu_us"] = sum(used.values()) * 1e6 / entries
        report["leader_cpu_us"] = used[self.leader_id] * 1e6 / entries
        report["follower_cpu_us"] = statistics.mean(v for m, v in used.items() if m != self.leader_id) * 1e6 / entries
        return report


def package_farm(tree: Path, root: Path) -> Path:
    """A directory whose `raftlog` package is `tree`'s folders, linked: the editable install maps
    raftlog.* to the checkout it was installed from, whichever tree the working directory is."""
    farm = root / "farm"
    (farm / "raftlog").mkdir(parents=True)
    (farm / "raftlog" / "__init__.py").touch()
    for name in ("storage", "raft", "api", "app", "pipeline"):
        (farm / "raftlog" / name).symlink_to(tree.resolve() / name, target_is_directory=True)
    return farm


@contextmanager
def raftlog_tree(tree: Path, root: Path) -> Any:
    """A 3-member cluster whose processes import raftlog from `tree`."""
    saved_cwd, saved_path = os.getcwd(), os.environ.get("PYTHONPATH")
    cluster = LocalCluster(root, 3)
    farm = package_farm(tree, root)
    os.chdir(farm)  # `python -m raftlog.app.cli` puts its working directory first on the path
    os.environ["PYTHONPATH"] = os.pathsep.join((str(farm), str(tree)))  # the tree: a tree before raftlog.*
    try:
        cluster.start()
    finally:
        os.chdir(saved_cwd)
        if saved_path is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = saved_path
    try:
        leader_id = cluster.wait_leader()
        follower_id = next(m for m in cluster.members if m != leader_id)
        leader = cluster.members[leader_id].client_url
        yield Contender(lambda: {m.id: m.process.pid for m in cluster.members.values() if m.process is not None},
                        leader_id, leader, cluster.members[follower_id].client_url, lambda: committed_index(leader))
    finally:
        cluster.stop()


@contextmanager
def etcd_cluster(root: Path) -> Any:
    cluster = EtcdCluster(root, 3)
    try:
        cluster.start()
        leader_id = cluster.wait_leader()
        follower_id = next(m for m in cluster.members if m != leader_id)
        yield Contender(cluster.pids, leader_id, cluster.members[leader_id].client_url,
                        cluster.members[follower_id].client_url, None)
    finally:
        cluster.stop()


def warm(contender: Contender) -> None:
    """A few hundred appends first: connections made, caches and segment files warm."""
    url = contender.leader if contender.committed is None else f"{contender.leader}/v1/entries"
    with httpx.Client(timeout=30.0) as http:
        for i in range(300):
            if contender.committed is None:
                http.post(f"{url}/v3/kv/put", json={"key": b64(f"warm{i}".encode()), "value": b64(BODY)})
            else:
                http.post(url, content=BODY)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--old", type=Path, help="another checkout of raftlog")
    parser.add_argument("--new", type=Path, default=Path(__file__).resolve().parent.parent)
    parser.add_argument("--workload", choices=("single", "forward", "batch", "read"), default="single")
    parser.add_argument("--connections", type=int, default=1)
    parser.add_argument("--seconds", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--etcd", action="store_true", help="etcd takes its turn too")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()
    if args.etcd and args.workload == "read":
        raise SystemExit("the read workload is raftlog's alone (etcd's reads by key: bench/compare.py)")
    if shutil.which("wrk") is None:
        raise SystemExit("wrk is not installed: run `make bench`, or apt-get install wrk")
    root = Path(tempfile.mkdtemp(prefix="raftlog-ab-"))
    runs: dict[str, list[dict[str, float]]] = {}
    try:
        with ExitStack() as stack:
            contenders = [stack.enter_context(raftlog_tree(tree.resolve(), root / f"t{i}"))
                          for i, tree in enumerate(t for t in (args.old, args.new) if t is not None)]
            names = ["old", "new"] if args.old is not None else ["new"]
            if args.etcd:
                contenders.append(stack.enter_context(etcd_cluster(root / "etcd")))
                names.append("etcd")
            for contender in contenders:
                warm(contender)
            for round_ in range(args.rounds):
                for name, contender in zip(names, contenders, strict=True):
                    report = contender.load(args.workload, args.connections, args.seconds)
                    runs.setdefault(name, []).append(report)
                    print(f"round {round_ + 1} {name:4} " + "  ".join(f"{k} {v:,.2f}" for k, v in report.items()),
                          file=sys.stderr, flush=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    medians = {name: {key: statistics.median(r[key] for r in reports) for key in reports[0]}
               for name, reports in runs.items()}
    result = {"workload": args.workload, "connections": args.connections, "seconds": args.seconds,
              "rounds": args.rounds, "machine": machine(), "medians": medians}
    if args.json:
        print(json.dumps(result))
        return
    keys = list(next(iter(medians.values())))
    load = (f"{BATCH_CLIENTS} clients, batches of {BATCH}" if args.workload == "batch"
            else f"{args.connections} connections")
    print(f"{args.workload}, {load}, medians of {args.rounds} rounds of {args.seconds} s "
          f"on {result['machine']}")
    print(f"{'':6}" + "".join(f"{k:>16}" for k in keys))
    for name, figures in medians.items():
        print(f"{name:6}" + "".join(f"{figures[k]:>16,.2f}" for k in keys))


if __name__ == "__main__":
    main()
