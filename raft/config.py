"""Raft settings: DLedger's names in snake_case, milliseconds, validated when built.

Timing defaults are chosen for fast failover on a LAN, not DLedger's 2 s
heartbeat (which takes 6 s and more to replace a dead leader):

- heartbeat_interval_ms 100: a leader is noticed missing after
  max_heartbeat_leak (3) intervals, 300 ms; heartbeats are tiny, ten a second
  per follower cost nothing.
- min/max_vote_interval_ms 50/150: the random back-off between vote rounds;
  its spread (100 ms) is many loopback or LAN round trips, so one candidate
  usually asks before the others and wins in one round.
- vote_timeout_ms 200 (+ up to max_vote_interval_ms): how long a round waits
  for answers (DLedger: 2000 + random).
Together a killed leader is replaced, and the new one has committed its NOOP,
in about 400-550 ms.

- max_push_timeout_ms 1000, max_wait_ack_ms 2500, max_pending_requests 10000:
  DLedger's values (compare again after an unanswered push, client wait, pending appends).
- push_bytes_max 1 MiB: one push carries at most this much raw log.
- push_window_max 2: pushes in flight per follower (DLedger's 1000 counts
  single entries; a raftlog push carries up to a MiB). Two let the next push
  travel while the follower syncs the one before; entries that arrive
  meanwhile wait and go together, so more in flight means smaller pushes and
  more CPU per entry (docs/benchmarks.md has the runs).
- push_inflight_bytes_max 4 MiB: raw log in flight per follower (etcd's
  MaxInflightBytes). More only queues on the peer connection: under load the
  queue outgrew the push timeout, every push was re-sent, and a follower
  never caught up.
- scrub_interval_ms 1 h: a pause between passes of the scrub, which verifies
  the committed log (each pass starts on open) with a tenth of the event
  loop's time, so damage in files that recovery does not rescan is found
  and repaired from a replica while the replicas still hold good copies.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from raftlog.raft.cluster_version import LEVEL

LEARNER_MARK = "@learner"


@dataclass(frozen=True, slots=True)
class Peer:
    id: str
    address: str  # host:port of the peer port
    learner: bool = False
    client_url: str | None = None  # where its clients go, when a configuration entry says (raft.membership)
    grpc_address: str | None = None


def parse_peers(peers: str) -> tuple[Peer, ...]:
    """DLedger's peers string: `n0-host:port;n1-host:port;n3-host:port@learner`.

    A member whose address ends in `@learner` receives the log but never
    votes, never counts in a quorum and never becomes a candidate.
    """
    members = parse_routes(peers)
    if not any(not m.learner for m in members):
        raise ValueError("a group needs at least one voting member")
    return members


def parse_routes(peers: str) -> tuple[Peer, ...]:
    """`id-host:port;...` (learners marked as in `peers`), with no member required: `peer_routes`."""
    members = []
    for item in filter(None, (part.strip() for part in peers.split(";"))):
        node_id, sep, address = item.partition("-")
        if not sep or not node_id or not address:
            raise ValueError(f"peer {item!r} is not of the form id-host:port")
        learner = address.endswith(LEARNER_MARK)
        if learner:
            address = address[: -len(LEARNER_MARK)]
        if ":" not in address:
            raise ValueError(f"peer {item!r}: address must be host:port")
        members.append(Peer(node_id, address, learner))
    ids = [m.id for m in members]
    if len(set(ids)) != len(ids):
        raise ValueError(f"duplicate member ids in {peers!r}")
    return tuple(members)


@dataclass(frozen=True, slots=True)
class RaftConfig:
    """`peers` is the group's first configuration: the one a member starts from until its log,
    checkpoint or a snapshot install tells it a later one (raft.membership)."""

    self_id: str
    peers: tuple[Peer, ...]
    group: str = "default"
    heartbeat_interval_ms: int = 100
    max_heartbeat_leak: int = 3
    min_vote_interval_ms: int = 50
    max_vote_interval_ms: int = 150
    min_take_leadership_vote_interval_ms: int = 30  # the back-off of a transfer's target: it stands sooner
    max_take_leadership_vote_interval_ms: int = 100
    vote_timeout_ms: int = 200
    max_push_timeout_ms: int = 1000
    max_wait_ack_ms: int = 2500
    max_pending_requests: int = 10_000
    push_bytes_max: int = 1 << 20
    push_entries_max: int = 10_000
    push_window_max: int = 2
    push_inflight_bytes_max: int = 4 << 20
    rpc_timeout_ms: int = 1000
    peer_push_throttle_point: int = 300 << 20  # bytes behind before the quota applies
    peer_push_quota: int = 20 << 20  # bytes per second to a far-behind follower
    max_leadership_transfer_wait_index: int = 1000
    leadership_transfer_wait_timeout_ms: int = 1000
    preferred_leader_ids: tuple[str, ...] = field(default=())
    apply_batch_max: int = 1000
    scrub_interval_ms: int = 3_600_000  # 0: no scrub (reads still find and repair damage)
    max_promote_lag_entries: int = 1000  # a learner further behind the leader is not promoted yet
    control_queue_max: int = 1024  # compares and truncates a follower holds (DLedger's compareOrTruncateRequests)
    waiting_pushes_max: int = 1024  # appends a follower holds that arrived ahead of their turn
    # producer sessions (raft.producers): Kafka's 5 batches kept per producer; sessions open at most, and at
    # most of one owner (a caller's name); a session that did nothing in this many entries expires: a day of a
    # steady 1,160 entries a second (docs/api.md, "The bounds")
    producer_batches_kept: int = 5
    producers_max: int = 100_000
    producer_sessions_per_name_max: int = 10_000
    producer_idle_entries: int = 100_000_000
    # named consumers (raft.consumers): at most this many, and at most this many of one owner (a caller's name);
    # one that committed nothing in this many entries expires: about ten days of a steady 1,160 entries a second
    # (a consumer's position is worth keeping longer than a producer's session: docs/api.md, Named consumers)
    consumers_max: int = 10_000
    consumers_per_name_max: int = 1_000
    consumer_idle_entries: int = 1_000_000_000
    # topics (raft.topics): at most this many (RocketMQ's and Kafka's clusters hold tens of thousands)
    topics_max: int = 100_000
    # the format and protocol level this member reports (raft.cluster_version): its release's, or lower to hold
    # a rolling upgrade's new formats back until every member runs the new release
    reported_level: int = LEVEL

    def __post_init__(self) -> None:
        ids = {p.id for p in self.peers}
        if self.self_id not in ids:
            raise ValueError(f"self_id {self.self_id!r} is not among the peers {sorted(ids)}")
        for name in ("heartbeat_interval_ms", "max_heartbeat_leak", "min_vote_interval_ms",
                     "vote_timeout_ms", "max_push_timeout_ms", "max_wait_ack_ms", "max_pending_requests",
                     "push_bytes_max", "push_entries_max", "push_window_max", "push_inflight_bytes_max",
                     "rpc_timeout_ms", "apply_batch_max", "min_take_leadership_vote_interval_ms",
                     "control_queue_max", "waiting_pushes_max", "producer_batches_kept", "producers_max",
                     "producer_sessions_per_name_max", "producer_idle_entries", "consumers_max",
                     "consumers_per_name_max", "consumer_idle_entries", "topics_max"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive")
        if self.scrub_interval_ms < 0:
            raise ValueError("scrub_interval_ms must be 0 (off) or positive")
        if self.max_vote_interval_ms < self.min_vote_interval_ms:
            raise ValueError("max_vote_interval_ms must be at least min_vote_interval_ms")
        if self.max_take_leadership_vote_interval_ms < self.min_take_leadership_vote_interval_ms:
            raise ValueError("max_take_leadership_vote_interval_ms must be at least "
                             "min_take_leadership_vote_interval_ms")
        if not 0 <= self.reported_level <= LEVEL:
            raise ValueError(f"reported_level is 0 to {LEVEL}, the levels this release knows")
        if self.max_promote_lag_entries < 0:
            raise ValueError("max_promote_lag_entries must not be negative")
        unknown = set(self.preferred_leader_ids) - {p.id for p in self.peers if not p.learner}
        if unknown:
            raise ValueError(f"preferred leaders {sorted(unknown)} are not voting peers")
