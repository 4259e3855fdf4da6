"""DLedger's leader elector: one task that keeps the member's role, woken by events and timers.

Candidate: request votes, parse the round, back off (election.py). Follower:
become candidate after max_heartbeat_leak heartbeat intervals without the
leader. Leader: heartbeat every interval; step down on a larger term, another
leader, or no quorum for max_heartbeat_leak intervals (DLedger's
DLedgerLeaderElector: maintainAsCandidate, maintainAsFollower, maintainAsLeader).
"""

from __future__ import annotations

import asyncio
import logging
import random
from typing import Any, Protocol

from raftlog.raft.config import RaftConfig
from raftlog.raft.election import (
    Backoff,
    HeartbeatAction,
    LeaderVerdict,
    LocalView,
    decide_heartbeat,
    decide_vote,
    parse_heartbeats,
    parse_votes,
    tally_votes,
)
from raftlog.raft.member_state import MemberState
from raftlog.raft.membership import ConfigLog
from raftlog.raft.messages import (
    Code,
    HeartbeatRequest,
    HeartbeatResponse,
    ParseResult,
    VoteRequest,
    VoteResponse,
    VoteResult,
)
from raftlog.raft.transport import PeerUnavailable, Transport
from raftlog.raft.waiting import Clock, Wakeup, consume
from raftlog.storage.errors import StorageError
from raftlog.storage.protocol import LogStore

log = logging.getLogger("raftlog.raft.elector")



class Candidacy(Protocol):
    """What the elector asks of its member: whether it may stand and vote, whom it talks to, and the
    leader's periodic duties beside its heartbeats."""

    @property
    def passive(self) -> bool: ...

    @property
    def rejoining(self) -> bool: ...

    @property
    def peer_ids(self) -> tuple[str, ...]: ...

    def check_preferred_leader(self) -> None: ...

    def heard_level(self, peer: str, level: int) -> None: ...

    def check_cluster_version(self) -> None: ...


class LeaderElector:
    def __init__(self, config: RaftConfig, state: MemberState, store: LogStore, members: ConfigLog,
                 transport: Transport, clock: Clock, rng: random.Random, member: Candidacy) -> None:
        self.config = config
        self.state = state
        self.store = store
        self.members = members
        self.transport = transport
        self.clock = clock
        self.rng = rng
        self.member = member
        self.last_leader_heartbeat = clock()
        self.last_send_heartbeat = float("-inf")
        self.last_success_heartbeat = clock()
        self.next_time_to_request_vote = -1.0
        self.need_increase_term_immediately = False
        # The first round after a start raises the term: a member that lost its unflushed
        # tail must not lead again in a term whose indices others may hold differently.
        self.last_parse_result = ParseResult.WAIT_TO_VOTE_NEXT
        self._unstorable_until = float("-inf")  # a term it could not store: no new try before this, asked or not
        self.last_vote_cost = 0.0
        self.taking_leadership = False
        self.peer_alive: dict[str, bool] = {}
        self.elections = 0  # rounds this member has won
        self.wake = Wakeup()

    # -- the task ------------------------------------------------------------------

    async def run(self) -> None:
        while True:
            self.wake.clear()  # before looking at the state: a wake-up from now on is kept
            if self.state.is_leader:
                await self._maintain_as_leader()
            elif self.state.is_follower or self.member.passive:
                await self._maintain_as_follower()
            else:
                await self._maintain_as_candidate()

    async def _sleep_until(self, deadline: float) -> None:
        """Wait for the deadline, or until something wakes the elector."""
        delay = deadline - self.clock()
        await self.wake.wait(None if delay == float("inf") else max(delay, 0.0))

    def _ms(self, ms: float) -> float:
        return ms / 1000

    def _next_vote_time(self) -> float:
        config = self.config
        low, high = ((config.min_take_leadership_vote_interval_ms, config.max_take_leadership_vote_interval_ms)
                     if self.taking_leadership else (config.min_vote_interval_ms, config.max_vote_interval_ms))
        return self.clock() + self.last_vote_cost + self._ms(self.rng.uniform(low, high))

    # -- leader ------------------------------------------------------------------------

    async def _maintain_as_leader(self) -> None:
        deadline = self.last_send_heartbeat + self._ms(self.config.heartbeat_interval_ms)
        if self.clock() < deadline:
            await self._sleep_until(deadline)
            return
        term = self.state.current_term
        self.last_send_heartbeat = self.clock()
        verdict = await self.heartbeat_round(term)
        if verdict is LeaderVerdict.RESEND:
            self.last_send_heartbeat = float("-inf")
        self.member.check_preferred_leader()
        self.member.check_cluster_version()

    async def heartbeat_round(self, term: int) -> LeaderVerdict:
        """Beat every other member once and act on the answers (sendHeartbeats)."""
        request = HeartbeatRequest(self.config.group, self.config.self_id, term,
                                   self.state.committed_index)
        others = self.member.peer_ids
        voters = self.members.current.voters
        tasks = {peer: asyncio.ensure_future(self.transport.heartbeat(peer, request)) for peer in others}
        for task in tasks.values():
            task.add_done_callback(consume)  # late answers are dropped, and so are their errors
        if tasks:  # a group of one confirms itself
            await asyncio.wait(tasks.values(), timeout=self._ms(self.config.heartbeat_interval_ms))
        answers = []
        for peer, task in tasks.items():
            response = _result(task)
            self.peer_alive[peer] = response is not None
            if response is not None:
                self.member.heard_level(peer, response.level)
                if peer in voters:
                    answers.append((response.code, response.term))
        now = self.clock()
        lost_too_long = now - self.last_success_heartbeat > self._leak()
        verdict, step_term = parse_heartbeats(term, answers, self._quorum(), lost_too_long)
        async with self.state.lock:
            if not self.state.is_leader or self.state.current_term != term:
                return LeaderVerdict.WAIT
            if verdict is LeaderVerdict.HEALTHY:
                self.last_success_heartbeat = now
            elif verdict is LeaderVerdict.STEP_DOWN:
                log.warning("%s steps down in term %d (%s)", self.config.self_id, term,
                            "a larger term" if step_term > term else "no quorum")
                self.state.change_to_candidate(step_term)
                self.next_time_to_request_vote = self._next_vote_time()
        return verdict

    def _leak(self) -> float:
        return self._ms(self.config.heartbeat_interval_ms * self.config.max_heartbeat_leak)

    def _quorum(self) -> int:
        return self.members.current.quorum()

    # -- follower ----------------------------------------------------------------------

    async def _maintain_as_follower(self) -> None:
        """A leader unheard for the heartbeat leak is lost: a follower stands; a member that never
        stands (a learner, a member rejoining) only stops naming it, and waits for the next."""
        if self.member.passive and (not self.state.is_follower or self.state.leader_id is None):
            await self._sleep_until(float("inf"))  # no leader to watch: until a heartbeat wakes it
            return
        deadline = self.last_leader_heartbeat + self._leak()
        if self.clock() < deadline:
            await self._sleep_until(deadline)
            return
        async with self.state.lock:
            if self.state.is_follower and self.clock() >= self.last_leader_heartbeat + self._leak():
                log.info("%s lost leader %s (no heartbeat for %.0f ms)", self.config.self_id,
                         self.state.leader_id, self._leak() * 1000)
                if self.member.passive:
                    self.state.lose_leader()
                else:
                    self._stand_after_losing()

    def _stand_after_losing(self) -> None:
        """Become a candidate, first asking at a random moment within min_vote_interval_ms: the other
        followers lost the same leader at the same heartbeat, and asking at once, together, each would
        keep its vote for itself, and all would wait a vote interval to ask again. The first to ask
        usually gets the others' votes.

        Its first round is in the next term, as in Raft; DLedger asks in the current term first, which is
        safe only while the voters never change. A term's leader may change the membership more than once
        (add a member, then remove another), and a majority of the new voters need not hold one voter of
        the majority that elected it: members that never voted in the term could elect a second leader
        in it, whose entries would carry the same index and term as the first one's."""
        self.state.change_to_candidate(self.state.current_term)
        self.next_time_to_request_vote = self.clock() + self._ms(
            self.rng.uniform(0, self.config.min_vote_interval_ms))
        self.last_parse_result = ParseResult.WAIT_TO_VOTE_NEXT

    # -- candidate ---------------------------------------------------------------------

    async def _maintain_as_candidate(self) -> None:
        if self.clock() < self.next_time_to_request_vote and (not self.need_increase_term_immediately
                                                                 or self.clock() < self._unstorable_until):
            await self._sleep_until(self.next_time_to_request_vote)
            return
        async with self.state.lock:
            if not self.state.is_candidate:
                return
            if (self.last_parse_result is ParseResult.WAIT_TO_VOTE_NEXT
                    or self.need_increase_term_immediately):
                try:
                    term = await self.state.next_term()
                except StorageError as exc:  # a term it cannot store, it cannot stand in: try again later
                    log.warning("%s cannot store a new term (%s); it stands again later", self.config.self_id, exc)
                    self.last_parse_result = ParseResult.WAIT_TO_VOTE_NEXT
                    self.need_increase_term_immediately = False
                    self.next_time_to_request_vote = self._unstorable_until = self._next_vote_time()
                    return
                self.last_parse_result = ParseResult.WAIT_TO_REVOTE
            else:
                term = self.state.current_term
            end_index, end_term = self.store.end_index, self.store.end_term
        if self.need_increase_term_immediately:
            self.next_time_to_request_vote = self._next_vote_time()
            self.need_increase_term_immediately = False
            return
        started = self.clock()
        answers = await self._request_votes(VoteRequest(
            self.config.group, self.config.self_id, term, end_term, end_index, self.taking_leadership))
        self.last_vote_cost = self.clock() - started
        tally = tally_votes(term, answers)
        result, backoff = parse_votes(tally, self._quorum())
        if result is ParseResult.PASSED and self.state.known_max_term > term:
            # A leader that stepped down for a larger term asks again in its own term first, and may win it
            # with the votes it had (a round ends at a quorum, before the member of the larger term answers);
            # it would step down at its first heartbeat, again and again: it stands in the larger term next.
            result, backoff = ParseResult.WAIT_TO_VOTE_NEXT, Backoff.VOTE_INTERVAL
        async with self.state.lock:
            if not self.state.is_candidate or self.state.current_term != term:
                return
            if tally.known_max_term > term:
                self.state.change_to_candidate(tally.known_max_term)
            self.last_parse_result = result
            self._back_off(backoff)
            if result is ParseResult.PASSED:
                self.elections += 1
                self.taking_leadership = False
                self.state.change_to_leader(term)
                self.last_send_heartbeat = float("-inf")
                self.last_success_heartbeat = self.clock()
        log.debug("%s vote round in term %d: %s %s", self.config.self_id, term, result.value, tally)

    def _back_off(self, backoff: Backoff) -> None:
        if backoff is Backoff.NONE:
            return
        extra = {Backoff.VOTE_INTERVAL: 0,
                 Backoff.PLUS_MAX_VOTE_INTERVAL: self.config.max_vote_interval_ms,
                 Backoff.PLUS_HEARTBEAT_LEAK: self._leak() * 1000}
        self.next_time_to_request_vote = self._next_vote_time() + self._ms(extra[backoff])

    async def _request_votes(self, request: VoteRequest) -> list[tuple[VoteResult, int]]:
        """Ask every voter, itself included, and wait for a decision or the vote timeout."""
        tasks = {}
        for voter in self.members.current.voters:
            if voter == self.config.self_id:
                tasks[voter] = asyncio.ensure_future(self.handle_vote(request, from_self=True))
            else:
                tasks[voter] = asyncio.ensure_future(self.transport.vote(voter, request))
        timeout = self._ms(self.config.vote_timeout_ms
                           + self.rng.uniform(0, self.config.max_vote_interval_ms))
        pending = set(tasks.values())
        deadline = self.clock() + timeout
        try:
            while pending:
                done, pending = await asyncio.wait(pending, timeout=max(0.0, deadline - self.clock()),
                                                   return_when=asyncio.FIRST_COMPLETED)
                if not done:
                    break
                answers = [r for r in map(_result, tasks.values()) if r is not None]
                accepted = sum(1 for r in answers if r.result is VoteResult.ACCEPT)
                not_ready = sum(1 for r in answers if r.result is VoteResult.REJECT_TERM_NOT_READY)
                if (any(r.result is VoteResult.REJECT_ALREADY_HAS_LEADER for r in answers)
                        or accepted >= self._quorum() or accepted + not_ready >= self._quorum()):
                    break
        finally:  # also when the member stops mid-round: no call outlives it, none fails unseen
            for task in pending:
                task.cancel()
                task.add_done_callback(consume)
        results = []
        for task in tasks.values():
            response = _result(task)
            results.append((response.result, response.term) if response else (VoteResult.UNKNOWN, -1))
        return results

    # -- incoming ------------------------------------------------------------------------

    def _view(self) -> LocalView:
        return LocalView(self.config.self_id, self.state.current_term, self.state.voted_for,
                         self.state.leader_id, self.store.end_term, self.store.end_index,
                         self.taking_leadership, self.hears_leader())

    def hears_leader(self) -> bool:
        """It leads with a quorum behind it, or follows a leader heard within the heartbeat leak."""
        if self.state.leader_id is None:
            return False
        last = self.last_success_heartbeat if self.state.is_leader else self.last_leader_heartbeat
        return self.clock() - last < self._leak()

    async def handle_vote(self, request: VoteRequest, from_self: bool = False) -> VoteResponse:
        if self.member.rejoining:
            return VoteResponse(self.state.current_term, VoteResult.REJECT_REJOINING)
        async with self.state.lock:
            result = decide_vote(self._view(), request, from_self)
            if result is VoteResult.REJECT_TERM_NOT_READY:
                self.state.change_to_candidate(request.term)
                self.need_increase_term_immediately = True
                self.wake.set()
            elif result is VoteResult.ACCEPT:
                try:
                    await self.state.vote_for(request.leader_id)
                except StorageError as exc:  # a vote it cannot store, it does not give (no answer, in effect)
                    log.warning("%s cannot store a vote for %s in term %d (%s); not granted", self.config.self_id,
                                request.leader_id, request.term, exc)
                    result = VoteResult.UNKNOWN
            term = (self.store.end_term if result is VoteResult.REJECT_TERM_SMALL_THAN_LEDGER
                    else self.state.current_term)
            if not from_self:
                log.debug("%s answers %s's vote request in term %d (its log ends %d/%d, mine %d/%d): %s",
                          self.config.self_id, request.leader_id, request.term, request.ledger_end_index,
                          request.ledger_end_term, self.store.end_index, self.store.end_term, result.value)
            return VoteResponse(term, result)

    async def handle_heartbeat(self, request: HeartbeatRequest) -> HeartbeatResponse:
        code, action = decide_heartbeat(self._view(), request)
        if action is HeartbeatAction.REFRESH or action is HeartbeatAction.NONE:
            # Only reads: answered at once, never queued behind a push that holds the lock for
            # its write (under load that wait made followers miss beats and leaders step down).
            if action is HeartbeatAction.REFRESH:
                self.last_leader_heartbeat = self.clock()
            return HeartbeatResponse(code, self.state.current_term, self.config.reported_level)
        async with self.state.lock:
            code, action = decide_heartbeat(self._view(), request)
            if action is HeartbeatAction.STEP_UP_TERM and self.member.passive:
                await self.state.adopt_term(request.term)
                code, action = Code.SUCCESS, HeartbeatAction.FOLLOW
            if action is HeartbeatAction.REFRESH:
                self.last_leader_heartbeat = self.clock()
            elif action is HeartbeatAction.FOLLOW:
                self.last_leader_heartbeat = self.clock()
                self.taking_leadership = False
                self.state.change_to_follower(request.term, request.leader_id)
                self.wake.set()  # a member that never stands now watches this leader's beats
            elif action is HeartbeatAction.STEP_UP_TERM:
                self.state.change_to_candidate(request.term)
                self.need_increase_term_immediately = True
                self.wake.set()
            return HeartbeatResponse(code, self.state.current_term, self.config.reported_level)

    def heartbeat_now(self) -> None:
        """A follower answered with a larger term: the next heartbeat round, at once, steps down."""
        self.last_send_heartbeat = float("-inf")
        self.wake.set()

    def take_leadership(self) -> None:
        """A transfer's target: become candidate of the next term and ask for votes at once."""
        self.state.change_to_candidate(self.state.current_term)
        self.taking_leadership = True
        self.last_parse_result = ParseResult.WAIT_TO_VOTE_NEXT
        self.next_time_to_request_vote = self.clock()
        self.wake.set()


def _result(task: asyncio.Future[Any]) -> Any:
    """A finished RPC's answer, or None when it failed or is still running."""
    if not task.done() or task.cancelled():
        return None
    if task.exception() is not None:
        if not isinstance(task.exception(), PeerUnavailable):
            log.error("peer call failed unexpectedly", exc_info=task.exception())
        return None
    return task.result()
