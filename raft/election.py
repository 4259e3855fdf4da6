"""DLedger's election rules as pure functions: no I/O, no clock, no state of their own.

The elector (elector.py) gathers what they need, calls them, and carries out
the answer, as DLedger's DLedgerLeaderElector does (maintainAsCandidate,
handleVote, sendHeartbeats, handleHeartBeat).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import Enum

from raftlog.raft.messages import Code, HeartbeatRequest, ParseResult, VoteRequest, VoteResult


@dataclass(frozen=True, slots=True)
class LocalView:
    """What a member knows of itself when it answers a vote or a heartbeat."""

    self_id: str
    current_term: int
    voted_for: str | None
    leader_id: str | None
    ledger_end_term: int
    ledger_end_index: int
    taking_leadership: bool = False
    hears_leader: bool = False  # it leads, or heard its leader within the heartbeat leak


def decide_vote(view: LocalView, request: VoteRequest, from_self: bool) -> VoteResult:
    """handleVote, checked in DLedger's order: log freshness, then term.

    Not DLedger's first check, that the candidate is a voter this member knows: configurations
    change, and a member may lag behind the one that makes the candidate a voter (Ongaro's thesis,
    4.1: servers answer without consulting their configurations). Instead, while a member hears
    from a leader it ignores every other candidate (the thesis's disruptive-server rule, 4.2.3), so
    a removed member left running cannot depose anyone; a leadership transfer's target is heard.
    """
    if not from_self and request.leader_id == view.self_id:
        return VoteResult.REJECT_UNEXPECTED_LEADER
    if (view.hears_leader and not request.taking_leadership and not from_self
            and request.leader_id != view.leader_id):
        return VoteResult.REJECT_ALREADY_HAS_LEADER
    if request.ledger_end_term < view.ledger_end_term:
        return VoteResult.REJECT_EXPIRED_LEDGER_TERM
    if (request.ledger_end_term == view.ledger_end_term
            and request.ledger_end_index < view.ledger_end_index):
        return VoteResult.REJECT_SMALL_LEDGER_END_INDEX
    if request.term < view.current_term:
        return VoteResult.REJECT_EXPIRED_VOTE_TERM
    if request.term > view.current_term:
        return VoteResult.REJECT_TERM_NOT_READY  # the caller moves to that term first
    if view.voted_for not in (None, request.leader_id):
        if view.leader_id is not None:
            return VoteResult.REJECT_ALREADY_HAS_LEADER
        return VoteResult.REJECT_ALREADY_VOTED
    if request.term < view.ledger_end_term:
        return VoteResult.REJECT_TERM_SMALL_THAN_LEDGER
    if (not from_self and view.taking_leadership and request.ledger_end_term == view.ledger_end_term
            and view.ledger_end_index >= request.ledger_end_index):
        return VoteResult.REJECT_TAKING_LEADERSHIP
    return VoteResult.ACCEPT


@dataclass(frozen=True, slots=True)
class VoteTally:
    term: int
    known_max_term: int
    valid: int
    accepted: int
    not_ready: int
    bigger_ledger: int
    already_has_leader: bool


def tally_votes(term: int, answers: Iterable[tuple[VoteResult, int]]) -> VoteTally:
    """Count a round's answers, (result, the answerer's term), as maintainAsCandidate does."""
    known_max_term, valid, accepted, not_ready, bigger, has_leader = term, 0, 0, 0, 0, False
    for result, answer_term in answers:
        if result is not VoteResult.UNKNOWN:
            valid += 1
        if result is VoteResult.ACCEPT:
            accepted += 1
        elif result is VoteResult.REJECT_ALREADY_HAS_LEADER:
            has_leader = True
        elif result in (VoteResult.REJECT_TERM_SMALL_THAN_LEDGER, VoteResult.REJECT_EXPIRED_VOTE_TERM,
                        VoteResult.REJECT_REJOINING):  # a rejoining member's term may be larger too
            known_max_term = max(known_max_term, answer_term)
        elif result in (VoteResult.REJECT_EXPIRED_LEDGER_TERM, VoteResult.REJECT_SMALL_LEDGER_END_INDEX):
            bigger += 1
        elif result is VoteResult.REJECT_TERM_NOT_READY:
            not_ready += 1
    return VoteTally(term, known_max_term, valid, accepted, not_ready, bigger, has_leader)


class Backoff(Enum):
    """How long to wait before the next round, on top of the random vote interval."""

    NONE = "none"  # vote again at once
    VOTE_INTERVAL = "vote interval"
    PLUS_MAX_VOTE_INTERVAL = "vote interval + max_vote_interval_ms"
    PLUS_HEARTBEAT_LEAK = "vote interval + heartbeat_interval_ms * max_heartbeat_leak"


def parse_votes(tally: VoteTally, quorum: int) -> tuple[ParseResult, Backoff]:
    """The round's outcome, in the order DLedgerLeaderElector.maintainAsCandidate weighs them."""
    if tally.known_max_term > tally.term:
        return ParseResult.WAIT_TO_VOTE_NEXT, Backoff.VOTE_INTERVAL
    if tally.already_has_leader:
        return ParseResult.WAIT_TO_REVOTE, Backoff.PLUS_HEARTBEAT_LEAK
    if tally.valid < quorum:
        return ParseResult.WAIT_TO_REVOTE, Backoff.VOTE_INTERVAL
    if tally.valid - tally.bigger_ledger < quorum:
        return ParseResult.WAIT_TO_REVOTE, Backoff.PLUS_MAX_VOTE_INTERVAL
    if tally.accepted >= quorum:
        return ParseResult.PASSED, Backoff.NONE
    if tally.accepted + tally.not_ready >= quorum:
        return ParseResult.REVOTE_IMMEDIATELY, Backoff.NONE
    return ParseResult.WAIT_TO_VOTE_NEXT, Backoff.VOTE_INTERVAL


class HeartbeatAction(Enum):
    NONE = "none"
    REFRESH = "refresh"  # the known leader is alive
    FOLLOW = "follow"  # accept the sender as leader of this term
    STEP_UP_TERM = "step up term"  # a larger term: become candidate of it, at once


def decide_heartbeat(view: LocalView, request: HeartbeatRequest) -> tuple[Code, HeartbeatAction]:
    """handleHeartBeat; as for votes, the sender need not be a voter this member knows yet."""
    if request.leader_id == view.self_id:
        return Code.UNEXPECTED_MEMBER, HeartbeatAction.NONE
    if request.term < view.current_term:
        return Code.EXPIRED_TERM, HeartbeatAction.NONE
    if request.term > view.current_term:
        return Code.TERM_NOT_READY, HeartbeatAction.STEP_UP_TERM
    if view.leader_id is None:
        return Code.SUCCESS, HeartbeatAction.FOLLOW
    if view.leader_id == request.leader_id:
        return Code.SUCCESS, HeartbeatAction.REFRESH
    return Code.INCONSISTENT_LEADER, HeartbeatAction.NONE


class LeaderVerdict(Enum):
    HEALTHY = "healthy"  # a quorum answered SUCCESS
    RESEND = "resend"  # a quorum with the not-ready ones: beat again at once
    STEP_DOWN = "step down"  # a larger term, another leader, or no quorum for too long
    WAIT = "wait"


def parse_heartbeats(term: int, answers: Iterable[tuple[Code, int]], quorum: int,
                     quorum_lost_too_long: bool) -> tuple[LeaderVerdict, int]:
    """sendHeartbeats' outcome; returns the verdict and the term to step down into.

    The leader counts itself as one SUCCESS.
    """
    success, not_ready, max_term, inconsistent = 1, 0, -1, False
    for code, answer_term in answers:
        if code is Code.SUCCESS:
            success += 1
        elif code is Code.EXPIRED_TERM:
            max_term = max(max_term, answer_term)
        elif code is Code.INCONSISTENT_LEADER:
            inconsistent = True
        elif code is Code.TERM_NOT_READY:
            not_ready += 1
    if max_term > term:
        return LeaderVerdict.STEP_DOWN, max_term
    if success >= quorum:
        return LeaderVerdict.HEALTHY, term
    if success + not_ready >= quorum:
        return LeaderVerdict.RESEND, term
    if inconsistent or quorum_lost_too_long:
        return LeaderVerdict.STEP_DOWN, term
    return LeaderVerdict.WAIT, term
