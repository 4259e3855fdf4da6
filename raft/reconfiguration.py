"""Membership changes on the leader, one at a time (Raft thesis, 4.1; etcd's single-member changes).

A change is planned by the pure rules of raft.membership, checked against the
group as it answers now, then appended as a CONFIG_CHANGE entry, in force from
the moment it is in the log. DLedger has no membership changes of its own.
"""

from __future__ import annotations

from raftlog.raft.client_appends import ClientAppends
from raftlog.raft.commitment import Commitment
from raftlog.raft.config import Peer, RaftConfig
from raftlog.raft.elector import LeaderElector
from raftlog.raft.errors import NotLeaderError
from raftlog.raft.member_state import MemberState
from raftlog.raft.membership import ConfigLog, Configuration, MembershipError, Refusal, plan_change
from raftlog.storage.codec import Magic
from raftlog.storage.protocol import LogStore


class Reconfiguration:
    def __init__(self, config: RaftConfig, state: MemberState, store: LogStore, members: ConfigLog,
                 commitment: Commitment, appends: ClientAppends, elector: LeaderElector) -> None:
        self.config = config
        self.state = state
        self.store = store
        self.members = members
        self.commitment = commitment
        self.appends = appends
        self.elector = elector
        self._changing = False  # a change is on its way into the log

    async def change(self, *, add: Peer | None = None, promote: str | None = None,
                     remove: str | None = None) -> Configuration:
        """One change (add a learner, promote it, remove a member), appended as a CONFIG_CHANGE entry;
        returns the new configuration once committed. Refused (MembershipError) before anything is
        written: a change in flight, one the group cannot take now, or the leader's own removal (it
        hands leadership over first)."""
        if not self.state.is_leader:
            raise NotLeaderError(f"{self.config.self_id} is not the leader", self.state.leader_id)
        term, committed = self.state.current_term, self.state.committed_index
        if self._changing or self.members.pending(committed) or not self.appends.caught_up:
            raise MembershipError(Refusal.CHANGE_IN_FLIGHT, "another change, or the leader's first entry of "
                                  "its term, is not committed yet: try again once it is")
        if remove == self.config.self_id:
            raise NotLeaderError("the leader hands leadership to another voter before its removal", None)
        planned = plan_change(self.members.current, add=add, promote=promote, remove=remove)
        if promote is not None:
            mark = self.commitment.watermark(term, promote)
            if mark < self.appends.term_first_index:  # never heard from in this term: not a learner in sync (etcd)
                raise MembershipError(Refusal.LEARNER_BEHIND, f"{promote} has not acknowledged this leader's "
                                      "first entry: it is not replicating")
            behind = self.store.end_index - mark
            if behind > self.config.max_promote_lag_entries:
                raise MembershipError(Refusal.LEARNER_BEHIND, f"{promote} is {behind} entries behind the leader "
                                      f"(max_promote_lag_entries {self.config.max_promote_lag_entries})")
        self._changing = True
        try:
            if planned.voters != self.members.current.voters:
                await self._check_answering(term, planned)
            appended = await self.appends.append_committed([planned.encode()], term, Magic.CONFIG_CHANGE)
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
