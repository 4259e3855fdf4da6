"""A read by queue offset against a read by index of the same message, in a queue of 10 million.

    python bench/queue_read_bench.py [--messages N] [--samples N] [--json] [--dir PATH] [--keep PATH]

The log is built in process: MESSAGE entries of one queue (a 100-byte body, an 8-byte key and one
8-byte tag each) written by the store's leader append in batches of 10,000, their units dispatched
into the consume queue as the dispatcher does (Store.message_units, ConsumeQueues.dispatch), and
flushed. `--keep PATH` builds there once and reuses it on the next run.

Then, at random offsets of the queue, warm (each sample read once before the timed rounds), p50 and
p99 of one read each way, the two taken in turns, in alternating order:
- store: `Store.get(index)` against the queue's unit, then `Store.get_at(pos)`;
- plan: the API's read plans with local consistency, as REST's and gRPC's Get call them:
  `LogReads.one` by index against `QueueReads.one` by queue offset, each down to its record.
The target (issue 45): the read by queue offset's p50 within 10% of the read by index's.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from raftlog.api.consumers import ConsumerCommits
from raftlog.api.limits import ApiLimits
from raftlog.api.queue_reads import QueueRead, QueueReads
from raftlog.api.read_plan import LogRead, LogReads
from raftlog.api.service import LogService
from raftlog.api.topics import TopicService
from raftlog.raft.topics import Topic
from raftlog.storage import Store, StoreConfig
from raftlog.storage.codec import Magic
from raftlog.storage.consume_queues import ConsumeQueues, DispatchedPoint
from raftlog.storage.message import Meta, encode_message

TOPIC_ID = 1
QUEUE = 0
BATCH = 10_000
META = Meta.of(["customer"], ["tagged-1"])  # an 8-byte key and one 8-byte tag
BODY = bytes(range(100))
TARGET = 1.10  # the queue read's p50 at most this times the index read's


def build(root: Path, messages: int) -> None:
    """The log and its consume queue, unless `root` holds them already."""
    if (root / "built.json").exists():
        return
    shutil.rmtree(root, ignore_errors=True)
    asyncio.run(_build(root, messages))
    (root / "built.json").write_text(json.dumps({"messages": messages}))


async def _build(root: Path, messages: int) -> None:
    store = Store.open(root / "log", StoreConfig())
    queues = ConsumeQueues(root / "consumequeue")
    meta, code = META.encode(), META.tags_code
    started = time.perf_counter()
    try:
        for first in range(0, messages, BATCH):
            count = min(BATCH, messages - first)
            bodies = [encode_message(TOPIC_ID, QUEUE, offset, meta, code, BODY)
                      for offset in range(first, first + count)]
            appended = await store.append_as_leader(bodies, term=1, magic=Magic.MESSAGE)
            last = appended.first_index + count - 1
            queues.dispatch([(TOPIC_ID, QUEUE, first, store.message_units(appended.first_index, last))],
                            DispatchedPoint(last, store.pos_at(last)))
            if first // BATCH % 100 == 99:
                await store.flush()
                queues.flush()
                print(f"built {first + count:,} messages in {time.perf_counter() - started:.0f} s", file=sys.stderr)
        await store.flush()
    finally:
        queues.close()
        await store.close()


def timed(samples: list[int], one: Callable[[int], Any]) -> list[float]:
    times = []
    for sample in samples:
        started = time.perf_counter_ns()
        one(sample)
        times.append((time.perf_counter_ns() - started) / 1000)
    return times


async def timed_async(samples: list[int], one: Callable[[int], Awaitable[Any]]) -> list[float]:
    times = []
    for sample in samples:
        started = time.perf_counter_ns()
        await one(sample)
        times.append((time.perf_counter_ns() - started) / 1000)
    return times


def plans(store: Store, queues: ConsumeQueues) -> tuple[LogReads, QueueReads]:
    """The API's two read plans over this store and queue, on a stand-in member that holds the topic and
    has committed the whole log (the plans read nothing else of it with local consistency)."""
    topic = Topic("bench", TOPIC_ID, 1)
    node: Any = SimpleNamespace(store=store, committed_index=store.end_index, leader_id=None,
                                topics=SimpleNamespace(current={topic.name: topic}, by_id={topic.id: topic}),
                                consume_queues=SimpleNamespace(queues=queues))
    service = LogService(node, None, ApiLimits(), client_url="", describe=lambda: ("sync", None))  # type: ignore[arg-type]
    return LogReads(service, ConsumerCommits(service)), QueueReads(service, TopicService(service))


async def measure(root: Path, messages: int, samples: int, rounds: int) -> dict[str, float]:
    store = Store.open(root / "log", StoreConfig())
    queues = ConsumeQueues(root / "consumequeue")
    try:
        cq = queues.queue(TOPIC_ID, QUEUE)
        assert cq.next_offset == messages
        offsets = random.Random(45).sample(range(messages), samples)
        index_of = {offset: store.get_at(cq.unit(offset)[0]).index for offset in offsets}  # type: ignore[union-attr]
        log_reads, queue_reads = plans(store, queues)

        def by_index(offset: int) -> Any:
            return store.get(index_of[offset])

        def by_offset(offset: int) -> Any:
            return store.get_at(queues.queue(TOPIC_ID, QUEUE).unit(offset)[0])

        async def plan_by_index(offset: int) -> Any:
            return await log_reads.one(LogRead(start=index_of[offset], linearizable=False))

        async def plan_by_offset(offset: int) -> Any:
            return await queue_reads.one(QueueRead("bench", QUEUE, offset=offset, linearizable=False))

        assert (await plan_by_index(offsets[0])) == (await plan_by_offset(offsets[0]))._replace(topic=None)
        times: dict[str, list[float]] = {"store_index": [], "store_queue": [], "plan_index": [], "plan_queue": []}
        for offset in offsets:  # warm: every sample's pages in memory, every file mapped
            by_offset(offset)
        for turn in range(rounds):
            pairs = [("store_index", by_index), ("store_queue", by_offset)]
            for name, read in pairs if turn % 2 == 0 else reversed(pairs):
                times[name] += timed(offsets, read)
            async_pairs = [("plan_index", plan_by_index), ("plan_queue", plan_by_offset)]
            for name, aread in async_pairs if turn % 2 == 0 else reversed(async_pairs):
                times[name] += await timed_async(offsets, aread)
    finally:
        queues.close()
        await store.close()
    figures = {}
    for name, values in times.items():
        figures[f"{name}_p50_us"] = statistics.median(values)
        figures[f"{name}_p99_us"] = statistics.quantiles(values, n=100)[98]
    for level in ("store", "plan"):
        figures[f"{level}_p50_ratio"] = figures[f"{level}_queue_p50_us"] / figures[f"{level}_index_p50_us"]
    return figures


def main() -> None:
    from measure import machine  # this folder's sibling (run as a script)

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--messages", type=int, default=10_000_000, help="in the queue (default 10,000,000)")
    parser.add_argument("--samples", type=int, default=20_000, help="random offsets read each round")
    parser.add_argument("--rounds", type=int, default=4, help="rounds of each read, in alternating order")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--dir", type=Path, default=None, help="where to put the temporary files")
    parser.add_argument("--keep", type=Path, default=None, help="build the log here once and keep it")
    args = parser.parse_args()
    root = args.keep or Path(tempfile.mkdtemp(prefix="raftlog-queue-read-", dir=args.dir))
    try:
        started = time.perf_counter()
        build(root, args.messages)
        built_s = time.perf_counter() - started
        figures = asyncio.run(measure(root, args.messages, min(args.samples, args.messages), args.rounds))
    finally:
        if args.keep is None:
            shutil.rmtree(root, ignore_errors=True)
    result: dict[str, Any] = {name: round(value, 3) for name, value in figures.items()}
    result.update({"messages": args.messages, "samples": args.samples, "rounds": args.rounds,
                   "build_s": round(built_s, 1), "cpu": machine(), "cores": os.cpu_count() or 0,
                   "target_p50_ratio_max": TARGET, "met": result["plan_p50_ratio"] <= TARGET})
    if args.json:
        print(json.dumps(result))
        return
    print(f"raftlog: a read by queue offset against a read by index, {result['cpu']} ({result['cores']} cores); "
          f"one queue of {args.messages:,} messages, {args.samples:,} random offsets x {args.rounds} rounds, warm")
    print(f"{'read':<32}{'p50 us':>10}{'p99 us':>10}{'p50 ratio':>12}")
    for level, what in (("store", "Store.get / ConsumeQueue.unit + Store.get_at"),
                        ("plan", "LogReads.one / QueueReads.one")):
        for kind in ("index", "queue"):
            ratio = f"{result[f'{level}_p50_ratio']:.3f}" if kind == "queue" else ""
            print(f"{level + ' by ' + ('index' if kind == 'index' else 'queue offset'):<32}"
                  f"{result[f'{level}_{kind}_p50_us']:>10.2f}{result[f'{level}_{kind}_p99_us']:>10.2f}{ratio:>12}")
        print(f"  ({what})")
    print(f"target: the plan's queue read p50 within 10% of its index read's: "
          f"{'met' if result['met'] else 'not met'} ({result['plan_p50_ratio']:.3f})")


if __name__ == "__main__":
    main()
