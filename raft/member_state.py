"""DLedger's MemberState: role, term, vote, leader and commit index of one member.

Term and vote reach the disk (through the TermStore seam, the storage
checkpoint in production) before anything that depends on them is said to
another member: `next_term` and `vote_for` return only once persisted. One
asyncio lock serialises them with the vote decision, so two candidates can
never both receive this member's vote in one term.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Protocol

from raftlog.raft.messages import Role

log = logging.getLogger("raftlog.raft")


class TermStore(Protocol):
    """Durable term and vote (storage.Checkpoint fills it)."""

    async def save_vote(self, term: int, voted_for: str | None) -> None: ...


RoleListener = Callable[[int, Role], None]


class MemberState:
    def __init__(self, self_id: str, terms: TermStore, term: int, voted_for: str | None,
                 committed_index: int = -1, *, voter: bool = True) -> None:
        self.self_id = self_id
        self._terms = terms
        # DLedger's start state; a learner only ever follows
        self.role = Role.CANDIDATE if voter else Role.FOLLOWER
        self.current_term = term
        self.voted_for = voted_for
        self.leader_id: str | None = None
        self.known_max_term = term
        self.committed_index = committed_index
        self.transferee: str | None = None  # a leadership transfer in progress
        self.lock = asyncio.Lock()
        self._listeners: list[RoleListener] = []
        self.changed = asyncio.Event()  # set on every role or term change

    # -- roles -----------------------------------------------------------------

    def add_role_listener(self, listener: RoleListener) -> None:
        """Called with (term, role) after every role change, as RocketMQ's RoleChangeHandler."""
        self._listeners.append(listener)

    @property
    def is_leader(self) -> bool:
        return self.role is Role.LEADER

    @property
    def is_follower(self) -> bool:
        return self.role is Role.FOLLOWER

    @property
    def is_candidate(self) -> bool:
        return self.role is Role.CANDIDATE

    def change_to_candidate(self, term: int) -> None:
        """Stop leading or following; `term` (>= current) is remembered as the largest known."""
        assert term >= self.current_term, "a candidate never goes back in term"
        self.known_max_term = max(self.known_max_term, term)
        self._set_role(Role.CANDIDATE, None)

    def change_to_follower(self, term: int, leader_id: str) -> None:
        assert term == self.current_term, "follow only a leader of the current term"
        self._set_role(Role.FOLLOWER, leader_id)

    def lose_leader(self) -> None:
        """A member that never stands (a learner, a member rejoining) stops naming a leader it no
        longer hears from, and follows the next one that reaches it."""
        self._set_role(Role.FOLLOWER, None)

    def change_to_leader(self, term: int) -> None:
        assert term == self.current_term, "lead only in the current term"
        self._set_role(Role.LEADER, self.self_id)

    def _set_role(self, role: Role, leader_id: str | None) -> None:
        changed = (role, leader_id) != (self.role, self.leader_id)
        self.role, self.leader_id = role, leader_id
        self.transferee = None
        if changed:
            log.info("%s is %s in term %d (leader %s)", self.self_id, role.value, self.current_term,
                     leader_id)
            self.changed.set()
            for listener in self._listeners:
                listener(self.current_term, role)

    # -- term and vote (persisted first) ------------------------------------------

    async def next_term(self) -> int:
        """A candidate's new term: the largest known, or one more; the vote is cleared."""
        term = self.known_max_term if self.known_max_term > self.current_term else self.current_term + 1
        await self._terms.save_vote(term, None)
        self.current_term, self.voted_for = term, None
        self.known_max_term = max(self.known_max_term, term)
        self.changed.set()
        return term

    async def adopt_term(self, term: int) -> None:
        """Move to a larger term without voting (a learner following a new leader)."""
        assert term > self.current_term
        await self._terms.save_vote(term, None)
        self.current_term, self.voted_for = term, None
        self.known_max_term = max(self.known_max_term, term)
        self.changed.set()

    async def vote_for(self, candidate: str) -> None:
        if self.voted_for != candidate:
            await self._terms.save_vote(self.current_term, candidate)
            self.voted_for = candidate

    # -- commit ----------------------------------------------------------------------

    def advance_commit(self, index: int) -> bool:
        """Raise the commit index; it never falls. True when it moved."""
        if index <= self.committed_index:
            return False
        self.committed_index = index
        return True
