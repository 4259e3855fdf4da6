"""Client appends on the leader (DLedger's handleAppend and appendAsLeader).

An append is written to the leader's own log under the member's lock, so
its term cannot change underneath it, then waits until a quorum holds it
(raft.commitment). A new leader's first entry is a NOOP, so that its commit
index can reach its own term at once. The leader's own flushes are grouped:
one fdatasync covers every append written since the last.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from raftlog.raft.commitment import Commitment
from raftlog.raft.config import RaftConfig
from raftlog.raft.errors import LeaderTransferringError, NotLeaderError, PendingFullError, RaftError
from raftlog.raft.member_state import MemberState
from raftlog.raft.membership import Configuration
from raftlog.raft.waiting import Wakeup
from raftlog.storage.codec import Magic
from raftlog.storage.protocol import LogStore


@dataclass(frozen=True, slots=True)
class Appended:
    first_index: int
    last_index: int
    term: int
    positions: list[int]


class ClientAppends:
    def __init__(self, config: RaftConfig, state: MemberState, store: LogStore, commitment: Commitment,
                 configuration_appended: Callable[[Configuration], None], appended: Callable[[], None],
                 durable_moved: Callable[[], None]) -> None:
        """`configuration_appended`: a CONFIG_CHANGE entry is in the log (in force at once);
        `appended`: the log grew (the dispatchers push it); `durable_moved`: a flush covered more."""
        self.config = config
        self.state = state
        self.store = store
        self.commitment = commitment
        self._configuration_appended = configuration_appended
        self._appended = appended
        self._durable_moved = durable_moved
        self._flush = Wakeup()  # the log grew: flush it
        self.term_first_index = -1  # the leader's NOOP: reads and membership changes wait for it to commit

    @property
    def caught_up(self) -> bool:
        """The leader's first entry of its term is committed."""
        return 0 <= self.term_first_index <= self.state.committed_index

    async def append(self, bodies: Sequence[bytes]) -> Appended:
        """Append entries and wait until they are committed (stored on a quorum, durable)."""
        if not bodies:
            raise ValueError("nothing to append")
        return await self.append_committed(bodies, self.state.current_term, Magic.NORMAL)

    async def append_committed(self, bodies: Sequence[bytes], term: int, magic: int) -> Appended:
        if self.commitment.pending >= self.config.max_pending_requests:
            raise PendingFullError(f"{self.commitment.pending} appends are waiting for a quorum")
        appended, committed = await self.append_local(bodies, term, magic)
        if committed is not None:  # else committed already (a single-member group)
            await committed  # fails with AckTimeoutError after max_wait_ack_ms
        return appended

    async def append_local(self, bodies: Sequence[bytes], term: int,
                           magic: int) -> tuple[Appended, asyncio.Future[None] | None]:
        """Into the leader's own log; with the future of its commit (None: committed already)."""
        async with self.state.lock:
            if not self.state.is_leader or self.state.current_term != term:
                raise NotLeaderError(f"{self.config.self_id} is not the leader", self.state.leader_id)
            if self.state.transferee is not None and magic != Magic.NOOP:
                # checked here, under the lock: an append queued on it when a transfer began would land after
                # the transferee was found caught up, and a log behind loses the transferee its vote round
                raise LeaderTransferringError("a leadership transfer is in progress", self.state.leader_id)
            result = await self.store.append_as_leader(bodies, term, magic)
            if magic == Magic.CONFIG_CHANGE:  # in force from now on, committed or not
                self._configuration_appended(Configuration.decode(bodies[0], result.first_index))
        last = result.first_index + len(bodies) - 1
        committed = self.commitment.wait_for(last)
        self._flush.set()
        self.commitment.check_quorum()
        self._appended()
        return Appended(result.first_index, last, term, result.positions), committed

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
