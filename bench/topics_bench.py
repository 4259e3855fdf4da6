"""Messages of a topic against plain appends, taking turns on one cluster: what topics cost per entry.

    python bench/topics_bench.py [--seconds 8] [--rounds 9] [--json]

Issue 45's figures, judged by CPU per entry of all three members (/proc, bench/measure.py) in
alternating rounds on the same 3-member cluster (each round runs every workload once, in turn):

- single: wrk, 64 connections, one entry per request: POST /v1/entries of 100 bytes, against
  POST /v1/topics/bench/messages of one message (a 100-byte body, an 8-byte key, one 8-byte tag);
- batch: 16 connections, 1000 entries per request: the binary batch of /v1/entries/batch, against a
  JSON batch of 1000 such messages of one key (one queue);
- visible: from a message's append answered (its commit) until a read by queue offset finds it, under
  single appends of messages at 64 connections: on the leader (its dispatcher runs as the commit index
  moves, before the answer) and on a follower (which learns the commit index from the next push or
  commit notice); p50 and p99 of PROBES probes, each a long-poll of the follower's queue at that offset.

Medians over the rounds; the target is at most +10% CPU per entry for messages.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
from cluster_bench import BATCH, BODY, wrk, wrk_batches  # this folder's siblings: run as `python bench/...`
from measure import committed_index, cpu_s, machine

from raftlog.app.launcher import LocalCluster

TOPIC = "bench"
QUEUES = 8
BATCH_CLIENTS = 16
PROBES = 200


def message_batch(size: int) -> bytes:
    message = {"body": BODY.decode(), "keys": ["k0000001"], "tags": ["tag-0001"]}
    return json.dumps({"messages": [message] * size}).encode()


def measured(cluster: LocalCluster, leader: str, run: Any) -> tuple[dict[str, float], float]:
    """run()'s report and the CPU microseconds per committed entry, all members."""
    pids = [m.process.pid for m in cluster.members.values() if m.process is not None]
    before, first = cpu_s(pids), committed_index(leader)
    report = run()
    used, entries = cpu_s(pids) - before, committed_index(leader) - first
    return report, used * 1e6 / max(entries, 1)


def loads(leader: str, seconds: int, batch_file: str) -> dict[str, Callable[[], dict[str, float]]]:
    return {
        "single_plain": lambda: wrk(f"{leader}/v1/entries", "wrk_append.lua", seconds),
        "single_messages": lambda: wrk(f"{leader}/v1/topics/{TOPIC}/messages", "wrk_message.lua", seconds),
        "batch_plain": lambda: wrk_batches(leader, BATCH, seconds, BATCH_CLIENTS),
        "batch_messages": lambda: wrk(f"{leader}/v1/topics/{TOPIC}/messages", "wrk_batch.lua", seconds,
                                      {"WRK_BATCH_FILE": batch_file, "WRK_CONTENT_TYPE": "application/json"},
                                      connections=BATCH_CLIENTS),
    }


def visible_ms(cluster: LocalCluster, seconds: int) -> dict[str, float]:
    """The visible figures (see above), with wrk's single appends of messages loading the leader meanwhile."""
    leader_id = cluster.wait_leader()
    leader = cluster.members[leader_id].client_url
    follower = cluster.members[next(m for m in cluster.members if m != leader_id)].client_url
    load = threading.Thread(target=wrk, args=(f"{leader}/v1/topics/{TOPIC}/messages", "wrk_message.lua", seconds))
    load.start()
    delays: dict[str, list[float]] = {"leader": [], "follower": []}
    with httpx.Client(timeout=30) as http:
        time.sleep(0.5)  # the load under way
        for n in range(PROBES):
            answer = http.post(f"{leader}/v1/topics/{TOPIC}/messages",
                               json={"messages": [{"body": f"probe {n}"}], "queue": n % QUEUES}).json()["messages"][0]
            committed = time.perf_counter()
            for where, url in (("leader", leader), ("follower", follower)):
                http.get(f"{url}/v1/topics/{TOPIC}/queues/{answer['queue']}/messages",
                         params={"offset": answer["queue_offset"], "limit": 1, "wait_ms": 10_000,
                                 "consistency": "local"}).raise_for_status()
                delays[where].append((time.perf_counter() - committed) * 1000)
                committed = time.perf_counter()  # the follower's from the leader's read: the leader's is ~0
    load.join()
    return {f"visible_{where}_{p}_ms": statistics.quantiles(values, n=100)[k] for where, values in delays.items()
            for p, k in (("p50", 49), ("p99", 98))}


def topic_overhead(cluster: LocalCluster, seconds: int, rounds: int, log: Callable[[str], None]) -> dict[str, float]:
    """Each workload once a round, in turn, on `cluster` (a topic of QUEUES queues created on it): the
    medians of CPU per entry and p99, and the ratios messages / plain."""
    leader = cluster.members[cluster.wait_leader()].client_url
    httpx.post(f"{leader}/v1/topics", json={"name": TOPIC, "queues": QUEUES}, timeout=30).raise_for_status()
    runs: list[dict[str, float]] = []
    with tempfile.NamedTemporaryFile(prefix="raftlog-messages-", suffix=".json") as batch:
        batch.write(message_batch(BATCH))
        batch.flush()
        for n in range(rounds):
            figures: dict[str, float] = {}
            for name, load in loads(leader, seconds, batch.name).items():
                for _attempt in range(3):  # a run the group changed leaders in is not a measure: again
                    try:
                        report, cpu_us = measured(cluster, leader, load)
                        break
                    except RuntimeError as exc:
                        log(f"  {name}: refused appends, run again: {str(exc).splitlines()[-1]}")
                        leader = cluster.members[cluster.wait_leader()].client_url
                else:
                    raise RuntimeError(f"{name}: three runs in a row met refused appends")
                figures[f"{name}_cpu_us"], figures[f"{name}_p99_ms"] = cpu_us, report["p99_us"] / 1000
            runs.append(figures)
            log(f"  round {n + 1}/{rounds}: " + ", ".join(f"{k} {v:.2f}" for k, v in figures.items()))
    medians = {key: statistics.median(r[key] for r in runs) for key in runs[0]}
    for name in ("single", "batch"):
        medians[f"{name}_ratio"] = medians[f"{name}_messages_cpu_us"] / medians[f"{name}_plain_cpu_us"]
    return {**medians, **visible_ms(cluster, seconds)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="raftlog-topics-bench-") as root, \
            LocalCluster(Path(root), nodes=3) as cluster:
        medians = topic_overhead(cluster, args.seconds, args.rounds, lambda line: print(line, file=sys.stderr))
    result = {"machine": machine(), "rounds": args.rounds, "seconds": args.seconds, **medians}
    if args.json:
        print(json.dumps(result))
        return
    print(f"machine: {result['machine']}; {args.rounds} rounds of {args.seconds} s, medians")
    print(f"{'workload':<10} {'plain CPU/entry':>16} {'messages CPU/entry':>19} {'ratio':>7} {'target':>7}")
    for name in ("single", "batch"):
        print(f"{name:<10} {medians[f'{name}_plain_cpu_us']:>13.1f} µs {medians[f'{name}_messages_cpu_us']:>16.1f} µs "
              f"{medians[f'{name}_ratio']:>7.3f} {'<= 1.10':>7}")
    for where in ("leader", "follower"):
        print(f"commit to visible, {where}: p50 {medians[f'visible_{where}_p50_ms']:.2f} ms, "
              f"p99 {medians[f'visible_{where}_p99_ms']:.2f} ms (target p99 <= 5 ms)")


if __name__ == "__main__":
    main()
