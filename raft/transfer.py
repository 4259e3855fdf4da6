"""Leadership transfer and the preferred leader (DLedger's handleLeadershipTransfer and
preferredLeaderIds; Raft thesis, 3.10).

The leader waits until the transferee holds its whole log, then asks it to
stand at once; appends stay refused meanwhile, so the transferee's log cannot
fall behind again before its vote round.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Protocol

from raftlog.raft.commitment import Commitment
from raftlog.raft.config import RaftConfig
from raftlog.raft.errors import NotLeaderError
from raftlog.raft.member_state import MemberState
from raftlog.raft.membership import ConfigLog
from raftlog.raft.messages import Code, TransferRequest
from raftlog.raft.transport import PeerUnavailable, Transport
from raftlog.raft.waiting import Clock, log_if_died, wait_event
from raftlog.storage.protocol import LogStore

log = logging.getLogger("raftlog.raft.transfer")


class Peers(Protocol):
    """Which followers answer heartbeats, and a way to push to one without delay."""

    def alive(self, peer: str) -> bool: ...

    def hurry(self, peer: str) -> None: ...


class LeadershipTransfer:
    def __init__(self, config: RaftConfig, state: MemberState, store: LogStore, members: ConfigLog,
                 commitment: Commitment, transport: Transport, clock: Clock, peers: Peers) -> None:
        self.config = config
        self.state = state
        self.store = store
        self.members = members
        self.commitment = commitment
        self.transport = transport
        self.clock = clock
        self.peers = peers
        self._preferred: asyncio.Task[Code] | None = None  # a transfer back to a preferred leader

    async def transfer(self, transferee: str) -> Code:
        """Hand leadership to `transferee` once it has caught up."""
        if not self.state.is_leader:
            raise NotLeaderError(f"{self.config.self_id} is not the leader", self.state.leader_id)
        if transferee == self.config.self_id:
            return Code.SUCCESS
        if transferee not in self.members.current.voters:
            return Code.UNKNOWN_MEMBER
        term = self.state.current_term
        behind = self.store.end_index - self.commitment.watermark(term, transferee)
        if behind > self.config.max_leadership_transfer_wait_index:
            return Code.FALL_BEHIND_TOO_MUCH
        self.state.transferee = transferee
        accepted = False
        deadline = self.clock() + self.config.leadership_transfer_wait_timeout_ms / 1000
        try:
            while True:
                moved = self.commitment.watermark_moved.current()
                if self.commitment.watermark(term, transferee) >= self.store.end_index:
                    break
                if self.clock() >= deadline or not self.state.is_leader:
                    return Code.TIMEOUT
                self.peers.hurry(transferee)
                await wait_event(moved, deadline - self.clock())
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
                                                      self._end, term, transferee)
            return response.code
        finally:
            if not accepted:
                self._end(term, transferee)

    def _end(self, term: int, transferee: str) -> None:
        if self.state.current_term == term and self.state.transferee == transferee:
            self.state.transferee = None

    def check_preferred_leader(self) -> None:
        """Give leadership back to a preferred member that is alive and caught up."""
        preferred = self.config.preferred_leader_ids
        if not preferred or self.config.self_id in preferred or self._preferred is not None:
            return
        term = self.state.current_term
        for peer in (p for p in preferred if p in self.members.current.voters):
            behind = self.store.end_index - self.commitment.watermark(term, peer)
            if self.peers.alive(peer) and behind <= self.config.max_leadership_transfer_wait_index:
                self._preferred = asyncio.create_task(self.transfer(peer))
                self._preferred.add_done_callback(self._preferred_done)
                return

    def _preferred_done(self, task: asyncio.Task[Code]) -> None:
        self._preferred = None
        log_if_died(task, log, self.config.self_id)
        if not task.cancelled() and task.exception() is None:
            log.info("transfer to a preferred leader: %s", task.result().name)

    @property
    def running(self) -> asyncio.Task[Code] | None:
        """A transfer to a preferred leader, while one runs (the node's stop cancels it)."""
        return self._preferred
