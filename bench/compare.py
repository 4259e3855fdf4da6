"""raftlog against etcd and PySyncObj, side by side on this machine in one run.

    python bench/compare.py [--seconds 10] [--rounds 3] [--kills 20] [--entries 10000000] [--quick] [--json]

Both raftlog (defaults: flush_mode sync) and etcd (defaults: fsync per write)
run as local 3-member clusters at the same time; each workload alternates
between them, raftlog then etcd, for --rounds rounds, and each figure is the
median of its rounds:

1. single appends of 100-byte bodies with wrk at 1, 16, 64 and 256 connections, to the leader
   (etcd: `POST /v3/kv/put`, a new key each time): requests/s and latency percentiles; then at 64
   connections to a follower, which forwards them to the leader (etcd's follower forwards its
   proposals too);
2. batch appends of 100 and 1000 bodies of 100 bytes, wrk with 16 connections (etcd: a transaction of
   puts, at most its `--max-txn-ops` of 128): entries/s;
3. linearizable reads by index (etcd: by key, among 10,000 written) with wrk, 64 connections, from a
   follower;
4. failover: under a load of single appends, SIGKILL the leader; time until a write through another
   member succeeds (--kills times each, the killed member restarted in between);
2b. raftlog alone: the same appends with and without producer sessions (bench/delivery_bench.py), taking
   turns: the CPU per entry that exactly-once costs;
2d. raftlog alone: a topic's messages against plain appends (bench/topics_bench.py), taking turns: the
   CPU per entry that topics cost, single at 64 connections and in batches of 1000;
5. raftlog alone: --entries entries appended in batches, each node's RSS sampled as the log grows;
   then each follower restarted in turn (a clean stop): time from its process start until it serves
   the last entry (restart_s_1gib, the median); then the whole cluster restarted at once, three
   processes starting on the same cores: time until all members serve under one leader;
then PySyncObj's highest sustained rate, with its own benchmark's method (bench/pysyncobj_cluster.py).

Every append phase is metered for CPU: the CPU time (utime + stime, from /proc/<pid>/stat) of all
three member processes during the phase, divided by the entries committed in it (raftlog: the
leader's committed index before and after, from /v1/cluster; etcd: the puts its client counted), in
µs per entry across the cluster, beside each rate.

Checks at start that wrk, etcd, PySyncObj and matplotlib are there (`make compare` installs them).
Prints a table with each figure, the ratio raftlog / peer and the target (issue 29's), and the
machine (lscpu's model line): etcd's own figures beside raftlog's tell a slower machine from a
slower raftlog. --json prints one object.
Writes PNG charts (throughput by connections, latency percentiles) and the JSON to bench/results/.
Every process it starts is stopped at the end, and its data directories removed.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import httpx
from client_bench import client_figures
from cluster_bench import (  # this folder's siblings: run as `python bench/compare.py`
    BODY,
    drive,
    raftlog_batch,
    wrk,
    wrk_batches,
)
from delivery_bench import idempotence
from etcd_cluster import EtcdCluster, b64
from measure import machine, median, metered, raftlog_metered, rate
from pysyncobj_cluster import max_rate
from topics_bench import topic_overhead

from raftlog.app.launcher import LocalCluster

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
CONNECTIONS = (1, 16, 64, 256)
BATCHES = (100, 1000)
BATCH_CLIENTS = 16
ETCD_TXN_OPS_MAX = 128  # etcd's default --max-txn-ops
READ_KEYS = 10_000
FAILOVER_LOAD_CONNECTIONS = 16
RSS_SAMPLES = 10

FORWARDED_CONNECTIONS = 64  # appends sent to a follower

Bound = float | str  # a number, or the name of another figure (etcd's)
TARGETS: dict[str, tuple[tuple[str, Bound], ...]] = {  # figure: its conditions, from issue 29
    "single_append_p50_ms_1conn": (("<=", "etcd_single_append_p50_ms_1conn"),),
    "cpu_us_per_entry_1conn": (("<=", "etcd_cpu_us_per_entry_1conn"),),
    "single_append_rps_ratio_vs_etcd": ((">=", 2.0),),
    "single_append_p99_ms_64conn": (("<=", "etcd_single_append_p99_ms_64conn"),),
    "forwarded_rps_ratio_vs_leader": ((">=", 0.8),),
    "forwarded_p50_ms_over_leader": (("<=", 1.0),),
    "batch_append_eps": ((">=", 300_000),),
    "cpu_us_per_entry_batch": (("<=", 6.0),),
    "ratio_vs_pysyncobj": ((">=", 10.0),),
    "failover_ms_p50": (("<", 400.0), ("<", "etcd_failover_ms_p50")),
    "restart_s_1gib": (("<", 2.0),),
    "session_cpu_overhead_single_64conn": (("<=", 0.10),),  # issue 31: what producer sessions cost
    "session_cpu_overhead_batch_1000": (("<=", 0.05),),
    "client_producer_eps": ((">=", 200_000),),  # issue 31: raftlog.client's Producer from one Python process
}

Log = Callable[[str], None]
T = TypeVar("T")
PERCENTILES = ("p50", "p90", "p99", "p999")


# -- clusters ------------------------------------------------------------------------------


@contextmanager
def clusters(root: Path, log: Log) -> Iterator[tuple[LocalCluster, EtcdCluster]]:
    raftlog, etcd = LocalCluster(root / "raftlog", 3), EtcdCluster(root / "etcd", 3)
    try:
        raftlog.start()
        etcd.start()
        log(f"raftlog leader {raftlog.wait_leader()}, etcd leader {etcd.wait_leader()}")
        yield raftlog, etcd
    finally:
        raftlog.stop()
        etcd.stop()


def raftlog_urls(cluster: LocalCluster) -> tuple[str, str]:
    """(leader's client URL, a follower's)."""
    leader = cluster.wait_leader()
    follower = next(m for m in cluster.members if m != leader and cluster.members[m].running)
    return cluster.members[leader].client_url, cluster.members[follower].client_url


def etcd_urls(cluster: EtcdCluster) -> tuple[str, str]:
    leader = cluster.wait_leader()
    follower = next(m for m in cluster.members if m != leader)
    return cluster.members[leader].client_url, cluster.members[follower].client_url


# -- etcd's CPU per entry --------------------------------------------------------------------


def etcd_metered(cluster: EtcdCluster, run: Callable[[], T], entries: Callable[[T], int]) -> tuple[T, float]:
    """run()'s result, and the CPU µs etcd's three members used per entry (put) its client counted."""
    result, cpu = metered(list(cluster.pids().values()), run)
    return result, cpu * 1e6 / entries(result)


# -- 1. single appends ---------------------------------------------------------------------


def single_summary(reports: list[dict[str, float]]) -> dict[str, float]:
    """The medians of one phase's rounds: requests/s, CPU µs per entry and latency percentiles in ms."""
    return {"rps": median([rate(r) for r in reports]), "cpu_us_per_entry": median([r["cpu_us_per_entry"]
                                                                                  for r in reports]),
            **{p: median([r[f"{p}_us"] / 1000 for r in reports]) for p in PERCENTILES}}


def single_round(raftlog: LocalCluster, etcd: EtcdCluster, seconds: int, connections: int,
                 forwarded: bool = False) -> tuple[dict[str, float], dict[str, float]]:
    """One wrk run on each system, metered for CPU (raftlog's, etcd's report): to the leader, or
    `forwarded` to a follower."""
    raftlog_leader, raftlog_follower = raftlog_urls(raftlog)
    etcd_leader, etcd_follower = etcd_urls(etcd)
    raftlog_target, etcd_target = (raftlog_follower, etcd_follower) if forwarded else (raftlog_leader, etcd_leader)

    def run_raftlog() -> dict[str, float]:
        return wrk(f"{raftlog_target}/v1/entries", "wrk_append.lua", seconds, connections=connections)

    def run_etcd() -> dict[str, float]:
        return wrk(etcd_target, "wrk_etcd_put.lua", seconds, {"WRK_VALUE_B64": b64(BODY)}, connections=connections)

    a, a_cpu = raftlog_metered(raftlog, raftlog_leader, run_raftlog)
    b, b_cpu = etcd_metered(etcd, run_etcd, lambda report: int(report["requests"]))
    return {**a, "cpu_us_per_entry": a_cpu}, {**b, "cpu_us_per_entry": b_cpu}


FORWARDED = "forwarded"  # the key of the phase to a follower, beside the connection counts


def single_appends(raftlog: LocalCluster, etcd: EtcdCluster, seconds: int, rounds: int,
                   log: Log) -> dict[str, dict[int | str, dict[str, float]]]:
    runs: dict[str, dict[int | str, list[dict[str, float]]]] = {"raftlog": {}, "etcd": {}}
    phases: list[tuple[int | str, int, bool]] = [(c, c, False) for c in CONNECTIONS]
    phases.append((FORWARDED, FORWARDED_CONNECTIONS, True))
    for _ in range(rounds):
        for key, connections, forwarded in phases:
            a, b = single_round(raftlog, etcd, seconds, connections, forwarded)
            runs["raftlog"].setdefault(key, []).append(a)
            runs["etcd"].setdefault(key, []).append(b)
            where = f"{connections} connections" + (" to a follower" if forwarded else "")
            log(f"  single appends, {where}: raftlog {rate(a):,.0f}/s, etcd {rate(b):,.0f}/s "
                f"(CPU µs per entry: raftlog {a['cpu_us_per_entry']:,.1f}, etcd {b['cpu_us_per_entry']:,.1f})")
    return {system: {c: single_summary(reports) for c, reports in by_phase.items()}
            for system, by_phase in runs.items()}


# -- 2. batch appends ----------------------------------------------------------------------


Medians = dict[str, dict[int, float]]  # system: batch size: the median of its rounds


def batch_appends(raftlog: LocalCluster, etcd: EtcdCluster, seconds: int, rounds: int,
                  log: Log) -> tuple[Medians, Medians]:
    """(entries/s, CPU µs per entry), by system and batch size."""
    runs: dict[str, dict[int, list[float]]] = {"raftlog": {}, "etcd": {}}
    cpu: dict[str, dict[int, list[float]]] = {"raftlog": {}, "etcd": {}}
    for _ in range(rounds):
        for size in BATCHES:
            raftlog_leader, _ = raftlog_urls(raftlog)
            etcd_leader, _ = etcd_urls(etcd)
            a, a_cpu = raftlog_metered(raftlog, raftlog_leader,
                                       partial(wrk_batches, raftlog_leader, size, seconds, BATCH_CLIENTS))
            b, b_cpu = etcd_metered(etcd, partial(wrk_batches, etcd_leader, min(size, ETCD_TXN_OPS_MAX), seconds,
                                                  BATCH_CLIENTS, etcd=True), lambda report: report["entries"])
            for system, eps, us in (("raftlog", a["entries"] / a["duration_us"] * 1e6, a_cpu),
                                    ("etcd", b["entries"] / b["duration_us"] * 1e6, b_cpu)):
                runs[system].setdefault(size, []).append(eps)
                cpu[system].setdefault(size, []).append(us)
            log(f"  batches of {size}: raftlog {runs['raftlog'][size][-1]:,.0f} entries/s, {a_cpu:,.1f} CPU µs per "
                f"entry; etcd {runs['etcd'][size][-1]:,.0f} entries/s, {b_cpu:,.1f} CPU µs per entry "
                f"(transactions of {min(size, ETCD_TXN_OPS_MAX)} puts)")

    def medians(by_system: dict[str, dict[int, list[float]]]) -> Medians:
        return {system: {size: median(values) for size, values in by_size.items()}
                for system, by_size in by_system.items()}

    return medians(runs), medians(cpu)


# -- 3. reads ------------------------------------------------------------------------------


def reads(raftlog: LocalCluster, etcd: EtcdCluster, seconds: int, rounds: int, log: Log) -> dict[str, float]:
    etcd_leader, etcd_follower = etcd_urls(etcd)
    for start in range(0, READ_KEYS, ETCD_TXN_OPS_MAX):  # keys base64_number(i, 8): 6 bytes, big-endian
        puts = [{"requestPut": {"key": b64(i.to_bytes(6, "big")), "value": b64(BODY)}}
                for i in range(start, min(start + ETCD_TXN_OPS_MAX, READ_KEYS))]
        httpx.post(f"{etcd_leader}/v3/kv/txn", json={"success": puts}, timeout=30).raise_for_status()
    runs: dict[str, list[float]] = {"raftlog": [], "etcd": []}
    for _ in range(rounds):
        _, raftlog_follower = raftlog_urls(raftlog)
        committed = httpx.get(f"{raftlog_follower}/v1/cluster").json()["committed_index"]
        a = rate(wrk(raftlog_follower, "wrk_get.lua", seconds, {"WRK_MAX_INDEX": str(committed)}))
        b = rate(wrk(etcd_follower, "wrk_etcd_range.lua", seconds, {"WRK_MAX_INDEX": str(READ_KEYS - 1)}))
        runs["raftlog"].append(a)
        runs["etcd"].append(b)
        log(f"  reads from a follower: raftlog {a:,.0f}/s by index, etcd {b:,.0f}/s by key")
    return {system: median(values) for system, values in runs.items()}


# -- 4. failover ---------------------------------------------------------------------------


def first_write_after(kill: Callable[[], None], urls: list[str], request: dict[str, Any], ok: int) -> float:
    """Kill, then write through each of `urls` in turn until one answers `ok`; ms from the kill to
    that answer. The connections stay open: a new client per try would add its own set-up (about
    50 ms here) to the time measured."""
    with httpx.Client(timeout=1.0) as client:
        def write() -> bool:
            for url in urls:
                try:
                    if client.post(url, **request).status_code == ok:
                        return True
                except httpx.HTTPError:
                    pass
            return False

        killed = time.monotonic()
        kill()
        while not write():
            time.sleep(0.005)
        return (time.monotonic() - killed) * 1000


@contextmanager
def background_load(url: str, script: str, env: dict[str, str] | None = None) -> Iterator[None]:
    """wrk writing through `url` for as long as the block runs; its errors are expected."""
    process = subprocess.Popen(
        ["wrk", "-t1", f"-c{FAILOVER_LOAD_CONNECTIONS}", "-d600s", "--timeout", "2s", "-s", str(HERE / script),
         url], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        env={**os.environ, "WRK_REPORT": str(HERE / "wrk_report.lua"), **(env or {})})
    try:
        yield
    finally:
        process.terminate()
        process.wait()


def raftlog_failover(cluster: LocalCluster) -> float:
    leader = cluster.wait_leader()
    others = [cluster.members[m].client_url for m in cluster.members if m != leader]
    with background_load(f"{others[0]}/v1/entries", "wrk_append.lua"):
        ms = first_write_after(lambda: cluster.kill_member(leader), [f"{url}/v1/entries" for url in others],
                               {"content": BODY}, 201)
    cluster.start_member(leader)
    cluster.wait_leader(timeout_s=60)
    return ms


def etcd_failover(cluster: EtcdCluster) -> float:
    leader = cluster.wait_leader()
    others = [cluster.members[m] for m in cluster.members if m != leader]
    with background_load(others[0].client_url, "wrk_etcd_put.lua", {"WRK_VALUE_B64": b64(BODY)}):
        ms = first_write_after(lambda: cluster.stop_member(leader, signal.SIGKILL),
                               [f"{member.client_url}/v3/kv/put" for member in others],
                               {"json": {"key": b64(b"failover"), "value": b64(BODY)}}, 200)
    cluster.start_member(leader)
    cluster.wait_leader(timeout_s=60)
    return ms


def failovers(raftlog: LocalCluster, etcd: EtcdCluster, kills: int, log: Log) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {"raftlog": [], "etcd": []}
    for i in range(kills):
        times["raftlog"].append(raftlog_failover(raftlog))
        times["etcd"].append(etcd_failover(etcd))
        log(f"  kill {i + 1}/{kills}: raftlog {times['raftlog'][-1]:,.0f} ms, etcd {times['etcd'][-1]:,.0f} ms")
    return times


# -- 5. a long log: memory and restart -----------------------------------------------------


def rss_mb(pid: int) -> dict[str, float]:
    """Resident memory of a process, MiB: all of it, and the anonymous part (Python's heap)
    apart from mapped file pages (the log's page cache that the process touched)."""
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, value = line.partition(":")
        if name in ("VmRSS", "RssAnon"):
            fields[name] = int(value.split()[0]) / 1024
    return {"rss": fields["VmRSS"], "anon": fields["RssAnon"]}


def raftlog_rss(cluster: LocalCluster) -> dict[str, float]:
    """The largest RSS among the members, and the largest anonymous part."""
    samples = [rss_mb(m.process.pid) for m in cluster.members.values() if m.process is not None]
    return {"rss": max(s["rss"] for s in samples), "anon": max(s["anon"] for s in samples)}


def long_log(cluster: LocalCluster, entries: int, log: Log) -> dict[str, Any]:
    """Append `entries`, sampling RSS as the log grows; then restart the cluster on that log."""
    leader, _ = raftlog_urls(cluster)
    step = -(-entries // RSS_SAMPLES)
    samples: list[dict[str, float]] = []
    started = time.monotonic()
    written = 0
    while written < entries:
        more, _ = asyncio.run(drive(raftlog_batch(leader, 1000), BATCH_CLIENTS, lambda done: done >= step))
        written += more
        samples.append({"entries": written, **raftlog_rss(cluster)})
        log(f"  {written:,} entries: RSS {samples[-1]['rss']:,.0f} MiB, "
            f"of it anonymous (Python objects) {samples[-1]['anon']:,.0f} MiB")
    load_eps = samples[-1]["entries"] / (time.monotonic() - started)
    log_gib = samples[-1]["entries"] * (48 + len(BODY)) / 2**30  # DLedger's 48-byte header + body
    last = httpx.get(f"{leader}/v1/cluster").json()["committed_index"]
    member_restarts = [restart_member(cluster, member, last) for member in followers(cluster)]
    log(f"  restart of one member on {log_gib:.2f} GiB of log, the others serving: "
        f"{', '.join(f'{s:.2f}' for s in member_restarts)} s from process start until it serves entry {last:,}")
    cluster.stop()  # SIGTERM: a clean stop, as for an upgrade
    started = time.monotonic()
    cluster.start()
    for member in cluster.members:
        cluster.wait_healthy(member, timeout_s=120)
    answering_s = time.monotonic() - started  # every process answers HTTP: its log is open
    leader, follower = raftlog_urls(cluster)  # one leader, every member caught up with it
    restart_s = time.monotonic() - started
    assert httpx.get(f"{follower}/v1/entries/{last}").status_code == 200
    log(f"  restart of the cluster, {log_gib:.2f} GiB of log each: every process answers after {answering_s:.2f} s, "
        f"every member serves (one leader, caught up) after {restart_s:.2f} s")
    return {"samples": samples, "load_eps": load_eps, "member_restart_s": member_restarts,
            "restart_s": restart_s, "answering_s": answering_s, "log_gib": log_gib}


def followers(cluster: LocalCluster) -> list[str]:
    leader = cluster.wait_leader()
    return [m for m in cluster.members if m != leader]


def restart_member(cluster: LocalCluster, member_id: str, last: int) -> float:
    """Seconds from a member's process start, after a clean stop, until it serves entry `last`
    (the issue's "time from process start to serving")."""
    cluster.stop_member(member_id)
    url = f"{cluster.members[member_id].client_url}/v1/entries/{last}"
    started = time.monotonic()
    cluster.start_member(member_id)
    while True:
        with suppress(httpx.HTTPError):
            if httpx.get(url, timeout=1.0).status_code == 200:
                return time.monotonic() - started
        if not cluster.members[member_id].running:
            raise RuntimeError(f"{member_id} exited on restart:\n{cluster.tail(member_id)}")
        time.sleep(0.01)


# -- the report ----------------------------------------------------------------------------


def figures(single: dict[str, dict[int | str, dict[str, float]]], batch: Medians, batch_cpu: Medians,
            read: dict[str, float], failover: dict[str, list[float]], long: dict[str, Any],
            pysyncobj_rps: int) -> dict[str, Any]:
    best_batch = max(batch["raftlog"].values())
    best_etcd_batch = max(batch["etcd"].values())
    rss = [s["rss"] for s in long["samples"]]
    anon = [s["anon"] for s in long["samples"]]
    ours, theirs, forwarded = single["raftlog"], single["etcd"], single["raftlog"][FORWARDED]
    return {
        "single_append_rps": ours[64]["rps"],
        "etcd_single_append_rps": theirs[64]["rps"],
        "single_append_rps_ratio_vs_etcd": ours[64]["rps"] / theirs[64]["rps"],
        "single_append_p99_ms_64conn": ours[64]["p99"],
        "etcd_single_append_p99_ms_64conn": theirs[64]["p99"],
        "single_append_p50_ms_1conn": ours[1]["p50"],
        "etcd_single_append_p50_ms_1conn": theirs[1]["p50"],
        "single_append_p50_ratio_vs_etcd_1conn": ours[1]["p50"] / theirs[1]["p50"],
        "cpu_us_per_entry_1conn": ours[1]["cpu_us_per_entry"],
        "etcd_cpu_us_per_entry_1conn": theirs[1]["cpu_us_per_entry"],
        "cpu_us_per_entry_single": ours[64]["cpu_us_per_entry"],
        "etcd_cpu_us_per_entry_single": theirs[64]["cpu_us_per_entry"],
        "forwarded_rps": forwarded["rps"],
        "forwarded_rps_ratio_vs_leader": forwarded["rps"] / ours[FORWARDED_CONNECTIONS]["rps"],
        "forwarded_p50_ms_over_leader": forwarded["p50"] - ours[FORWARDED_CONNECTIONS]["p50"],
        "cpu_us_per_entry_forwarded": forwarded["cpu_us_per_entry"],
        "cpu_us_per_entry_batch": batch_cpu["raftlog"][1000],
        "etcd_cpu_us_per_entry_batch": batch_cpu["etcd"][1000],
        "cpu_us_per_entry_batch_100": batch_cpu["raftlog"][100],
        "etcd_cpu_us_per_entry_batch_100": batch_cpu["etcd"][100],
        "batch_append_eps": best_batch,
        "etcd_batch_eps": best_etcd_batch,
        "batch_ratio_vs_etcd": best_batch / best_etcd_batch,
        "etcd_single_put_rps_best": max(v["rps"] for v in theirs.values()),
        "batch_ratio_vs_etcd_puts": best_batch / max(v["rps"] for v in theirs.values()),
        "pysyncobj_max_rps": pysyncobj_rps,
        "ratio_vs_pysyncobj": best_batch / pysyncobj_rps,
        "single_ratio_vs_pysyncobj": ours[64]["rps"] / pysyncobj_rps,
        "read_rps": read["raftlog"],
        "etcd_read_rps": read["etcd"],
        "read_ratio_vs_etcd": read["raftlog"] / read["etcd"],
        "failover_ms_p50": median(failover["raftlog"]),
        "failover_ms_max": max(failover["raftlog"]),
        "etcd_failover_ms_p50": median(failover["etcd"]),
        "etcd_failover_ms_max": max(failover["etcd"]),
        "restart_s_1gib": median(long["member_restart_s"]),
        "member_restart_s": long["member_restart_s"],
        "cluster_restart_s": long["restart_s"],
        "cluster_restart_answering_s": long["answering_s"],
        "log_gib": long["log_gib"],
        "rss_mb_10m": rss[-1],
        "rss_mb_first_sample": rss[0],
        "rss_first_sample_entries": long["samples"][0]["entries"],
        "rss_anon_mb_10m": anon[-1],
        "rss_anon_mb_first_sample": anon[0],
        "long_log_entries": long["samples"][-1]["entries"],
        "long_log_load_eps": long["load_eps"],
    }


COMPARISONS: dict[str, Callable[[float, float], bool]] = {
    ">=": lambda a, b: a >= b, "<=": lambda a, b: a <= b, "<": lambda a, b: a < b}


def meets(name: str, result: dict[str, Any]) -> bool:
    """Whether a figure meets all its conditions; a bound that names a figure is that figure's value."""
    return all(COMPARISONS[op](result[name], result[bound] if isinstance(bound, str) else bound)
               for op, bound in TARGETS[name])


def goal(name: str) -> str:
    """A figure's conditions as text; a bound that names a figure is etcd's."""
    return " and ".join(f"{op} {'etcd' if isinstance(bound, str) else f'{bound:,}'}" for op, bound in TARGETS[name])


def row(label: str, raftlog: float, peer: float | None = None, fmt: str = ",.0f") -> str:
    line = f"{label:<46}{raftlog:>14{fmt}}"
    if peer is not None:
        line += f"{peer:>14{fmt}}{raftlog / peer:>9.2f}"
    return line


def print_table(result: dict[str, Any]) -> None:
    single, batch, cpu = result["single"], result["batch"], result["batch_cpu_us_per_entry"]
    print(f"\nraftlog against etcd {result['etcd_version']} and PySyncObj {result['pysyncobj_version']}, "
          f"3 members each on one {os.cpu_count()}-core machine ({result['machine']}); medians of "
          f"{result['rounds']} rounds of {result['seconds']} s")
    print(f"{'figure':<46}{'raftlog':>14}{'etcd':>14}{'ratio':>9}")
    for c in (*CONNECTIONS, FORWARDED):
        a, b = single["raftlog"][c], single["etcd"][c]
        where = f"{FORWARDED_CONNECTIONS} connections to a follower" if c == FORWARDED else f"{c} connections"
        print(row(f"single appends/s, {where}", a["rps"], b["rps"]))
        print(row("  CPU µs per entry, all members", a["cpu_us_per_entry"], b["cpu_us_per_entry"], ",.1f"))
        for p in ("p50", "p99"):
            print(row(f"  latency {p}, ms", a[p], b[p], ",.2f"))
    for size in BATCHES:
        print(row(f"batch appends, entries/s, batches of {size}", batch["raftlog"][size], batch["etcd"][size]))
        print(row("  CPU µs per entry, all members", cpu["raftlog"][size], cpu["etcd"][size], ",.1f"))
    topics = result["topics"]
    for name, label in (("single", "single, 64 connections"), ("batch", "batches of 1000")):
        print(row(f"topic messages / plain appends, CPU per entry, {label}", topics[f"{name}_ratio"], fmt=",.2f"))
    print(row("reads/s from a follower, 64 connections", result["read_rps"], result["etcd_read_rps"]))
    print(row("failover ms, median", result["failover_ms_p50"], result["etcd_failover_ms_p50"]))
    print(row("failover ms, worst", result["failover_ms_max"], result["etcd_failover_ms_max"]))
    print(row("raftlog batch entries/s / PySyncObj max rps", result["batch_append_eps"], result["pysyncobj_max_rps"]))
    gib = result["log_gib"]
    print(row(f"restart s of a member, {gib:.2f} GiB of log, until it serves", result["restart_s_1gib"], fmt=",.2f"))
    print(row(f"restart s of the whole cluster, {gib:.2f} GiB each, until served", result["cluster_restart_s"],
              fmt=",.2f"))
    print(row("  until every process answers HTTP", result["cluster_restart_answering_s"], fmt=",.2f"))
    first = result["rss_first_sample_entries"]
    print(row(f"RSS MiB after {first:,} entries", result["rss_mb_first_sample"]))
    print(row(f"RSS MiB after {result['long_log_entries']:,} entries", result["rss_mb_10m"]))
    print(row("  of it anonymous (Python objects)", result["rss_anon_mb_10m"]))
    print(f"\n{'target':<40}{'measured':>14}  {'goal':<24}met")
    for name in TARGETS:
        print(f"{name:<40}{result[name]:>14,.2f}  {goal(name):<24}{'yes' if result['targets_met'][name] else 'NO'}")


def charts(result: dict[str, Any], out: Path) -> list[Path]:
    import matplotlib  # the bench extra

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out.mkdir(parents=True, exist_ok=True)
    single = result["single"]
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for system in ("raftlog", "etcd"):
        ax.plot(CONNECTIONS, [single[system][c]["rps"] for c in CONNECTIONS], marker="o", label=system)
    ax.set(xscale="log", xlabel="connections", ylabel="single appends per second (100 B)",
           title="Single appends, 3 members, flush to disk on a quorum")
    ax.set_xticks(CONNECTIONS, [str(c) for c in CONNECTIONS])
    ax.legend()
    ax.grid(alpha=0.3)
    throughput = out / "throughput.png"
    fig.savefig(throughput, dpi=100, bbox_inches="tight")
    plt.close(fig)

    fig, axes = plt.subplots(1, len(CONNECTIONS), figsize=(13, 4), sharey=True)
    percentiles = PERCENTILES
    for ax, c in zip(axes, CONNECTIONS, strict=True):
        for offset, system in ((-0.2, "raftlog"), (0.2, "etcd")):
            ax.bar([i + offset for i in range(len(percentiles))], [single[system][c][p] for p in percentiles],
                   width=0.4, label=system)
        ax.set_xticks(range(len(percentiles)), percentiles)
        ax.set_title(f"{c} connection{'s' if c > 1 else ''}")
        ax.set_yscale("log")
        ax.grid(alpha=0.3, axis="y")
    axes[0].set_ylabel("latency, ms (log scale)")
    axes[0].legend()
    fig.suptitle("Single append latency percentiles")
    latency = out / "latency.png"
    fig.savefig(latency, dpi=100, bbox_inches="tight")
    plt.close(fig)
    return [throughput, latency]


def check_installed() -> None:
    """Fail at once, not after minutes of load, when a tool or the bench extra is missing."""
    missing = [tool for tool in ("wrk", "etcd") if shutil.which(tool) is None]
    missing += [module for module in ("pysyncobj", "matplotlib") if importlib.util.find_spec(module) is None]
    if missing:
        raise SystemExit(f"{', '.join(missing)} not installed: run `make compare`, which installs wrk, "
                         "etcd-server and the bench extra")


def versions() -> dict[str, str]:
    from importlib.metadata import version

    etcd = subprocess.run(["etcd", "--version"], capture_output=True, text=True).stdout.split()[2]
    return {"etcd_version": etcd, "pysyncobj_version": version("pysyncobj")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--seconds", type=int, default=10, help="length of each load phase")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--kills", type=int, default=20, help="leader kills per system")
    parser.add_argument("--entries", type=int, default=10_000_000, help="entries for the memory and restart figures")
    parser.add_argument("--pysyncobj-seconds", type=float, default=5.0, help="length of each PySyncObj trial")
    parser.add_argument("--quick", action="store_true", help="3 s phases, 1 round, 3 kills, 1M entries")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--keep", type=Path, help="keep the clusters' data and logs here")
    args = parser.parse_args()
    if args.quick:
        args.seconds, args.rounds, args.kills, args.entries, args.pysyncobj_seconds = 3, 1, 3, 1_000_000, 3.0
    check_installed()

    def log(line: str) -> None:
        print(line, flush=True, file=sys.stderr if args.json else sys.stdout)

    root = args.keep or Path(tempfile.mkdtemp(prefix="raftlog-compare-"))
    try:
        log("PySyncObj: bisecting for its highest rate with at least 90% of requests succeeding")
        pysyncobj_rps = max_rate(seconds=args.pysyncobj_seconds, log=log)
        with clusters(root, log) as (raftlog, etcd):
            log("1. single appends")
            single = single_appends(raftlog, etcd, args.seconds, args.rounds, log)
            log("2. batch appends")
            batch, batch_cpu = batch_appends(raftlog, etcd, args.seconds, args.rounds, log)
            log("2b. producer sessions against the same appends without (bench/delivery_bench.py)")
            sessions = idempotence(raftlog, args.seconds, args.rounds, log)
            log("2d. a topic's messages against plain appends (bench/topics_bench.py)")
            topics = topic_overhead(raftlog, args.seconds, args.rounds, log)
            log("2c. the Python client from one process: a producer and a consumer (bench/client_bench.py)")
            client = client_figures(raftlog, 1_000_000 if not args.quick else 200_000, args.rounds, log)
            log("3. reads")
            read = reads(raftlog, etcd, args.seconds, args.rounds, log)
            log("4. failover")
            failover = failovers(raftlog, etcd, args.kills, log)
            etcd_rss = max(rss_mb(pid)["rss"] for pid in etcd.pids().values())
            etcd.stop()
            log("5. a long log: memory and restart")
            long = long_log(raftlog, args.entries, log)
    finally:
        if args.keep is None:
            shutil.rmtree(root, ignore_errors=True)
    result: dict[str, Any] = {**figures(single, batch, batch_cpu, read, failover, long, pysyncobj_rps),
                              **versions(), "machine": machine(), "etcd_rss_mb_after_run": etcd_rss,
                              "seconds": args.seconds, "rounds": args.rounds, "kills": args.kills, "single": single,
                              "batch": batch, "batch_cpu_us_per_entry": batch_cpu,
                              "failover_ms": failover, "rss_samples": long["samples"], "sessions": sessions,
                              "session_cpu_overhead_single_64conn":
                                  sessions["single appends, 64 connections"]["cpu_overhead"],
                              "session_cpu_overhead_batch_1000":
                                  sessions["batches of 1000, 16 connections"]["cpu_overhead"],
                              "topics": topics, "topic_cpu_ratio_single_64conn": topics["single_ratio"],
                              "topic_cpu_ratio_batch_1000": topics["batch_ratio"],
                              "client": client, "client_producer_eps": client["produce (httpx)"]["eps"],
                              "client_consumer_eps": client["follow (httpx, named consumer)"]["eps"]}
    result["targets_met"] = {name: meets(name, result) for name in TARGETS}
    paths = charts(result, RESULTS)
    (RESULTS / "compare.json").write_text(json.dumps(result, indent=1))
    if args.json:
        print(json.dumps(result))
    else:
        print_table(result)
        print(f"\ncharts: {', '.join(str(p.relative_to(HERE.parent)) for p in paths)}; "
              f"all figures: bench/results/compare.json")


if __name__ == "__main__":
    main()
