"""Typed messages between members, and DLedger's codes. Encoding to bytes happens in `api/`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum, IntEnum


class Code(IntEnum):
    """DLedgerResponseCode: names and numbers kept, the API maps them to HTTP."""

    UNKNOWN = -1
    SUCCESS = 200
    TIMEOUT = 300
    METADATA_ERROR = 301
    NETWORK_ERROR = 302
    UNSUPPORTED = 303
    UNKNOWN_GROUP = 400
    UNKNOWN_MEMBER = 401
    UNEXPECTED_MEMBER = 402
    EXPIRED_TERM = 403
    NOT_LEADER = 404
    NOT_FOLLOWER = 405
    INCONSISTENT_STATE = 406
    INCONSISTENT_TERM = 407
    INCONSISTENT_INDEX = 408
    INCONSISTENT_LEADER = 409
    INDEX_OUT_OF_RANGE = 410
    UNEXPECTED_ARGUMENT = 411
    REPEATED_REQUEST = 412
    REPEATED_PUSH = 413
    DISK_ERROR = 414
    DISK_FULL = 415
    TERM_NOT_READY = 416
    FALL_BEHIND_TOO_MUCH = 417
    TAKE_LEADERSHIP_FAILED = 418
    INDEX_LESS_THAN_LOCAL_BEGIN = 419
    REQUEST_WITH_EMPTY_BODYS = 420
    INTERNAL_ERROR = 500
    TERM_CHANGED = 501
    WAIT_QUORUM_ACK_TIMEOUT = 502
    LEADER_PENDING_FULL = 503
    ILLEGAL_MEMBER_STATE = 504
    LEADER_NOT_READY = 505
    LEADER_TRANSFERRING = 506
    PUSH_REQUEST_IS_FULL = 507  # the older pusher's follower queue-full answer
    # raftlog's own, beyond DLedger's table: the public API's security and limits
    UNAUTHENTICATED = 601  # no credentials, or unknown ones
    PERMISSION_DENIED = 602  # a token whose role is too low, or a wrong cluster secret
    SERVER_BUSY = 603  # too many requests, or request bytes, in flight on this member
    # membership changes refused (raft.membership.Refusal has the same names)
    MEMBER_EXISTS = 604  # an id or a peer address that is already a member's
    ALREADY_VOTER = 605  # promoting a voter
    LAST_VOTER = 606  # removing the last voter
    CHANGE_IN_FLIGHT = 607  # the previous change, or the leader's first entry of its term, is not committed
    LEARNER_BEHIND = 608  # promoting a learner further behind than max_promote_lag_entries
    QUORUM_AT_RISK = 609  # the voters answering now would be short of the new configuration's quorum
    # raftlog's own: what a web page or a change of the group may not do (api.browser, api.service)
    HOST_NOT_ALLOWED = 610  # a Host header that is not one of this member's names (DNS rebinding)
    ORIGIN_NOT_ALLOWED = 611  # a state-changing request from a page of another origin
    SECRET_REQUIRED = 612  # a member beyond loopback added to a group without a cluster secret
    # raftlog's own: producer sessions (raft.producers)
    OUT_OF_ORDER_SEQUENCE = 613  # a producer's batch that skips ahead of its next sequence
    PRODUCER_FENCED = 614  # a batch from an epoch below the producer's current one
    # raftlog's own: named consumers (raft.consumers)
    CONSUMER_CONFLICT = 615  # a compare-and-set found the consumer at another position
    CONSUMER_NOT_FOUND = 616  # no consumer of that name (or it expired)
    CONSUMERS_FULL = 617  # a new consumer would pass consumers_max
    # raftlog's own: producer sessions with owners, and the cluster version (raft.producers, raft.cluster_version)
    UNKNOWN_PRODUCER = 618  # no open session of this producer id and epoch (never opened, closed or expired)
    NOT_PRODUCER_OWNER = 619  # a session another caller opened
    PRODUCERS_FULL = 620  # a new session would pass producers_max, or its caller's producer_sessions_per_name_max
    CLUSTER_VERSION_TOO_LOW = 621  # what the request needs is written from a cluster version the group is below
    CONSUMER_POSITION_PAST_END = 622  # a consumer's position past the end of the leader's log
    # raftlog's own: topics and queues (raft.topics, raft.queues)
    TOPIC_EXISTS = 623  # creating a topic whose name is taken
    TOPIC_NOT_FOUND = 624  # no topic of that name (or id), or no such queue in it
    INVALID_TOPIC = 625  # a name, queue count, size bound or change the catalog cannot take
    TOPICS_FULL = 626  # a new topic would pass topics_max
    TOPIC_NOT_WRITABLE = 627  # the topic's permissions refuse appends (an operator drains it)
    TOPIC_NOT_READABLE = 628  # the topic's permissions refuse reads
    KEYS_IN_SEVERAL_QUEUES = 629  # one batch whose keys fall in several queues, unsplit
    MESSAGE_TOO_LARGE = 630  # a message above its topic's largest message size


class Role(Enum):
    CANDIDATE = "candidate"
    FOLLOWER = "follower"
    LEADER = "leader"


class VoteResult(Enum):
    ACCEPT = "ACCEPT"
    REJECT_UNEXPECTED_LEADER = "REJECT_UNEXPECTED_LEADER"
    REJECT_EXPIRED_VOTE_TERM = "REJECT_EXPIRED_VOTE_TERM"
    REJECT_ALREADY_VOTED = "REJECT_ALREADY_VOTED"
    REJECT_ALREADY_HAS_LEADER = "REJECT_ALREADY_HAS_LEADER"
    REJECT_TERM_NOT_READY = "REJECT_TERM_NOT_READY"
    REJECT_TERM_SMALL_THAN_LEDGER = "REJECT_TERM_SMALL_THAN_LEDGER"
    REJECT_EXPIRED_LEDGER_TERM = "REJECT_EXPIRED_LEDGER_TERM"
    REJECT_SMALL_LEDGER_END_INDEX = "REJECT_SMALL_LEDGER_END_INDEX"
    REJECT_TAKING_LEADERSHIP = "REJECT_TAKING_LEADERSHIP"
    REJECT_REJOINING = "REJECT_REJOINING"  # this member lost committed entries and is getting them back
    UNKNOWN = "UNKNOWN"  # no answer (network error, timeout)


class ParseResult(Enum):
    """What a candidate makes of a vote round (DLedger's VoteResponse.ParseResult)."""

    WAIT_TO_REVOTE = "WAIT_TO_REVOTE"
    REVOTE_IMMEDIATELY = "REVOTE_IMMEDIATELY"
    PASSED = "PASSED"
    WAIT_TO_VOTE_NEXT = "WAIT_TO_VOTE_NEXT"


class PushType(Enum):
    APPEND = "APPEND"
    COMMIT = "COMMIT"
    COMPARE = "COMPARE"
    TRUNCATE = "TRUNCATE"
    INSTALL_SNAPSHOT = "INSTALL_SNAPSHOT"


@dataclass(frozen=True, slots=True)
class VoteRequest:
    group: str
    leader_id: str  # the candidate
    term: int
    ledger_end_term: int
    ledger_end_index: int
    taking_leadership: bool = False  # a transfer target asks: voters skip their own preference


@dataclass(frozen=True, slots=True)
class VoteResponse:
    term: int
    result: VoteResult


@dataclass(frozen=True, slots=True)
class HeartbeatRequest:
    group: str
    leader_id: str
    term: int
    commit_index: int = -1


@dataclass(frozen=True, slots=True)
class HeartbeatResponse:
    code: Code
    term: int = -1
    level: int = 0  # the format and protocol level the member knows (raft.cluster_version); 0: says none


@dataclass(frozen=True, slots=True)
class PushRequest:
    """One push: APPEND carries raw stored entries from `first_index`.

    COMPARE asks whether (pre_log_index, pre_log_term) is in the follower's log;
    TRUNCATE drops pre_log_index and after; INSTALL_SNAPSHOT restarts the
    follower's log after (pre_log_index, pre_log_term) with the leader's chain
    CRC and position; COMMIT only carries the commit index.
    """

    group: str
    leader_id: str
    term: int
    type: PushType
    commit_index: int
    first_index: int = -1
    count: int = 0
    data: bytes | memoryview = b""
    pre_log_index: int = -1
    pre_log_term: int = -1
    chain_crc: int | None = None  # COMPARE: the leader's chain CRC at pre_log_index
    next_pos: int | None = None
    tables: Mapping[str, bytes] = field(default_factory=dict)  # INSTALL_SNAPSHOT: the leader's tables (raft.tables)

    @property
    def last_index(self) -> int:
        return self.first_index + self.count - 1


@dataclass(frozen=True, slots=True)
class PushResponse:
    code: Code
    term: int
    index: int = -1  # first_index of an APPEND, pre_log_index of the others
    end_index: int = -1
    end_term: int = -1
    x_term: int = -1  # COMPARE mismatch: the follower's term at pre_log_index
    x_index: int = -1  # and the first index of that term in its log
    ack_index: int = -1  # the follower's end that its flush mode lets it acknowledge


@dataclass(frozen=True, slots=True)
class FetchRequest:
    """A repair asks for a member's stored copy of one committed entry (raftlog's own call)."""

    group: str
    index: int


@dataclass(frozen=True, slots=True)
class TransferRequest:
    group: str
    leader_id: str
    term: int
    transferee_id: str


@dataclass(frozen=True, slots=True)
class TransferResponse:
    code: Code
    term: int = -1
