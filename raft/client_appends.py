"""Client appends on the leader (DLedger's handleAppend and appendAsLeader).

An append is written to the leader's own log under the member's lock, so
its term cannot change underneath it, then waits until a quorum holds it
(raft.commitment). A producer's batch is checked against its session there
first (raft.producers): a duplicate is answered with its original entries once
they commit, a batch out of order, from a fenced epoch, of a session it has no
record of or of another caller's is refused. Control entries the leader writes
itself (a session opened or closed, a consumer's position, the cluster
version) are decided under the same lock, against the log's tail. A new
leader's first entry is a NOOP, so that its commit index can reach its own term
at once. The leader's own flushes are grouped:
one fdatasync covers every append written since the last.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from raftlog.raft.cluster_version import CONSUMER_OWNERS, PRODUCER_OWNERS, ClusterVersion, encode_level
from raftlog.raft.commitment import Commitment
from raftlog.raft.config import RaftConfig
from raftlog.raft.consumers import ConsumerAsk, ConsumerCommit, ConsumerPositions
from raftlog.raft.errors import (
    AckTimeoutError,
    ClusterVersionError,
    ConsumerConflictError,
    ConsumerNotFoundError,
    ConsumerPositionError,
    ConsumersFullError,
    LeaderTransferringError,
    NotLeaderError,
    NotProducerOwnerError,
    OutOfOrderSequenceError,
    PendingFullError,
    ProducerFencedError,
    ProducersFullError,
    RaftError,
    TermChangedError,
    TopicError,
    UnknownProducerError,
)
from raftlog.raft.member_state import MemberState
from raftlog.raft.producers import EPOCH_MAX, ProducerSessions, QueueKey, Sequenced, SessionChange, Verdict
from raftlog.raft.tables import Tables
from raftlog.raft.waiting import Wakeup, log_if_died
from raftlog.storage.codec import CONTROL_MAGICS, Magic
from raftlog.storage.message import queued_of
from raftlog.storage.protocol import LogStore

log = logging.getLogger("raftlog.raft.client_appends")
# refusals a deposed leader may make by a table the group has moved past: they stand only once a quorum confirms it
REFUSALS = (OutOfOrderSequenceError, ProducerFencedError, ConsumerConflictError, ConsumerNotFoundError,
            ConsumersFullError, ConsumerPositionError, UnknownProducerError, NotProducerOwnerError, ProducersFullError,
            ClusterVersionError, TopicError)


@dataclass(frozen=True, slots=True)
class Appended:
    first_index: int
    last_index: int
    term: int
    positions: list[int]
    duplicate: bool = False  # a producer's retry: these entries were appended before, not now


class ClientAppends:
    def __init__(self, config: RaftConfig, state: MemberState, store: LogStore, commitment: Commitment,
                 tables: Tables, sessions: ProducerSessions, consumers: ConsumerPositions, version: ClusterVersion,
                 member_ids: Callable[[], Sequence[str]], appended: Callable[[], None],
                 durable_moved: Callable[[], None], confirm_leadership: Callable[[], Awaitable[object]]) -> None:
        """`tables`: what the log's entries make (each control entry written is handed to them);
        `member_ids`: the voters and learners in force;
        `appended`: the log grew (the dispatchers push it); `durable_moved`: a flush covered more;
        `confirm_leadership`: a heartbeat round, NotLeaderError if a quorum no longer follows."""
        self.config = config
        self.state = state
        self.store = store
        self.commitment = commitment
        self.tables = tables
        self.sessions = sessions
        self.consumers = consumers
        self.version = version
        self._member_ids = member_ids
        self._appended = appended
        self._durable_moved = durable_moved
        self._confirm_leadership = confirm_leadership
        self._flush = Wakeup()  # the log grew: flush it
        self.term_first_index = -1  # the leader's NOOP: reads and membership changes wait for it to commit
        self._raising_version: asyncio.Task[None] | None = None

    @property
    def caught_up(self) -> bool:
        """The leader's first entry of its term is committed."""
        return 0 <= self.term_first_index <= self.state.committed_index

    async def append(self, bodies: Sequence[bytes], producer: Sequenced | None = None, caller: str = "") -> Appended:
        """Append entries and wait until they are committed (stored on a quorum, durable); a producer's
        batch that is in the log already is answered with its entries once they commit. `caller`: who
        sends it (a producer's session must be its own)."""
        if not bodies:
            raise ValueError("nothing to append")
        return await self.append_committed(bodies, self.state.current_term, Magic.NORMAL, producer, caller=caller)

    async def change_session(self, producer_id: int, caller: str, close: bool = False) -> SessionChange:
        """Open a producer session of `producer_id` for `caller` (a new one at epoch 0, or its next
        epoch, which fences the one before), or close it: a PRODUCER_SESSION entry, once committed.
        Below the cluster version sessions need, it waits up to max_wait_ack_ms for the leader to raise
        it (a group just started, or a new leader, has not heard every member's level yet)."""
        await self.version.wait_for(PRODUCER_OWNERS, self.config.max_wait_ack_ms / 1000)
        decided: list[SessionChange] = []

        def decide() -> list[bytes]:
            self.version.require(PRODUCER_OWNERS, self._member_ids())
            state = self.sessions.table.producers.get(producer_id)
            if state is not None and state.owner not in (None, caller):
                raise NotProducerOwnerError(f"producer {producer_id}'s session is another caller's",
                                            self.state.leader_id)
            if close:
                if state is None or state.owner is None:
                    raise UnknownProducerError(f"producer {producer_id} has no open session", self.state.leader_id)
                change = SessionChange(producer_id, state.epoch, caller, closed=True)
            else:
                if (problem := self.sessions.table.room_for(producer_id, caller)) is not None:
                    raise ProducersFullError(problem, self.state.leader_id)
                epoch = 0 if state is None else state.epoch + 1
                if epoch > EPOCH_MAX:
                    raise ProducerFencedError(f"producer {producer_id} has used its last epoch; take a new id",
                                              self.state.leader_id)
                change = SessionChange(producer_id, epoch, caller)
            decided.append(change)
            return [change.encode()]

        await self.append_committed([b""], self.state.current_term, Magic.PRODUCER_SESSION, decide=decide)
        return decided[0]

    def check_cluster_version(self) -> None:
        """The leader raises the cluster version once every member reports a higher level: one entry at
        a time, after its first entry of the term has committed (a heartbeat round's duty)."""
        if not self.state.is_leader or not self.caught_up or self._raising_version is not None:
            return
        target = self.version.target(self._member_ids())
        if target is None or target <= self.version.level:
            return
        log.info("%s raises the cluster version from %d to %d: every member reports it", self.config.self_id,
                 self.version.level, target)
        task = self._raising_version = asyncio.create_task(self._raise_version(self.state.current_term, target))
        task.add_done_callback(lambda done: log_if_died(done, log, self.config.self_id))

    async def _raise_version(self, term: int, level: int) -> None:
        def decide() -> list[bytes]:
            if self.version.level >= level:
                raise ClusterVersionError(f"the cluster version is {self.version.level} already", None, [])
            return [encode_level(level)]

        try:
            await self.append_committed([b""], term, Magic.CLUSTER_VERSION, decide=decide)
        except RaftError as exc:  # deposed, or a slow quorum: the next leader, or the next heartbeat, tries again
            log.info("%s: cluster version %d not raised: %s", self.config.self_id, level, exc)
        finally:
            self._raising_version = None

    async def commit_consumer(self, ask: ConsumerAsk) -> tuple[Appended, ConsumerCommit]:
        """A consumer's position as a CONSUMER entry, once committed (and in the table), with the entry
        written (raft.consumers decides it). One that sets the retention-floor flag needs the cluster
        version of the entry's extended form: it waits for it as a session does (change_session); so
        does any while every member reports that version and the leader is about to raise it (a group
        just started), so that a consumer created then has its owner."""
        if ask.floor or self.version.level < CONSUMER_OWNERS <= (self.version.target(self._member_ids()) or 0):
            await self.version.wait_for(CONSUMER_OWNERS, self.config.max_wait_ack_ms / 1000)
        decided: list[ConsumerCommit] = []

        def decide() -> list[bytes]:
            if ask.floor:
                self.version.require(CONSUMER_OWNERS, self._member_ids())
            commit = self.consumers.decide(ask, extended=self.version.level >= CONSUMER_OWNERS)
            decided.append(commit)
            return [commit.encode()]

        appended = await self.append_committed([b""], self.state.current_term, Magic.CONSUMER, decide=decide)
        self.consumers.fold()
        return appended, decided[0]

    async def append_committed(self, bodies: Sequence[bytes], term: int, magic: int,
                               producer: Sequenced | None = None, *, caller: str = "",
                               decide: Callable[[], Sequence[bytes] | None] | None = None) -> Appended:
        """`decide` runs under the append lock first: it raises to refuse the append, and may give the
        bodies to write in place of `bodies` (a control entry made of the table it checks)."""
        if self.commitment.pending >= self.config.max_pending_requests:
            raise PendingFullError(f"{self.commitment.pending} appends are waiting for a quorum")
        try:
            appended, committed = await self.append_local(bodies, term, magic, producer, caller, decide)
        except REFUSALS:
            # a deposed leader that has not heard of it yet judges by a table the group has moved past:
            # its refusal stands only once a quorum confirms it leads (else NOT_LEADER: ask the leader)
            await self._confirm_leadership()
            raise
        if appended.duplicate:
            await self.original_committed(appended)
        elif committed is not None:  # else committed already (a single-member group)
            await committed  # fails with AckTimeoutError after max_wait_ack_ms
        return appended

    async def original_committed(self, appended: Appended) -> None:
        """A duplicate's original entries, once committed (they may not be yet: a retry soon after)."""
        if not await self.commitment.wait_committed(appended.last_index, self.config.max_wait_ack_ms / 1000):
            raise AckTimeoutError(f"no quorum for index {appended.last_index} within "
                                  f"{self.config.max_wait_ack_ms} ms", self.state.leader_id)
        if self.store.term_at(appended.last_index) != appended.term:  # leadership and the entries lost
            raise TermChangedError("the original entries were replaced while waiting for their commit",
                                   self.state.leader_id)

    async def append_local(self, bodies: Sequence[bytes], term: int, magic: int, producer: Sequenced | None = None,
                           caller: str = "", decide: Callable[[], Sequence[bytes] | None] | None = None,
                           ) -> tuple[Appended, asyncio.Future[None] | None]:
        """Into the leader's own log; with the future of its commit (None: committed already, or a
        producer's duplicate, which waits for its original entries)."""
        async with self.state.lock:
            if not self.state.is_leader or self.state.current_term != term:
                raise NotLeaderError(f"{self.config.self_id} is not the leader", self.state.leader_id)
            if self.state.transferee is not None and magic != Magic.NOOP:
                # checked here, under the lock: an append queued on it when a transfer began would land after
                # the transferee was found caught up, and a log behind loses the transferee its vote round
                raise LeaderTransferringError("a leadership transfer is in progress", self.state.leader_id)
            if decide is not None:
                bodies = decide() or bodies
            if producer is None:
                result = await self.store.append_as_leader(bodies, term, magic)
            else:
                original = self.original_of(producer, len(bodies), caller)
                if original is not None:
                    return original, None
                result = await self.store.append_as_leader(bodies, term, Magic.PRODUCED, stamp=producer)
                self.tables.produced((*producer, result.first_index, result.first_index + len(bodies) - 1))
            if magic in CONTROL_MAGICS:  # one entry, in the tables from now on, committed or not
                self.tables.appended(result.first_index, magic, bodies[0])
            elif magic == Magic.MESSAGE:  # one queue's messages, with contiguous offsets: one run
                topic_id, queue, offset, producer_id, epoch, sequence = queued_of(bodies[0])
                self.tables.queued((topic_id, queue, offset, result.first_index,
                                    result.first_index + len(bodies) - 1, producer_id, epoch, sequence))
        last = result.first_index + len(bodies) - 1
        committed = self.commitment.wait_for(last)
        self._flush.set()
        self.commitment.check_quorum()
        self._appended()
        return Appended(result.first_index, last, term, result.positions), committed

    def original_of(self, producer: Sequenced, count: int, caller: str, queue: QueueKey | None = None
                    ) -> Appended | None:
        """A duplicate's original entries, or None for a new batch; raises for one out of order, fenced,
        of no open session, or of another caller's. `queue`: a batch of messages, whose sequence is
        its topic-queue's."""
        checked = self.sessions.table.check(producer.producer_id, producer.epoch, producer.sequence, count,
                                            caller=caller, owned=self.version.level >= PRODUCER_OWNERS, queue=queue)
        if checked.verdict is Verdict.NEW:
            return None
        if checked.verdict is Verdict.UNKNOWN:
            raise UnknownProducerError(
                f"producer {producer.producer_id} has no open session of epoch {producer.epoch} to take sequence "
                f"{producer.sequence} (never opened, closed or expired): open one with POST /v1/producers",
                self.state.leader_id)
        if checked.verdict is Verdict.NOT_OWNER:
            raise NotProducerOwnerError(f"producer {producer.producer_id}'s session is another caller's",
                                        self.state.leader_id)
        if checked.verdict is Verdict.OUT_OF_ORDER:
            assert checked.expected_seq is not None
            raise OutOfOrderSequenceError(
                f"producer {producer.producer_id} epoch {producer.epoch}: sequence {producer.sequence}, "
                f"expected {checked.expected_seq}", self.state.leader_id, checked.expected_seq)
        if checked.verdict is Verdict.FENCED:
            raise ProducerFencedError(f"producer {producer.producer_id}: epoch {producer.epoch} is fenced by "
                                      f"epoch {checked.epoch}", self.state.leader_id)
        assert checked.original is not None
        first = checked.original.first_index + producer.sequence - checked.original.first_seq
        indices = range(first, first + count)
        return Appended(first, indices[-1], self.store.term_at(first), [self.store.pos_at(i) for i in indices],
                        duplicate=True)

    async def append_noop(self, term: int) -> None:
        """A new leader's first entry, so the commit index can reach its term at once."""
        try:
            appended, _committed = await self.append_local([b""], term, Magic.NOOP)
        except RaftError:
            return
        self.term_first_index = appended.first_index
        self.commitment.moved.fire()  # read_index waits for this entry to commit

    async def flush_loop(self) -> None:
        """Group commit on the leader: its own watermark is what is durable."""
        while True:
            await self._flush.wait()
            self._flush.clear()
            await self.store.wait_durable()
            self.commitment.check_quorum()
            self._durable_moved()
