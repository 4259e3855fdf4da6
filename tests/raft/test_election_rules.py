"""DLedger's election rules, one decision at a time.

Reference: seeds/dledger-leader-election-zh.md, 3.4.2 handleVote (log freshness
is checked before the term), 3.3.1 maintainAsCandidate (parse order), 3.5
sendHeartbeats / handleHeartBeat.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from raftlog.raft.election import (
    Backoff,
    HeartbeatAction,
    LeaderVerdict,
    LocalView,
    VoteTally,
    decide_heartbeat,
    decide_vote,
    parse_heartbeats,
    parse_votes,
    tally_votes,
)
from raftlog.raft.messages import Code, HeartbeatRequest, ParseResult, VoteRequest, VoteResult

ME = LocalView(self_id="n0", current_term=5, voted_for=None, leader_id=None,
               ledger_end_term=4, ledger_end_index=100)


def ask(term: int = 5, end_term: int = 4, end_index: int = 100, who: str = "n1",
        transfer: bool = False) -> VoteRequest:
    return VoteRequest("g", who, term, end_term, end_index, transfer)


HEARING = replace(ME, leader_id="n2", hears_leader=True)


@pytest.mark.parametrize(
    ("view", "request_", "from_self", "expected"),
    [
        # a candidate this member does not know as a voter yet: configurations change (thesis 4.1)
        (ME, ask(who="n9"), False, VoteResult.ACCEPT),
        # while it hears from a leader, another candidate is ignored, even one with a larger term
        # (the disruptive-server rule); the leader itself standing again, or a transfer's target, is heard
        (HEARING, ask(who="n9"), False, VoteResult.REJECT_ALREADY_HAS_LEADER),
        (HEARING, ask(who="n1", term=9), False, VoteResult.REJECT_ALREADY_HAS_LEADER),
        (HEARING, ask(who="n2", term=6), False, VoteResult.REJECT_TERM_NOT_READY),
        (HEARING, ask(who="n1", transfer=True), False, VoteResult.ACCEPT),
        (replace(HEARING, leader_id="n0"), ask(who="n1", term=6), False, VoteResult.REJECT_ALREADY_HAS_LEADER),
        (replace(ME, leader_id="n2"), ask(who="n1", term=6), False, VoteResult.REJECT_TERM_NOT_READY),
        (ME, ask(who="n0"), False, VoteResult.REJECT_UNEXPECTED_LEADER),
        (ME, ask(who="n0"), True, VoteResult.ACCEPT),
        (ME, ask(end_term=3, end_index=500), False, VoteResult.REJECT_EXPIRED_LEDGER_TERM),
        (ME, ask(end_index=99), False, VoteResult.REJECT_SMALL_LEDGER_END_INDEX),
        (ME, ask(term=4), False, VoteResult.REJECT_EXPIRED_VOTE_TERM),
        (ME, ask(term=6), False, VoteResult.REJECT_TERM_NOT_READY),
        (replace(ME, voted_for="n2"), ask(), False, VoteResult.REJECT_ALREADY_VOTED),
        (replace(ME, voted_for="n2", leader_id="n2"), ask(), False, VoteResult.REJECT_ALREADY_HAS_LEADER),
        (replace(ME, voted_for="n1"), ask(), False, VoteResult.ACCEPT),
        (replace(ME, current_term=3), ask(term=3), False, VoteResult.REJECT_TERM_SMALL_THAN_LEDGER),
        (replace(ME, taking_leadership=True), ask(), False, VoteResult.REJECT_TAKING_LEADERSHIP),
        (replace(ME, taking_leadership=True), ask(end_index=101), False, VoteResult.ACCEPT),
        (ME, ask(end_term=4, end_index=100), False, VoteResult.ACCEPT),
        (ME, ask(end_term=5, end_index=0), False, VoteResult.ACCEPT),
    ],
)
def test_vote_decisions(view: LocalView, request_: VoteRequest, from_self: bool,
                        expected: VoteResult) -> None:
    assert decide_vote(view, request_, from_self) is expected


def test_log_freshness_is_checked_before_the_term() -> None:
    # a stale log with a newer term is refused for its log, not asked to wait for the term
    assert decide_vote(ME, ask(term=9, end_term=3), False) is VoteResult.REJECT_EXPIRED_LEDGER_TERM


def tally(**counts: int) -> VoteTally:
    base = dict(term=5, known_max_term=5, valid=3, accepted=0, not_ready=0, bigger_ledger=0,
                already_has_leader=False)
    base.update(counts)
    return VoteTally(**base)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("t", "expected"),
    [
        (tally(known_max_term=7, accepted=3), (ParseResult.WAIT_TO_VOTE_NEXT, Backoff.VOTE_INTERVAL)),
        (tally(already_has_leader=True, accepted=2),
         (ParseResult.WAIT_TO_REVOTE, Backoff.PLUS_HEARTBEAT_LEAK)),
        (tally(valid=1, accepted=1), (ParseResult.WAIT_TO_REVOTE, Backoff.VOTE_INTERVAL)),
        (tally(valid=3, bigger_ledger=2, accepted=1),
         (ParseResult.WAIT_TO_REVOTE, Backoff.PLUS_MAX_VOTE_INTERVAL)),
        (tally(accepted=2), (ParseResult.PASSED, Backoff.NONE)),
        (tally(accepted=1, not_ready=1), (ParseResult.REVOTE_IMMEDIATELY, Backoff.NONE)),
        (tally(accepted=1), (ParseResult.WAIT_TO_VOTE_NEXT, Backoff.VOTE_INTERVAL)),
    ],
)
def test_vote_rounds_are_parsed_in_dledger_order(t: VoteTally, expected: tuple) -> None:
    assert parse_votes(t, quorum=2) == expected


def test_tally_counts_each_answer_kind() -> None:
    t = tally_votes(5, [(VoteResult.ACCEPT, 5), (VoteResult.REJECT_EXPIRED_VOTE_TERM, 8),
                        (VoteResult.REJECT_SMALL_LEDGER_END_INDEX, 5), (VoteResult.UNKNOWN, -1),
                        (VoteResult.REJECT_TERM_NOT_READY, 4), (VoteResult.REJECT_ALREADY_HAS_LEADER, 5)])
    assert (t.valid, t.accepted, t.known_max_term, t.bigger_ledger, t.not_ready, t.already_has_leader) \
        == (5, 1, 8, 1, 1, True)


def beat(term: int = 5, leader: str = "n1") -> HeartbeatRequest:
    return HeartbeatRequest("g", leader, term)


@pytest.mark.parametrize(
    ("view", "request_", "expected"),
    [
        (ME, beat(leader="n9"), (Code.SUCCESS, HeartbeatAction.FOLLOW)),  # a leader it does not know yet
        (ME, beat(leader="n0"), (Code.UNEXPECTED_MEMBER, HeartbeatAction.NONE)),
        (ME, beat(term=4), (Code.EXPIRED_TERM, HeartbeatAction.NONE)),
        (ME, beat(term=6), (Code.TERM_NOT_READY, HeartbeatAction.STEP_UP_TERM)),
        (ME, beat(), (Code.SUCCESS, HeartbeatAction.FOLLOW)),
        (replace(ME, leader_id="n1"), beat(), (Code.SUCCESS, HeartbeatAction.REFRESH)),
        (replace(ME, leader_id="n2"), beat(), (Code.INCONSISTENT_LEADER, HeartbeatAction.NONE)),
    ],
)
def test_heartbeat_decisions(view: LocalView, request_: HeartbeatRequest, expected: tuple) -> None:
    assert decide_heartbeat(view, request_) == expected


@pytest.mark.parametrize(
    ("answers", "lost_too_long", "expected"),
    [
        ([(Code.SUCCESS, 5), (Code.SUCCESS, 5)], False, (LeaderVerdict.HEALTHY, 5)),
        ([(Code.SUCCESS, 5)], False, (LeaderVerdict.HEALTHY, 5)),  # the leader counts itself
        ([(Code.EXPIRED_TERM, 9), (Code.SUCCESS, 5)], False, (LeaderVerdict.STEP_DOWN, 9)),
        ([(Code.TERM_NOT_READY, 5)], True, (LeaderVerdict.RESEND, 5)),
        ([(Code.INCONSISTENT_LEADER, 5)], False, (LeaderVerdict.STEP_DOWN, 5)),
        ([], False, (LeaderVerdict.WAIT, 5)),
        ([], True, (LeaderVerdict.STEP_DOWN, 5)),
    ],
)
def test_heartbeat_rounds(answers: list, lost_too_long: bool, expected: tuple) -> None:
    assert parse_heartbeats(5, answers, quorum=2, quorum_lost_too_long=lost_too_long) == expected


def test_a_rejoining_members_larger_term_makes_the_candidate_vote_in_a_new_term() -> None:
    """Found by the fault suite: a member rejoining after losing data answered REJECT_REJOINING from
    term 398 while the others elected a leader in 397; the leader's heartbeats met 398 and it stepped
    down, then won 397 again, for 50 s, and the rejoining member never caught up."""
    t = tally_votes(397, [(VoteResult.ACCEPT, 397), (VoteResult.ACCEPT, 397), (VoteResult.REJECT_REJOINING, 398)])
    assert t.known_max_term == 398
    assert parse_votes(t, 2)[0] is ParseResult.WAIT_TO_VOTE_NEXT
