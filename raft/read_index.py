"""Read index (Raft thesis §6.4): the commit index a leader may answer a linearizable read with.

A leader knows its commit index is the group's once its first entry of the term has committed
(until then, entries of earlier terms may be committed that it has not counted) and a heartbeat
round has shown that a quorum still follows it (a deposed leader would answer stale reads).
"""

from __future__ import annotations

import asyncio

from raftlog.raft.client_appends import ClientAppends
from raftlog.raft.commitment import Commitment
from raftlog.raft.config import RaftConfig
from raftlog.raft.election import LeaderVerdict
from raftlog.raft.elector import LeaderElector
from raftlog.raft.errors import AckTimeoutError, NotLeaderError
from raftlog.raft.member_state import MemberState
from raftlog.raft.waiting import Clock, wait_event


class ReadIndex:
    def __init__(self, config: RaftConfig, state: MemberState, commitment: Commitment, appends: ClientAppends,
                 elector: LeaderElector, clock: Clock) -> None:
        self.config = config
        self.state = state
        self.commitment = commitment
        self.appends = appends
        self.elector = elector
        self.now = clock

    async def confirm(self) -> int:
        """The leader's commit index, confirmed by a heartbeat round (linearizable reads)."""
        term = self.state.current_term
        if not self.state.is_leader:
            raise NotLeaderError(f"{self.config.self_id} is not the leader", self.state.leader_id)
        deadline = self.now() + self.config.max_wait_ack_ms / 1000
        while True:
            moved = self.commitment.moved.current()
            if self.appends.caught_up:
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
