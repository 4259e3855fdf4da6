"""What the Python client (raftlog.client) does from one Python process, over httpx and over gRPC.

    python bench/client_bench.py [--entries 1000000] [--rounds 3] [--json]

One local 3-member cluster (flush_mode sync). Each round, in turn:

- produce: `--entries` entries of 100 bytes through one AsyncProducer (linger_ms 5, batches of up
  to 10,000, 5 in flight, a producer session), every entry's answer awaited;
- produce over gRPC: the same entries as batches of 10,000 on one AppendStream (raw stubs, 5 in
  flight, no session): the transport the client could have used instead;
- follow: a named consumer (AsyncConsumer) handed the same number of entries, and a gRPC Read
  stream of 100,000 of them (raw stubs: a message per entry).

Rates are entries per second of wall time; CPU is the client process's and the three members'
(utime + stime from /proc) per entry. Target (issue 31): the producer at least 200,000 entries/s
with lingering. Medians of the rounds. `bench/compare.py` runs the same phase (2c).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
from measure import cpu_s, machine  # this folder's siblings: run as `python bench/client_bench.py`

from raftlog.api import log_pb2 as pb
from raftlog.api import log_pb2_grpc
from raftlog.app.launcher import LocalCluster
from raftlog.client import AsyncConsumer, AsyncProducer, Connection

BODY = b"x" * 100
TARGET_EPS = 200_000
GRPC_BATCH = 10_000
GRPC_READ = 100_000  # gRPC's Read sends a message per entry: a sample is enough to see its rate


async def produce(urls: list[str], entries: int) -> None:
    async with Connection(urls) as connection, AsyncProducer(connection, linger_ms=5) as producer:
        last = None
        for _ in range(entries):
            last = await producer.send(BODY)
        await producer.flush()
        assert last is not None and (await last).index > 0


def produce_grpc(address: str, entries: int) -> None:
    def batches() -> Iterator[pb.AppendBatchRequest]:
        for _ in range(entries // GRPC_BATCH):
            yield pb.AppendBatchRequest(bodies=[BODY] * GRPC_BATCH)

    with grpc.insecure_channel(address, options=[("grpc.max_send_message_length", 64 << 20)]) as channel:
        answered = sum(a.last_index - a.first_index + 1 for a in log_pb2_grpc.LogStub(channel).AppendStream(batches()))
        assert answered == entries // GRPC_BATCH * GRPC_BATCH


async def follow(urls: list[str], entries: int, name: str) -> None:
    async with Connection(urls) as connection, AsyncConsumer(connection, name, auto_commit_interval_s=1.0) as c:
        seen = 0
        async for _record in c:
            seen += 1
            if seen == entries:
                return


def follow_grpc(address: str, entries: int) -> None:
    with grpc.insecure_channel(address, options=[("grpc.max_receive_message_length", 64 << 20)]) as channel:
        seen = sum(1 for _ in log_pb2_grpc.LogStub(channel).Read(pb.ReadRequest(start=0, limit=entries)))
        assert seen == entries


def metered(members: list[int], run: Callable[[], Any], entries: int) -> dict[str, float]:
    me = [os.getpid()]
    cluster_before, client_before, started = cpu_s(members), cpu_s(me), time.perf_counter()
    run()
    elapsed = time.perf_counter() - started
    return {"eps": entries / elapsed, "client_cpu_us": (cpu_s(me) - client_before) * 1e6 / entries,
            "cluster_cpu_us": (cpu_s(members) - cluster_before) * 1e6 / entries}


def client_figures(cluster: LocalCluster, entries: int, rounds: int, log: Callable[[str], None]) -> dict[str, Any]:
    leader = cluster.members[cluster.wait_leader()]
    urls = [m.client_url for m in cluster.members.values()]
    pids = [m.process.pid for m in cluster.members.values() if m.process is not None]
    runs: dict[str, list[dict[str, float]]] = {"produce (httpx)": [], "produce (gRPC AppendStream)": [],
                                               "follow (httpx, named consumer)": [], "follow (gRPC Read)": []}
    for round_ in range(rounds):
        workloads = {
            "produce (httpx)": lambda: asyncio.run(produce(urls, entries)),
            "produce (gRPC AppendStream)": lambda: produce_grpc(leader.grpc_address, entries),
            "follow (httpx, named consumer)": lambda r=round_: asyncio.run(follow(urls, entries, f"bench-{r}")),
            "follow (gRPC Read)": lambda: follow_grpc(leader.grpc_address, GRPC_READ)}
        for name, run in workloads.items():
            report = metered(pids, run, GRPC_READ if name == "follow (gRPC Read)" else entries)
            runs[name].append(report)
            log(f"  round {round_ + 1}, {name}: {report['eps']:,.0f} entries/s, CPU per entry: client "
                f"{report['client_cpu_us']:.2f} µs, members {report['cluster_cpu_us']:.2f} µs")
    figures: dict[str, Any] = {name: {key: statistics.median(r[key] for r in reports) for key in reports[0]}
                               for name, reports in runs.items()}
    figures["produce (httpx)"]["target_eps"] = TARGET_EPS
    figures["produce (httpx)"]["met"] = figures["produce (httpx)"]["eps"] >= TARGET_EPS
    return figures


def print_table(figures: dict[str, Any], header: str) -> None:
    print(header)
    print(f"{'workload':<34}{'entries/s':>12}{'client µs/entry':>17}{'members µs/entry':>18}")
    for name, f in figures.items():
        met = f"  target {f['target_eps']:,}: {'met' if f['met'] else 'NOT met'}" if "met" in f else ""
        print(f"{name:<34}{f['eps']:>12,.0f}{f['client_cpu_us']:>17,.2f}{f['cluster_cpu_us']:>18,.2f}{met}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--entries", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()

    def log(line: str) -> None:
        print(line, flush=True, file=sys.stderr if args.json else sys.stdout)

    root = Path(tempfile.mkdtemp(prefix="raftlog-client-"))
    try:
        with LocalCluster(root, 3) as cluster:
            figures = client_figures(cluster, args.entries, args.rounds, log)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    result = {"machine": machine(), "entries": args.entries, "rounds": args.rounds, "client": figures}
    if args.json:
        print(json.dumps(result))
    else:
        print_table(figures, f"\nraftlog.client on {machine()}: medians of {args.rounds} rounds of "
                             f"{args.entries:,} entries of {len(BODY)} bytes")


if __name__ == "__main__":
    main()
