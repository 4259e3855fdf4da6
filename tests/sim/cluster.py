"""A simulated cluster: real `raft` nodes over the in-memory network, on a virtual clock.

Stores are the real file store (on a temporary directory, its blocking work
run inline so the clock stays virtual) or the in-memory store. A crash stops
a node's tasks and drops its process state; what survives is what a killed
process leaves: its files (page cache included) and its checkpoint. With
`power_loss`, a crash is a power loss instead: the in-memory store keeps what
its last flush covered, the file store what fsync covered (`tests.sim.disk`).
A file store may also be damaged while its member is down; on restart its own
recovery decides, as `app.node` does, whether the member lost committed
entries and must rejoin.

Each member runs the public API's service layer (`api.service.LogService`)
beside its raft node, so clients append and read through forwarding and
read index as real clients do. Every acknowledgement and every read is
recorded with its invocation and completion time, and checked; so is every
ERROR log record and every exception nobody handled.
"""

from __future__ import annotations

import asyncio
import bisect
import logging
import random
import shutil
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from raftlog.api.answers import DiskStatus
from raftlog.api.auth import LOCAL
from raftlog.api.consumers import ConsumerCommits
from raftlog.api.errors import ApiError
from raftlog.api.limits import ApiLimits
from raftlog.api.service import LogService
from raftlog.raft.cluster_version import LEVEL, decode_level
from raftlog.raft.config import Peer, RaftConfig, parse_peers
from raftlog.raft.consumers import ConsumerCommit
from raftlog.raft.errors import RaftError
from raftlog.raft.inmem_transport import Fate, Network
from raftlog.raft.membership import Configuration, saved_configuration
from raftlog.raft.messages import Code, Role
from raftlog.raft.node import RaftNode, trusted_commit_end
from raftlog.raft.producers import Sequenced, SessionChange
from raftlog.raft.waiting import loop_time
from raftlog.storage import CorruptLogError, Store, StoreConfig
from raftlog.storage.codec import DATA_MAGICS, Magic, client_body
from raftlog.storage.consume_queues import ConsumeQueues
from raftlog.storage.memory import MemoryCheckpoint, MemoryStore
from raftlog.storage.message import decode_message
from tests.sim.disk import PowerLossDisk, SlowDiskExecutor
from tests.sim.peers import Endpoint, SimPeers
from tests.sim.vloop import InlineExecutor
from tests.sim.wire import round_trip

SIM_STORE = StoreConfig(data_file_size=4096, index_file_size=32 * 64)
FSYNC_S = 0.002  # how long a flush takes on the simulated slow disks


# Raft's calls may arrive twice (a re-sent push or vote); a client's append forwarded by the
# service is one HTTP request, which the network never repeats: a second copy would be the
# service's own retry, a bug the final log's check finds.
NEVER_DUPLICATED = frozenset({"append"})
PRODUCER = "producer"  # the caller name of the scenarios' producers: the owner of their sessions


@dataclass
class Faults:
    """Seeded message faults, switched on and off by the scenario."""

    rng: random.Random
    loss: float = 0.0
    duplicate: float = 0.0
    delay_max_s: float = 0.0
    latency_s: float = 0.0002  # every message takes a little time, as on loopback

    def lost(self) -> Fate:
        """A message that never arrives."""
        return Fate(delay_s=self.latency_s, lose_request=True)

    def __call__(self, source: str, target: str, kind: str) -> Fate:
        r = self.rng.random
        if not (self.loss or self.duplicate or self.delay_max_s):
            return Fate(delay_s=self.latency_s * (0.5 + r()))
        return Fate(delay_s=self.latency_s + r() * self.delay_max_s, lose_request=r() < self.loss / 2,
                    lose_response=r() < self.loss / 2,
                    duplicate=r() < self.duplicate and kind not in NEVER_DUPLICATED)


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

    def flushed(self) -> asyncio.Future[None]:
        return asyncio.ensure_future(self.flush())

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
    service: LogService | None = None
    consumers: ConsumerCommits | None = None
    last_commit: int = -1  # in this incarnation
    lost_data: bool = False  # its store's recovery found committed entries damaged or missing
    seed: tuple[Peer, ...] | None = None  # a member added later starts from the configuration the group gave it
    calls: set[asyncio.Task[Any]] = field(default_factory=set)  # clients' calls it is serving


@dataclass(frozen=True, slots=True)
class Ack:
    """An acknowledged append: where it landed, what it held, when it was asked and answered."""

    index: int
    body: bytes
    invoked: float
    completed: float
    via: str


@dataclass(frozen=True, slots=True)
class Read:
    index: int
    body: bytes | None  # None: the member answered "not found" (INDEX_OUT_OF_RANGE)
    invoked: float
    completed: float
    via: str


@dataclass
class History:
    """What the checkers know: committed entries, leaders by term, every acknowledgement and read."""

    committed: dict[int, int] = field(default_factory=dict)  # index -> chain CRC
    leaders: dict[int, str] = field(default_factory=dict)  # term -> leader
    acks: list[Ack] = field(default_factory=list)  # every one, in order of completion
    reads: list[Read] = field(default_factory=list)  # those that answered an entry or "not found"
    # the checkers' indexes over them (a seed has thousands): by index, and the highest index acknowledged by
    # each point of the acks in completion order
    acks_at: dict[int, list[Ack]] = field(default_factory=dict)
    completions: list[float] = field(default_factory=list)
    highest: list[Ack] = field(default_factory=list)
    found_at: dict[int, list[Read]] = field(default_factory=dict)  # the reads that returned an entry
    failed_reads: int = 0
    forwarded: int = 0  # acknowledged appends a follower's API forwarded to the leader
    sent: set[bytes] = field(default_factory=set)  # every body a client sent
    produced: int = 0  # producers' retries answered as duplicates
    consumer_tries: dict[str, set[int]] = field(default_factory=dict)  # every position each consumer sent
    consumers: dict[str, int] = field(default_factory=dict)  # each consumer's last position answered


class _ErrorRecords(logging.Handler):
    """ERROR records of the code under test, during a run: each one is a violation unless expected."""

    def __init__(self, cluster: SimCluster) -> None:
        super().__init__(logging.ERROR)
        self.cluster = cluster

    def emit(self, record: logging.LogRecord) -> None:
        self.cluster.on_error_record(record)


class SimCluster:
    def __init__(self, seed: int, voters: int = 3, learners: int = 0, tmp: Path | None = None,
                 config: dict[str, object] | None = None, power_loss: bool = False,
                 flush_mode: str = "sync") -> None:
        self.power_loss = power_loss
        self.flush_mode = flush_mode
        self.seed = seed
        self.rng = random.Random(seed)
        self.faults = Faults(random.Random(seed * 7919 + 1))
        self.network = Network(rpc_timeout_s=0.3, faults=self.faults, wire=round_trip)
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
        self.members: dict[str, Member] = {}
        for peer in self.peers:
            self.members[peer.id] = Member(peer.id, MemoryCheckpoint(), self._new_store(peer.id))
        self.history = History()
        self.violations: list[str] = []
        self.expected_errors: set[str] = set()  # message formats of ERROR records a scenario provokes
        self.loop = asyncio.get_running_loop()
        self._errors = _ErrorRecords(self)
        logging.getLogger("raftlog").addHandler(self._errors)
        self._loop_handler = self.loop.get_exception_handler()
        self.loop.set_exception_handler(self._unhandled)

    def now(self) -> float:
        return self.loop.time()

    # -- errors nobody handled ------------------------------------------------------------

    def on_error_record(self, record: logging.LogRecord) -> None:
        if record.msg not in self.expected_errors:
            cause = f" ({record.exc_info[1]!r})" if record.exc_info else ""
            self.violations.append(f"ERROR logged by {record.name}: {record.getMessage()}{cause}")

    def _unhandled(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        self.violations.append(f"unhandled: {context.get('message')} {context.get('exception')!r}")

    # -- members -----------------------------------------------------------------------

    def _new_store(self, node_id: str) -> Store | MemoryStore:
        if self.tmp is not None:
            return self._open_store(node_id)
        if self.power_loss:
            return PowerLossStore(fsync_s=FSYNC_S, flush_mode=self.flush_mode)
        return MemoryStore(SIM_STORE)

    def _open_store(self, node_id: str) -> Store:
        """Open the file store as `app.node` does: committed entries damaged or missing stop the
        open; then it is opened again, cut before them, and the member rejoins."""
        assert self.tmp is not None
        config = replace(SIM_STORE, flush_mode=self.flush_mode, flush_interval_ms=10)
        committed = self.members[node_id].checkpoint.committed_index if node_id in self.members else -1
        try:
            store = Store.open(self.tmp / node_id, config, committed_index=committed,
                               executor=self.executors[node_id])
        except CorruptLogError:
            store = Store.open(self.tmp / node_id, config, committed_index=committed, salvage=True,
                               executor=self.executors[node_id])
        if node_id in self.members:
            self.members[node_id].lost_data = store.recovery.lost_from is not None
        return store

    def start(self, node_id: str, rejoining: bool = False) -> None:
        member = self.members[node_id]
        cp = member.checkpoint
        config = RaftConfig(self_id=node_id, peers=member.seed or self.peers, rpc_timeout_ms=300, **self.overrides)
        committed = min(cp.committed_index, trusted_commit_end(self.flush_mode, member.store))  # as app.node
        node = RaftNode(config, member.store, cp, self.network.transport(node_id), term=cp.current_term,
                        voted_for=cp.voted_for, committed_index=committed,
                        applied_index=cp.applied_index, rng=random.Random(self.rng.random()),
                        rejoining=rejoining or member.lost_data,
                        configuration=saved_configuration(cp.config_index, cp.config),
                        config_scan_from=cp.committed_index + 1, tables=cp.saved_tables, work_clock=loop_time,
                        consume_queues=None if self.tmp is None else ConsumeQueues(self.tmp / node_id / "consumequeue"))
        peers = SimPeers(self.network, node_id, (config.max_wait_ack_ms + config.rpc_timeout_ms) / 1000)
        member.service = LogService(node, peers, ApiLimits(), client_url=f"sim://{node_id}",  # type: ignore[arg-type]
                                    describe=lambda: ("sync", DiskStatus("memory", 0.0, False)))
        member.consumers = ConsumerCommits(member.service)
        member.node, member.last_commit = node, node.committed_index
        self.network.register(node_id, Endpoint(node, member.service, member.consumers))
        member.store.start()
        node.start()

    def add_member(self, node_id: str, configuration: Configuration) -> None:
        """A new machine with an empty disk, started with the configuration that added it (as
        `raftlog serve --join` is)."""
        self.executors[node_id] = SlowDiskExecutor(FSYNC_S) if self.disk else InlineExecutor()
        self.members[node_id] = Member(node_id, MemoryCheckpoint(), self._new_store(node_id),
                                       seed=configuration.members)
        self.start(node_id)

    def group(self) -> tuple[str, ...]:
        """The members of the newest leader's configuration (all of them, without a leader)."""
        leader = self.leader()
        return leader.configuration.ids if leader is not None else tuple(self.members)

    def start_all(self) -> None:
        for node_id in self.members:
            self.start(node_id)

    async def crash(self, node_id: str, damage: Callable[[Store], None] | None = None) -> None:
        """Kill the process (or, with `power_loss`, the machine): tasks gone, memory gone, the calls
        it was serving gone; the checkpoint stays, and the files (all of them, or what fsync covered).
        `damage` then harms a file store's files before it is opened again."""
        member = self.members[node_id]
        if member.node is None:
            return
        self.network.unregister(node_id)
        calls = list(member.calls)
        for call in calls:
            call.cancel()
        if calls:
            await asyncio.wait(calls)
        await member.node.stop()
        if member.node.consume_queues is not None:
            member.node.consume_queues.queues.close()
        member.node = member.service = None
        if isinstance(member.store, PowerLossStore):
            await member.store.power_loss()  # the whole machine went down: unflushed data is gone
        if isinstance(member.store, Store):
            executor = self.executors[node_id]
            if isinstance(executor, SlowDiskExecutor):
                executor.drop()
            member.store._release()  # no flush: the page cache survives a process kill
            if self.disk is not None:
                self.disk.power_loss(member.store.data_dir)  # but not a power loss
            member.store = self._open_store(node_id)
            if damage is not None:  # harmed as it lies on disk, then opened again: recovery decides
                damage(member.store)
                member.store._release()
                member.store = self._open_store(node_id)

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
        logging.getLogger("raftlog").removeHandler(self._errors)
        self.loop.set_exception_handler(self._loop_handler)

    @property
    def running(self) -> list[RaftNode]:
        return [m.node for m in self.members.values() if m.node is not None]

    def leader(self) -> RaftNode | None:
        leaders = [n for n in self.running if n.role is Role.LEADER]
        return max(leaders, key=lambda n: n.term) if leaders else None

    def stale_leaders(self) -> list[RaftNode]:
        """Members that believe they lead, in a term a newer leader has taken over."""
        newest = self.leader()
        return [n for n in self.running if n.role is Role.LEADER and n is not newest]

    # -- clients ---------------------------------------------------------------------------

    def call(self, node_id: str, op: Coroutine[Any, Any, object]) -> asyncio.Task[Any] | None:
        """A client's call served by `node_id`: it ends with that member's crash. An exception
        it raises (nothing it was meant to meet) is a violation."""
        member = self.members[node_id]
        if member.node is None:
            op.close()
            return None
        task = asyncio.ensure_future(op)
        member.calls.add(task)

        def done(finished: asyncio.Task[Any]) -> None:
            member.calls.discard(finished)
            if not finished.cancelled() and finished.exception() is not None:
                self.violations.append(f"a client call on {node_id} raised {finished.exception()!r}")

        task.add_done_callback(done)
        return task

    async def append(self, body: bytes, node: RaftNode | None = None) -> int | None:
        """One client append on `node` (default: whoever leads now); the index if acknowledged."""
        node = node or self.leader()
        if node is None:
            return None
        invoked = self.now()
        self.history.sent.add(body)
        try:
            appended = await node.append([body])
        except RaftError:
            return None
        self._acked(Ack(appended.first_index, body, invoked, self.now(), node.config.self_id))
        return appended.first_index

    async def append_via(self, node_id: str, body: bytes) -> int | None:
        """One client append to any member's API, which forwards it to the leader."""
        service = self.members[node_id].service
        assert service is not None
        invoked = self.now()
        forwarded = service.node.role is not Role.LEADER
        self.history.sent.add(body)
        try:
            answer = await service.append([body])
        except ApiError as exc:
            self._check_api_error(node_id, "append", exc)
            return None
        self.history.forwarded += forwarded
        self._acked(Ack(answer.first_index, body, invoked, self.now(), node_id))
        return answer.first_index

    async def open_session(self, node_id: str, producer_id: int, epoch: list[int]) -> bool:
        """One attempt to open a producer session through a member's API; its epoch into `epoch`. False
        when the outcome is unknown or nothing was done (no leader, the cluster version not raised yet)."""
        service = self.members[node_id].service
        assert service is not None
        try:
            epoch[0] = (await service.change_session(producer_id, PRODUCER)).epoch
        except ApiError as exc:
            self._check_api_error(node_id, "producer session", exc)
            return False
        return True

    async def produce(self, node_id: str, producer: Sequenced, bodies: list[bytes], invoked: float) -> bool:
        """One attempt of a producer's append of `bodies` through a member's API (`invoked`: its first
        attempt's time); False when the outcome is unknown or nothing was done: the producer retries."""
        service = self.members[node_id].service
        assert service is not None
        self.history.sent.update(bodies)
        try:
            answer = await service.append(bodies, producer, PRODUCER)
        except ApiError as exc:
            self._check_api_error(node_id, "append", exc)
            if exc.code in (Code.OUT_OF_ORDER_SEQUENCE, Code.PRODUCER_FENCED, Code.UNKNOWN_PRODUCER,
                            Code.NOT_PRODUCER_OWNER):
                self.violations.append(f"producer {producer.producer_id} sequence {producer.sequence} via "
                                       f"{node_id}: {exc.code.name}: {exc.message}")
            return False
        self.history.produced += answer.duplicate
        for k, body in enumerate(bodies):
            self._acked(Ack(answer.first_index + k, body, invoked, self.now(), node_id), duplicate=answer.duplicate)
        return True

    async def commit_consumer(self, node_id: str, name: str, position: int, expected: int | None) -> bool:
        """One attempt of a consumer's commit through a member's API; False when the outcome is unknown
        (the consumer retries). A compare-and-set that finds its own position was answered before."""
        consumers = self.members[node_id].consumers
        assert consumers is not None
        self.history.consumer_tries.setdefault(name, set()).add(position)
        try:
            answer = await consumers.commit(name, position, expected=expected, caller=LOCAL)
        except ApiError as exc:
            self._check_api_error(node_id, "consumer commit", exc)
            if exc.code is not Code.CONSUMER_CONFLICT:
                return False
            try:
                found = (await consumers.get(name)).position
            except ApiError:
                return False
            # one writer each: only its own commit can be there, or be on its way (an earlier attempt in
            # the leader's log, not committed yet: the consumer tries again)
            if found not in (position, expected):
                self.violations.append(f"consumer {name}: expected {expected}, committing {position}, "
                                       f"the group has {found}")
            return found == position
        self.history.consumers[name] = answer.position
        return True

    async def read(self, node_id: str, index: int) -> bytes | None:
        """A linearizable read of `index` from a member's API: read index, then its store."""
        service = self.members[node_id].service
        assert service is not None
        invoked = self.now()
        try:
            entry = await service.get(index, linearizable=True)
        except ApiError as exc:
            self._check_api_error(node_id, "read", exc)
            if exc.code is Code.INDEX_OUT_OF_RANGE:
                self._read(Read(index, None, invoked, self.now(), node_id))
            else:
                self.history.failed_reads += 1
            return None
        self._read(Read(index, bytes(client_body(entry)), invoked, self.now(), node_id))
        return bytes(client_body(entry))

    async def read_range(self, node_id: str, start: int, limit: int) -> None:
        """A linearizable range read from a member's API: each index of the page is a read that
        returned it, and each index the page stopped short of, one that found nothing."""
        service = self.members[node_id].service
        assert service is not None
        invoked = self.now()
        try:
            entries, _ = await service.read(start, limit, linearizable=True)
        except ApiError as exc:
            self._check_api_error(node_id, "range read", exc)
            self.history.failed_reads += 1
            return
        got = {entry.index: bytes(client_body(entry)) for entry in entries}
        for index in range(start, start + limit):
            self._read(Read(index, got.get(index), invoked, self.now(), node_id))

    def _check_api_error(self, node_id: str, what: str, exc: ApiError) -> None:
        if exc.code is Code.INTERNAL_ERROR:  # a crash below, turned into a 500
            self.violations.append(f"{what} on {node_id} answered INTERNAL_ERROR: {exc.message}")

    def _acked(self, ack: Ack, duplicate: bool = False) -> None:
        """`duplicate`: a producer's retry answered with its original entry, which may have been
        acknowledged before (`invoked` is then the first attempt's)."""
        history = self.history
        for other in history.acks_at.get(ack.index, ()):
            if not (duplicate and other.body == ack.body):
                self.violations.append(f"two acknowledgements at index {ack.index}: {other.body!r} "
                                       f"(via {other.via}) and {ack.body!r} (via {ack.via})")
        before = bisect.bisect_right(history.completions, ack.invoked)  # acknowledged before it was invoked
        if before and history.highest[before - 1].index > ack.index:
            other = history.highest[before - 1]
            self.violations.append(f"{ack.body!r} was invoked after {other.body!r} was acknowledged at "
                                   f"{other.index}, but landed before it, at {ack.index}")
        history.acks.append(ack)
        history.acks_at.setdefault(ack.index, []).append(ack)
        history.completions.append(ack.completed)  # the virtual clock's: never falls
        history.highest.append(ack if not history.highest or ack.index > history.highest[-1].index
                               else history.highest[-1])

    def _read(self, read: Read) -> None:
        history = self.history
        acked = history.acks_at.get(read.index, ())
        if read.body is None:
            for ack in acked:
                if ack.completed <= read.invoked:
                    self.violations.append(f"read of {read.index} on {read.via} found nothing, but it was "
                                           f"acknowledged (via {ack.via}) before the read began")
            for seen in history.found_at.get(read.index, ()):
                if seen.completed <= read.invoked:
                    self.violations.append(f"read of {read.index} on {read.via} found nothing, but an earlier "
                                           f"read (on {seen.via}) had returned it")
        else:
            for ack in acked:
                if ack.body != read.body:
                    self.violations.append(f"read of {read.index} on {read.via} returned {read.body!r}, "
                                           f"acknowledged was {ack.body!r}")
            history.found_at.setdefault(read.index, []).append(read)
        history.reads.append(read)

    # -- checkers ---------------------------------------------------------------------------

    def check(self) -> None:
        """Raft's safety properties, looked at on every running member."""
        for member in self.members.values():
            node = member.node
            if node is None:
                continue
            if not node.is_voter and node.role is Role.LEADER:
                self.violations.append(f"{member.id}, not a voter, leads in term {node.term}")
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
                voters = node.configuration.voters  # the configuration in force on the leader
                durable = sum(1 for m in self.members.values() if m.id in voters and self._holds(m, committed))
                if durable < len(voters) // 2 + 1:
                    self.violations.append(f"{member.id} committed {committed} durable on only {durable}")

    def _holds(self, member: Member, index: int) -> bool:
        """Durable on this member, or lost to damage there: then it does not vote until it has it back."""
        rejoining = member.node.rejoining if member.node is not None else member.lost_data
        return rejoining or member.store.durable_end_index >= index

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

    def check_final(self) -> None:
        """On the converged log: every acknowledged append is there, every read answered what is
        there, and every entry is a NOOP or a body some client sent, once."""
        leader = self.leader()
        assert leader is not None and self.converged()
        store = leader.store
        for ack in self.history.acks:
            if ack.index > store.end_index:
                self.violations.append(f"acknowledged index {ack.index} (via {ack.via}) is past the final "
                                       f"log end {store.end_index}: lost")
            elif bytes(client_body(store.get(ack.index))) != ack.body:
                self.violations.append(f"acknowledged append at {ack.index} (via {ack.via}) was lost")
        for read in self.history.reads:
            if read.body is not None and (read.index > store.end_index
                                          or bytes(client_body(store.get(read.index))) != read.body):
                self.violations.append(f"read of {read.index} on {read.via} returned {read.body!r}, "
                                       "which is not the committed entry")
        written: dict[bytes, int] = {}  # every body is sent once: a second copy was duplicated below
        for index in range(store.begin_index, store.end_index + 1):
            entry = store.get(index)
            if entry.magic == Magic.NOOP and not entry.body:
                continue
            if entry.magic == Magic.CONFIG_CHANGE:  # an operator's, not a client's
                Configuration.decode(entry.body, index)
                continue
            if entry.magic == Magic.CONSUMER:
                ConsumerCommit.decode(entry.body)
                continue
            if entry.magic == Magic.PRODUCER_SESSION:  # a producer's open, by the leader
                assert SessionChange.decode(entry.body).owner == PRODUCER
                continue
            if entry.magic == Magic.CLUSTER_VERSION:  # the leader's own, once every member reports a level
                assert decode_level(entry.body) == LEVEL
                continue
            if entry.magic in (Magic.TOPIC, Magic.QUEUE_COMMIT):  # the topic writers' (tests.sim.topics checks)
                continue
            body = bytes(decode_message(entry.body).body if entry.magic == Magic.MESSAGE else client_body(entry))
            if entry.magic not in DATA_MAGICS or body not in self.history.sent:
                self.violations.append(f"entry {index} ({Magic(entry.magic).name}) was written by no client")
            elif body in written:
                self.violations.append(f"{body!r} is in the log twice, at {written[body]} and {index}")
            written.setdefault(body, index)
        self.check_sessions()
        self.check_consumers()

    def check_consumers(self) -> None:
        """Every member of the group holds the same consumer positions, each one its consumer sent; a
        consumer that compares and sets (its name starts with "cas") is at least where its last answered
        commit put it (a plain commit retried may land after a later one, as in any log)."""
        leader = self.leader()
        assert leader is not None
        tables = {node.config.self_id: {name: p.position for name, p in node.consumers.live().items()}
                  for node in self.running if node.config.self_id in leader.configuration.ids}
        first = next(iter(tables.values()))
        for node_id, table in tables.items():
            if table != first:
                self.violations.append(f"consumer positions differ: {node_id} has {table}, {next(iter(tables))} "
                                       f"has {first}")
        for name, answered in self.history.consumers.items():
            position = first.get(name)
            if position not in self.history.consumer_tries[name] or (name.startswith("cas") and position < answered):
                self.violations.append(f"consumer {name} is at {position}; its last commit answered was {answered}")

    def check_sessions(self) -> None:
        """Every member of the group knows each producer's epoch and last batch as the others do: a
        function of the log alone (the older batches kept may differ for a while, as each member drops
        them once committed)."""
        leader = self.leader()
        assert leader is not None
        tables = {node.config.self_id: {producer_id: (state.epoch, state.batches[-1:],
                                                      {queue: batches[-1] for queue, batches in state.queues.items()})
                                        for producer_id, state in node.sessions.table.producers.items()}
                  for node in self.running if node.config.self_id in leader.configuration.ids}
        first = next(iter(tables.values()))
        for node_id, table in tables.items():
            if table != first:
                self.violations.append(f"producer sessions differ: {node_id} has {table}, "
                                       f"{next(iter(tables))} has {first}")

    def lost_acks(self, store: Store | MemoryStore) -> int:
        """Acknowledged appends not in `store` at their index."""
        return sum(1 for ack in self.history.acks
                   if ack.index > store.end_index or bytes(client_body(store.get(ack.index))) != ack.body)

    def converged(self) -> bool:
        """Every member of the leader's configuration runs and holds its log, all committed (a member
        removed and left running is not waited for)."""
        leader = self.leader()
        if leader is None:
            return False
        group = leader.configuration.ids
        nodes = [n for n in self.running if n.config.self_id in group]
        if len(nodes) != len(group):
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
