"""One Raft member (DLedger's DLedgerServer): assembles its parts around a log
store, a term store and a transport, and routes calls and events between them.

- the elector keeps the role (raft.elector), the dispatchers push to each
  follower (raft.dispatcher), the entry handler takes pushes (raft.handler);
- client appends (raft.client_appends) wait on the quorum ack (raft.commitment);
- committed entries are applied and checkpointed (raft.apply);
- leadership transfer (raft.transfer) and membership changes (raft.membership);
- damaged entries are repaired from replicas (raft.repair).

Everything runs as tasks on one event loop, woken by events; with the
cluster idle, the only work left is the leader's heartbeat timer.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from raftlog.raft.apply import Applier, ProgressStore, StateMachine
from raftlog.raft.client_appends import Appended, ClientAppends
from raftlog.raft.cluster_version import ClusterVersion
from raftlog.raft.commitment import Commitment
from raftlog.raft.config import Peer, RaftConfig
from raftlog.raft.consume_dispatch import ConsumeQueueDispatcher
from raftlog.raft.consumers import ConsumerAsk, ConsumerCommit, ConsumerPositions
from raftlog.raft.dispatcher import EntryDispatcher
from raftlog.raft.elector import LeaderElector
from raftlog.raft.errors import TermChangedError
from raftlog.raft.group_offsets import GroupOffsets
from raftlog.raft.handler import EntryHandler
from raftlog.raft.member_state import MemberState
from raftlog.raft.membership import ConfigLog, Configuration, ConfigurationTable, MembershipError
from raftlog.raft.messages import (
    Code,
    FetchRequest,
    HeartbeatRequest,
    HeartbeatResponse,
    PushRequest,
    PushResponse,
    Role,
    TransferRequest,
    TransferResponse,
    VoteRequest,
    VoteResponse,
)
from raftlog.raft.producers import ProducerSessions, Sequenced, SessionChange
from raftlog.raft.progress import PeerProgress, Progress
from raftlog.raft.queues import QueueOffsets
from raftlog.raft.read_index import ReadIndex
from raftlog.raft.reconfiguration import Reconfiguration
from raftlog.raft.repair import Repairer
from raftlog.raft.tables import Tables
from raftlog.raft.topic_appends import TopicAppends
from raftlog.raft.topics import TopicCatalog
from raftlog.raft.transfer import LeadershipTransfer
from raftlog.raft.transport import Transport
from raftlog.raft.waiting import Clock, Signal, log_if_died, loop_time
from raftlog.storage.codec import Magic
from raftlog.storage.consume_queues import ConsumeQueues
from raftlog.storage.errors import StorageError
from raftlog.storage.protocol import LogStore

log = logging.getLogger("raftlog.raft.node")

ConfigListener = Callable[[Sequence[Peer]], None]


def trusted_commit_end(flush_mode: str, store: LogStore) -> int:
    """How far a restarted member believes the commit index in its checkpoint.

    In flush_mode "async" a quorum acknowledges entries before flushing them: after a power loss the
    group may have gone on without one this member counts as committed, so it learns the commit index
    from its leader again (or it would refuse to truncate that entry for ever). In "sync" mode what it
    holds after recovery is all it may count."""
    return store.end_index if flush_mode == "sync" else store.before_begin_index


class RaftNode:
    def __init__(self, config: RaftConfig, store: LogStore, progress: ProgressStore, transport: Transport,
                 *, term: int = 0, voted_for: str | None = None, committed_index: int = -1,
                 applied_index: int = -1, state_machine: StateMachine | None = None,
                 rng: random.Random | None = None, rejoining: bool = False,
                 configuration: Configuration | None = None, config_scan_from: int = 0,
                 tables: Mapping[str, bytes | None] | None = None, consume_queues: ConsumeQueues | None = None,
                 work_clock: Clock = time.perf_counter) -> None:
        """`configuration`: the committed one the checkpoint holds (None: `config.peers`, the first);
        the log's configuration entries from `config_scan_from` on come after it (the checkpoint
        holds every configuration up to the commit index it saved), as do the other tables of the log
        (raft.tables) after what `tables` holds of each, by name; `consume_queues`: the topics' consume
        queues (None: the simulation's, without). `work_clock` times the
        scrub's batches, to pace it (the simulation gives its virtual clock, so a seed replays the same)."""
        self.config = config
        self.store = store
        self.transport = transport
        self.rng = rng or random.Random()
        committed = min(committed_index, store.end_index)
        base = configuration if configuration is not None else Configuration(config.peers)
        self.members = self._configurations(base, config_scan_from, committed)
        self._config_listeners: list[ConfigListener] = []
        self._config_in_force = self.members.current.index  # the one last logged
        self._peer_ids = self._members_but_self()
        self.state = MemberState(config.self_id, progress, term, voted_for, committed, voter=self.is_voter)
        self.applier = Applier(config, self.state, store, progress, self.members, state_machine,
                               applied_index=applied_index, saved_config_index=base.index)
        self.commitment = Commitment(config, self.state, store, self.members, self.now, self)
        self.sessions = ProducerSessions(config, self.state, store)
        self.consumers = ConsumerPositions(config, self.state, store)
        self.version = ClusterVersion(config.self_id, config.reported_level, self.state, store)
        self.topics = TopicCatalog(config.self_id, config.topics_max)
        self.consume_queues = None if consume_queues is None else ConsumeQueueDispatcher(config.self_id, store,
                                                                                           consume_queues)
        self.queue_offsets = QueueOffsets(config.self_id, self.consume_queues)
        self.groups = GroupOffsets(config, self.state, self.queue_offsets.next_offset)
        self.tables = Tables(config.self_id, store, [table for table in (  # the log's tables (raft.tables)
            ConfigurationTable(config.self_id, self.members, self._config_changed),
            self.sessions,
            self.consumers,
            self.version,
            self.topics,
            self.consume_queues,  # before the queue offsets: it restores the queues they are read from
            self.queue_offsets,
            self.groups,
        ) if table is not None])
        self.tables.restore(tables or {}, progress)
        self.tables.committed(committed)  # what a start replayed and was committed: the consume queues
        self.version.check_startable()
        self.appends = ClientAppends(config, self.state, store, self.commitment, self.tables, self.sessions,
                                     self.consumers, self.version, self._member_ids, self.wake_dispatchers,
                                     self.durable_moved, self.read_index)
        # topics, their messages and consumer groups' offsets (raft.topic_appends): `node.topic_appends.*`
        self.topic_appends = TopicAppends(config, self.state, self.appends, self.topics, self.queue_offsets,
                                          self.groups, self.version, self._member_ids)
        self.elector = LeaderElector(config, self.state, store, self.members, transport, self.now, self.rng, self)
        self.reads = ReadIndex(config, self.state, self.commitment, self.appends, self.elector, self.now)
        self.handler = EntryHandler(config, self.state, store, self.now, self, self.tables)
        self.dispatchers = {peer: self._dispatcher(peer) for peer in self._peer_ids}
        self._dispatch_tasks: dict[str, asyncio.Task[None]] = {}
        self.repairer = Repairer(config, self.state, store, transport, lambda: self._peer_ids, work_clock)
        self.reconfiguration = Reconfiguration(config, self.state, store, self.members, self.commitment,
                                               self.appends, self.elector)
        self.transfer = LeadershipTransfer(config, self.state, store, self.members, self.commitment, transport,
                                           self.now, self)
        self.leader_commit_index = -1  # a follower: the commit index its leader last told it
        # A member that lost committed entries (a damaged disk, cut away on open) may not know what was
        # committed: it neither votes nor stands until it holds what its first leader had committed, up
        # to an entry of that leader's own term (so every entry committed before is included).
        self.rejoining = rejoining
        self._rejoin_target: int | None = None
        self._leading = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._side_tasks: set[asyncio.Task[None]] = set()  # one-off work such as the NOOP
        self.started_at: float | None = None  # on the loop's clock, once started
        self.state.add_role_listener(self._on_role_change)

    def now(self) -> float:
        """The loop's clock: the simulation drives it."""
        return loop_time()

    def _dispatcher(self, peer: str) -> EntryDispatcher:
        return EntryDispatcher(peer, self.config, self.state, self.store, self.members, self.commitment,
                               self.transport, self.now, self, self.tables)

    # -- life ------------------------------------------------------------------------

    def start(self) -> None:
        self.started_at = self.now()
        loop_tasks = [self.elector.run(), self.handler.run(), self.applier.run(), self.appends.flush_loop()]
        loop_tasks.append(self.repairer.run_repairs())
        if self.config.scrub_interval_ms:
            loop_tasks.append(self.repairer.run_scrub(self.config.scrub_interval_ms / 1000))
        self._tasks = [asyncio.create_task(t, name=f"raft-{self.config.self_id}") for t in loop_tasks]
        for task in self._tasks:
            task.add_done_callback(self._task_ended)
        for peer, dispatcher in self.dispatchers.items():
            self._start_dispatcher(peer, dispatcher)
        self.applier.wake.set()  # entries committed before a restart may still wait to be applied

    def _start_dispatcher(self, peer: str, dispatcher: EntryDispatcher) -> None:
        task = self._dispatch_tasks[peer] = asyncio.create_task(dispatcher.run(), name=f"push-{peer}")
        task.add_done_callback(self._task_ended)

    def _task_ended(self, task: asyncio.Task[Any]) -> None:
        """A task of the member died: said at once, not only found when `stop` gathers it."""
        log_if_died(task, log, self.config.self_id)

    async def stop(self) -> None:
        tasks = [*self._tasks, *self._dispatch_tasks.values(), *self._side_tasks,
                 *(t for t in (self.transfer.running, self.applier.saving) if t is not None)]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._tasks, self._side_tasks, self._dispatch_tasks = [], set(), {}
        self.commitment.fail_pending(TermChangedError("the node is stopping"))

    # -- roles -----------------------------------------------------------------------

    def _on_role_change(self, term: int, role: Role) -> None:
        self.handler.reset()
        self.commitment.fail_pending(TermChangedError(f"term changed to {term} ({role.value})",
                                                      self.state.leader_id))
        if role is Role.LEADER:
            self._leading.set()
            self.version.forget_reports()
            self.commitment.lead(term)
            self.appends.term_first_index = -1
            task = asyncio.create_task(self.appends.append_noop(term))
            self._side_tasks.add(task)
            task.add_done_callback(self._side_tasks.discard)
            task.add_done_callback(self._task_ended)
        else:
            self._leading.clear()
        self.elector.wake.set()
        self.wake_dispatchers()

    async def wait_for_leadership(self) -> None:
        await self._leading.wait()

    def note_larger_term(self, term: int) -> None:
        """A follower answered with a larger term: the next heartbeat round steps down."""
        self.elector.heartbeat_now()

    def wake_dispatchers(self) -> None:
        for dispatcher in self.dispatchers.values():
            dispatcher.wake.set()

    # -- client appends (leader; raft.client_appends) -------------------------------------

    async def append(self, bodies: Sequence[bytes], producer: Sequenced | None = None, caller: str = "") -> Appended:
        """Append entries and wait until they are committed (stored on a quorum, durable)."""
        return await self.appends.append(bodies, producer, caller)

    async def change_session(self, producer_id: int, caller: str, close: bool = False) -> SessionChange:
        """Open (or close) `caller`'s producer session of `producer_id`, in the log once committed."""
        return await self.appends.change_session(producer_id, caller, close)

    async def commit_consumer(self, ask: ConsumerAsk) -> tuple[Appended, ConsumerCommit]:
        """A named consumer's position, in the log once committed (raft.consumers), and the entry written."""
        return await self.appends.commit_consumer(ask)

    def durable_moved(self) -> None:
        """A flush covered more of the log: the checkpoint's progress may move up to the commit index."""
        self.applier.wake.set()

    # -- commitment (raft.commitment's CommitListener) --------------------------------------

    def configuration_committed(self) -> None:
        self._config_changed()

    def entries_committed(self) -> None:
        self.tables.committed(self.state.committed_index)
        self.applier.wake.set()

    def follower_commit(self, leader_commit: int, matched_end: int) -> None:
        if not self.state.is_leader:
            self.leader_commit_index = max(self.leader_commit_index, leader_commit)
            self.commitment.commit(min(leader_commit, matched_end, self.store.end_index))
            if self.rejoining:
                self._check_rejoined()

    @property
    def passive(self) -> bool:
        """Never a candidate and never a voter: a learner, a removed member, or a member rejoining
        after losing data."""
        return not self.is_voter or self.rejoining

    def _check_rejoined(self) -> None:
        if self._rejoin_target is None:
            self._rejoin_target = self.leader_commit_index
            log.warning("%s rejoins: it votes again once it holds index %d", self.config.self_id,
                        self._rejoin_target)
        committed = self.state.committed_index
        # an entry of the leader's own term committed: every entry committed before it is at or below it
        if committed >= self._rejoin_target and self.store.term_at(committed) == self.state.current_term:
            self.rejoining = False
            log.warning("%s holds everything committed up to %d again: it votes and stands again",
                        self.config.self_id, self._rejoin_target)
            self.elector.wake.set()

    @property
    def caught_up(self) -> bool:
        """Has a leader and holds everything it committed (a leader: its NOOP is committed)."""
        if self.state.is_leader:
            return self.appends.caught_up
        return self.state.leader_id is not None and self.state.committed_index >= self.leader_commit_index

    # -- reads -------------------------------------------------------------------------

    async def read_index(self) -> int:
        """The leader's commit index, confirmed by a heartbeat round (linearizable reads)."""
        return await self.reads.confirm()

    async def wait_committed(self, index: int, timeout_s: float) -> bool:
        """Wait until this member's commit index reaches `index`; False after `timeout_s`."""
        return await self.commitment.wait_committed(index, timeout_s)

    def snapshot_installed(self, index: int, term: int, configuration: Configuration | None = None) -> None:
        """The log restarts after `index`; `configuration` is the leader's committed one, which the
        entries cleaned away may have set (None: the leader did not say, the log's stays)."""
        if configuration is not None:
            self.members.reset(configuration if configuration.index >= self.members.base.index
                               else self.members.base)
            self._config_changed()
        self.applier.snapshot_installed(index, term, configuration)
        self.commitment.commit(index)

    # -- membership (raft.membership) ------------------------------------------------------

    @property
    def configuration(self) -> Configuration:
        """The latest configuration in the log, committed or not: the one this member uses."""
        return self.members.current

    @property
    def voters(self) -> tuple[str, ...]:
        return self.members.current.voters

    @property
    def is_voter(self) -> bool:
        return self.config.self_id in self.members.current.voters

    @property
    def peer_ids(self) -> tuple[str, ...]:
        """The other members this one talks to: those of every configuration in play."""
        return self._peer_ids

    def add_config_listener(self, listener: ConfigListener) -> None:
        """Called with every member in play, whenever they change (the peer client's addresses)."""
        self._config_listeners.append(listener)
        listener(tuple(self.members.members.values()))

    async def change_membership(self, *, add: Peer | None = None, promote: str | None = None,
                                remove: str | None = None) -> Configuration:
        """One change, appended as a CONFIG_CHANGE entry: the new configuration once committed."""
        return await self.reconfiguration.change(add=add, promote=promote, remove=remove)

    def _configurations(self, base: Configuration, scan_from: int, committed: int) -> ConfigLog:
        """The configurations in force: `base`, then those of the log's entries after it."""
        members = ConfigLog(base)
        for index in range(max(base.index + 1, scan_from, self.store.begin_index), self.store.end_index + 1):
            try:
                entry = self.store.get(index)
                if entry.magic == Magic.CONFIG_CHANGE:
                    members.append(Configuration.decode(entry.body, index))
            except (MembershipError, StorageError) as exc:
                log.error("%s: configuration entry %d not taken: %s", self.config.self_id, index, exc)
        members.commit(committed)
        return members

    def _members_but_self(self) -> tuple[str, ...]:
        return tuple(m for m in self.members.members if m != self.config.self_id)

    def _config_changed(self) -> None:
        """Dispatchers, the peer client's addresses and the elector follow the configurations in play."""
        self._peer_ids = self._members_but_self()
        for peer in self._peer_ids:
            if peer not in self.dispatchers:
                dispatcher = self.dispatchers[peer] = self._dispatcher(peer)
                if self._tasks:  # started
                    self._start_dispatcher(peer, dispatcher)
        for peer in [p for p in self.dispatchers if p not in self._peer_ids]:
            del self.dispatchers[peer]
            task = self._dispatch_tasks.pop(peer, None)
            if task is not None:
                task.cancel()
        members = tuple(self.members.members.values())
        for listener in self._config_listeners:
            listener(members)
        if self.configuration.index != self._config_in_force:
            self._config_in_force = self.configuration.index
            log.info("%s: configuration of entry %d in force: voters %s, learners %s", self.config.self_id,
                     self.configuration.index, ",".join(self.voters),
                     ",".join(m.id for m in self.configuration.members if m.learner) or "none")
        self.elector.wake.set()
        self.wake_dispatchers()

    # -- leadership transfer (raft.transfer's Peers) -------------------------------------------

    async def transfer_leadership(self, transferee: str) -> Code:
        """Hand leadership to `transferee` once it has caught up."""
        return await self.transfer.transfer(transferee)

    def check_preferred_leader(self) -> None:
        self.transfer.check_preferred_leader()

    def heard_level(self, peer: str, level: int) -> None:
        self.version.heard(peer, level)

    def check_cluster_version(self) -> None:
        self.appends.check_cluster_version()

    def _member_ids(self) -> list[str]:
        """The voters and learners still in play (a member being added or removed included): every one
        must read what the leader writes."""
        return list(self.members.members)

    def alive(self, peer: str) -> bool:
        return bool(self.elector.peer_alive.get(peer))

    def hurry(self, peer: str) -> None:
        self.dispatchers[peer].wake.set()

    # -- incoming calls (the transport's PeerHandler) ---------------------------------------

    async def handle_vote(self, request: VoteRequest) -> VoteResponse:
        return await self.elector.handle_vote(request)

    async def handle_heartbeat(self, request: HeartbeatRequest) -> HeartbeatResponse:
        return await self.elector.handle_heartbeat(request)

    def take_push(self, request: PushRequest) -> asyncio.Future[PushResponse]:
        """The answer to a push, to come: a push from the current leader goes to the handler."""
        state = self.state
        if request.group != self.config.group:
            code = Code.UNKNOWN_GROUP
        elif request.term < state.current_term:
            code = Code.EXPIRED_TERM
        elif request.term > state.current_term:
            code = Code.INCONSISTENT_TERM  # the heartbeat brings this member to that term first
        elif not state.is_follower:
            code = Code.NOT_FOLLOWER
        elif request.leader_id != state.leader_id:
            code = Code.INCONSISTENT_LEADER
        else:
            return self.handler.take(request)
        refused: asyncio.Future[PushResponse] = asyncio.get_running_loop().create_future()
        refused.set_result(PushResponse(code, state.current_term, request.first_index, self.store.end_index,
                                        self.store.end_term))
        return refused

    async def handle_transfer(self, request: TransferRequest) -> TransferResponse:
        """The transfer's target: take leadership if the request is from the current leader."""
        async with self.state.lock:
            state = self.state
            if request.transferee_id != self.config.self_id or self.passive:
                return TransferResponse(Code.UNEXPECTED_MEMBER, state.current_term)
            if request.term != state.current_term or state.leader_id != request.leader_id:
                return TransferResponse(Code.INCONSISTENT_LEADER, state.current_term)
            self.elector.take_leadership()
            return TransferResponse(Code.SUCCESS, state.current_term)

    async def handle_fetch(self, request: FetchRequest) -> bytes:
        """This member's stored copy of a committed entry, for another's repair; empty if none."""
        if request.group != self.config.group:
            return b""
        return self.repairer.copy_of(request.index)

    # -- status ------------------------------------------------------------------------------

    @property
    def role(self) -> Role:
        return self.state.role

    @property
    def term(self) -> int:
        return self.state.current_term

    @property
    def leader_id(self) -> str | None:
        return self.state.leader_id

    @property
    def commit_moved(self) -> Signal:
        """Fired each time the commit index advances: what readers following the log wait on."""
        return self.commitment.moved

    @property
    def committed_index(self) -> int:
        return self.state.committed_index

    @property
    def applied_index(self) -> int:
        return self.applier.applied_index

    @property
    def pending_appends(self) -> int:
        return self.commitment.pending

    def watermark(self, term: int, peer: str) -> int:
        return self.commitment.watermark(term, peer)

    def snapshot(self) -> Progress:
        """Where this member is, read-only: what the API's status and the metrics show."""
        state, term = self.state, self.state.current_term
        peers = {peer: PeerProgress(self.alive(peer), d.match_index, self.commitment.watermark(term, peer),
                                    d.inflight_bytes)
                 for peer, d in self.dispatchers.items()} if state.is_leader else {}
        return Progress(state.role, term, state.leader_id, state.committed_index, self.applier.applied_index,
                        self.commitment.pending, self.rejoining, self.elector.elections, len(self.repairer.damaged),
                        self.repairer.repaired, self.repairer.scrubs, peers)

    @property
    def role_changed(self) -> asyncio.Event:
        """Set on every role or term change (cleared by whoever waits on it)."""
        return self.state.changed
