"""PySyncObj's highest sustained rate, measured the way its own benchmark does.

A 3-node cluster of a replicated append-only list, each node a process on
localhost that is also its own client (PySyncObj's `benchmarks/testobj.py`
shape): once there is a leader, every node calls the replicated `append`
rate/3 times a second with a 100-byte value for `seconds`, then waits for the
callbacks and exits with its success rate in percent. The highest rate at
which the average success rate is at least 90% is found by bisection, as in
PySyncObj's `benchmarks/benchmarks.py`. PySyncObj runs with its defaults, as
in its benchmark: the log in memory, no journal file, so nothing is fsynced.

    python bench/pysyncobj_cluster.py RATE SIZE SECONDS SELF PARTNER...   # one node (used by max_rate)
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable

from raftlog.app.launcher import free_ports

WARMUP_S = 2.0
DRAIN_S = 3.0
SUCCESS_MIN = 0.9


def run_node(rate: int, size: int, seconds: float, self_addr: str, partners: list[str]) -> int:
    from pysyncobj import FAIL_REASON, SyncObj, replicated  # the bench extra

    class AppendOnlyList(SyncObj):
        def __init__(self) -> None:
            super().__init__(self_addr, partners)
            self.entries: list[bytes] = []

        @replicated
        def append(self, value: bytes) -> int:
            self.entries.append(value)
            return len(self.entries) - 1

    sent = succeeded = 0

    def on_result(_result: object, error: object) -> None:
        nonlocal succeeded
        succeeded += error == FAIL_REASON.SUCCESS

    log = AppendOnlyList()
    while log._getLeader() is None:
        time.sleep(0.1)
    time.sleep(WARMUP_S)
    value = b"x" * size
    started = time.monotonic()
    while time.monotonic() - started < seconds:
        second = time.monotonic()
        for _ in range(rate):
            log.append(value, callback=on_result)
            sent += 1
        time.sleep(max(0.0, 1.0 - (time.monotonic() - second)))
    time.sleep(DRAIN_S)
    return int(100 * succeeded / max(sent, 1))


def success_rate(rate: int, size: int, seconds: float, nodes: int = 3) -> float:
    """Run one cluster at `rate` requests/s in all; the nodes' average success rate."""
    addrs = [f"127.0.0.1:{port}" for port in free_ports(nodes)]
    per_node = max(1, rate // nodes)
    processes = [subprocess.Popen([sys.executable, __file__, str(per_node), str(size), str(seconds), addr,
                                   *[a for a in addrs if a != addr]],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                  env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
                 for addr in addrs]
    try:
        codes = [p.wait(timeout=seconds + WARMUP_S + DRAIN_S + 60) for p in processes]
    finally:
        for p in processes:
            if p.poll() is None:
                p.kill()
                p.wait()
    return sum(codes) / len(codes) / 100


def max_rate(size: int = 100, seconds: float = 5.0, low: int = 100, high: int = 40_000, step: int = 250,
             log: Callable[[str], None] = print) -> int:
    """Bisect for the highest rate whose success rate is at least 90%."""
    while high - low > step:
        rate = (low + high) // 2
        ok = success_rate(rate, size, seconds)
        log(f"  pysyncobj: {rate:,} requests/s -> {ok:.0%} succeeded")
        low, high = (rate, high) if ok >= SUCCESS_MIN else (low, rate)
    return low


if __name__ == "__main__":
    rate_arg, size_arg, seconds_arg, self_arg, *partner_args = sys.argv[1:]
    sys.exit(run_node(int(rate_arg), int(size_arg), float(seconds_arg), self_arg, partner_args))
