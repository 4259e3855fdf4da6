from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class PushType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    APPEND: _ClassVar[PushType]
    COMMIT: _ClassVar[PushType]
    COMPARE: _ClassVar[PushType]
    TRUNCATE: _ClassVar[PushType]
    INSTALL_SNAPSHOT: _ClassVar[PushType]
APPEND: PushType
COMMIT: PushType
COMPARE: PushType
TRUNCATE: PushType
INSTALL_SNAPSHOT: PushType

class PushRequest(_message.Message):
    __slots__ = ("group", "leader_id", "term", "type", "commit_index", "first_index", "count", "data", "pre_log_index", "pre_log_term", "chain_crc", "next_pos", "producers", "consumers", "cluster_version", "tables")
    class TablesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: bytes
        def __init__(self, key: _Optional[str] = ..., value: _Optional[bytes] = ...) -> None: ...
    GROUP_FIELD_NUMBER: _ClassVar[int]
    LEADER_ID_FIELD_NUMBER: _ClassVar[int]
    TERM_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    COMMIT_INDEX_FIELD_NUMBER: _ClassVar[int]
    FIRST_INDEX_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    PRE_LOG_INDEX_FIELD_NUMBER: _ClassVar[int]
    PRE_LOG_TERM_FIELD_NUMBER: _ClassVar[int]
    CHAIN_CRC_FIELD_NUMBER: _ClassVar[int]
    NEXT_POS_FIELD_NUMBER: _ClassVar[int]
    PRODUCERS_FIELD_NUMBER: _ClassVar[int]
    CONSUMERS_FIELD_NUMBER: _ClassVar[int]
    CLUSTER_VERSION_FIELD_NUMBER: _ClassVar[int]
    TABLES_FIELD_NUMBER: _ClassVar[int]
    group: str
    leader_id: str
    term: int
    type: PushType
    commit_index: int
    first_index: int
    count: int
    data: bytes
    pre_log_index: int
    pre_log_term: int
    chain_crc: int
    next_pos: int
    producers: bytes
    consumers: bytes
    cluster_version: bytes
    tables: _containers.ScalarMap[str, bytes]
    def __init__(self, group: _Optional[str] = ..., leader_id: _Optional[str] = ..., term: _Optional[int] = ..., type: _Optional[_Union[PushType, str]] = ..., commit_index: _Optional[int] = ..., first_index: _Optional[int] = ..., count: _Optional[int] = ..., data: _Optional[bytes] = ..., pre_log_index: _Optional[int] = ..., pre_log_term: _Optional[int] = ..., chain_crc: _Optional[int] = ..., next_pos: _Optional[int] = ..., producers: _Optional[bytes] = ..., consumers: _Optional[bytes] = ..., cluster_version: _Optional[bytes] = ..., tables: _Optional[_Mapping[str, bytes]] = ...) -> None: ...

class PushResponse(_message.Message):
    __slots__ = ("code", "term", "index", "end_index", "end_term", "x_term", "x_index", "ack_index")
    CODE_FIELD_NUMBER: _ClassVar[int]
    TERM_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    END_INDEX_FIELD_NUMBER: _ClassVar[int]
    END_TERM_FIELD_NUMBER: _ClassVar[int]
    X_TERM_FIELD_NUMBER: _ClassVar[int]
    X_INDEX_FIELD_NUMBER: _ClassVar[int]
    ACK_INDEX_FIELD_NUMBER: _ClassVar[int]
    code: int
    term: int
    index: int
    end_index: int
    end_term: int
    x_term: int
    x_index: int
    ack_index: int
    def __init__(self, code: _Optional[int] = ..., term: _Optional[int] = ..., index: _Optional[int] = ..., end_index: _Optional[int] = ..., end_term: _Optional[int] = ..., x_term: _Optional[int] = ..., x_index: _Optional[int] = ..., ack_index: _Optional[int] = ...) -> None: ...

class VoteRequest(_message.Message):
    __slots__ = ("group", "leader_id", "term", "ledger_end_term", "ledger_end_index", "taking_leadership")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    LEADER_ID_FIELD_NUMBER: _ClassVar[int]
    TERM_FIELD_NUMBER: _ClassVar[int]
    LEDGER_END_TERM_FIELD_NUMBER: _ClassVar[int]
    LEDGER_END_INDEX_FIELD_NUMBER: _ClassVar[int]
    TAKING_LEADERSHIP_FIELD_NUMBER: _ClassVar[int]
    group: str
    leader_id: str
    term: int
    ledger_end_term: int
    ledger_end_index: int
    taking_leadership: bool
    def __init__(self, group: _Optional[str] = ..., leader_id: _Optional[str] = ..., term: _Optional[int] = ..., ledger_end_term: _Optional[int] = ..., ledger_end_index: _Optional[int] = ..., taking_leadership: _Optional[bool] = ...) -> None: ...

class VoteResponse(_message.Message):
    __slots__ = ("term", "result")
    TERM_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    term: int
    result: str
    def __init__(self, term: _Optional[int] = ..., result: _Optional[str] = ...) -> None: ...

class HeartbeatRequest(_message.Message):
    __slots__ = ("group", "leader_id", "term", "commit_index")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    LEADER_ID_FIELD_NUMBER: _ClassVar[int]
    TERM_FIELD_NUMBER: _ClassVar[int]
    COMMIT_INDEX_FIELD_NUMBER: _ClassVar[int]
    group: str
    leader_id: str
    term: int
    commit_index: int
    def __init__(self, group: _Optional[str] = ..., leader_id: _Optional[str] = ..., term: _Optional[int] = ..., commit_index: _Optional[int] = ...) -> None: ...

class HeartbeatResponse(_message.Message):
    __slots__ = ("code", "term", "level")
    CODE_FIELD_NUMBER: _ClassVar[int]
    TERM_FIELD_NUMBER: _ClassVar[int]
    LEVEL_FIELD_NUMBER: _ClassVar[int]
    code: int
    term: int
    level: int
    def __init__(self, code: _Optional[int] = ..., term: _Optional[int] = ..., level: _Optional[int] = ...) -> None: ...

class TransferRequest(_message.Message):
    __slots__ = ("group", "leader_id", "term", "transferee_id")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    LEADER_ID_FIELD_NUMBER: _ClassVar[int]
    TERM_FIELD_NUMBER: _ClassVar[int]
    TRANSFEREE_ID_FIELD_NUMBER: _ClassVar[int]
    group: str
    leader_id: str
    term: int
    transferee_id: str
    def __init__(self, group: _Optional[str] = ..., leader_id: _Optional[str] = ..., term: _Optional[int] = ..., transferee_id: _Optional[str] = ...) -> None: ...

class TransferResponse(_message.Message):
    __slots__ = ("code", "term")
    CODE_FIELD_NUMBER: _ClassVar[int]
    TERM_FIELD_NUMBER: _ClassVar[int]
    code: int
    term: int
    def __init__(self, code: _Optional[int] = ..., term: _Optional[int] = ...) -> None: ...

class FetchRequest(_message.Message):
    __slots__ = ("group", "index")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    group: str
    index: int
    def __init__(self, group: _Optional[str] = ..., index: _Optional[int] = ...) -> None: ...

class RawEntry(_message.Message):
    __slots__ = ("data",)
    DATA_FIELD_NUMBER: _ClassVar[int]
    data: bytes
    def __init__(self, data: _Optional[bytes] = ...) -> None: ...

class ApiError(_message.Message):
    __slots__ = ("code", "message", "leader", "status")
    CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    LEADER_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    code: str
    message: str
    leader: str
    status: int
    def __init__(self, code: _Optional[str] = ..., message: _Optional[str] = ..., leader: _Optional[str] = ..., status: _Optional[int] = ...) -> None: ...

class AppendRequest(_message.Message):
    __slots__ = ("bodies", "producer_id", "producer_epoch", "sequence", "caller")
    BODIES_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_ID_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    CALLER_FIELD_NUMBER: _ClassVar[int]
    bodies: _containers.RepeatedScalarFieldContainer[bytes]
    producer_id: int
    producer_epoch: int
    sequence: int
    caller: str
    def __init__(self, bodies: _Optional[_Iterable[bytes]] = ..., producer_id: _Optional[int] = ..., producer_epoch: _Optional[int] = ..., sequence: _Optional[int] = ..., caller: _Optional[str] = ...) -> None: ...

class AppendResponse(_message.Message):
    __slots__ = ("error", "first_index", "last_index", "term", "positions", "leader", "duplicate")
    ERROR_FIELD_NUMBER: _ClassVar[int]
    FIRST_INDEX_FIELD_NUMBER: _ClassVar[int]
    LAST_INDEX_FIELD_NUMBER: _ClassVar[int]
    TERM_FIELD_NUMBER: _ClassVar[int]
    POSITIONS_FIELD_NUMBER: _ClassVar[int]
    LEADER_FIELD_NUMBER: _ClassVar[int]
    DUPLICATE_FIELD_NUMBER: _ClassVar[int]
    error: ApiError
    first_index: int
    last_index: int
    term: int
    positions: _containers.RepeatedScalarFieldContainer[int]
    leader: str
    duplicate: bool
    def __init__(self, error: _Optional[_Union[ApiError, _Mapping]] = ..., first_index: _Optional[int] = ..., last_index: _Optional[int] = ..., term: _Optional[int] = ..., positions: _Optional[_Iterable[int]] = ..., leader: _Optional[str] = ..., duplicate: _Optional[bool] = ...) -> None: ...

class ReadIndexRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ReadIndexResponse(_message.Message):
    __slots__ = ("error", "committed_index")
    ERROR_FIELD_NUMBER: _ClassVar[int]
    COMMITTED_INDEX_FIELD_NUMBER: _ClassVar[int]
    error: ApiError
    committed_index: int
    def __init__(self, error: _Optional[_Union[ApiError, _Mapping]] = ..., committed_index: _Optional[int] = ...) -> None: ...

class TransferLeadershipRequest(_message.Message):
    __slots__ = ("target",)
    TARGET_FIELD_NUMBER: _ClassVar[int]
    target: str
    def __init__(self, target: _Optional[str] = ...) -> None: ...

class StatusRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class MembershipChange(_message.Message):
    __slots__ = ("action", "id", "peer_address", "client_url", "grpc_address", "learner")
    ACTION_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    PEER_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    CLIENT_URL_FIELD_NUMBER: _ClassVar[int]
    GRPC_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    LEARNER_FIELD_NUMBER: _ClassVar[int]
    action: str
    id: str
    peer_address: str
    client_url: str
    grpc_address: str
    learner: bool
    def __init__(self, action: _Optional[str] = ..., id: _Optional[str] = ..., peer_address: _Optional[str] = ..., client_url: _Optional[str] = ..., grpc_address: _Optional[str] = ..., learner: _Optional[bool] = ...) -> None: ...

class ConsumerCommit(_message.Message):
    __slots__ = ("name", "position", "metadata", "expected", "caller", "retention_floor")
    NAME_FIELD_NUMBER: _ClassVar[int]
    POSITION_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_FIELD_NUMBER: _ClassVar[int]
    CALLER_FIELD_NUMBER: _ClassVar[int]
    RETENTION_FLOOR_FIELD_NUMBER: _ClassVar[int]
    name: str
    position: int
    metadata: str
    expected: int
    caller: str
    retention_floor: bool
    def __init__(self, name: _Optional[str] = ..., position: _Optional[int] = ..., metadata: _Optional[str] = ..., expected: _Optional[int] = ..., caller: _Optional[str] = ..., retention_floor: _Optional[bool] = ...) -> None: ...

class SessionChange(_message.Message):
    __slots__ = ("producer_id", "caller", "close")
    PRODUCER_ID_FIELD_NUMBER: _ClassVar[int]
    CALLER_FIELD_NUMBER: _ClassVar[int]
    CLOSE_FIELD_NUMBER: _ClassVar[int]
    producer_id: int
    caller: str
    close: bool
    def __init__(self, producer_id: _Optional[int] = ..., caller: _Optional[str] = ..., close: _Optional[bool] = ...) -> None: ...

class TopicChange(_message.Message):
    __slots__ = ("op", "name", "queues", "max_message_bytes", "readable", "writable", "description", "caller")
    OP_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    QUEUES_FIELD_NUMBER: _ClassVar[int]
    MAX_MESSAGE_BYTES_FIELD_NUMBER: _ClassVar[int]
    READABLE_FIELD_NUMBER: _ClassVar[int]
    WRITABLE_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    CALLER_FIELD_NUMBER: _ClassVar[int]
    op: str
    name: str
    queues: int
    max_message_bytes: int
    readable: bool
    writable: bool
    description: str
    caller: str
    def __init__(self, op: _Optional[str] = ..., name: _Optional[str] = ..., queues: _Optional[int] = ..., max_message_bytes: _Optional[int] = ..., readable: _Optional[bool] = ..., writable: _Optional[bool] = ..., description: _Optional[str] = ..., caller: _Optional[str] = ...) -> None: ...

class MessagesRequest(_message.Message):
    __slots__ = ("messages", "topic", "queue", "caller", "producer_id", "producer_epoch", "sequence")
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    CALLER_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_ID_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    messages: _containers.RepeatedScalarFieldContainer[bytes]
    topic: str
    queue: int
    caller: str
    producer_id: int
    producer_epoch: int
    sequence: int
    def __init__(self, messages: _Optional[_Iterable[bytes]] = ..., topic: _Optional[str] = ..., queue: _Optional[int] = ..., caller: _Optional[str] = ..., producer_id: _Optional[int] = ..., producer_epoch: _Optional[int] = ..., sequence: _Optional[int] = ...) -> None: ...

class MessagesResponse(_message.Message):
    __slots__ = ("error", "topic", "topic_id", "queue", "first_offset", "first_index", "term", "positions", "leader", "duplicate")
    ERROR_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    TOPIC_ID_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    FIRST_OFFSET_FIELD_NUMBER: _ClassVar[int]
    FIRST_INDEX_FIELD_NUMBER: _ClassVar[int]
    TERM_FIELD_NUMBER: _ClassVar[int]
    POSITIONS_FIELD_NUMBER: _ClassVar[int]
    LEADER_FIELD_NUMBER: _ClassVar[int]
    DUPLICATE_FIELD_NUMBER: _ClassVar[int]
    error: ApiError
    topic: str
    topic_id: int
    queue: int
    first_offset: int
    first_index: int
    term: int
    positions: _containers.RepeatedScalarFieldContainer[int]
    leader: str
    duplicate: bool
    def __init__(self, error: _Optional[_Union[ApiError, _Mapping]] = ..., topic: _Optional[str] = ..., topic_id: _Optional[int] = ..., queue: _Optional[int] = ..., first_offset: _Optional[int] = ..., first_index: _Optional[int] = ..., term: _Optional[int] = ..., positions: _Optional[_Iterable[int]] = ..., leader: _Optional[str] = ..., duplicate: _Optional[bool] = ...) -> None: ...

class GroupCommit(_message.Message):
    __slots__ = ("group", "caller", "queues", "remove")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    CALLER_FIELD_NUMBER: _ClassVar[int]
    QUEUES_FIELD_NUMBER: _ClassVar[int]
    REMOVE_FIELD_NUMBER: _ClassVar[int]
    group: str
    caller: str
    queues: _containers.RepeatedCompositeFieldContainer[QueueCommit]
    remove: bool
    def __init__(self, group: _Optional[str] = ..., caller: _Optional[str] = ..., queues: _Optional[_Iterable[_Union[QueueCommit, _Mapping]]] = ..., remove: _Optional[bool] = ...) -> None: ...

class QueueCommit(_message.Message):
    __slots__ = ("topic_id", "queue", "offset", "expected")
    TOPIC_ID_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_FIELD_NUMBER: _ClassVar[int]
    topic_id: int
    queue: int
    offset: int
    expected: int
    def __init__(self, topic_id: _Optional[int] = ..., queue: _Optional[int] = ..., offset: _Optional[int] = ..., expected: _Optional[int] = ...) -> None: ...

class JsonAnswer(_message.Message):
    __slots__ = ("error", "json")
    ERROR_FIELD_NUMBER: _ClassVar[int]
    JSON_FIELD_NUMBER: _ClassVar[int]
    error: ApiError
    json: str
    def __init__(self, error: _Optional[_Union[ApiError, _Mapping]] = ..., json: _Optional[str] = ...) -> None: ...
