"""A local 3-node cluster under load, driven from separate processes.

    python bench/cluster_bench.py [--seconds 10] [--rounds 3] [--json]

- single_append_rps: wrk, 64 connections, POST /v1/entries with 100-byte bodies, to the leader
- p50_ms, p99_ms: those appends' latency (request to committed answer)
- batch_append_eps: entries per second, binary batches of 1000 bodies of 100 bytes, 4 concurrent
  clients in this process
- get_rps: wrk, 64 connections, GET /v1/entries/{random committed index}, to a follower

The nodes run with their defaults (flush_mode sync: every acknowledged entry is
on a quorum of disks). Each figure is the median of --rounds runs, each on a
fresh cluster in a temporary directory. With --tokens the members check API
tokens and every request carries one (the price of auth). Needs wrk (`make
bench` installs it).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import secrets
import shutil
import statistics
import subprocess
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import httpx

from raftlog.api.bodies import BATCH_CONTENT_TYPE, encode_bodies
from raftlog.app.launcher import LocalCluster

HERE = Path(__file__).resolve().parent
BODY = b"x" * 100
BATCH = 1000
CONNECTIONS = 64
BATCH_CLIENTS = 4
TARGETS = {}  # issue 8 sets them


def wrk(url: str, script: str, seconds: int, env: dict[str, str] | None = None,
        connections: int = CONNECTIONS, threads: int | None = None) -> dict[str, float]:
    """Run wrk with one of this folder's scripts; its report (requests, duration, percentiles)."""
    run = subprocess.run(
        ["wrk", f"-t{threads or min(2, connections)}", f"-c{connections}", f"-d{seconds}s", "--timeout", "10s",
         "-s", str(HERE / script), url],
        capture_output=True, text=True, check=True,
        env={**os.environ, "WRK_REPORT": str(HERE / "wrk_report.lua"), **(env or {})})
    line = next(line for line in run.stdout.splitlines() if line.startswith("WRK_JSON "))
    report = json.loads(line.removeprefix("WRK_JSON "))
    if report["errors"]:
        raise RuntimeError(f"wrk saw {report['errors']} errors:\n{run.stdout}{run.stderr[-2000:]}")
    return report


def wrk_batches(url: str, size: int, seconds: int, connections: int, etcd: bool = False) -> dict[str, float]:
    """wrk posting batches of `size` bodies of BODY for `seconds`: raftlog's binary batches (the same
    bytes each time), or with `etcd` transactions of `size` puts under new keys; its report, with
    `entries` written. A load generator in C: one in Python here spent 40% of a core on 230 batches a
    second, on the same two cores as the members it measured."""
    if etcd:
        report = wrk(f"{url}/v3/kv/txn", "wrk_etcd_txn.lua", seconds,
                     {"WRK_VALUE_B64": base64.b64encode(BODY).decode(), "WRK_TXN_OPS": str(size)},
                     connections=connections)
    else:
        with tempfile.NamedTemporaryFile(prefix="raftlog-batch-") as batch:
            batch.write(encode_bodies([BODY] * size))
            batch.flush()
            report = wrk(f"{url}/v1/entries/batch", "wrk_batch.lua", seconds, {"WRK_BATCH_FILE": batch.name},
                         connections=connections)
    return {**report, "entries": report["requests"] * size}


Send = Callable[[httpx.AsyncClient], Awaitable[int]]


async def drive(send: Send, clients: int, stop: Callable[[int], bool]) -> tuple[int, float]:
    """`clients` loops of `send` (which returns the entries it wrote) until `stop(entries so far)`;
    (entries written, seconds taken)."""
    done = 0

    async def client() -> None:
        nonlocal done
        async with httpx.AsyncClient(timeout=30.0) as http:
            while not stop(done):
                written = await send(http)  # not `done += await ...`: that reads `done` before the await
                done += written

    started = time.monotonic()
    await asyncio.gather(*(client() for _ in range(clients)))
    return done, time.monotonic() - started


async def drive_for(send: Send, seconds: float, clients: int) -> float:
    """Entries per second that `clients` loops of `send` achieve in `seconds`."""
    deadline = time.monotonic() + seconds
    done, elapsed = await drive(send, clients, lambda _done: time.monotonic() >= deadline)
    return done / elapsed


def bearer(token: str | None) -> dict[str, str]:
    return {"authorization": f"Bearer {token}"} if token else {}


def raftlog_batch(url: str, size: int, token: str | None = None) -> Send:
    """A sender of binary batches of `size` bodies of BODY."""
    payload = encode_bodies([BODY] * size)
    headers = {"content-type": BATCH_CONTENT_TYPE, **bearer(token)}

    async def send(http: httpx.AsyncClient) -> int:
        response = await http.post(f"{url}/v1/entries/batch", content=payload, headers=headers)
        response.raise_for_status()
        return size

    return send


def one_round(seconds: int, tokens: bool) -> dict[str, float]:
    root = Path(tempfile.mkdtemp(prefix="raftlog-cluster-bench-"))
    token = secrets.token_hex(24) if tokens else None
    cluster = LocalCluster(root, 3, settings={"tokens": f"writer:{token}"} if token else {})
    auth = {"WRK_TOKEN": token} if token else {}
    try:
        cluster.start()
        leader_id = cluster.wait_leader()
        leader = cluster.members[leader_id].client_url
        follower = next(m.client_url for m in cluster.members.values() if m.id != leader_id)
        single = wrk(f"{leader}/v1/entries", "wrk_append.lua", seconds, auth)
        eps = asyncio.run(drive_for(raftlog_batch(leader, BATCH, token), seconds, BATCH_CLIENTS))
        committed = httpx.get(f"{follower}/v1/cluster", headers=bearer(token)).json()["committed_index"]
        gets = wrk(follower, "wrk_get.lua", seconds, {"WRK_MAX_INDEX": str(committed), **auth})
        return {
            "single_append_rps": single["requests"] / single["duration_us"] * 1e6,
            "batch_append_eps": eps,
            "get_rps": gets["requests"] / gets["duration_us"] * 1e6,
            "p50_ms": single["p50_us"] / 1000,
            "p99_ms": single["p99_us"] / 1000,
        }
    finally:
        cluster.stop()
        shutil.rmtree(root)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--seconds", type=int, default=10, help="length of each load phase")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--tokens", action="store_true", help="members check API tokens; requests carry one")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()
    if shutil.which("wrk") is None:
        raise SystemExit("wrk is not installed: run `make bench`, or apt-get install wrk")
    rounds = [one_round(args.seconds, args.tokens) for _ in range(args.rounds)]
    result: dict[str, float | int] = {
        name: round(statistics.median(r[name] for r in rounds), 3) for name in rounds[0]}
    result.update(nodes=3, connections=CONNECTIONS, body_bytes=len(BODY), batch=BATCH, seconds=args.seconds,
                  rounds=args.rounds, tokens=args.tokens)
    if args.json:
        print(json.dumps(result))
        return
    print(f"raftlog, local 3-node cluster, flush_mode sync{', API tokens' if args.tokens else ''}, "
          f"median of {args.rounds} rounds of {args.seconds} s")
    print(f"{'figure':<20}{'median':>14}{'rounds':>36}")
    for name in rounds[0]:
        spread = ", ".join(f"{r[name]:,.1f}" for r in rounds)
        print(f"{name:<20}{result[name]:>14,.1f}{spread:>36}")


if __name__ == "__main__":
    main()
