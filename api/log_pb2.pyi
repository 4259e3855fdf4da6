from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Consistency(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    LINEARIZABLE: _ClassVar[Consistency]
    LOCAL: _ClassVar[Consistency]

class EntryType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    NORMAL: _ClassVar[EntryType]
    NOOP: _ClassVar[EntryType]
    CONFIG_CHANGE: _ClassVar[EntryType]
    CONSUMER: _ClassVar[EntryType]
    PRODUCER_SESSION: _ClassVar[EntryType]
    CLUSTER_VERSION: _ClassVar[EntryType]
    MESSAGE: _ClassVar[EntryType]
    TOPIC: _ClassVar[EntryType]
    QUEUE_COMMIT: _ClassVar[EntryType]
LINEARIZABLE: Consistency
LOCAL: Consistency
NORMAL: EntryType
NOOP: EntryType
CONFIG_CHANGE: EntryType
CONSUMER: EntryType
PRODUCER_SESSION: EntryType
CLUSTER_VERSION: EntryType
MESSAGE: EntryType
TOPIC: EntryType
QUEUE_COMMIT: EntryType

class Producer(_message.Message):
    __slots__ = ("id", "epoch", "sequence")
    ID_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    id: int
    epoch: int
    sequence: int
    def __init__(self, id: _Optional[int] = ..., epoch: _Optional[int] = ..., sequence: _Optional[int] = ...) -> None: ...

class CommitConsumerRequest(_message.Message):
    __slots__ = ("name", "position", "metadata", "expected", "retention_floor")
    NAME_FIELD_NUMBER: _ClassVar[int]
    POSITION_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_FIELD_NUMBER: _ClassVar[int]
    RETENTION_FLOOR_FIELD_NUMBER: _ClassVar[int]
    name: str
    position: int
    metadata: str
    expected: int
    retention_floor: bool
    def __init__(self, name: _Optional[str] = ..., position: _Optional[int] = ..., metadata: _Optional[str] = ..., expected: _Optional[int] = ..., retention_floor: _Optional[bool] = ...) -> None: ...

class ConsumerRequest(_message.Message):
    __slots__ = ("name", "consistency")
    NAME_FIELD_NUMBER: _ClassVar[int]
    CONSISTENCY_FIELD_NUMBER: _ClassVar[int]
    name: str
    consistency: Consistency
    def __init__(self, name: _Optional[str] = ..., consistency: _Optional[_Union[Consistency, str]] = ...) -> None: ...

class DeleteConsumerRequest(_message.Message):
    __slots__ = ("name", "expected")
    NAME_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_FIELD_NUMBER: _ClassVar[int]
    name: str
    expected: int
    def __init__(self, name: _Optional[str] = ..., expected: _Optional[int] = ...) -> None: ...

class ListConsumersRequest(_message.Message):
    __slots__ = ("consistency",)
    CONSISTENCY_FIELD_NUMBER: _ClassVar[int]
    consistency: Consistency
    def __init__(self, consistency: _Optional[_Union[Consistency, str]] = ...) -> None: ...

class Consumer(_message.Message):
    __slots__ = ("name", "position", "metadata", "index", "lag", "lag_bytes", "owner", "retention_floor")
    NAME_FIELD_NUMBER: _ClassVar[int]
    POSITION_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    LAG_FIELD_NUMBER: _ClassVar[int]
    LAG_BYTES_FIELD_NUMBER: _ClassVar[int]
    OWNER_FIELD_NUMBER: _ClassVar[int]
    RETENTION_FLOOR_FIELD_NUMBER: _ClassVar[int]
    name: str
    position: int
    metadata: str
    index: int
    lag: int
    lag_bytes: int
    owner: str
    retention_floor: bool
    def __init__(self, name: _Optional[str] = ..., position: _Optional[int] = ..., metadata: _Optional[str] = ..., index: _Optional[int] = ..., lag: _Optional[int] = ..., lag_bytes: _Optional[int] = ..., owner: _Optional[str] = ..., retention_floor: _Optional[bool] = ...) -> None: ...

class ConsumerList(_message.Message):
    __slots__ = ("consumers",)
    CONSUMERS_FIELD_NUMBER: _ClassVar[int]
    consumers: _containers.RepeatedCompositeFieldContainer[Consumer]
    def __init__(self, consumers: _Optional[_Iterable[_Union[Consumer, _Mapping]]] = ...) -> None: ...

class NewProducerRequest(_message.Message):
    __slots__ = ("id",)
    ID_FIELD_NUMBER: _ClassVar[int]
    id: int
    def __init__(self, id: _Optional[int] = ...) -> None: ...

class CloseProducerRequest(_message.Message):
    __slots__ = ("id",)
    ID_FIELD_NUMBER: _ClassVar[int]
    id: int
    def __init__(self, id: _Optional[int] = ...) -> None: ...

class AppendRequest(_message.Message):
    __slots__ = ("body", "producer")
    BODY_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_FIELD_NUMBER: _ClassVar[int]
    body: bytes
    producer: Producer
    def __init__(self, body: _Optional[bytes] = ..., producer: _Optional[_Union[Producer, _Mapping]] = ...) -> None: ...

class AppendResponse(_message.Message):
    __slots__ = ("index", "term", "pos", "leader", "duplicate")
    INDEX_FIELD_NUMBER: _ClassVar[int]
    TERM_FIELD_NUMBER: _ClassVar[int]
    POS_FIELD_NUMBER: _ClassVar[int]
    LEADER_FIELD_NUMBER: _ClassVar[int]
    DUPLICATE_FIELD_NUMBER: _ClassVar[int]
    index: int
    term: int
    pos: int
    leader: str
    duplicate: bool
    def __init__(self, index: _Optional[int] = ..., term: _Optional[int] = ..., pos: _Optional[int] = ..., leader: _Optional[str] = ..., duplicate: _Optional[bool] = ...) -> None: ...

class AppendBatchRequest(_message.Message):
    __slots__ = ("bodies", "producer")
    BODIES_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_FIELD_NUMBER: _ClassVar[int]
    bodies: _containers.RepeatedScalarFieldContainer[bytes]
    producer: Producer
    def __init__(self, bodies: _Optional[_Iterable[bytes]] = ..., producer: _Optional[_Union[Producer, _Mapping]] = ...) -> None: ...

class AppendBatchResponse(_message.Message):
    __slots__ = ("first_index", "last_index", "term", "positions", "leader", "duplicate")
    FIRST_INDEX_FIELD_NUMBER: _ClassVar[int]
    LAST_INDEX_FIELD_NUMBER: _ClassVar[int]
    TERM_FIELD_NUMBER: _ClassVar[int]
    POSITIONS_FIELD_NUMBER: _ClassVar[int]
    LEADER_FIELD_NUMBER: _ClassVar[int]
    DUPLICATE_FIELD_NUMBER: _ClassVar[int]
    first_index: int
    last_index: int
    term: int
    positions: _containers.RepeatedScalarFieldContainer[int]
    leader: str
    duplicate: bool
    def __init__(self, first_index: _Optional[int] = ..., last_index: _Optional[int] = ..., term: _Optional[int] = ..., positions: _Optional[_Iterable[int]] = ..., leader: _Optional[str] = ..., duplicate: _Optional[bool] = ...) -> None: ...

class GetRequest(_message.Message):
    __slots__ = ("index", "pos", "consistency")
    INDEX_FIELD_NUMBER: _ClassVar[int]
    POS_FIELD_NUMBER: _ClassVar[int]
    CONSISTENCY_FIELD_NUMBER: _ClassVar[int]
    index: int
    pos: int
    consistency: Consistency
    def __init__(self, index: _Optional[int] = ..., pos: _Optional[int] = ..., consistency: _Optional[_Union[Consistency, str]] = ...) -> None: ...

class Entry(_message.Message):
    __slots__ = ("index", "term", "pos", "type", "body", "body_crc", "producer", "topic_id", "topic", "queue", "queue_offset", "keys", "tags", "properties")
    class PropertiesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    INDEX_FIELD_NUMBER: _ClassVar[int]
    TERM_FIELD_NUMBER: _ClassVar[int]
    POS_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    BODY_FIELD_NUMBER: _ClassVar[int]
    BODY_CRC_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_FIELD_NUMBER: _ClassVar[int]
    TOPIC_ID_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    QUEUE_OFFSET_FIELD_NUMBER: _ClassVar[int]
    KEYS_FIELD_NUMBER: _ClassVar[int]
    TAGS_FIELD_NUMBER: _ClassVar[int]
    PROPERTIES_FIELD_NUMBER: _ClassVar[int]
    index: int
    term: int
    pos: int
    type: EntryType
    body: bytes
    body_crc: int
    producer: Producer
    topic_id: int
    topic: str
    queue: int
    queue_offset: int
    keys: _containers.RepeatedScalarFieldContainer[str]
    tags: _containers.RepeatedScalarFieldContainer[str]
    properties: _containers.ScalarMap[str, str]
    def __init__(self, index: _Optional[int] = ..., term: _Optional[int] = ..., pos: _Optional[int] = ..., type: _Optional[_Union[EntryType, str]] = ..., body: _Optional[bytes] = ..., body_crc: _Optional[int] = ..., producer: _Optional[_Union[Producer, _Mapping]] = ..., topic_id: _Optional[int] = ..., topic: _Optional[str] = ..., queue: _Optional[int] = ..., queue_offset: _Optional[int] = ..., keys: _Optional[_Iterable[str]] = ..., tags: _Optional[_Iterable[str]] = ..., properties: _Optional[_Mapping[str, str]] = ...) -> None: ...

class ReadRequest(_message.Message):
    __slots__ = ("start", "pos", "limit", "follow", "consistency", "consumer", "include_control")
    START_FIELD_NUMBER: _ClassVar[int]
    POS_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    FOLLOW_FIELD_NUMBER: _ClassVar[int]
    CONSISTENCY_FIELD_NUMBER: _ClassVar[int]
    CONSUMER_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_CONTROL_FIELD_NUMBER: _ClassVar[int]
    start: int
    pos: int
    limit: int
    follow: bool
    consistency: Consistency
    consumer: str
    include_control: bool
    def __init__(self, start: _Optional[int] = ..., pos: _Optional[int] = ..., limit: _Optional[int] = ..., follow: _Optional[bool] = ..., consistency: _Optional[_Union[Consistency, str]] = ..., consumer: _Optional[str] = ..., include_control: _Optional[bool] = ...) -> None: ...

class ClusterRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class Member(_message.Message):
    __slots__ = ("id", "peer_url", "client_url", "grpc_address", "voter", "role", "term", "end_index", "committed_index", "applied_index", "match_index", "lag", "lag_bytes", "inflight_bytes", "last_contact_ms", "rejoining", "reachable", "level")
    ID_FIELD_NUMBER: _ClassVar[int]
    PEER_URL_FIELD_NUMBER: _ClassVar[int]
    CLIENT_URL_FIELD_NUMBER: _ClassVar[int]
    GRPC_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    VOTER_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    TERM_FIELD_NUMBER: _ClassVar[int]
    END_INDEX_FIELD_NUMBER: _ClassVar[int]
    COMMITTED_INDEX_FIELD_NUMBER: _ClassVar[int]
    APPLIED_INDEX_FIELD_NUMBER: _ClassVar[int]
    MATCH_INDEX_FIELD_NUMBER: _ClassVar[int]
    LAG_FIELD_NUMBER: _ClassVar[int]
    LAG_BYTES_FIELD_NUMBER: _ClassVar[int]
    INFLIGHT_BYTES_FIELD_NUMBER: _ClassVar[int]
    LAST_CONTACT_MS_FIELD_NUMBER: _ClassVar[int]
    REJOINING_FIELD_NUMBER: _ClassVar[int]
    REACHABLE_FIELD_NUMBER: _ClassVar[int]
    LEVEL_FIELD_NUMBER: _ClassVar[int]
    id: str
    peer_url: str
    client_url: str
    grpc_address: str
    voter: bool
    role: str
    term: int
    end_index: int
    committed_index: int
    applied_index: int
    match_index: int
    lag: int
    lag_bytes: int
    inflight_bytes: int
    last_contact_ms: int
    rejoining: bool
    reachable: bool
    level: int
    def __init__(self, id: _Optional[str] = ..., peer_url: _Optional[str] = ..., client_url: _Optional[str] = ..., grpc_address: _Optional[str] = ..., voter: _Optional[bool] = ..., role: _Optional[str] = ..., term: _Optional[int] = ..., end_index: _Optional[int] = ..., committed_index: _Optional[int] = ..., applied_index: _Optional[int] = ..., match_index: _Optional[int] = ..., lag: _Optional[int] = ..., lag_bytes: _Optional[int] = ..., inflight_bytes: _Optional[int] = ..., last_contact_ms: _Optional[int] = ..., rejoining: _Optional[bool] = ..., reachable: _Optional[bool] = ..., level: _Optional[int] = ...) -> None: ...

class Disk(_message.Message):
    __slots__ = ("data_dir", "usage_ratio", "full")
    DATA_DIR_FIELD_NUMBER: _ClassVar[int]
    USAGE_RATIO_FIELD_NUMBER: _ClassVar[int]
    FULL_FIELD_NUMBER: _ClassVar[int]
    data_dir: str
    usage_ratio: float
    full: bool
    def __init__(self, data_dir: _Optional[str] = ..., usage_ratio: _Optional[float] = ..., full: _Optional[bool] = ...) -> None: ...

class ClusterResponse(_message.Message):
    __slots__ = ("group", "self", "role", "term", "leader", "members", "begin_index", "end_index", "committed_index", "applied_index", "uptime_s", "flush_mode", "disk", "configuration_index", "cluster_version")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    SELF_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    TERM_FIELD_NUMBER: _ClassVar[int]
    LEADER_FIELD_NUMBER: _ClassVar[int]
    MEMBERS_FIELD_NUMBER: _ClassVar[int]
    BEGIN_INDEX_FIELD_NUMBER: _ClassVar[int]
    END_INDEX_FIELD_NUMBER: _ClassVar[int]
    COMMITTED_INDEX_FIELD_NUMBER: _ClassVar[int]
    APPLIED_INDEX_FIELD_NUMBER: _ClassVar[int]
    UPTIME_S_FIELD_NUMBER: _ClassVar[int]
    FLUSH_MODE_FIELD_NUMBER: _ClassVar[int]
    DISK_FIELD_NUMBER: _ClassVar[int]
    CONFIGURATION_INDEX_FIELD_NUMBER: _ClassVar[int]
    CLUSTER_VERSION_FIELD_NUMBER: _ClassVar[int]
    group: str
    self: str
    role: str
    term: int
    leader: str
    members: _containers.RepeatedCompositeFieldContainer[Member]
    begin_index: int
    end_index: int
    committed_index: int
    applied_index: int
    uptime_s: float
    flush_mode: str
    disk: Disk
    configuration_index: int
    cluster_version: int
    def __init__(self_, group: _Optional[str] = ..., self: _Optional[str] = ..., role: _Optional[str] = ..., term: _Optional[int] = ..., leader: _Optional[str] = ..., members: _Optional[_Iterable[_Union[Member, _Mapping]]] = ..., begin_index: _Optional[int] = ..., end_index: _Optional[int] = ..., committed_index: _Optional[int] = ..., applied_index: _Optional[int] = ..., uptime_s: _Optional[float] = ..., flush_mode: _Optional[str] = ..., disk: _Optional[_Union[Disk, _Mapping]] = ..., configuration_index: _Optional[int] = ..., cluster_version: _Optional[int] = ...) -> None: ...

class TransferLeaderRequest(_message.Message):
    __slots__ = ("target",)
    TARGET_FIELD_NUMBER: _ClassVar[int]
    target: str
    def __init__(self, target: _Optional[str] = ...) -> None: ...

class TransferLeaderResponse(_message.Message):
    __slots__ = ("leader", "previous")
    LEADER_FIELD_NUMBER: _ClassVar[int]
    PREVIOUS_FIELD_NUMBER: _ClassVar[int]
    leader: str
    previous: str
    def __init__(self, leader: _Optional[str] = ..., previous: _Optional[str] = ...) -> None: ...

class MembersRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class AddMemberRequest(_message.Message):
    __slots__ = ("id", "peer_address", "client_url", "grpc_address", "voter")
    ID_FIELD_NUMBER: _ClassVar[int]
    PEER_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    CLIENT_URL_FIELD_NUMBER: _ClassVar[int]
    GRPC_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    VOTER_FIELD_NUMBER: _ClassVar[int]
    id: str
    peer_address: str
    client_url: str
    grpc_address: str
    voter: bool
    def __init__(self, id: _Optional[str] = ..., peer_address: _Optional[str] = ..., client_url: _Optional[str] = ..., grpc_address: _Optional[str] = ..., voter: _Optional[bool] = ...) -> None: ...

class MemberRequest(_message.Message):
    __slots__ = ("id",)
    ID_FIELD_NUMBER: _ClassVar[int]
    id: str
    def __init__(self, id: _Optional[str] = ...) -> None: ...

class ConfiguredMember(_message.Message):
    __slots__ = ("id", "peer_address", "voter", "client_url", "grpc_address")
    ID_FIELD_NUMBER: _ClassVar[int]
    PEER_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    VOTER_FIELD_NUMBER: _ClassVar[int]
    CLIENT_URL_FIELD_NUMBER: _ClassVar[int]
    GRPC_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    id: str
    peer_address: str
    voter: bool
    client_url: str
    grpc_address: str
    def __init__(self, id: _Optional[str] = ..., peer_address: _Optional[str] = ..., voter: _Optional[bool] = ..., client_url: _Optional[str] = ..., grpc_address: _Optional[str] = ...) -> None: ...

class Configuration(_message.Message):
    __slots__ = ("index", "version", "members", "committed")
    INDEX_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    MEMBERS_FIELD_NUMBER: _ClassVar[int]
    COMMITTED_FIELD_NUMBER: _ClassVar[int]
    index: int
    version: int
    members: _containers.RepeatedCompositeFieldContainer[ConfiguredMember]
    committed: bool
    def __init__(self, index: _Optional[int] = ..., version: _Optional[int] = ..., members: _Optional[_Iterable[_Union[ConfiguredMember, _Mapping]]] = ..., committed: _Optional[bool] = ...) -> None: ...
