"""What every bench measures with: CPU time from /proc, committed entries, rates and the machine.

A change is judged by CPU per entry, all processes, not by rates (docs/benchmarks.md): machines here
differ by 30% in speed from one session to the next.
"""

from __future__ import annotations

import os
import statistics
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import httpx

from raftlog.app.launcher import LocalCluster

T = TypeVar("T")
CLOCK_TICKS_S = os.sysconf("SC_CLK_TCK")  # /proc/<pid>/stat counts CPU time in these


def median(values: list[float]) -> float:
    return statistics.median(values)


def cpu_s(pids: list[int]) -> float:
    """CPU seconds (user + system, all threads) the processes have used so far, from /proc/<pid>/stat."""
    ticks = 0
    for pid in pids:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
        ticks += int(fields[11]) + int(fields[12])  # utime and stime: fields 14 and 15 in proc(5)
    return ticks / CLOCK_TICKS_S


def metered(pids: list[int], run: Callable[[], T]) -> tuple[T, float]:
    """run()'s result, and the CPU seconds the processes used while it ran."""
    before = cpu_s(pids)
    result = run()
    return result, cpu_s(pids) - before


def committed_index(url: str) -> int:
    return int(httpx.get(f"{url}/v1/cluster", timeout=10.0).json()["committed_index"])


def raftlog_metered(cluster: LocalCluster, leader_url: str, run: Callable[[], T]) -> tuple[T, float]:
    """run()'s result, and the CPU µs the three members used per entry committed while it ran
    (the leader's committed index, read before and after, outside the metered time)."""
    pids = [m.process.pid for m in cluster.members.values() if m.process is not None]
    first = committed_index(leader_url)
    result, cpu = metered(pids, run)
    entries = committed_index(leader_url) - first
    assert entries > 0, "nothing committed during a metered phase"
    return result, cpu * 1e6 / entries


def rate(report: dict[str, float]) -> float:
    return report["requests"] / report["duration_us"] * 1e6


def machine() -> str:
    """lscpu's model line: figures from a slower machine are not a slower raftlog."""
    out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    return next((line.split(":", 1)[1].strip() for line in out.splitlines() if line.startswith("Model name")), "?")
