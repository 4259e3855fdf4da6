"""A simulated cluster: real `raft` nodes over the in-memory network, on a virtual clock.

Stores are the real file store (on a temporary directory, its blocking work
run inline so the clock stays virtual) or the in-memory store. A crash stops
a node's tasks and drops its process state; what survives is what a killed
process leaves: its files (page cache included) and its checkpoint. With
`power_loss`, a crash is a power loss instead: the in-memory store keeps what
its last flush covered, the file store what fsync covered (`tests.sim.disk`).
"""

from __future__ import annotations

import asyncio
import random
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from raft.config import RaftConfig, parse_peers
from raft.errors import RaftError
from raft.inmem_transport import Fate, Network
from raft.messages import Role
from raft.node import RaftNode
from storage import Store, StoreConfig
from storage.memory import MemoryCheckpoint, MemoryStore
from tests.sim.disk import PowerLossDisk, SlowDiskExecutor
from tests.sim.vloop import InlineExecutor

SIM_STORE = StoreConfig(data_file_size=4096, index_file_size=32 * 64)
FSYNC_S = 0.002  # how long a flush takes on the simulated slow disks


@dataclass
class Faults:
    """Seeded message faults, switched on and off by the scenario."""

    rng: random.Random
    loss: float = 0.0
    duplicate: float = 0.0
    delay_max_s: float = 0.0
    latency_s: float = 0.0002  # every message takes a little time, as on loopback

    def __call__(self, source: str, target: str, kind: str) -> Fate:
        r = self.rng.random
        if not (self.loss or self.duplicate or self.delay_max_s):
            return Fate(delay_s=self.latency_s * (0.5 + r()))
        return Fate(delay_s=self.latency_s + r() * self.delay_max_s, lose_request=r() < self.loss / 2,
                    lose_response=r() < self.loss / 2, duplicate=r() < self.duplicate)


class PowerLossStore(MemoryStore):
    """The in-memory store with a disk behind it: a flush takes `fsync_s`, and a power
    loss keeps only what the last completed flush covered. With flush_mode "async", as
    the file store: entries are acknowledged at once and flushed every `flush_interval_s`."""

    def __init__(self, fsync_s: float, flush_mode: str = "sync", flush_interval_s: float = 0.01) -> None:
        super().__init__(SIM_STORE)
        self.fsync_s = fsync_s
        self.flush_mode = flush_mode
        self.flush_interval_s = flush_interval_s
        self._durable = -1
        self._periodic: asyncio.Task[None] | None = None

    @property
    def durable_end_index(self) -> int:
        return min(self._durable, self.end_index)

    @property
    def ack_end_index(self) -> int:
        return self.durable_end_index if self.flush_mode == "sync" else self.end_index

    async def flush(self) -> None:
        target = self.end_index
        await asyncio.sleep(self.fsync_s)
        self._durable = max(self._durable, min(target, self.end_index))

    async def wait_durable(self) -> None:
        if self.flush_mode == "sync":
            await self.flush()

    def start(self) -> None:
        if self.flush_mode == "async" and self._periodic is None:
            self._periodic = asyncio.create_task(self._flush_periodically())

    async def _flush_periodically(self) -> None:
        while True:
            await asyncio.sleep(self.flush_interval_s)
            await self.flush()

    async def truncate(self, index: int) -> int:
        end = await super().truncate(index)
        self._durable = min(self._durable, end)
        return end

    async def reset_begin(self, index: int, term: int, **base: int | None) -> None:
        await super().reset_begin(index, term, **base)  # type: ignore[arg-type]
        self._durable = index

    async def power_loss(self) -> None:
        if self._periodic is not None:
            self._periodic.cancel()
            self._periodic = None
        await super().truncate(max(self._durable + 1, self.begin_index))


@dataclass
class Member:
    id: str
    checkpoint: MemoryCheckpoint
    store: Store | MemoryStore
    node: RaftNode | None = None
    last_commit: int = -1  # in this incarnation


@dataclass
class History:
    """What the checkers know: committed entries, leaders by term, acknowledged appends."""

    committed: dict[int, int] = field(default_factory=dict)  # index -> chain CRC
    leaders: dict[int, str] = field(default_factory=dict)  # term -> leader
    acked: dict[int, bytes] = field(default_factory=dict)  # index -> body


class SimCluster:
    def __init__(self, seed: int, voters: int = 3, learners: int = 0, tmp: Path | None = None,
                 config: dict[str, object] | None = None, power_loss: bool = False,
                 flush_mode: str = "sync") -> None:
        self.power_loss = power_loss
        self.flush_mode = flush_mode
        self.seed = seed
        self.rng = random.Random(seed)
        self.faults = Faults(random.Random(seed * 7919 + 1))
        self.network = Network(rpc_timeout_s=0.3, faults=self.faults)
        spec = ";".join([f"n{i}-sim:{7000 + i}" for i in range(voters)]
                        + [f"n{voters + i}-sim:{7000 + voters + i}@learner" for i in range(learners)])
        self.peers = parse_peers(spec)
        self.tmp = tmp
        self.overrides = config or {}
        self.disk: PowerLossDisk | None = None
        if power_loss and tmp is not None:
            self.disk = PowerLossDisk(tmp)
            self.disk.install()
        self.executors: dict[str, InlineExecutor | SlowDiskExecutor] = {
            p.id: SlowDiskExecutor(FSYNC_S) if self.disk else InlineExecutor() for p in self.peers}
        self.members = {p.id: Member(p.id, MemoryCheckpoint(), self._new_store(p.id)) for p in self.peers}
        self.history = History()
        self.violations: list[str] = []

    # -- members -----------------------------------------------------------------------

    def _new_store(self, node_id: str, committed_index: int = -1) -> Store | MemoryStore:
        if self.tmp is not None:
            config = replace(SIM_STORE, flush_mode=self.flush_mode, flush_interval_ms=10)
            return Store.open(self.tmp / node_id, config, committed_index=committed_index,
                              executor=self.executors[node_id])
        if self.power_loss:
            return PowerLossStore(fsync_s=FSYNC_S, flush_mode=self.flush_mode)
        return MemoryStore(SIM_STORE)

    def start(self, node_id: str, rejoining: bool = False) -> None:
        member = self.members[node_id]
        cp = member.checkpoint
        config = RaftConfig(self_id=node_id, peers=self.peers, rpc_timeout_ms=300, **self.overrides)
        node = RaftNode(config, member.store, cp, self.network.transport(node_id), term=cp.current_term,
                        voted_for=cp.voted_for, committed_index=cp.committed_index,
                        applied_index=cp.applied_index, rng=random.Random(self.rng.random()), rejoining=rejoining)
        member.node, member.last_commit = node, node.committed_index
        self.network.register(node_id, node)
        member.store.start()
        node.start()

    def start_all(self) -> None:
        for node_id in self.members:
            self.start(node_id)

    async def crash(self, node_id: str) -> None:
        """Kill the process (or, with `power_loss`, the machine): tasks gone, memory gone;
        the checkpoint stays, and the files (all of them, or what fsync covered)."""
        member = self.members[node_id]
        if member.node is None:
            return
        self.network.unregister(node_id)
        await member.node.stop()
        member.node = None
        if isinstance(member.store, PowerLossStore):
            await member.store.power_loss()  # the whole machine went down: unflushed data is gone
        if isinstance(member.store, Store):
            executor = self.executors[node_id]
            if isinstance(executor, SlowDiskExecutor):
                executor.drop()
            member.store._release()  # no flush: the page cache survives a process kill
            if self.disk is not None:
                self.disk.power_loss(member.store.data_dir)  # but not a power loss
            member.store = self._new_store(node_id, member.checkpoint.committed_index)

    async def stop(self) -> None:
        for node_id in list(self.members):
            await self.crash(node_id)
        for member in self.members.values():
            if isinstance(member.store, Store):
                await member.store.close()
        if self.disk is not None:
            self.disk.uninstall()
        if self.tmp is not None:
            shutil.rmtree(self.tmp, ignore_errors=True)

    @property
    def running(self) -> list[RaftNode]:
        return [m.node for m in self.members.values() if m.node is not None]

    def leader(self) -> RaftNode | None:
        leaders = [n for n in self.running if n.role is Role.LEADER]
        return max(leaders, key=lambda n: n.term) if leaders else None

    # -- clients ---------------------------------------------------------------------------

    async def append(self, body: bytes) -> int | None:
        """One client append through whoever leads now; the index if acknowledged."""
        leader = self.leader()
        if leader is None:
            return None
        try:
            appended = await leader.append([body])
        except RaftError:
            return None
        self.history.acked[appended.first_index] = body
        return appended.first_index

    # -- checkers ---------------------------------------------------------------------------

    def check(self) -> None:
        """Raft's safety properties, looked at on every running member."""
        for member in self.members.values():
            node = member.node
            if node is None:
                continue
            if node.role is Role.LEADER:
                seen = self.history.leaders.setdefault(node.term, node.config.self_id)
                if seen != node.config.self_id:
                    self.violations.append(
                        f"two leaders in term {node.term}: {seen} and {node.config.self_id}")
            committed = node.committed_index
            if committed < member.last_commit:
                self.violations.append(
                    f"{member.id} commit index went back {member.last_commit} -> {committed}")
            if committed > node.store.end_index:
                self.violations.append(
                    f"{member.id} committed {committed} beyond its log end {node.store.end_index}")
            start = max(member.last_commit + 1, node.store.begin_index)
            for index in range(start, committed + 1):
                chain = node.store.get(index).chain_crc
                known = self.history.committed.setdefault(index, chain)
                if known != chain:
                    self.violations.append(f"{member.id} committed a different entry at {index}")
            member.last_commit = max(member.last_commit, committed)
            if node.role is Role.LEADER and committed >= 0 and node.store.term_at(committed) == node.term:
                durable = sum(1 for m in self.members.values()
                              if m.id in node.config.voters and m.store.durable_end_index >= committed)
                if durable < len(node.config.voters) // 2 + 1:
                    self.violations.append(f"{member.id} committed {committed} durable on only {durable}")
        for index, body in self.history.acked.items():
            if index in self.history.committed:
                holder = next((n for n in self.running if n.committed_index >= index
                               and n.store.begin_index <= index), None)
                if holder is not None and bytes(holder.store.get(index).body) != body:
                    self.violations.append(f"acknowledged append at {index} was replaced")

    def check_committed_kept(self) -> None:
        """Every committed entry is still in the log of every member that committed it."""
        for member in self.members.values():
            node = member.node
            if node is None:
                continue
            for index in range(node.store.begin_index, node.committed_index + 1):
                if self.history.committed.get(index, node.store.get(index).chain_crc) \
                        != node.store.get(index).chain_crc:
                    self.violations.append(f"{member.id} lost committed entry {index}")

    def converged(self) -> bool:
        nodes = self.running
        if len(nodes) != len(self.members):
            return False
        leader = self.leader()
        if leader is None:
            return False
        end = leader.store.end_index
        return all(n.store.end_index == end and n.committed_index == end
                   and n.store.end_term == leader.store.end_term for n in nodes)


async def run_until(cluster: SimCluster, predicate: Callable[[], bool], timeout_s: float,
                    step_s: float = 0.01) -> bool:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while loop.time() < deadline:
        cluster.check()
        if predicate():
            return True
        await asyncio.sleep(step_s)
    return predicate()
