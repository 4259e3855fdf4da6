"""Seeded fault scenarios over a simulated cluster; each seed replays exactly.

    python -m tests.sim --seeds 2000            # many seeds
    python -m tests.sim --seed 17 --verbose     # replay one
    python -m tests.sim --outage async --seeds 100   # what a power outage costs each flush mode
    python -m tests.sim --outage sync --disk file     # the same on the real file store
    python -m tests.sim --mutant votes-twice --seeds 50   # which seeds catch a planted bug
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import tempfile
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from raftlog.raft.config import Peer
from raftlog.raft.consumers import ABSENT
from raftlog.raft.errors import RaftError
from raftlog.raft.membership import Configuration, MembershipError
from raftlog.raft.messages import Code, Role
from raftlog.raft.node import RaftNode
from raftlog.raft.producers import Sequenced
from raftlog.storage import Store
from raftlog.storage.codec import HEADER, HEADER_SIZE
from raftlog.storage.recovery import SCAN_FILES
from tests.sim.cluster import SimCluster, run_until
from tests.sim.mutants import MUTANTS
from tests.sim.topics import MessageAck, check_topics, topic_writers
from tests.sim.vloop import run_virtual

RANGE_LIMIT = 5  # entries a range read asks for
CONVERGE_S = 15.0  # virtual seconds a healed group gets to agree on one log
NEMESES = ("calm", "lossy", "partition", "isolate-leader", "crash", "crash-leader", "one-way",
           "transfer", "transfer-isolate", "damage")


@dataclass
class Outcome:
    seed: int
    violations: list[str]
    converged: bool
    acked: int
    committed: int
    nemeses: list[str]
    reads: int = 0  # answered an entry or "not found"
    failed_reads: int = 0
    rejoins: int = 0  # restarts whose recovery found committed entries damaged or missing
    forwarded: int = 0  # acknowledged appends that a follower forwarded to the leader
    changes: list[str] = field(default_factory=list)  # membership changes committed, in order

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
                flush_mode: str = "sync", learners: int = 0) -> SimCluster:
    kind = kind or store_kind(seed)
    tmp = Path(tempfile.mkdtemp(prefix=f"raftlog-{prefix}-{seed}-")) if kind.startswith("file") else None
    return SimCluster(seed, voters=voters, learners=learners, tmp=tmp, power_loss=kind.endswith("power-loss"),
                      flush_mode=flush_mode)


async def _clients(cluster: SimCluster, rng: random.Random, stop: asyncio.Event) -> None:
    """Appends every few ms: most to the leader, some to any member's API (forwarded to the
    leader), some to a stale leader (or, without one, any member): those must be refused or
    lost, never acknowledged and then missing."""
    counter = 0
    tasks: list[asyncio.Task[object] | None] = []
    while not stop.is_set():
        counter += 1
        body = f"seed{cluster.seed}-op{counter}".encode()
        roll, running = rng.random(), cluster.running
        leader = cluster.leader()
        if roll < 0.15 and running:
            node: RaftNode | None = rng.choice(cluster.stale_leaders() or running)
        elif roll < 0.45 and running:
            target = rng.choice(running).config.self_id
            tasks.append(cluster.call(target, cluster.append_via(target, body)))
            node = None
        else:
            node = leader
        if node is not None:
            tasks.append(cluster.call(node.config.self_id, cluster.append(body, node)))
        await asyncio.sleep(rng.uniform(0.005, 0.03))
    await _finished(tasks)


async def _until_answered(cluster: SimCluster, rng: random.Random, stop: asyncio.Event, given_up: list[float],
                          attempt: Callable[[str], Coroutine[Any, Any, bool]]) -> bool:
    """One client's call, sent through any member until one answers True (a crash of its member
    cancels it: unknown, sent again); False once stopped CONVERGE_S / 3 without an answer
    (`given_up`: that moment, once set, for all the client's calls)."""
    while True:
        if stop.is_set():
            given_up[0] = given_up[0] or cluster.now() + CONVERGE_S / 3
            if cluster.now() >= given_up[0]:
                return False
        running = cluster.running
        if running:
            target = rng.choice(running).config.self_id
            call = cluster.call(target, attempt(target))
            if call is not None:
                await asyncio.wait([call])
                if not call.cancelled() and call.exception() is None and call.result() is True:
                    return True
        await asyncio.sleep(rng.uniform(0.01, 0.05))


async def _producers(cluster: SimCluster, rng: random.Random, stop: asyncio.Event, count: int = 2) -> None:
    """Producers with sessions, one append in flight each, through any member's API: a session opened
    first (its open sent again until answered: a retry of one that committed opens the next epoch),
    then an append whose outcome is unknown is sent again, the same body with the same sequence, until
    the group answers (after the faults end too, for a while): the final log must hold each body once."""
    async def producer(producer_id: int) -> None:
        sequence, given_up, epoch = 0, [0.0], [-1]
        if not await _until_answered(cluster, rng, stop, given_up, lambda target:
                                     cluster.open_session(target, producer_id, epoch)):
            return
        while not stop.is_set():
            bodies = [f"seed{cluster.seed}-producer{producer_id}-{sequence + k}".encode()
                      for k in range(rng.randint(1, 3))]
            invoked = cluster.now()
            session = Sequenced(producer_id, epoch[0], sequence)
            if not await _until_answered(cluster, rng, stop, given_up, lambda target, s=session, b=bodies, i=invoked:
                                         cluster.produce(target, s, b, i)):
                return
            sequence += len(bodies)
            await asyncio.sleep(rng.uniform(0.005, 0.03))

    await asyncio.gather(*(producer(1000 + k) for k in range(count)))


async def _consumers(cluster: SimCluster, rng: random.Random, stop: asyncio.Event) -> None:
    """Named consumers commit ever higher positions (acknowledged indices) through any member, one
    commit at a time, each sent again until the group answers it: "cas" compares and sets each (its
    last position expected), "plain" does not, "idle" commits once (its position must outlive every
    restart and snapshot)."""
    async def consumer(name: str, commits: int | None = None) -> None:
        position, given_up = ABSENT, [0.0]
        while not stop.is_set() and commits != 0:
            acks = cluster.history.acks
            new = max(position + 1, rng.choice(acks).index) if acks else 0
            expected = position if name.startswith("cas") else None
            if not await _until_answered(cluster, rng, stop, given_up, lambda target, n=new, e=expected:
                                         cluster.commit_consumer(target, name, n, e)):
                return
            position = new
            commits = None if commits is None else commits - 1
            await asyncio.sleep(rng.uniform(0.02, 0.08))

    await asyncio.gather(consumer("cas"), consumer("plain"), consumer("idle", commits=1))


async def _readers(cluster: SimCluster, rng: random.Random, stop: asyncio.Event) -> None:
    """Linearizable reads of acknowledged indices across the whole log (and of the newest), single
    or in short range pages, from any member; a stale leader, when there is one, is asked half
    the time."""
    tasks: list[asyncio.Task[object] | None] = []
    while not stop.is_set():
        acks, running = cluster.history.acks, cluster.running
        if acks and running:
            index = (acks[-1] if rng.random() < 0.3 else rng.choice(acks)).index
            stale = cluster.stale_leaders()
            node_id = (rng.choice(stale) if stale and rng.random() < 0.5 else rng.choice(running)).config.self_id
            if rng.random() < 0.25:  # a page of a few entries around it
                read = cluster.read_range(node_id, max(0, index - rng.randrange(3)), RANGE_LIMIT)
            else:
                read = cluster.read(node_id, index)
            tasks.append(cluster.call(node_id, read))
        await asyncio.sleep(rng.uniform(0.01, 0.04))
    await _finished(tasks)


async def _finished(tasks: list[asyncio.Task[object] | None]) -> None:
    """Wait for the calls; their errors were counted as violations when they ended."""
    running = {task for task in tasks if task is not None}
    if running:
        await asyncio.wait(running)


async def _transfer(cluster: SimCluster, leader: RaftNode, target: str, isolate: bool) -> None:
    """Hand leadership to `target`; with `isolate`, cut the old leader off as soon as it has: it
    goes on believing it leads until its heartbeats fail, a stale leader for clients to meet."""
    try:
        code = await leader.transfer_leadership(target)
    except RaftError:
        return
    if isolate and code is Code.SUCCESS:
        me = leader.config.self_id
        cluster.network.partition({me}, set(cluster.members) - {me})


def _damage(cluster: SimCluster, victim: str, rng: random.Random) -> Callable[[Store], None]:
    """Harm a committed entry within what recovery rescans: a bit of it flipped, or the log's
    tail cut there. Recovery must find it: the member then rejoins."""

    def harm(store: Store) -> None:
        last = min(cluster.members[victim].checkpoint.committed_index, store.end_index)
        segments = store.data.segments
        rescanned = segments[max(0, len(segments) - SCAN_FILES)].start if segments else 0
        candidates = [i for i in range(max(store.begin_index, last - 20), last + 1)
                      if store.pos_at(i) >= rescanned]
        if not candidates:
            return
        pos = store.pos_at(rng.choice(candidates))
        seg = store.data.find(pos)
        offset = pos - seg.start
        if rng.random() < 0.5:  # the tail cut at this entry
            seg.view[offset:] = bytes(len(seg.view) - offset)
            return
        body_size = HEADER.unpack_from(seg.view, offset)[8]
        flip = offset + (HEADER_SIZE + rng.randrange(body_size) if body_size else 36)  # the body or its chain CRC
        seg.view[flip] ^= 1 << rng.randrange(8)

    return harm


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
    elif kind in ("transfer", "transfer-isolate") and leader is not None:
        target = rng.choice([v for v in leader.voters if v != leader.config.self_id] or [None])
        if target is not None:
            await _transfer(cluster, leader, target, isolate=kind == "transfer-isolate")
    elif kind == "crash":
        victim = rng.choice(ids)
        await cluster.crash(victim)
        return [victim]
    elif kind == "damage":  # the in-memory store has no files to damage: a crash
        victim = rng.choice(ids)
        # One member's data at a time, as the fault model has it: damage while another member is down or
        # still getting its own lost entries back could leave no quorum that holds a committed entry.
        alone = all(m.node is not None and not m.node.rejoining for i, m in cluster.members.items() if i != victim)
        await cluster.crash(victim, _damage(cluster, victim, rng) if cluster.tmp is not None and alone else None)
        return [victim]
    elif kind == "crash-leader" and leader is not None:
        await cluster.crash(leader.config.self_id)
        return [leader.config.self_id]
    return []


MEMBERSHIP_CHANGES = ("add", "promote", "remove", "remove-leader", "replace")
MAX_MEMBERS = 6


async def _change(cluster: SimCluster, what: str, **change: object) -> Configuration | None:
    """One membership change on the newest leader; None when refused or cut short (a fault, a
    change in flight, a learner behind, a quorum at risk): never a violation by itself."""
    leader = cluster.leader()
    if leader is None:
        return None

    async def change_on_leader() -> Configuration | None:
        try:
            return await leader.change_membership(**change)  # type: ignore[arg-type]
        except (MembershipError, RaftError):
            return None

    call = cluster.call(leader.config.self_id, change_on_leader())
    if call is None:
        return None
    with contextlib.suppress(asyncio.CancelledError):
        await asyncio.wait({call})
    return None if call.cancelled() or call.exception() is not None else call.result()


async def _add(cluster: SimCluster, changes: list[str]) -> str | None:
    """A new member on an empty disk: added as a learner, then started with what the group said."""
    node_id = f"n{len(cluster.members)}"
    new = Peer(node_id, f"sim:{7000 + len(cluster.members)}", learner=True)
    configuration = await _change(cluster, f"add {node_id}", add=new)
    if configuration is None:  # refused, or its answer lost: the operator looks at the group's members
        await run_until(cluster, lambda: False, 0.5)
        leader = cluster.leader()
        configuration = leader.configuration if leader is not None else None
        if configuration is None or configuration.member(node_id) is None:
            return None
    changes.append(f"add {node_id}")
    cluster.add_member(node_id, configuration)
    return node_id


async def _promote(cluster: SimCluster, node_id: str, changes: list[str]) -> bool:
    node = cluster.members[node_id].node
    leader = cluster.leader()
    if node is not None and leader is not None:  # give it time to catch up, as an operator would
        await run_until(cluster, lambda: node.store.end_index >= leader.store.end_index - 10, 3.0)
    if await _change(cluster, f"promote {node_id}", promote=node_id) is None:
        return False
    changes.append(f"promote {node_id}")
    return True


async def _remove(cluster: SimCluster, node_id: str, changes: list[str]) -> bool:
    leader = cluster.leader()
    if leader is not None and leader.config.self_id == node_id:  # the leader hands over first
        target = next((v for v in leader.voters if v != node_id and cluster.members[v].node is not None), None)
        if target is None:
            return False
        await _transfer(cluster, leader, target, isolate=False)
        await run_until(cluster, lambda: (cluster.leader() or leader) is not leader, 2.0)
    if await _change(cluster, f"remove {node_id}", remove=node_id) is None:
        return False
    changes.append(f"remove {node_id}")
    return True


async def _reconfigure(cluster: SimCluster, rng: random.Random, changes: list[str]) -> None:
    """A random membership change beside the faults: add a learner, promote one, remove a member (the
    leader too, which hands over first), or replace a member (kill it, add a fresh one, promote it,
    remove the dead one). Removed members are left running."""
    leader = cluster.leader()
    if leader is None:
        return
    _start_added(cluster)
    config = leader.configuration
    learners = [m.id for m in config.members if m.learner]
    others = [v for v in config.voters if v != leader.config.self_id]
    possible = {"add": len(config.members) < MAX_MEMBERS, "promote": bool(learners),
                "remove": bool(learners) or len(config.voters) > 3, "remove-leader": len(config.voters) > 3,
                "replace": len(config.members) < MAX_MEMBERS}
    kind = rng.choice([k for k in MEMBERSHIP_CHANGES if possible[k]])
    if kind == "add":
        await _add(cluster, changes)
    elif kind == "promote":
        await _promote(cluster, rng.choice(learners), changes)
    elif kind == "remove":
        await _remove(cluster, rng.choice(learners or others), changes)
    elif kind == "remove-leader":
        await _remove(cluster, leader.config.self_id, changes)
    else:
        dead = rng.choice(others)
        await cluster.crash(dead)
        new = await _add(cluster, changes)
        if new is not None and await _promote(cluster, new, changes):
            await _remove(cluster, dead, changes)


def _start_added(cluster: SimCluster) -> None:
    """Members the group added though the answer was lost: the operator starts them now."""
    leader = cluster.leader()
    if leader is not None:
        for member in leader.configuration.members:
            if member.id not in cluster.members:
                cluster.add_member(member.id, leader.configuration)


def _calm(cluster: SimCluster) -> None:
    cluster.network.heal()
    cluster.faults.loss = cluster.faults.duplicate = cluster.faults.delay_max_s = 0.0


async def scenario(seed: int, voters: int = 3, phases: int = 5, verbose: bool = False,
                   membership: bool = False) -> Outcome:
    """`membership`: every phase also makes a random membership change, beside its fault."""
    rng = random.Random(seed)
    membership_rng = random.Random(seed * 104_729 + 3)  # its own: the faults' schedule stays as it was
    changes: list[str] = []
    cluster = new_cluster(seed, voters, "sim", learners=1 if seed % 3 == 0 else 0)
    nemeses: list[str] = []
    stop = asyncio.Event()
    rejoins = 0
    try:
        cluster.start_all()
        await run_until(cluster, lambda: cluster.leader() is not None, 5.0)
        clients = asyncio.create_task(_clients(cluster, rng, stop))
        readers = asyncio.create_task(_readers(cluster, random.Random(seed * 31 + 7), stop))
        producers = asyncio.create_task(_producers(cluster, random.Random(seed * 7919 + 11), stop))
        consumers = asyncio.create_task(_consumers(cluster, random.Random(seed * 6007 + 5), stop))
        message_acks: list[MessageAck] = []
        writers = asyncio.create_task(topic_writers(cluster, random.Random(seed * 4099 + 13), stop, message_acks,
                                                    _until_answered))
        for _ in range(phases):
            kind = rng.choice(NEMESES)
            nemeses.append(kind)
            crashed = await _nemesis(cluster, rng, kind)
            if verbose:
                print(f"t={asyncio.get_running_loop().time():.3f} nemesis {kind} {crashed}")
            if membership:
                await _reconfigure(cluster, membership_rng, changes)
                crashed += [i for i, m in cluster.members.items() if m.node is None and i not in crashed]
                if verbose:
                    print(f"t={asyncio.get_running_loop().time():.3f} changes so far {changes}")
            await run_until(cluster, lambda: False, rng.uniform(0.3, 1.2))
            _calm(cluster)
            for node_id in crashed:
                rejoins += cluster.members[node_id].lost_data
                cluster.start(node_id)
            await run_until(cluster, lambda: False, rng.uniform(0.1, 0.5))
        stop.set()
        await clients
        await readers
        await producers
        await consumers
        await writers
        if membership:
            await run_until(cluster, lambda: cluster.leader() is not None, CONVERGE_S)
            _start_added(cluster)
        converged = await run_until(cluster, cluster.converged, CONVERGE_S)
        cluster.check()
        cluster.check_committed_kept()
        if converged:
            cluster.check_final()
            check_topics(cluster, message_acks)
        else:
            ends = {n.config.self_id: (n.role.value, n.term, n.store.end_index, n.committed_index)
                    for n in cluster.running}
            cluster.violations.append(f"liveness: no convergence {CONVERGE_S:g} s after the faults ended "
                                      f"(role, term, end, committed: {ends})")
        if verbose:
            for node in cluster.running:
                print(node.config.self_id, node.role.value, node.term, node.store.end_index,
                      node.committed_index, "waiting", sorted(node.handler.waiting)[:5],
                      "control", len(node.handler.control), "lock", node.state.lock.locked())
                for peer, d in node.dispatchers.items():
                    if node.role is Role.LEADER:
                        print("   ->", peer, d.state.value, "write", d.write_index, "match", d.match_index,
                              "pending", sorted(d.pending)[:5])
        history = cluster.history
        return Outcome(seed, cluster.violations, converged, len(history.acks), len(history.committed), nemeses,
                       len(history.reads), history.failed_reads, rejoins, history.forwarded, changes)
    finally:
        stop.set()
        await cluster.stop()


async def stale_leader(seed: int) -> tuple[list[str], int]:
    """A leader hands over and is cut off at once: it still believes it leads while the new
    leader acknowledges an append. Clients then append to it and read that index from it: it
    must refuse, or fail, the read (read index confirms leadership with a heartbeat round),
    never answer "not found"; it must never acknowledge the append. Returns the violations
    and how many of its reads it answered."""
    cluster = new_cluster(seed, 3, "stale", kind="memory")
    try:
        cluster.start_all()
        assert await run_until(cluster, cluster.converged, 10.0)
        old = cluster.leader()
        assert old is not None
        target = next(v for v in old.voters if v != old.config.self_id)
        await _transfer(cluster, old, target, isolate=True)
        new = cluster.members[target].node
        assert new is not None and await run_until(cluster, lambda: new.caught_up and new.role is Role.LEADER, 2.0)
        assert old.role is Role.LEADER, "the old leader stepped down before it could be asked"
        index = await cluster.append(b"after the handover", new)
        assert index is not None
        me = old.config.self_id
        calls = [cluster.call(me, cluster.read(me, index)), cluster.call(me, cluster.append(b"to the old", old))]
        await _finished(calls)
        cluster.network.heal()
        assert await run_until(cluster, cluster.converged, 10.0)
        cluster.check_final()
        return cluster.violations, sum(1 for read in cluster.history.reads if read.via == me)
    finally:
        await cluster.stop()


async def diverged_follower(seed: int, converge_s: float = 3.0) -> list[str]:
    """A leader cut off with entries nobody else has; the others go on without it. Healed, it
    must drop those entries (COMPARE, then TRUNCATE) and take the new leader's: the group
    converges, or the run ends with a liveness violation. Returns the violations."""
    cluster = new_cluster(seed, 3, "diverged", kind="memory")
    try:
        cluster.start_all()
        assert await run_until(cluster, cluster.converged, 10.0)
        old = cluster.leader()
        assert old is not None
        me = old.config.self_id
        cluster.network.partition({me}, set(cluster.members) - {me})
        writes = [cluster.call(me, cluster.append(f"lost {i}".encode(), old)) for i in range(3)]
        assert await run_until(cluster, lambda: (cluster.leader() or old) is not old, 5.0)
        new = cluster.leader()
        assert new is not None
        for i in range(3):
            await cluster.append(f"kept {i}".encode(), new)
        await _finished(writes)
        cluster.network.heal()
        if await run_until(cluster, cluster.converged, converge_s):
            cluster.check_final()
        else:
            cluster.violations.append(f"liveness: no convergence {converge_s:g} s after the partition healed")
        return cluster.violations
    finally:
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
                    and leader.appends.caught_up)

        assert await run_until(cluster, writable, 10.0, step_s=0.001)
        return loop.time() - killed_at
    finally:
        await cluster.stop()


async def outage(seed: int, flush_mode: str, voters: int = 3, disk: str = "memory") -> tuple[int, int, bool]:
    """Clients append, then every member loses power at once (unflushed writes are gone) and
    restarts; returns (appends acknowledged, of those not in the log afterwards, whether the
    group converged again: if not, the log is the most committed member's)."""
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
        converged = await run_until(cluster, cluster.converged, CONVERGE_S)
        furthest = max(cluster.running, key=lambda node: node.committed_index)
        return len(cluster.history.acks), cluster.lost_acks(furthest.store), converged
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
    parser.add_argument("--membership", action="store_true", help="a random membership change in every phase")
    parser.add_argument("--failover", action="store_true", help="measure election time after a leader crash")
    parser.add_argument("--outage", choices=["sync", "async"],
                        help="every member loses power at once under this flush mode: count lost appends")
    parser.add_argument("--disk", choices=["memory", "file"], default="memory",
                        help="the store behind --outage: in memory, or the real file store")
    parser.add_argument("--mutant", choices=sorted(MUTANTS), help="plant this bug (tests.sim.mutants) first")
    args = parser.parse_args(argv)
    if args.mutant:
        owner, attribute, bug = MUTANTS[args.mutant]
        setattr(owner, attribute, bug(getattr(owner, attribute)))
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
        acked, lost = sum(a for a, _, _ in results), sum(n for _, n, _ in results)
        hit = sum(1 for _, n, _ in results if n)
        stuck = [s for s, (_, _, converged) in zip(seeds, results, strict=True) if not converged]
        print(f"power outage, flush_mode {args.outage}, {args.disk} store, {len(seeds)} seeds: "
              f"{acked:,} appends acknowledged, {lost:,} lost ({lost / max(acked, 1):.2%}); {hit} seeds lost some"
              + (f"; no convergence after seeds {stuck}" if stuck else ""))
        if stuck:
            return 1
        return 1 if args.outage == "sync" and lost else 0
    failed = 0
    outcomes = []
    for seed in seeds:
        with contextlib.suppress(KeyboardInterrupt):
            outcome = run_virtual(scenario(seed, voters=args.voters, verbose=args.verbose,
                                           membership=args.membership))
        outcomes.append(outcome)
        if not outcome.ok:
            failed += 1
            print(f"seed {seed} FAILED ({outcome.nemeses}; {outcome.changes}): converged={outcome.converged} "
                  f"{outcome.violations[:3]}\n  replay: {outcome.replay()}")
    reads, failed_reads = sum(o.reads for o in outcomes), sum(o.failed_reads for o in outcomes)
    print(f"{len(seeds) - failed}/{len(seeds)} seeds passed: {sum(o.acked for o in outcomes):,} appends "
          f"acknowledged ({sum(o.forwarded for o in outcomes):,} forwarded by a follower), {reads:,} reads "
          f"answered and {failed_reads:,} failed ({reads / max(reads + failed_reads, 1):.1%} answered), "
          f"{sum(o.rejoins for o in outcomes)} rejoins after damage, "
          f"{sum(len(o.changes) for o in outcomes)} membership changes")
    return 1 if failed else 0
