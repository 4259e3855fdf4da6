"""Storage engine throughput: appends, reads, recovery and group-commit flushes.

    python bench/storage_bench.py [--quick] [--json] [--rounds N] [--dir PATH]

Bodies of 100 bytes, batches of 1000, one million entries (100,000 with
--quick), DLedger's default file sizes, on a temporary directory that is
removed afterwards. Each figure is the median of --rounds runs (default 3).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from raftlog.storage import Store, StoreConfig, clean_stop

BODY_SIZE = 100
BATCH = 1000


async def one_round(root: Path, entries: int) -> dict[str, float]:
    config = StoreConfig()
    bodies = [random.randbytes(BODY_SIZE) for _ in range(BATCH)]
    batches = entries // BATCH
    leader = Store.open(root / "leader", config)
    follower = Store.open(root / "follower", config)
    figures: dict[str, float] = {}
    try:
        started = time.perf_counter()
        for _ in range(batches):
            await leader.append_as_leader(bodies, term=1)
        figures["leader_append_eps"] = batches * BATCH / (time.perf_counter() - started)

        pushes = []
        index = 0
        while index <= leader.end_index:
            raw = leader.read_range(index, BATCH, 1 << 20)
            pushes.append(raw.data)
            index += raw.count
        started = time.perf_counter()
        for data in pushes:
            await follower.append_as_follower(data)
        figures["follower_append_eps"] = (follower.end_index + 1) / (time.perf_counter() - started)

        picks = [random.randrange(leader.end_index + 1) for _ in range(min(entries, 200_000))]
        started = time.perf_counter()
        for i in picks:
            leader.get(i)
        figures["get_ops"] = len(picks) / (time.perf_counter() - started)

        started = time.perf_counter()
        total = index = 0
        while index <= leader.end_index:
            raw = leader.read_range(index, 1 << 20, 1 << 20)
            total += len(raw.data)
            index += raw.count
        figures["range_read_mbps"] = total / (1 << 20) / (time.perf_counter() - started)

        flushes = []
        await leader.flush()
        for _ in range(20):
            await leader.append_as_leader(bodies, term=1)
            started = time.perf_counter()
            await leader.flush()
            flushes.append((time.perf_counter() - started) * 1000)
        figures["sync_flush_batch_ms"] = statistics.median(flushes)
    finally:
        await leader.close()
        await follower.close()

    reopens, clean_reopens = [], []
    for _ in range(3):  # the first open after writing also pays for mapping the pages
        (root / "leader" / clean_stop.NAME).unlink()  # as after a crash: scan
        started = time.perf_counter()
        reopened = Store.open(root / "leader", config)
        reopens.append((time.perf_counter() - started, reopened.recovery.entries_scanned))
        await reopened.close()
        started = time.perf_counter()
        reopened = Store.open(root / "leader", config)  # after a clean close: no scan
        clean_reopens.append(time.perf_counter() - started)
        await reopened.close()
    elapsed, scanned = sorted(reopens)[1]
    figures["recovery_eps"] = scanned / elapsed
    figures["recovery_s"] = elapsed
    figures["clean_reopen_s"] = statistics.median(clean_reopens)
    return figures


TARGETS = {
    "leader_append_eps": 500_000,
    "follower_append_eps": 500_000,
    "get_ops": 200_000,
    "recovery_eps": 500_000,
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="100,000 entries instead of 1,000,000")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--dir", type=Path, default=None, help="where to put the temporary logs")
    args = parser.parse_args()
    entries = 100_000 if args.quick else 1_000_000
    rounds = []
    for _ in range(args.rounds):
        root = Path(tempfile.mkdtemp(prefix="raftlog-bench-", dir=args.dir))
        try:
            rounds.append(asyncio.run(one_round(root, entries)))
        finally:
            shutil.rmtree(root)
    result: dict[str, float | int] = {
        name: round(statistics.median(r[name] for r in rounds), 3) for name in rounds[0]}
    result["entries"] = entries
    result["body_bytes"] = BODY_SIZE
    result["batch"] = BATCH
    result["rounds"] = args.rounds
    if args.json:
        print(json.dumps(result))
        return
    print(f"raftlog storage, {entries:,} entries of {BODY_SIZE} B, batches of {BATCH}, "
          f"median of {args.rounds} rounds")
    print(f"{'figure':<22}{'median':>16}{'target':>14}")
    for name in rounds[0]:
        target = TARGETS.get(name)
        print(f"{name:<22}{result[name]:>16,.3f}{(f'>= {target:,}' if target else ''):>14}")


if __name__ == "__main__":
    main()
