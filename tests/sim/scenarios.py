"""Seeded fault scenarios over a simulated cluster; each seed replays exactly.

    python -m tests.sim --seeds 2000            # many seeds
    python -m tests.sim --seed 17 --verbose     # replay one
    python -m tests.sim --outage async --seeds 100   # what a power outage costs each flush mode
    python -m tests.sim --outage sync --disk file     # the same on the real file store
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import tempfile
from dataclasses import dataclass
from pathlib import Path

from raft.messages import Role
from tests.sim.cluster import SimCluster, run_until
from tests.sim.vloop import run_virtual

NEMESES = ("calm", "lossy", "partition", "isolate-leader", "crash", "crash-leader", "one-way")


@dataclass
class Outcome:
    seed: int
    violations: list[str]
    converged: bool
    acked: int
    committed: int
    nemeses: list[str]

    @property
    def ok(self) -> bool:
        return not self.violations and self.converged

    def replay(self) -> str:
        return f"python -m tests.sim --seed {self.seed} --verbose"


def store_kind(seed: int) -> str:
    """A quarter of the seeds each: the in-memory store, the real file store (a crash kills
    the process), and both behind a slow disk where a crash is a power loss."""
    return ("memory", "file", "memory-power-loss", "file-power-loss")[seed % 4]


def new_cluster(seed: int, voters: int, prefix: str, kind: str | None = None,
                flush_mode: str = "sync") -> SimCluster:
    kind = kind or store_kind(seed)
    tmp = Path(tempfile.mkdtemp(prefix=f"raftlog-{prefix}-{seed}-")) if kind.startswith("file") else None
    return SimCluster(seed, voters=voters, tmp=tmp, power_loss=kind.endswith("power-loss"),
                      flush_mode=flush_mode)


async def _clients(cluster: SimCluster, rng: random.Random, stop: asyncio.Event) -> None:
    counter = 0

    async def one(n: int) -> None:
        await cluster.append(f"seed{cluster.seed}-op{n}".encode())

    tasks: set[asyncio.Task[None]] = set()
    while not stop.is_set():
        counter += 1
        task = asyncio.create_task(one(counter))
        tasks.add(task)
        task.add_done_callback(tasks.discard)
        await asyncio.sleep(rng.uniform(0.005, 0.03))
    await asyncio.gather(*tasks, return_exceptions=True)


async def _nemesis(cluster: SimCluster, rng: random.Random, kind: str) -> list[str]:
    """Start a fault; returns the members it crashed (restarted when the fault ends)."""
    ids = list(cluster.members)
    leader = cluster.leader()
    if kind == "lossy":
        cluster.faults.loss, cluster.faults.duplicate, cluster.faults.delay_max_s = 0.2, 0.1, 0.05
    elif kind == "partition":
        rng.shuffle(ids)
        cut = rng.randint(1, len(ids) - 1)
        cluster.network.partition(set(ids[:cut]), set(ids[cut:]))
    elif kind == "isolate-leader" and leader is not None:
        me = leader.config.self_id
        cluster.network.partition({me}, set(ids) - {me})
    elif kind == "one-way" and leader is not None:
        for other in ids:  # the leader hears everyone, nobody hears it
            if other != leader.config.self_id:
                cluster.network.cut(leader.config.self_id, other)
    elif kind == "crash":
        victim = rng.choice(ids)
        await cluster.crash(victim)
        return [victim]
    elif kind == "crash-leader" and leader is not None:
        await cluster.crash(leader.config.self_id)
        return [leader.config.self_id]
    return []


def _calm(cluster: SimCluster) -> None:
    cluster.network.heal()
    cluster.faults.loss = cluster.faults.duplicate = cluster.faults.delay_max_s = 0.0


async def scenario(seed: int, voters: int = 3, phases: int = 5, verbose: bool = False) -> Outcome:
    rng = random.Random(seed)
    cluster = new_cluster(seed, voters, "sim")
    nemeses: list[str] = []
    stop = asyncio.Event()
    try:
        cluster.start_all()
        await run_until(cluster, lambda: cluster.leader() is not None, 5.0)
        clients = asyncio.create_task(_clients(cluster, rng, stop))
        for _ in range(phases):
            kind = rng.choice(NEMESES)
            nemeses.append(kind)
            crashed = await _nemesis(cluster, rng, kind)
            if verbose:
                print(f"t={asyncio.get_running_loop().time():.3f} nemesis {kind} {crashed}")
            await run_until(cluster, lambda: False, rng.uniform(0.3, 1.2))
            _calm(cluster)
            for node_id in crashed:
                cluster.start(node_id)
            await run_until(cluster, lambda: False, rng.uniform(0.1, 0.5))
        stop.set()
        await clients
        converged = await run_until(cluster, cluster.converged, 15.0)
        cluster.check()
        cluster.check_committed_kept()
        if verbose:
            for node in cluster.running:
                print(node.config.self_id, node.role.value, node.term, node.store.end_index,
                      node.committed_index, "waiting", sorted(node.handler.waiting)[:5],
                      "control", len(node.handler.control), "lock", node.state.lock.locked())
                for peer, d in node.dispatchers.items():
                    if node.role is Role.LEADER:
                        print("   ->", peer, d.state.value, "write", d.write_index, "match", d.match_index,
                              "pending", sorted(d.pending)[:5])
        return Outcome(seed, cluster.violations, converged, len(cluster.history.acked),
                       len(cluster.history.committed), nemeses)
    finally:
        stop.set()
        await cluster.stop()


async def failover(seed: int, voters: int = 3) -> float:
    """Seconds from killing a steady leader until a new leader accepts writes (its first entry
    committed), with the default timing settings."""
    cluster = new_cluster(seed, voters, "failover")
    try:
        cluster.start_all()
        await run_until(cluster, cluster.converged, 10.0)
        rng = random.Random(seed)
        await asyncio.sleep(rng.uniform(0.2, 0.6))  # somewhere between heartbeats
        old = cluster.leader()
        assert old is not None
        loop = asyncio.get_running_loop()
        killed_at = loop.time()
        await cluster.crash(old.config.self_id)

        def writable() -> bool:
            leader = cluster.leader()
            return (leader is not None and leader.role is Role.LEADER
                    and 0 <= leader._term_first_index <= leader.committed_index)

        assert await run_until(cluster, writable, 10.0, step_s=0.001)
        return loop.time() - killed_at
    finally:
        await cluster.stop()


async def outage(seed: int, flush_mode: str, voters: int = 3, disk: str = "memory") -> tuple[int, int]:
    """Clients append, then every member loses power at once (unflushed writes are gone) and
    restarts; returns (appends acknowledged, of those not in the log afterwards)."""
    rng = random.Random(seed)
    cluster = new_cluster(seed, voters, "outage", f"{disk}-power-loss", flush_mode)
    stop = asyncio.Event()
    try:
        cluster.start_all()
        await run_until(cluster, lambda: cluster.leader() is not None, 5.0)
        clients = asyncio.create_task(_clients(cluster, rng, stop))
        await asyncio.sleep(rng.uniform(0.5, 1.5))
        for node_id in cluster.members:  # the same instant: no virtual time passes between them
            await cluster.crash(node_id)
        stop.set()
        await clients
        cluster.start_all()
        assert await run_until(cluster, cluster.converged, 15.0), f"seed {seed}: no convergence"
        leader = cluster.leader()
        assert leader is not None
        store = leader.store
        lost = sum(1 for index, body in cluster.history.acked.items()
                   if index > store.end_index or bytes(store.get(index).body) != body)
        return len(cluster.history.acked), lost
    finally:
        stop.set()
        await cluster.stop()


def run_scenario(seed: int, **kwargs: object) -> Outcome:
    return run_virtual(scenario(seed, **kwargs))  # type: ignore[arg-type]


def run_failover(seed: int) -> float:
    return run_virtual(failover(seed))


def main(argv: list[str] | None = None) -> int:
    import argparse
    import logging
    import statistics

    parser = argparse.ArgumentParser(prog="python -m tests.sim", description=__doc__,
                                     formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--seeds", type=int, default=200, help="run seeds 1..N")
    parser.add_argument("--seed", type=int, help="run this seed only")
    parser.add_argument("--voters", type=int, default=3)
    parser.add_argument("--verbose", action="store_true")
    parser.add_argument("--failover", action="store_true", help="measure election time after a leader crash")
    parser.add_argument("--outage", choices=["sync", "async"],
                        help="every member loses power at once under this flush mode: count lost appends")
    parser.add_argument("--disk", choices=["memory", "file"], default="memory",
                        help="the store behind --outage: in memory, or the real file store")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.ERROR,
                        format="%(name)s %(message)s")
    seeds = [args.seed] if args.seed is not None else list(range(1, args.seeds + 1))
    if args.failover:
        times = [run_failover(s) * 1000 for s in seeds]
        print(f"failover over {len(times)} seeds: median {statistics.median(times):.0f} ms, "
              f"worst {max(times):.0f} ms")
        return 0
    if args.outage:
        results = [run_virtual(outage(s, args.outage, args.voters, args.disk)) for s in seeds]
        acked, lost = sum(a for a, _ in results), sum(n for _, n in results)
        hit = sum(1 for _, n in results if n)
        print(f"power outage, flush_mode {args.outage}, {args.disk} store, {len(seeds)} seeds: "
              f"{acked:,} appends acknowledged, {lost:,} lost ({lost / max(acked, 1):.2%}); {hit} seeds lost some")
        return 1 if args.outage == "sync" and lost else 0
    failed = 0
    for seed in seeds:
        with contextlib.suppress(KeyboardInterrupt):
            outcome = run_virtual(scenario(seed, voters=args.voters, verbose=args.verbose))
        if not outcome.ok:
            failed += 1
            print(f"seed {seed} FAILED ({outcome.nemeses}): converged={outcome.converged} "
                  f"{outcome.violations[:3]}\n  replay: {outcome.replay()}")
    print(f"{len(seeds) - failed}/{len(seeds)} seeds passed")
    return 1 if failed else 0
