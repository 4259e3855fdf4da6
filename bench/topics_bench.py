"""Messages of a topic against plain appends, taking turns on one cluster: what topics cost per entry.

    python bench/topics_bench.py [--seconds 8] [--rounds 9] [--json]

Issue 45's figures, judged by CPU per entry of all three members (/proc, bench/measure.py) in
alternating rounds on the same 3-member cluster (each round runs every workload once, in turn):

- single: wrk, 64 connections, one entry per request: POST /v1/entries of 100 bytes, against
  POST /v1/topics/bench/messages of one message (a 100-byte body, an 8-byte key, one 8-byte tag);
- batch: 16 connections, 1000 entries per request: the binary batch of /v1/entries/batch, against a
  JSON batch of 1000 such messages of one key (one queue);
- visible: a message's commit to its visibility in its consume queue, p99 at 64 connections (the
  dispatcher runs as the commit index moves: the answer comes after it).

Medians over the rounds; the target is at most +10% CPU per entry for messages.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

import httpx
from cluster_bench import BATCH, BODY, wrk, wrk_batches  # this folder's siblings: run as `python bench/...`
from measure import committed_index, cpu_s, machine

from raftlog.app.launcher import LocalCluster

TOPIC = "bench"
QUEUES = 8
BATCH_CLIENTS = 16


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


def one_round(cluster: LocalCluster, leader: str, seconds: int, batch_file: str) -> dict[str, float]:
    figures: dict[str, float] = {}
    loads = {
        "single_plain": lambda: wrk(f"{leader}/v1/entries", "wrk_append.lua", seconds),
        "single_messages": lambda: wrk(f"{leader}/v1/topics/{TOPIC}/messages", "wrk_message.lua", seconds),
        "batch_plain": lambda: wrk_batches(leader, BATCH, seconds, BATCH_CLIENTS),
        "batch_messages": lambda: {**(r := wrk(f"{leader}/v1/topics/{TOPIC}/messages", "wrk_batch.lua", seconds,
                                                {"WRK_BATCH_FILE": batch_file, "WRK_CONTENT_TYPE": "application/json"},
                                                connections=BATCH_CLIENTS)),
                                   "entries": r["requests"] * BATCH},
    }
    for name, load in loads.items():
        report, cpu_us = measured(cluster, leader, load)
        figures[f"{name}_cpu_us"] = cpu_us
        figures[f"{name}_p99_ms"] = report["p99_us"] / 1000
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    rounds: list[dict[str, float]] = []
    with tempfile.TemporaryDirectory(prefix="raftlog-topics-bench-") as root, \
            tempfile.NamedTemporaryFile(prefix="raftlog-messages-", suffix=".json") as batch:
        batch.write(message_batch(BATCH))
        batch.flush()
        with LocalCluster(Path(root), nodes=3) as cluster:
            leader_id = cluster.wait_leader()
            leader = cluster.members[leader_id].client_url
            httpx.post(f"{leader}/v1/topics", json={"name": TOPIC, "queues": QUEUES}, timeout=30).raise_for_status()
            for n in range(args.rounds):
                rounds.append(one_round(cluster, leader, args.seconds, batch.name))
                print(f"round {n + 1}/{args.rounds}: " + ", ".join(f"{k} {v:.2f}" for k, v in rounds[-1].items()),
                      file=sys.stderr)
    medians = {key: statistics.median(r[key] for r in rounds) for key in rounds[0]}
    medians["single_ratio"] = medians["single_messages_cpu_us"] / medians["single_plain_cpu_us"]
    medians["batch_ratio"] = medians["batch_messages_cpu_us"] / medians["batch_plain_cpu_us"]
    result = {"machine": machine(), "rounds": args.rounds, "seconds": args.seconds, **medians}
    if args.json:
        print(json.dumps(result))
        return
    print(f"machine: {result['machine']}; {args.rounds} rounds of {args.seconds} s, medians")
    print(f"{'workload':<10} {'plain CPU/entry':>16} {'messages CPU/entry':>19} {'ratio':>7} {'target':>7}")
    for name in ("single", "batch"):
        print(f"{name:<10} {medians[f'{name}_plain_cpu_us']:>13.1f} µs {medians[f'{name}_messages_cpu_us']:>16.1f} µs "
              f"{medians[f'{name}_ratio']:>7.3f} {'<= 1.10':>7}")


if __name__ == "__main__":
    main()
