"""Consensus errors a client append or read can meet; each carries its DLedger code.

    RaftError
    ├── NotLeaderError          NOT_LEADER (leader_id says where to go, if known)
    ├── LeaderTransferringError LEADER_TRANSFERRING
    ├── PendingFullError        LEADER_PENDING_FULL
    ├── AckTimeoutError         WAIT_QUORUM_ACK_TIMEOUT (the entry may still commit)
    ├── TermChangedError        TERM_CHANGED (leadership was lost while waiting)
    ├── OutOfOrderSequenceError OUT_OF_ORDER_SEQUENCE (expected_seq says what comes next)
    ├── ProducerFencedError     PRODUCER_FENCED (a newer epoch of the producer appended)
    ├── ConsumerConflictError   CONSUMER_CONFLICT (found says where the consumer is)
    ├── ConsumerNotFoundError   CONSUMER_NOT_FOUND
    ├── ConsumersFullError      CONSUMERS_FULL (consumers_max, or the owner's consumers_per_name_max)
    ├── ConsumerPositionError   CONSUMER_POSITION_PAST_END (a position past the leader's log end)
    ├── UnknownProducerError    UNKNOWN_PRODUCER (no open session of this id and epoch)
    ├── NotProducerOwnerError   NOT_PRODUCER_OWNER (the session is another caller's)
    ├── ProducersFullError      PRODUCERS_FULL (producers_max, or the caller's producer_sessions_per_name_max)
    ├── ClusterVersionError     CLUSTER_VERSION_TOO_LOW (behind names the members holding it back)
    └── TopicError              TOPIC_EXISTS, TOPIC_NOT_FOUND, INVALID_TOPIC, TOPICS_FULL, TOPIC_NOT_WRITABLE,
                                TOPIC_NOT_READABLE, KEYS_IN_SEVERAL_QUEUES, MESSAGE_TOO_LARGE (raft.topics)
"""

from __future__ import annotations

from raftlog.raft.messages import Code


class RaftError(Exception):
    code = Code.INTERNAL_ERROR

    def __init__(self, message: str, leader_id: str | None = None) -> None:
        super().__init__(message)
        self.leader_id = leader_id


class NotLeaderError(RaftError):
    code = Code.NOT_LEADER


class LeaderTransferringError(RaftError):
    code = Code.LEADER_TRANSFERRING


class PendingFullError(RaftError):
    code = Code.LEADER_PENDING_FULL


class AckTimeoutError(RaftError):
    code = Code.WAIT_QUORUM_ACK_TIMEOUT


class TermChangedError(RaftError):
    code = Code.TERM_CHANGED


class OutOfOrderSequenceError(RaftError):
    code = Code.OUT_OF_ORDER_SEQUENCE

    def __init__(self, message: str, leader_id: str | None, expected_seq: int) -> None:
        super().__init__(message, leader_id)
        self.expected_seq = expected_seq


class ProducerFencedError(RaftError):
    code = Code.PRODUCER_FENCED


class ConsumerConflictError(RaftError):
    code = Code.CONSUMER_CONFLICT

    def __init__(self, message: str, leader_id: str | None, found: int) -> None:
        super().__init__(message, leader_id)
        self.found = found  # the consumer's position (-1: none)


class ConsumerNotFoundError(RaftError):
    code = Code.CONSUMER_NOT_FOUND


class ConsumersFullError(RaftError):
    code = Code.CONSUMERS_FULL


class ConsumerPositionError(RaftError):
    code = Code.CONSUMER_POSITION_PAST_END


class UnknownProducerError(RaftError):
    code = Code.UNKNOWN_PRODUCER


class NotProducerOwnerError(RaftError):
    code = Code.NOT_PRODUCER_OWNER


class ProducersFullError(RaftError):
    code = Code.PRODUCERS_FULL


class ClusterVersionError(RaftError):
    code = Code.CLUSTER_VERSION_TOO_LOW

    def __init__(self, message: str, leader_id: str | None, behind: list[str]) -> None:
        super().__init__(message, leader_id)
        self.behind = behind


class TopicError(RaftError):
    """A request the topic catalog refuses; `code` says why."""

    def __init__(self, code: Code, message: str, leader_id: str | None = None) -> None:
        super().__init__(message, leader_id)
        self.code = code
