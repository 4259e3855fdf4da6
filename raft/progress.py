"""A member's progress as the API's status and the metrics show it: a read-only snapshot, so that
they do not reach into the elector, the dispatchers or the member state."""

from __future__ import annotations

from dataclasses import dataclass

from raftlog.raft.messages import Role


@dataclass(frozen=True, slots=True)
class PeerProgress:
    """The leader's view of one follower or learner."""

    alive: bool  # answered the last heartbeat
    match_index: int  # the last index known to match the leader's log
    watermark: int  # the last index it holds durably, in this term
    inflight_bytes: int  # log bytes pushed to it and not answered yet


@dataclass(frozen=True, slots=True)
class Progress:
    """A read-only snapshot of the member, for the API's status and the metrics."""

    role: Role
    term: int
    leader_id: str | None
    committed_index: int
    applied_index: int
    pending_appends: int
    rejoining: bool
    elections: int  # won by this member
    damaged_entries: int
    repaired_entries: int
    scrubs: int
    peers: dict[str, PeerProgress]  # a leader's followers and learners; empty on a follower
