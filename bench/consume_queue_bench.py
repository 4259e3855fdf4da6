"""Consume queues: the dispatcher's rate, a read by queue offset, and what many small queues cost.

    python bench/consume_queue_bench.py [--quick] [--json] [--rounds N] [--dir PATH]

- dispatch: units built from index records and tags codes read from mapped data files (entries of
  100 bytes, in 64 MiB files), then appended: 8 queues, runs of 1000, 1,000,000 units in all
  (200,000 with --quick); each figure the median of --rounds rounds.
- reads: unit(offset) at random offsets of one queue of 10,000,000 units (1,000,000 with --quick),
  warm: in mapped full files, and in the file still growing (pread); units(offset, 32), a page.
- many queues: 10,000 topics x 8 queues, one unit each (1,000 topics with --quick): dispatch and
  flush, then in a fresh process the set's open, its recover (every queue's end checked), the RSS
  after each, and the disk the root takes (du).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from raftlog.storage.codec import INDEX_RECORD, place
from raftlog.storage.consume_queue import UNIT, ConsumeQueue, units_of
from raftlog.storage.consume_queues import TAGS_CODE_AT, ConsumeQueues, DispatchedPoint, tags_codes_of
from raftlog.storage.segments import SegmentList

ENTRY_SIZE = 100
DATA_FILE_SIZE = 64 << 20
QUEUES = 8
RUN = 1000
PAGE = 32


def rss_mib() -> float:
    line = next(line for line in Path("/proc/self/status").read_text().splitlines() if line.startswith("VmRSS"))
    return int(line.split()[1]) / 1024


def log_of(root: Path, entries: int) -> tuple[SegmentList, bytes]:
    """Data files holding a tags code in each 100-byte entry, placed as the log places them, and the
    entries' index records."""
    positions = []
    pos = 0
    for _ in range(entries):
        pos = place(pos, ENTRY_SIZE, DATA_FILE_SIZE) or 0
        positions.append(pos)
        pos += ENTRY_SIZE
    data = SegmentList(root / "data", DATA_FILE_SIZE)
    data.load()
    while data.end < pos:
        data.create(data.end)
    for i, pos in enumerate(positions):
        data.view(pos + TAGS_CODE_AT, 8)[:] = (i * 0x9E3779B97F4A7C15 % (1 << 64)).to_bytes(8, "big")
    records = b"".join(INDEX_RECORD.pack(9, pos, ENTRY_SIZE, i, 1) for i, pos in enumerate(positions))
    return data, records


def dispatch_round(root: Path, data: SegmentList, records: bytes) -> dict[str, float]:
    """Each run takes RUN consecutive entries for one queue, the queues in turn."""
    view = memoryview(records)
    runs = len(records) // INDEX_RECORD.size // RUN
    spans = [view[r * RUN * INDEX_RECORD.size:(r + 1) * RUN * INDEX_RECORD.size] for r in range(runs)]
    started = time.perf_counter()
    built = [units_of(span, tags_codes_of(span, data)) for span in spans]
    build_s = time.perf_counter() - started
    queues = ConsumeQueues(root / "cq")
    started = time.perf_counter()
    for r in range(0, runs, QUEUES):
        batch = [(1, q, (r // QUEUES) * RUN, units_of(spans[r + q], tags_codes_of(spans[r + q], data)))
                 for q in range(min(QUEUES, runs - r))]
        last = (r + len(batch)) * RUN - 1
        queues.dispatch(batch, DispatchedPoint(last, INDEX_RECORD.unpack_from(records, last * INDEX_RECORD.size)[1]))
    dispatch_s = time.perf_counter() - started
    started = time.perf_counter()
    queues.flush()
    flush_s = time.perf_counter() - started
    assert queues.queue(1, QUEUES - 1).units(0, 1) == built[QUEUES - 1][:UNIT.size]
    queues.close()
    units = runs * RUN
    return {"build_units_per_s": units / build_s, "dispatch_units_per_s": units / dispatch_s, "flush_s": flush_s}


def reads(root: Path, units: int) -> dict[str, float]:
    cq = ConsumeQueue(root / "long", 0)
    chunk = 100_000
    for first in range(0, units, chunk):
        cq.append(first, b"".join(UNIT.pack(i * ENTRY_SIZE, ENTRY_SIZE, i) for i in range(first, first + chunk)))
    last_start = cq.grid.start_of(cq.grid.file_of(units - 1))
    figures = {}
    for name, lo in (("unit_read_us", 0), ("unit_read_growing_file_us", last_start)):
        offsets = [random.randrange(lo, units) for _ in range(200_000)]
        for offset in offsets:  # warm: map the files, fault their pages in
            cq.unit(offset)
        started = time.perf_counter()
        for offset in offsets:
            cq.unit(offset)
        figures[name] = (time.perf_counter() - started) / len(offsets) * 1e6
    offsets = [random.randrange(0, units - PAGE) for _ in range(200_000)]
    started = time.perf_counter()
    for offset in offsets:
        cq.units(offset, PAGE)
    figures["page_read_us"] = (time.perf_counter() - started) / len(offsets) * 1e6
    assert cq.unit(units - 1) == ((units - 1) * ENTRY_SIZE, ENTRY_SIZE, units - 1)
    cq.close_files()
    return figures


def many_queues(root: Path, topics: int) -> dict[str, float]:
    queues = ConsumeQueues(root / "many")
    started = time.perf_counter()
    queues.dispatch([(t, q, 0, UNIT.pack(t * 8 + q, ENTRY_SIZE, 0)) for t in range(topics) for q in range(8)],
                    DispatchedPoint(topics * 8 - 1, (topics * 8 - 1) * ENTRY_SIZE))
    dispatch_s = time.perf_counter() - started
    started = time.perf_counter()
    queues.close()
    figures = {"many_dispatch_s": dispatch_s, "many_flush_s": time.perf_counter() - started}
    out = subprocess.run([sys.executable, __file__, "--open", str(root / "many"), str(topics)],
                         capture_output=True, text=True, check=True).stdout
    figures.update(json.loads(out))
    du = subprocess.run(["du", "-sk", str(root / "many")], capture_output=True, text=True, check=True).stdout
    figures["many_disk_mib"] = int(du.split()[0]) / 1024
    return figures


def open_many(root: Path, topics: int) -> None:
    """In a fresh process: open the set, recover it, read each queue's unit once."""
    figures = {"rss_before_open_mib": rss_mib()}
    started = time.perf_counter()
    queues = ConsumeQueues(root)
    figures["many_open_s"] = time.perf_counter() - started
    figures["many_rss_after_open_mib"] = rss_mib()
    started = time.perf_counter()
    queues.recover(topics * 8 * ENTRY_SIZE)
    figures["many_recover_s"] = time.perf_counter() - started
    figures["many_rss_after_recover_mib"] = rss_mib()
    started = time.perf_counter()
    assert all(queues.queue(t, q).unit(0)[0] == t * 8 + q for t in range(topics) for q in range(8))
    figures["many_read_each_s"] = time.perf_counter() - started
    figures["many_rss_after_reads_mib"] = rss_mib()
    queues.close()
    print(json.dumps(figures))


TARGETS = {"dispatch_units_per_s": ">= 1,000,000", "many_open_s": "< 2", "many_rss_after_reads_mib": "<= 100",
           "many_disk_mib": "<= 1024"}


def main() -> None:
    if len(sys.argv) == 4 and sys.argv[1] == "--open":
        open_many(Path(sys.argv[2]), int(sys.argv[3]))
        return
    from measure import machine  # this folder's sibling (run as a script); here, not in the process that opens
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="a fifth of the units and a tenth of the topics")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--dir", type=Path, default=None, help="where to put the temporary files")
    args = parser.parse_args()
    entries = 200_000 if args.quick else 1_000_000
    root = Path(tempfile.mkdtemp(prefix="raftlog-cq-bench-", dir=args.dir))
    try:
        data, records = log_of(root, entries)
        rounds = []
        for i in range(args.rounds):
            rounds.append(dispatch_round(root / f"round-{i}", data, records))
            shutil.rmtree(root / f"round-{i}")
        data.close()
        result: dict[str, float | int | str] = {
            name: round(statistics.median(r[name] for r in rounds), 3) for name in rounds[0]}
        result.update({name: round(value, 3) for name, value in reads(root, 1_000_000 if args.quick
                                                                       else 10_000_000).items()})
        shutil.rmtree(root / "long")
        result.update({name: round(value, 3) for name, value in many_queues(root, 1_000 if args.quick
                                                                             else 10_000).items()})
    finally:
        shutil.rmtree(root)
    result.update({"units": entries, "run": RUN, "queues": QUEUES, "rounds": args.rounds, "cpu": machine(),
                   "cores": os.cpu_count() or 0})
    if args.json:
        print(json.dumps(result))
        return
    print(f"raftlog consume queues, {result['cpu']} ({result['cores']} cores); dispatch: {entries:,} units, "
          f"{QUEUES} queues, runs of {RUN}, median of {args.rounds} rounds")
    print(f"{'figure':<28}{'value':>16}{'target':>14}")
    for name, value in result.items():
        if isinstance(value, float):
            print(f"{name:<28}{value:>16,.3f}{TARGETS.get(name, ''):>14}")


if __name__ == "__main__":
    main()
