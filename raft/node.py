"""One Raft member: assembles the elector, the dispatchers, the entry handler,
the quorum check, client appends, read index, leadership transfer and the
apply loop around a log store, a term store and a transport.

Everything runs as tasks on one event loop, woken by events; with the
cluster idle, the only work left is the leader's heartbeat timer.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections import OrderedDict, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from raftlog.raft.config import Peer, RaftConfig
from raftlog.raft.dispatcher import EntryDispatcher
from raftlog.raft.election import LeaderVerdict
from raftlog.raft.elector import LeaderElector
from raftlog.raft.errors import (
    AckTimeoutError,
    LeaderTransferringError,
    NotLeaderError,
    PendingFullError,
    RaftError,
    TermChangedError,
)
from raftlog.raft.handler import EntryHandler
from raftlog.raft.member_state import MemberState, TermStore
from raftlog.raft.membership import ConfigLog, Configuration, MembershipError, Refusal, plan_change
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
from raftlog.raft.quorum import quorum_index
from raftlog.raft.repair import Repairer
from raftlog.raft.transport import PeerUnavailable, Transport
from raftlog.raft.waiting import Signal, Wakeup, wait_event
from raftlog.storage.codec import Entry, Magic
from raftlog.storage.errors import StorageError
from raftlog.storage.protocol import LogStore

log = logging.getLogger("raftlog.raft.node")


class StateMachine(Protocol):
    """What committed entries are handed to, in index order."""

    def apply(self, entries: list[Entry]) -> None: ...

    def snapshot_installed(self, index: int, term: int) -> None: ...


class ProgressStore(TermStore, Protocol):
    """Term and vote, committed and applied indices, and the committed configuration (storage.Checkpoint)."""

    def note_progress(self, committed_index: int, applied_index: int) -> None: ...

    async def save_config(self, index: int, config: bytes) -> None: ...


ConfigListener = Callable[[Sequence[Peer]], None]


def trusted_commit_end(flush_mode: str, store: LogStore) -> int:
    """How far a restarted member believes the commit index in its checkpoint.

    In flush_mode "async" a quorum acknowledges entries before flushing them: after a power loss the
    group may have gone on without one this member counts as committed, so it learns the commit index
    from its leader again (or it would refuse to truncate that entry for ever). In "sync" mode what it
    holds after recovery is all it may count."""
    return store.end_index if flush_mode == "sync" else store.before_begin_index


@dataclass(frozen=True, slots=True)
class Appended:
    first_index: int
    last_index: int
    term: int
    positions: list[int]


class RaftNode:
    def __init__(self, config: RaftConfig, store: LogStore, progress: ProgressStore, transport: Transport,
                 *, term: int = 0, voted_for: str | None = None, committed_index: int = -1,
                 applied_index: int = -1, state_machine: StateMachine | None = None,
                 rng: random.Random | None = None, rejoining: bool = False,
                 configuration: Configuration | None = None, config_scan_from: int = 0) -> None:
        """`configuration`: the committed one the checkpoint holds (None: `config.peers`, the first);
        the log's configuration entries from `config_scan_from` on come after it (the checkpoint
        holds every configuration up to the commit index it saved)."""
        self.config = config
        self.store = store
        self.progress = progress
        self.transport = transport
        self.rng = rng or random.Random()
        self.state_machine = state_machine  # None: the log itself is the product, nothing to apply
        committed = min(committed_index, store.end_index)
        base = configuration if configuration is not None else Configuration(config.peers)
        self._saved_config_index = base.index
        self.members = self._configurations(base, config_scan_from, committed)
        self._config_save: asyncio.Task[None] | None = None
        self._config_listeners: list[ConfigListener] = []
        self._changing = False  # a membership change is on its way into the log
        self._config_in_force = self.members.current.index  # the one last logged
        self._peer_ids = self._members_but_self()
        self.state = MemberState(config.self_id, progress, term, voted_for, committed, voter=self.is_voter)
        self.applied_index = max(min(applied_index, committed), store.before_begin_index)
        self._noted = (committed, min(applied_index, committed))
        self.elector = LeaderElector(self)
        self.handler = EntryHandler(self)
        self.dispatchers = {peer: EntryDispatcher(self, peer) for peer in self._peer_ids}
        self._dispatch_tasks: dict[str, asyncio.Task[None]] = {}
        self.repairer = Repairer(self)
        self._watermarks: dict[str, int] = {}
        self._watermark_term = -1
        self._pending: OrderedDict[int, asyncio.Future[None]] = OrderedDict()
        # When each waiting append gives up (max_wait_ack_ms), in append order: one timer serves them all.
        self._ack_deadlines: deque[tuple[float, int, asyncio.Future[None]]] = deque()
        self._ack_timer: asyncio.TimerHandle | None = None
        self._term_first_index = -1  # the leader's NOOP: reads wait for it to commit
        self.leader_commit_index = -1  # a follower: the commit index its leader last told it
        # A member that lost committed entries (a damaged disk, cut away on open) may not know what was
        # committed: it neither votes nor stands until it holds what its first leader had committed, up
        # to an entry of that leader's own term (so every entry committed before is included).
        self.rejoining = rejoining
        self._rejoin_target: int | None = None
        self._apply_wake = Wakeup()
        self._commit_moved = Signal()  # the commit index advanced
        self._watermark_moved = Signal()  # a follower acknowledged more
        self._appended = Wakeup()  # the leader's own log grew: flush it
        self._leading = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._side_tasks: set[asyncio.Task[None]] = set()  # one-off work such as the NOOP
        self._transfer: asyncio.Task[Code] | None = None
        self.state.add_role_listener(self._on_role_change)

    def now(self) -> float:
        return asyncio.get_running_loop().time()

    # -- life ------------------------------------------------------------------------

    def start(self) -> None:
        loop_tasks = [self.elector.run(), self.handler.run(), self._apply_loop(), self._leader_flush_loop()]
        loop_tasks.append(self.repairer.run_repairs())
        if self.config.scrub_interval_ms:
            loop_tasks.append(self.repairer.run_scrub(self.config.scrub_interval_ms / 1000))
        self._tasks = [asyncio.create_task(t, name=f"raft-{self.config.self_id}") for t in loop_tasks]
        for task in self._tasks:
            task.add_done_callback(self._task_ended)
        for peer, dispatcher in self.dispatchers.items():
            self._start_dispatcher(peer, dispatcher)
        self._apply_wake.set()  # entries committed before a restart may still wait to be applied

    def _start_dispatcher(self, peer: str, dispatcher: EntryDispatcher) -> None:
        task = self._dispatch_tasks[peer] = asyncio.create_task(dispatcher.run(), name=f"push-{peer}")
        task.add_done_callback(self._task_ended)

    def _task_ended(self, task: asyncio.Task[Any]) -> None:
        """A task of the member died: said at once, not only found when `stop` gathers it."""
        if not task.cancelled() and task.exception() is not None:
            log.error("%s: task %s died", self.config.self_id, task.get_coro(), exc_info=task.exception())

    async def stop(self) -> None:
        tasks = [*self._tasks, *self._dispatch_tasks.values(), *self._side_tasks,
                 *(t for t in (self._transfer, self._config_save) if t is not None)]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._tasks, self._side_tasks, self._dispatch_tasks = [], set(), {}
        self._fail_pending(TermChangedError("the node is stopping"))

    # -- roles -----------------------------------------------------------------------

    def _on_role_change(self, term: int, role: Role) -> None:
        self.handler.reset()
        self._fail_pending(TermChangedError(f"term changed to {term} ({role.value})",
                                            self.state.leader_id))
        if role is Role.LEADER:
            self._leading.set()
            self._watermarks, self._watermark_term = {}, term
            self._term_first_index = -1
            task = asyncio.create_task(self._append_noop(term))
            self._side_tasks.add(task)
            task.add_done_callback(self._side_tasks.discard)
            task.add_done_callback(self._task_ended)
        else:
            self._leading.clear()
        self.elector.wake.set()
        for dispatcher in self.dispatchers.values():
            dispatcher.wake.set()

    async def wait_for_leadership(self) -> None:
        await self._leading.wait()

    def note_larger_term(self, term: int) -> None:
        """A follower answered with a larger term: the next heartbeat round steps down."""
        self.elector.last_send_heartbeat = float("-inf")
        self.elector.wake.set()

    async def _append_noop(self, term: int) -> None:
        """A new leader's first entry, so the commit index can reach its term at once."""
        try:
            appended = await self._append_local([b""], term, Magic.NOOP)
        except RaftError:
            return
        self._term_first_index = appended.first_index
        self._commit_moved.fire()  # read_index waits for this entry to commit

    # -- client appends (leader) -------------------------------------------------------

    async def append(self, bodies: Sequence[bytes]) -> Appended:
        """Append entries and wait until they are committed (stored on a quorum, durable)."""
        if not bodies:
            raise ValueError("nothing to append")
        return await self._append_committed(bodies, self.state.current_term, Magic.NORMAL)

    async def _append_committed(self, bodies: Sequence[bytes], term: int, magic: int) -> Appended:
        if len(self._pending) >= self.config.max_pending_requests:
            raise PendingFullError(f"{len(self._pending)} appends are waiting for a quorum")
        appended = await self._append_local(bodies, term, magic)
        future = self._pending.get(appended.last_index)
        if future is not None:  # else committed already (a single-member group)
            await future  # fails with AckTimeoutError after max_wait_ack_ms: see _expire_waits
        return appended

    async def _append_local(self, bodies: Sequence[bytes], term: int, magic: int) -> Appended:
        async with self.state.lock:
            if not self.state.is_leader or self.state.current_term != term:
                raise NotLeaderError(f"{self.config.self_id} is not the leader", self.state.leader_id)
            if self.state.transferee is not None and magic != Magic.NOOP:
                # checked here, under the lock: an append queued on it when a transfer began would land after
                # the transferee was found caught up, and a log behind loses the transferee its vote round
                raise LeaderTransferringError("a leadership transfer is in progress", self.state.leader_id)
            result = await self.store.append_as_leader(bodies, term, magic)
            if magic == Magic.CONFIG_CHANGE:  # in force from now on, committed or not
                self.members.append(Configuration.decode(bodies[0], result.first_index))
                self._config_changed()
        last = result.first_index + len(bodies) - 1
        if last > self.state.committed_index:
            loop = asyncio.get_running_loop()
            future = self._pending[last] = loop.create_future()
            self._ack_deadlines.append((loop.time() + self.config.max_wait_ack_ms / 1000, last, future))
            if self._ack_timer is None:
                self._ack_timer = loop.call_at(self._ack_deadlines[0][0], self._expire_waits)
        self._appended.set()
        self._check_quorum()
        for dispatcher in self.dispatchers.values():
            dispatcher.wake.set()
        return Appended(result.first_index, last, term, result.positions)

    async def _leader_flush_loop(self) -> None:
        """Group commit on the leader: its own watermark is what is durable."""
        while True:
            await self._appended.wait()
            self._appended.clear()
            await self.store.wait_durable()
            self._check_quorum()
            self.durable_moved()

    def durable_moved(self) -> None:
        """A flush covered more of the log: the progress noted for the checkpoint, which stays at
        what is durable here, may move up to the commit index (a commit can come first: the leader's
        by its followers' acks, a follower's by the leader's word)."""
        self._apply_wake.set()

    def _expire_waits(self) -> None:
        """Appends waiting longer than max_wait_ack_ms are answered with a timeout; their entries stay
        pending and may still commit. Deadlines come in append order, so one timer runs at the oldest
        (a timer per append cost more CPU than the rest of the wait)."""
        self._ack_timer = None
        deadlines, now = self._ack_deadlines, self.now()
        while deadlines and (deadlines[0][2].done() or deadlines[0][0] <= now):
            _deadline, last, future = deadlines.popleft()
            if not future.done():
                future.set_exception(AckTimeoutError(f"no quorum for index {last} within "
                                                     f"{self.config.max_wait_ack_ms} ms", self.state.leader_id))
                future.exception()  # retrieved here: a waiter that gave up will not see it
        if deadlines:
            self._ack_timer = asyncio.get_running_loop().call_at(deadlines[0][0], self._expire_waits)

    def _fail_pending(self, error: RaftError) -> None:
        for future in self._pending.values():
            if not future.done():
                future.set_exception(error)
                future.exception()  # retrieved here: a waiter that gave up will not see it
        self._pending.clear()
        self._ack_deadlines.clear()
        if self._ack_timer is not None:
            self._ack_timer.cancel()
            self._ack_timer = None

    # -- quorum ------------------------------------------------------------------------

    def watermark(self, term: int, peer: str) -> int:
        return self._watermarks.get(peer, -1) if term == self._watermark_term else -1

    def update_watermark(self, term: int, peer: str, index: int) -> None:
        if term != self._watermark_term or index <= self._watermarks.get(peer, -1):
            return
        self._watermarks[peer] = index
        self._watermark_moved.fire()
        self._check_quorum()

    def _check_quorum(self) -> None:
        """Commit the median voter watermark if it holds an entry of the current term."""
        if not self.state.is_leader:
            return
        term = self.state.current_term
        self._watermarks[self.config.self_id] = self.store.ack_end_index
        index = quorum_index(self._watermarks, self.voters)
        if index <= self.state.committed_index or self.store.term_at(index) != term:
            return
        self._commit(index)
        for dispatcher in self.dispatchers.values():
            dispatcher.wake.set()

    def _commit(self, index: int) -> None:
        if not self.state.advance_commit(index):
            return
        if self.members.commit(index):
            self._config_changed()  # a member whose removal committed is no longer replicated to
        while self._pending:
            last, future = next(iter(self._pending.items()))
            if last > index:
                break
            self._pending.popitem(last=False)
            if not future.done():
                future.set_result(None)
        self._apply_wake.set()
        self._commit_moved.fire()

    def follower_commit(self, leader_commit: int, matched_end: int) -> None:
        if not self.state.is_leader:
            self.leader_commit_index = max(self.leader_commit_index, leader_commit)
            self._commit(min(leader_commit, matched_end, self.store.end_index))
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
            return 0 <= self._term_first_index <= self.state.committed_index
        return self.state.leader_id is not None and self.state.committed_index >= self.leader_commit_index

    # -- reads -------------------------------------------------------------------------

    async def read_index(self) -> int:
        """The leader's commit index, confirmed by a heartbeat round (linearizable reads)."""
        term = self.state.current_term
        if not self.state.is_leader:
            raise NotLeaderError(f"{self.config.self_id} is not the leader", self.state.leader_id)
        deadline = self.now() + self.config.max_wait_ack_ms / 1000
        while True:
            moved = self._commit_moved.current()
            if 0 <= self._term_first_index <= self.state.committed_index:
                break
            if not await wait_event(moved, deadline - self.now()):
                raise AckTimeoutError("the new leader has not committed its first entry yet",
                                      self.state.leader_id)
            if self.state.current_term != term or not self.state.is_leader:
                raise NotLeaderError("leadership changed", self.state.leader_id)
        committed = self.state.committed_index
        interval = self.config.heartbeat_interval_ms / 1000
        while True:  # a round that is not conclusive is tried again, once a heartbeat interval, until the deadline
            started = self.now()
            verdict = await self.elector.heartbeat_round(term)
            if self.state.current_term != term or not self.state.is_leader:
                raise NotLeaderError("leadership lost while confirming", self.state.leader_id)
            if verdict is LeaderVerdict.HEALTHY:
                return committed
            if self.now() >= deadline:
                raise NotLeaderError("leadership could not be confirmed by a quorum", None)
            if verdict is not LeaderVerdict.RESEND:  # peers that failed at once (refused) fail again at once
                await asyncio.sleep(max(0.0, min(started + interval, deadline) - self.now()))

    async def wait_committed(self, index: int, timeout_s: float) -> bool:
        """Wait until this member's commit index reaches `index`; False after `timeout_s`."""
        deadline = self.now() + timeout_s
        while True:
            moved = self._commit_moved.current()
            if self.state.committed_index >= index:
                return True
            if not await wait_event(moved, deadline - self.now()) and self.now() >= deadline:
                return self.state.committed_index >= index

    # -- apply -------------------------------------------------------------------------

    async def _apply_loop(self) -> None:
        while True:
            await self._apply_wake.wait()
            self._apply_wake.clear()
            if self.state_machine is None:  # nothing to hand entries to
                self.applied_index = max(self.applied_index, self.state.committed_index)
            while self.applied_index < self.state.committed_index:
                assert self.state_machine is not None
                last = min(self.state.committed_index, self.applied_index + self.config.apply_batch_max)
                entries = [self.store.get(i) for i in range(self.applied_index + 1, last + 1)]
                self.state_machine.apply(entries)
                self.applied_index = last
                self._note_progress()
                await asyncio.sleep(0)  # a batch at a time: heartbeats must not wait for a long backlog
            self._note_progress()

    def _note_progress(self) -> None:
        """Checkpoint at most what this member holds durably, never moving back; and never a commit
        index past a committed configuration before the checkpoint holds it (a restart looks for
        configuration entries only after the commit index the checkpoint saved)."""
        committed = max(self._noted[0], min(self.state.committed_index, self.store.durable_end_index))
        base = self.members.base
        if base.index > self._saved_config_index and base.index <= committed:
            committed = max(self._noted[0], base.index - 1)
            self._save_config()
        applied = max(self._noted[1], min(self.applied_index, committed))
        if (committed, applied) != self._noted:
            self._noted = (committed, applied)
            self.progress.note_progress(committed, applied)

    def snapshot_installed(self, index: int, term: int, configuration: Configuration | None = None) -> None:
        """The log restarts after `index`; `configuration` is the leader's committed one, which the
        entries cleaned away may have set (None: the leader did not say, the log's stays)."""
        if configuration is not None:
            self.members.reset(configuration if configuration.index >= self.members.base.index
                               else self.members.base)
            self._config_changed()
            self._save_config()
        if self.state_machine is not None:
            self.state_machine.snapshot_installed(index, term)
        self.applied_index = max(self.applied_index, index)
        self._commit(index)

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
        """One change (add a learner, promote it, remove a member), appended as a CONFIG_CHANGE entry;
        returns the new configuration once committed. Refused (MembershipError) before anything is
        written: a change in flight, one the group cannot take now, or the leader's own removal (it
        hands leadership over first)."""
        if not self.state.is_leader:
            raise NotLeaderError(f"{self.config.self_id} is not the leader", self.state.leader_id)
        term, committed = self.state.current_term, self.state.committed_index
        if self._changing or self.members.pending(committed) or not 0 <= self._term_first_index <= committed:
            raise MembershipError(Refusal.CHANGE_IN_FLIGHT, "another change, or the leader's first entry of "
                                  "its term, is not committed yet: try again once it is")
        if remove == self.config.self_id:
            raise NotLeaderError("the leader hands leadership to another voter before its removal", None)
        planned = plan_change(self.configuration, add=add, promote=promote, remove=remove)
        if promote is not None:
            mark = self.watermark(term, promote)
            if mark < self._term_first_index:  # never heard from in this term: not a learner in sync (etcd)
                raise MembershipError(Refusal.LEARNER_BEHIND, f"{promote} has not acknowledged this leader's "
                                      "first entry: it is not replicating")
            behind = self.store.end_index - mark
            if behind > self.config.max_promote_lag_entries:
                raise MembershipError(Refusal.LEARNER_BEHIND, f"{promote} is {behind} entries behind the leader "
                                      f"(max_promote_lag_entries {self.config.max_promote_lag_entries})")
        self._changing = True
        try:
            if planned.voters != self.voters:
                await self._check_answering(term, planned)
            appended = await self._append_committed([planned.encode()], term, Magic.CONFIG_CHANGE)
        finally:
            self._changing = False
        return Configuration(planned.members, appended.first_index)

    async def _check_answering(self, term: int, planned: Configuration) -> None:
        """etcd's strict reconfiguration check: the voters of the new configuration that answer a
        heartbeat right now make a quorum of it (else the group would stall on the change itself)."""
        await self.elector.heartbeat_round(term)
        if not self.state.is_leader or self.state.current_term != term:
            raise NotLeaderError("leadership lost while checking the change", self.state.leader_id)
        answering = {self.config.self_id, *(p for p, alive in self.elector.peer_alive.items() if alive)}
        voting = answering.intersection(planned.voters)
        if len(voting) < planned.quorum():
            raise MembershipError(Refusal.QUORUM_AT_RISK, f"{len(voting)} of the new configuration's "
                                  f"{len(planned.voters)} voters answer now; it needs {planned.quorum()}")

    def note_config_entries(self, indices: Sequence[int]) -> None:
        """A follower took CONFIG_CHANGE entries at `indices`: the latest is in force at once."""
        for index in indices:
            if index <= self.members.current.index:
                continue  # known already: a snapshot install brought it
            try:
                self.members.append(Configuration.decode(self.store.get(index).body, index))
            except (MembershipError, StorageError) as exc:
                log.error("%s: configuration entry %d not taken: %s", self.config.self_id, index, exc)
        self._config_changed()

    def log_truncated(self, from_index: int) -> None:
        """Entries from `from_index` on left the log: a configuration they set is no longer in force."""
        if self.members.truncate(from_index):
            self._config_changed()

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
                dispatcher = self.dispatchers[peer] = EntryDispatcher(self, peer)
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
        for dispatcher in self.dispatchers.values():
            dispatcher.wake.set()

    def _save_config(self) -> None:
        """Write the committed configuration to the checkpoint, once at a time; progress waits for it."""
        if self._config_save is None and self.members.base.index > self._saved_config_index:
            self._config_save = asyncio.create_task(self._write_config(self.members.base))

    async def _write_config(self, config: Configuration) -> None:
        try:
            await self.progress.save_config(config.index, config.encode())
        except Exception:
            log.exception("%s: the configuration of entry %d could not be checkpointed; trying again with the "
                          "next commit", self.config.self_id, config.index)
            return
        finally:
            self._config_save = None
        self._saved_config_index = config.index
        self._apply_wake.set()  # the progress held back for it is noted now

    # -- leadership transfer ---------------------------------------------------------------

    async def transfer_leadership(self, transferee: str) -> Code:
        """Hand leadership to `transferee` once it has caught up (DLedger's handleLeadershipTransfer)."""
        if not self.state.is_leader:
            raise NotLeaderError(f"{self.config.self_id} is not the leader", self.state.leader_id)
        if transferee == self.config.self_id:
            return Code.SUCCESS
        if transferee not in self.voters:
            return Code.UNKNOWN_MEMBER
        term = self.state.current_term
        behind = self.store.end_index - self.watermark(term, transferee)
        if behind > self.config.max_leadership_transfer_wait_index:
            return Code.FALL_BEHIND_TOO_MUCH
        self.state.transferee = transferee
        accepted = False
        deadline = self.now() + self.config.leadership_transfer_wait_timeout_ms / 1000
        try:
            while True:
                moved = self._watermark_moved.current()
                if self.watermark(term, transferee) >= self.store.end_index:
                    break
                if self.now() >= deadline or not self.state.is_leader:
                    return Code.TIMEOUT
                self.dispatchers[transferee].wake.set()
                await wait_event(moved, deadline - self.now())
            request = TransferRequest(self.config.group, self.config.self_id, term, transferee)
            try:
                response = await self.transport.transfer(transferee, request)
            except PeerUnavailable:
                return Code.NETWORK_ERROR
            if response.code is Code.SUCCESS:
                # Appends stay refused while the target stands (one more here would put its log behind, and
                # lose it the round), until this member steps down, or for the wait timeout if it never does
                # (the thesis, 3.10: the transfer is aborted after an election timeout).
                accepted = True
                asyncio.get_running_loop().call_later(self.config.leadership_transfer_wait_timeout_ms / 1000,
                                                      self._end_transfer, term, transferee)
            return response.code
        finally:
            if not accepted:
                self._end_transfer(term, transferee)

    def _end_transfer(self, term: int, transferee: str) -> None:
        if self.state.current_term == term and self.state.transferee == transferee:
            self.state.transferee = None

    def check_preferred_leader(self) -> None:
        """Give leadership back to a preferred member that is alive and caught up."""
        preferred = self.config.preferred_leader_ids
        if not preferred or self.config.self_id in preferred or self._transfer is not None:
            return
        term = self.state.current_term
        for peer in (p for p in preferred if p in self.voters):
            behind = self.store.end_index - self.watermark(term, peer)
            if self.elector.peer_alive.get(peer) and behind <= self.config.max_leadership_transfer_wait_index:
                self._transfer = asyncio.create_task(self.transfer_leadership(peer))
                self._transfer.add_done_callback(self._transfer_done)
                return

    def _transfer_done(self, task: asyncio.Task[Code]) -> None:
        self._transfer = None
        self._task_ended(task)
        if not task.cancelled() and task.exception() is None:
            log.info("transfer to a preferred leader: %s", task.result().name)

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
        return self._commit_moved

    @property
    def committed_index(self) -> int:
        return self.state.committed_index

    @property
    def pending_appends(self) -> int:
        return len(self._pending)
