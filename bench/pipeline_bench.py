"""The Spark pipeline over one million committed entries of 100 bytes.

    python bench/pipeline_bench.py [--entries 1000000] [--rounds 3] [--json]

- online_read_eps: entries/s of `spark.read.format("raftlog").option("url", ...)` into Spark's
  noop sink (every column materialised), partitions spread over the 3 members
- export_eps: entries/s of `raftlog pipeline export` (jobs.export) into Parquet, a fresh output
  directory each round
- offline_read_eps: entries/s of the offline reader on a stopped follower's data directory

A local 3-node cluster (flush_mode sync, 64 MiB data files so the offline reader has
several files to spread) is loaded with binary batches; Spark runs local[*] in this
process. Each figure is the median of --rounds runs over the same log.
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
from collections.abc import Callable
from pathlib import Path

import httpx

from raftlog.api.bodies import BATCH_CONTENT_TYPE, encode_bodies
from raftlog.app.launcher import LocalCluster

BODY = b"x" * 100
BATCH = 1000
CLIENTS = 4
DATA_FILE_SIZE = 64 << 20


async def load(urls: list[str], entries: int) -> float:
    """Append `entries` bodies in batches from CLIENTS concurrent clients; returns entries/s."""
    payload = encode_bodies([BODY] * BATCH)
    batches = iter(range(entries // BATCH))

    async def client(url: str) -> None:
        async with httpx.AsyncClient(timeout=60.0) as http:
            for _ in batches:
                response = await http.post(f"{url}/v1/entries/batch", content=payload,
                                           headers={"content-type": BATCH_CONTENT_TYPE})
                response.raise_for_status()

    started = time.monotonic()
    await asyncio.gather(*(client(urls[0]) for _ in range(CLIENTS)))
    return entries / (time.monotonic() - started)


def wait_replicated(url: str, at_least: int) -> int:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        members = httpx.get(f"{url}/v1/cluster", timeout=10).json()["members"]
        committed = {m["committed_index"] for m in members}
        if len(committed) == 1 and (index := committed.pop()) is not None and index >= at_least:
            return index
        time.sleep(0.2)
    raise TimeoutError("the members did not all commit the log")


def timed(entries: int, run: Callable[[], object]) -> float:
    started = time.perf_counter()
    run()
    return entries / (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--entries", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from raftlog.pipeline import jobs

    root = Path(tempfile.mkdtemp(prefix="raftlog-pipeline-bench-"))
    cluster = LocalCluster(root / "cluster", 3, settings={"data_file_size": DATA_FILE_SIZE})
    rounds: dict[str, list[float]] = {"online_read_eps": [], "export_eps": [], "offline_read_eps": []}
    try:
        cluster.start()
        leader = cluster.members[cluster.wait_leader()].client_url
        urls = [m.client_url for m in cluster.members.values()]
        load_eps = asyncio.run(load([leader], args.entries))
        count = wait_replicated(leader, args.entries) + 1  # the leaders' no-op entries too
        spark = jobs.session()
        spark.sparkContext.setLogLevel("ERROR")
        spark.read.format("raftlog").option("url", leader).option("endIndex", "1000").load().count()  # warm up

        def online() -> None:
            spark.read.format("raftlog").option("url", ",".join(urls)).load().write.format("noop").mode(
                "overwrite").save()

        for i in range(args.rounds):
            rounds["online_read_eps"].append(timed(count, online))
            out = root / f"export{i}"
            rounds["export_eps"].append(timed(count, lambda out=out: jobs.export(  # type: ignore[misc]
                spark, urls, out, progress=lambda _: None)))
            shutil.rmtree(out)
        follower = next(m for m in cluster.members.values() if m.client_url != leader)
        cluster.stop()

        def offline() -> None:
            spark.read.format("raftlog").load(str(follower.data_dir)).write.format("noop").mode("overwrite").save()

        for _ in range(args.rounds):
            rounds["offline_read_eps"].append(timed(count, offline))
        spark.stop()
    finally:
        cluster.stop()
        shutil.rmtree(root, ignore_errors=True)
    result: dict[str, float | int] = {name: round(statistics.median(v)) for name, v in rounds.items()}
    result.update(entries=count, body_bytes=len(BODY), rounds=args.rounds, load_eps=round(load_eps),
                  cores=os.cpu_count() or 1)
    if args.json:
        print(json.dumps(result))
        return
    print(f"raftlog pipeline, {count:,} entries of {len(BODY)} bytes, Spark local[*] on {os.cpu_count()} cores, "
          f"median of {args.rounds} rounds", file=sys.stdout)
    print(f"{'figure':<20}{'median':>14}{'rounds':>40}")
    for name, values in rounds.items():
        spread = ", ".join(f"{v:,.0f}" for v in values)
        print(f"{name:<20}{result[name]:>14,}{spread:>40}")


if __name__ == "__main__":
    main()
