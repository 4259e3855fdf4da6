"""The quorum ack and the commit index (DLedger's QuorumAckChecker).

The leader keeps each voter's watermark, the highest index it holds durably;
the median of them commits once it holds an entry of the leader's own term
(Raft thesis, 3.6.2). Client appends wait here for their last index to
commit, each for at most max_wait_ack_ms. A follower's commit index comes
from its leader's word, through the same `commit`.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict, deque
from typing import Protocol

from raftlog.raft.config import RaftConfig
from raftlog.raft.errors import AckTimeoutError, RaftError
from raftlog.raft.member_state import MemberState
from raftlog.raft.membership import ConfigLog
from raftlog.raft.quorum import quorum_index
from raftlog.raft.waiting import Clock, Signal, wait_event
from raftlog.storage.protocol import LogStore


class CommitListener(Protocol):
    """What follows a commit, in this order: a committed configuration in force, entries to apply,
    dispatchers to tell the followers."""

    def configuration_committed(self) -> None: ...

    def entries_committed(self) -> None: ...

    def wake_dispatchers(self) -> None: ...


class Commitment:
    def __init__(self, config: RaftConfig, state: MemberState, store: LogStore, members: ConfigLog,
                 clock: Clock, listener: CommitListener) -> None:
        self.config = config
        self.state = state
        self.store = store
        self.members = members
        self.clock = clock
        self.listener = listener
        self.moved = Signal()  # the commit index advanced
        self.watermark_moved = Signal()  # a follower acknowledged more
        self._watermarks: dict[str, int] = {}
        self._watermark_term = -1
        self._pending: OrderedDict[int, asyncio.Future[None]] = OrderedDict()
        # When each waiting append gives up (max_wait_ack_ms), in append order: one timer serves them all.
        self._ack_deadlines: deque[tuple[float, int, asyncio.Future[None]]] = deque()
        self._ack_timer: asyncio.TimerHandle | None = None

    @property
    def pending(self) -> int:
        """Appends waiting for a quorum."""
        return len(self._pending)

    def lead(self, term: int) -> None:
        """A new leadership: no follower has acknowledged anything in `term` yet."""
        self._watermarks, self._watermark_term = {}, term

    def watermark(self, term: int, peer: str) -> int:
        return self._watermarks.get(peer, -1) if term == self._watermark_term else -1

    def update_watermark(self, term: int, peer: str, index: int) -> None:
        if term != self._watermark_term or index <= self._watermarks.get(peer, -1):
            return
        self._watermarks[peer] = index
        self.watermark_moved.fire()
        self.check_quorum()

    def check_quorum(self) -> None:
        """Commit the median voter watermark if it holds an entry of the current term."""
        if not self.state.is_leader:
            return
        term = self.state.current_term
        self._watermarks[self.config.self_id] = self.store.ack_end_index
        index = quorum_index(self._watermarks, self.members.current.voters)
        if index <= self.state.committed_index or self.store.term_at(index) != term:
            return
        self.commit(index)
        self.listener.wake_dispatchers()

    def commit(self, index: int) -> None:
        if not self.state.advance_commit(index):
            return
        if self.members.commit(index):
            self.listener.configuration_committed()  # a member whose removal committed is no longer replicated to
        while self._pending:
            last, future = next(iter(self._pending.items()))
            if last > index:
                break
            self._pending.popitem(last=False)
            if not future.done():
                future.set_result(None)
        self.listener.entries_committed()
        self.moved.fire()

    async def wait_committed(self, index: int, timeout_s: float) -> bool:
        """Wait until this member's commit index reaches `index`; False after `timeout_s`."""
        deadline = self.clock() + timeout_s
        while True:
            moved = self.moved.current()
            if self.state.committed_index >= index:
                return True
            if not await wait_event(moved, deadline - self.clock()) and self.clock() >= deadline:
                return self.state.committed_index >= index

    def wait_for(self, last: int) -> asyncio.Future[None] | None:
        """A future done once `last` commits, or failed after max_wait_ack_ms (None: committed already)."""
        if last <= self.state.committed_index:
            return None
        loop = asyncio.get_running_loop()
        future = self._pending[last] = loop.create_future()
        self._ack_deadlines.append((loop.time() + self.config.max_wait_ack_ms / 1000, last, future))
        if self._ack_timer is None:
            self._ack_timer = loop.call_at(self._ack_deadlines[0][0], self._expire_waits)
        return future

    def _expire_waits(self) -> None:
        """Appends waiting longer than max_wait_ack_ms are answered with a timeout; their entries stay
        pending and may still commit. Deadlines come in append order, so one timer runs at the oldest
        (a timer per append cost more CPU than the rest of the wait)."""
        self._ack_timer = None
        deadlines, now = self._ack_deadlines, self.clock()
        while deadlines and (deadlines[0][2].done() or deadlines[0][0] <= now):
            _deadline, last, future = deadlines.popleft()
            if not future.done():
                future.set_exception(AckTimeoutError(f"no quorum for index {last} within "
                                                     f"{self.config.max_wait_ack_ms} ms", self.state.leader_id))
                future.exception()  # retrieved here: a waiter that gave up will not see it
        if deadlines:
            self._ack_timer = asyncio.get_running_loop().call_at(deadlines[0][0], self._expire_waits)

    def fail_pending(self, error: RaftError) -> None:
        for future in self._pending.values():
            if not future.done():
                future.set_exception(error)
                future.exception()  # retrieved here: a waiter that gave up will not see it
        self._pending.clear()
        self._ack_deadlines.clear()
        if self._ack_timer is not None:
            self._ack_timer.cancel()
            self._ack_timer = None
