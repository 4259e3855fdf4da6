"""Client appends on the leader (DLedger's handleAppend and appendAsLeader).

An append is written to the leader's own log under the member's lock, so
its term cannot change underneath it, then waits until a quorum holds it
(raft.commitment). A producer's batch is checked against its session there
first (raft.producers): a duplicate is answered with its original entries once
they commit, a batch out of order or from a fenced epoch is refused. A new
leader's first entry is a NOOP, so that its commit index can reach its own term
at once. The leader's own flushes are grouped:
one fdatasync covers every append written since the last.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from raftlog.raft.commitment import Commitment
from raftlog.raft.config import RaftConfig
from raftlog.raft.consumers import ConsumerCommit, ConsumerPositions
from raftlog.raft.errors import (
    AckTimeoutError,
    ConsumerConflictError,
    ConsumerNotFoundError,
    ConsumersFullError,
    LeaderTransferringError,
    NotLeaderError,
    OutOfOrderSequenceError,
    PendingFullError,
    ProducerFencedError,
    RaftError,
    TermChangedError,
)
from raftlog.raft.member_state import MemberState
from raftlog.raft.membership import Configuration
from raftlog.raft.producers import ProducerSessions, Sequenced, Verdict
from raftlog.raft.waiting import Wakeup
from raftlog.storage.codec import Magic
from raftlog.storage.protocol import LogStore


@dataclass(frozen=True, slots=True)
class Appended:
    first_index: int
    last_index: int
    term: int
    positions: list[int]
    duplicate: bool = False  # a producer's retry: these entries were appended before, not now


class ClientAppends:
    def __init__(self, config: RaftConfig, state: MemberState, store: LogStore, commitment: Commitment,
                 sessions: ProducerSessions, consumers: ConsumerPositions,
                 configuration_appended: Callable[[Configuration], None],
                 appended: Callable[[], None], durable_moved: Callable[[], None],
                 confirm_leadership: Callable[[], Awaitable[object]]) -> None:
        """`configuration_appended`: a CONFIG_CHANGE entry is in the log (in force at once);
        `appended`: the log grew (the dispatchers push it); `durable_moved`: a flush covered more;
        `confirm_leadership`: a heartbeat round, NotLeaderError if a quorum no longer follows."""
        self.config = config
        self.state = state
        self.store = store
        self.commitment = commitment
        self.sessions = sessions
        self.consumers = consumers
        self._configuration_appended = configuration_appended
        self._appended = appended
        self._durable_moved = durable_moved
        self._confirm_leadership = confirm_leadership
        self._flush = Wakeup()  # the log grew: flush it
        self.term_first_index = -1  # the leader's NOOP: reads and membership changes wait for it to commit

    @property
    def caught_up(self) -> bool:
        """The leader's first entry of its term is committed."""
        return 0 <= self.term_first_index <= self.state.committed_index

    async def append(self, bodies: Sequence[bytes], producer: Sequenced | None = None) -> Appended:
        """Append entries and wait until they are committed (stored on a quorum, durable); a producer's
        batch that is in the log already is answered with its entries once they commit."""
        if not bodies:
            raise ValueError("nothing to append")
        return await self.append_committed(bodies, self.state.current_term, Magic.NORMAL, producer)

    async def commit_consumer(self, commit: ConsumerCommit, expected: int | None) -> Appended:
        """A consumer's position as a CONSUMER entry, once committed (and in the table); `expected`: the
        position it must be at now (ABSENT: no such consumer), else ConsumerConflictError."""
        appended = await self.append_committed([commit.encode()], self.state.current_term, Magic.CONSUMER,
                                               check=lambda: self.consumers.check(commit, expected))
        self.consumers.fold()
        return appended

    async def append_committed(self, bodies: Sequence[bytes], term: int, magic: int,
                               producer: Sequenced | None = None,
                               check: Callable[[], None] | None = None) -> Appended:
        """`check` runs under the append lock first, and raises to refuse the append."""
        if self.commitment.pending >= self.config.max_pending_requests:
            raise PendingFullError(f"{self.commitment.pending} appends are waiting for a quorum")
        try:
            appended, committed = await self.append_local(bodies, term, magic, producer, check)
        except (OutOfOrderSequenceError, ProducerFencedError, ConsumerConflictError, ConsumerNotFoundError,
                ConsumersFullError):
            # a deposed leader that has not heard of it yet judges by a table the group has moved past:
            # its refusal stands only once a quorum confirms it leads (else NOT_LEADER: ask the leader)
            await self._confirm_leadership()
            raise
        if appended.duplicate:
            if not await self.commitment.wait_committed(appended.last_index, self.config.max_wait_ack_ms / 1000):
                raise AckTimeoutError(f"no quorum for index {appended.last_index} within "
                                      f"{self.config.max_wait_ack_ms} ms", self.state.leader_id)
            if self.store.term_at(appended.last_index) != appended.term:  # leadership and the entries lost
                raise TermChangedError("the original entries were replaced while waiting for their commit",
                                       self.state.leader_id)
        elif committed is not None:  # else committed already (a single-member group)
            await committed  # fails with AckTimeoutError after max_wait_ack_ms
        return appended

    async def append_local(self, bodies: Sequence[bytes], term: int, magic: int, producer: Sequenced | None = None,
                           check: Callable[[], None] | None = None) -> tuple[Appended, asyncio.Future[None] | None]:
        """Into the leader's own log; with the future of its commit (None: committed already, or a
        producer's duplicate, which waits for its original entries)."""
        async with self.state.lock:
            if not self.state.is_leader or self.state.current_term != term:
                raise NotLeaderError(f"{self.config.self_id} is not the leader", self.state.leader_id)
            if self.state.transferee is not None and magic != Magic.NOOP:
                # checked here, under the lock: an append queued on it when a transfer began would land after
                # the transferee was found caught up, and a log behind loses the transferee its vote round
                raise LeaderTransferringError("a leadership transfer is in progress", self.state.leader_id)
            if check is not None:
                check()
            if producer is None:
                result = await self.store.append_as_leader(bodies, term, magic)
            else:
                original = self._original(producer, len(bodies))
                if original is not None:
                    return original, None
                result = await self.store.append_as_leader(bodies, term, Magic.PRODUCED, stamp=producer)
                self.sessions.appended_one(*producer, result.first_index, result.first_index + len(bodies) - 1)
            if magic == Magic.CONFIG_CHANGE:  # in force from now on, committed or not
                self._configuration_appended(Configuration.decode(bodies[0], result.first_index))
            elif magic == Magic.CONSUMER:
                self.consumers.appended([result.first_index])
        last = result.first_index + len(bodies) - 1
        committed = self.commitment.wait_for(last)
        self._flush.set()
        self.commitment.check_quorum()
        self._appended()
        return Appended(result.first_index, last, term, result.positions), committed

    def _original(self, producer: Sequenced, count: int) -> Appended | None:
        """A duplicate's original entries, or None for a new batch; raises for one out of order or fenced."""
        checked = self.sessions.table.check(producer.producer_id, producer.epoch, producer.sequence, count)
        if checked.verdict is Verdict.NEW:
            return None
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
