"""10,000 topics of 8 queues, one message in each: what they cost a 3-member cluster at rest.

    python bench/many_topics_bench.py [--topics 10000] [--queues 8] [--json]

Issue 45's targets, against the same cluster before its topics: a restart at most 2 s slower, at
most 100 MiB more RSS per member, at most 1 GiB more disk (all members), idle CPU unchanged (the
members' CPU over IDLE_S seconds of no load, from /proc).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import tempfile
import time
from pathlib import Path

import httpx
from measure import cpu_s, machine  # this folder's sibling: run as `python bench/many_topics_bench.py`

from raftlog.app.launcher import LocalCluster

IDLE_S = 10.0
IN_FLIGHT = 32


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def at_rest(cluster: LocalCluster, root: Path) -> dict[str, float]:
    """Restart time, RSS per member (the largest), disk of all members, idle CPU: the cluster's figures."""
    for member_id in cluster.members:
        cluster.stop_member(member_id)
    began = time.perf_counter()
    cluster.start()
    cluster.wait_leader(timeout_s=120)
    restart_s = time.perf_counter() - began
    pids = [m.process.pid for m in cluster.members.values() if m.process is not None]
    time.sleep(2)  # past the start's own work
    before = cpu_s(pids)
    time.sleep(IDLE_S)
    idle_cpu = (cpu_s(pids) - before) / IDLE_S
    disk = int(subprocess.run(["du", "-sb", str(root)], capture_output=True, text=True).stdout.split()[0])
    return {"restart_s": restart_s, "rss_mib": max(rss_mib(pid) for pid in pids), "disk_mib": disk / (1 << 20),
            "idle_cpu_cores": idle_cpu}


async def fill(leader: str, topics: int, queues: int) -> float:
    """Create the topics, then one message in each queue; the seconds it took."""
    began = time.perf_counter()
    async with httpx.AsyncClient(base_url=leader, timeout=60) as client:
        gate = asyncio.Semaphore(IN_FLIGHT)

        async def call(path: str, body: dict[str, object]) -> None:
            async with gate:
                (await client.post(path, json=body)).raise_for_status()

        await asyncio.gather(*(call("/v1/topics", {"name": f"t{i:05d}", "queues": queues}) for i in range(topics)))
        await asyncio.gather(*(call(f"/v1/topics/t{i:05d}/messages", {"messages": [{"body": "m"}], "queue": q})
                               for i in range(topics) for q in range(queues)))
    return time.perf_counter() - began


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--topics", type=int, default=10_000)
    parser.add_argument("--queues", type=int, default=8)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="raftlog-many-topics-") as root, \
            LocalCluster(Path(root), nodes=3) as cluster:
        cluster.wait_leader()
        empty = at_rest(cluster, Path(root))
        leader = cluster.members[cluster.wait_leader()].client_url
        fill_s = asyncio.run(fill(leader, args.topics, args.queues))
        full = at_rest(cluster, Path(root))
    result = {"machine": machine(), "topics": args.topics, "queues": args.queues, "fill_s": fill_s,
              **{f"empty_{k}": v for k, v in empty.items()}, **{f"full_{k}": v for k, v in full.items()},
              "restart_more_s": full["restart_s"] - empty["restart_s"],
              "rss_more_mib": full["rss_mib"] - empty["rss_mib"], "disk_more_mib": full["disk_mib"] - empty["disk_mib"],
              "idle_cpu_more_cores": full["idle_cpu_cores"] - empty["idle_cpu_cores"]}
    if args.json:
        print(json.dumps(result))
        return
    print(f"machine: {result['machine']}; {args.topics} topics of {args.queues} queues, one message in each "
          f"(filled in {fill_s:.0f} s)")
    print(f"{'figure':<22} {'empty':>10} {'with topics':>12} {'more':>10} {'target':>10}")
    for name, unit, target in (("restart_s", "s", "<= 2 s"), ("rss_mib", "MiB", "<= 100 MiB"),
                               ("disk_mib", "MiB", "<= 1 GiB"), ("idle_cpu_cores", "cores", "unchanged")):
        print(f"{name + ' (' + unit + ')':<22} {empty[name]:>10.3f} {full[name]:>12.3f} "
              f"{full[name] - empty[name]:>10.3f} {target:>10}")


if __name__ == "__main__":
    main()
