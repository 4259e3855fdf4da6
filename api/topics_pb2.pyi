from raftlog.api import log_pb2 as _log_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Topic(_message.Message):
    __slots__ = ("name", "id", "queues", "max_message_bytes", "readable", "writable", "perm", "description", "created_ms")
    NAME_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    QUEUES_FIELD_NUMBER: _ClassVar[int]
    MAX_MESSAGE_BYTES_FIELD_NUMBER: _ClassVar[int]
    READABLE_FIELD_NUMBER: _ClassVar[int]
    WRITABLE_FIELD_NUMBER: _ClassVar[int]
    PERM_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    CREATED_MS_FIELD_NUMBER: _ClassVar[int]
    name: str
    id: int
    queues: int
    max_message_bytes: int
    readable: bool
    writable: bool
    perm: str
    description: str
    created_ms: int
    def __init__(self, name: _Optional[str] = ..., id: _Optional[int] = ..., queues: _Optional[int] = ..., max_message_bytes: _Optional[int] = ..., readable: _Optional[bool] = ..., writable: _Optional[bool] = ..., perm: _Optional[str] = ..., description: _Optional[str] = ..., created_ms: _Optional[int] = ...) -> None: ...

class CreateTopicRequest(_message.Message):
    __slots__ = ("name", "queues", "max_message_bytes", "readable", "writable", "description")
    NAME_FIELD_NUMBER: _ClassVar[int]
    QUEUES_FIELD_NUMBER: _ClassVar[int]
    MAX_MESSAGE_BYTES_FIELD_NUMBER: _ClassVar[int]
    READABLE_FIELD_NUMBER: _ClassVar[int]
    WRITABLE_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    name: str
    queues: int
    max_message_bytes: int
    readable: bool
    writable: bool
    description: str
    def __init__(self, name: _Optional[str] = ..., queues: _Optional[int] = ..., max_message_bytes: _Optional[int] = ..., readable: _Optional[bool] = ..., writable: _Optional[bool] = ..., description: _Optional[str] = ...) -> None: ...

class ListTopicsRequest(_message.Message):
    __slots__ = ("consistency",)
    CONSISTENCY_FIELD_NUMBER: _ClassVar[int]
    consistency: _log_pb2.Consistency
    def __init__(self, consistency: _Optional[_Union[_log_pb2.Consistency, str]] = ...) -> None: ...

class TopicList(_message.Message):
    __slots__ = ("topics",)
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    topics: _containers.RepeatedCompositeFieldContainer[Topic]
    def __init__(self, topics: _Optional[_Iterable[_Union[Topic, _Mapping]]] = ...) -> None: ...

class GetTopicRequest(_message.Message):
    __slots__ = ("name", "consistency")
    NAME_FIELD_NUMBER: _ClassVar[int]
    CONSISTENCY_FIELD_NUMBER: _ClassVar[int]
    name: str
    consistency: _log_pb2.Consistency
    def __init__(self, name: _Optional[str] = ..., consistency: _Optional[_Union[_log_pb2.Consistency, str]] = ...) -> None: ...

class ChangeTopicRequest(_message.Message):
    __slots__ = ("name", "queues", "max_message_bytes", "readable", "writable", "description")
    NAME_FIELD_NUMBER: _ClassVar[int]
    QUEUES_FIELD_NUMBER: _ClassVar[int]
    MAX_MESSAGE_BYTES_FIELD_NUMBER: _ClassVar[int]
    READABLE_FIELD_NUMBER: _ClassVar[int]
    WRITABLE_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    name: str
    queues: int
    max_message_bytes: int
    readable: bool
    writable: bool
    description: str
    def __init__(self, name: _Optional[str] = ..., queues: _Optional[int] = ..., max_message_bytes: _Optional[int] = ..., readable: _Optional[bool] = ..., writable: _Optional[bool] = ..., description: _Optional[str] = ...) -> None: ...

class DeleteTopicRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class DeleteTopicResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class TopicMessage(_message.Message):
    __slots__ = ("body", "keys", "tags", "properties")
    class PropertiesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    BODY_FIELD_NUMBER: _ClassVar[int]
    KEYS_FIELD_NUMBER: _ClassVar[int]
    TAGS_FIELD_NUMBER: _ClassVar[int]
    PROPERTIES_FIELD_NUMBER: _ClassVar[int]
    body: bytes
    keys: _containers.RepeatedScalarFieldContainer[str]
    tags: _containers.RepeatedScalarFieldContainer[str]
    properties: _containers.ScalarMap[str, str]
    def __init__(self, body: _Optional[bytes] = ..., keys: _Optional[_Iterable[str]] = ..., tags: _Optional[_Iterable[str]] = ..., properties: _Optional[_Mapping[str, str]] = ...) -> None: ...

class AppendMessagesRequest(_message.Message):
    __slots__ = ("messages", "topic", "queue", "split", "producer")
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    SPLIT_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_FIELD_NUMBER: _ClassVar[int]
    messages: _containers.RepeatedCompositeFieldContainer[TopicMessage]
    topic: str
    queue: int
    split: bool
    producer: _log_pb2.Producer
    def __init__(self, messages: _Optional[_Iterable[_Union[TopicMessage, _Mapping]]] = ..., topic: _Optional[str] = ..., queue: _Optional[int] = ..., split: _Optional[bool] = ..., producer: _Optional[_Union[_log_pb2.Producer, _Mapping]] = ...) -> None: ...

class MessagePlace(_message.Message):
    __slots__ = ("topic", "topic_id", "queue", "queue_offset", "index", "pos", "duplicate")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    TOPIC_ID_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    QUEUE_OFFSET_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    POS_FIELD_NUMBER: _ClassVar[int]
    DUPLICATE_FIELD_NUMBER: _ClassVar[int]
    topic: str
    topic_id: int
    queue: int
    queue_offset: int
    index: int
    pos: int
    duplicate: bool
    def __init__(self, topic: _Optional[str] = ..., topic_id: _Optional[int] = ..., queue: _Optional[int] = ..., queue_offset: _Optional[int] = ..., index: _Optional[int] = ..., pos: _Optional[int] = ..., duplicate: _Optional[bool] = ...) -> None: ...

class MessageError(_message.Message):
    __slots__ = ("code", "message", "leader")
    CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    LEADER_FIELD_NUMBER: _ClassVar[int]
    code: str
    message: str
    leader: str
    def __init__(self, code: _Optional[str] = ..., message: _Optional[str] = ..., leader: _Optional[str] = ...) -> None: ...

class MessageResult(_message.Message):
    __slots__ = ("placed", "error")
    PLACED_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    placed: MessagePlace
    error: MessageError
    def __init__(self, placed: _Optional[_Union[MessagePlace, _Mapping]] = ..., error: _Optional[_Union[MessageError, _Mapping]] = ...) -> None: ...

class AppendMessagesResponse(_message.Message):
    __slots__ = ("messages",)
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    messages: _containers.RepeatedCompositeFieldContainer[MessageResult]
    def __init__(self, messages: _Optional[_Iterable[_Union[MessageResult, _Mapping]]] = ...) -> None: ...

class QueueOffset(_message.Message):
    __slots__ = ("queue", "offset", "expected")
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_FIELD_NUMBER: _ClassVar[int]
    queue: int
    offset: int
    expected: int
    def __init__(self, queue: _Optional[int] = ..., offset: _Optional[int] = ..., expected: _Optional[int] = ...) -> None: ...

class CommitGroupOffsetsRequest(_message.Message):
    __slots__ = ("group", "topic", "queues")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    QUEUES_FIELD_NUMBER: _ClassVar[int]
    group: str
    topic: str
    queues: _containers.RepeatedCompositeFieldContainer[QueueOffset]
    def __init__(self, group: _Optional[str] = ..., topic: _Optional[str] = ..., queues: _Optional[_Iterable[_Union[QueueOffset, _Mapping]]] = ...) -> None: ...

class GroupOffsetsCommitted(_message.Message):
    __slots__ = ("group", "index", "topic", "topic_id", "queues")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    TOPIC_ID_FIELD_NUMBER: _ClassVar[int]
    QUEUES_FIELD_NUMBER: _ClassVar[int]
    group: str
    index: int
    topic: str
    topic_id: int
    queues: _containers.RepeatedCompositeFieldContainer[QueueOffset]
    def __init__(self, group: _Optional[str] = ..., index: _Optional[int] = ..., topic: _Optional[str] = ..., topic_id: _Optional[int] = ..., queues: _Optional[_Iterable[_Union[QueueOffset, _Mapping]]] = ...) -> None: ...

class ListGroupsRequest(_message.Message):
    __slots__ = ("consistency",)
    CONSISTENCY_FIELD_NUMBER: _ClassVar[int]
    consistency: _log_pb2.Consistency
    def __init__(self, consistency: _Optional[_Union[_log_pb2.Consistency, str]] = ...) -> None: ...

class GroupList(_message.Message):
    __slots__ = ("groups",)
    GROUPS_FIELD_NUMBER: _ClassVar[int]
    groups: _containers.RepeatedCompositeFieldContainer[ConsumerGroup]
    def __init__(self, groups: _Optional[_Iterable[_Union[ConsumerGroup, _Mapping]]] = ...) -> None: ...

class GetGroupRequest(_message.Message):
    __slots__ = ("group", "consistency")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    CONSISTENCY_FIELD_NUMBER: _ClassVar[int]
    group: str
    consistency: _log_pb2.Consistency
    def __init__(self, group: _Optional[str] = ..., consistency: _Optional[_Union[_log_pb2.Consistency, str]] = ...) -> None: ...

class QueueLag(_message.Message):
    __slots__ = ("queue", "offset", "end", "lag")
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    END_FIELD_NUMBER: _ClassVar[int]
    LAG_FIELD_NUMBER: _ClassVar[int]
    queue: int
    offset: int
    end: int
    lag: int
    def __init__(self, queue: _Optional[int] = ..., offset: _Optional[int] = ..., end: _Optional[int] = ..., lag: _Optional[int] = ...) -> None: ...

class GroupTopic(_message.Message):
    __slots__ = ("topic", "topic_id", "lag", "queues")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    TOPIC_ID_FIELD_NUMBER: _ClassVar[int]
    LAG_FIELD_NUMBER: _ClassVar[int]
    QUEUES_FIELD_NUMBER: _ClassVar[int]
    topic: str
    topic_id: int
    lag: int
    queues: _containers.RepeatedCompositeFieldContainer[QueueLag]
    def __init__(self, topic: _Optional[str] = ..., topic_id: _Optional[int] = ..., lag: _Optional[int] = ..., queues: _Optional[_Iterable[_Union[QueueLag, _Mapping]]] = ...) -> None: ...

class ConsumerGroup(_message.Message):
    __slots__ = ("name", "owner", "index", "queue_count", "lag", "topics")
    NAME_FIELD_NUMBER: _ClassVar[int]
    OWNER_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    QUEUE_COUNT_FIELD_NUMBER: _ClassVar[int]
    LAG_FIELD_NUMBER: _ClassVar[int]
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    name: str
    owner: str
    index: int
    queue_count: int
    lag: int
    topics: _containers.RepeatedCompositeFieldContainer[GroupTopic]
    def __init__(self, name: _Optional[str] = ..., owner: _Optional[str] = ..., index: _Optional[int] = ..., queue_count: _Optional[int] = ..., lag: _Optional[int] = ..., topics: _Optional[_Iterable[_Union[GroupTopic, _Mapping]]] = ...) -> None: ...

class DeleteGroupRequest(_message.Message):
    __slots__ = ("group",)
    GROUP_FIELD_NUMBER: _ClassVar[int]
    group: str
    def __init__(self, group: _Optional[str] = ...) -> None: ...

class DeleteGroupResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetMessageRequest(_message.Message):
    __slots__ = ("topic", "queue", "offset", "consistency")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    CONSISTENCY_FIELD_NUMBER: _ClassVar[int]
    topic: str
    queue: int
    offset: int
    consistency: _log_pb2.Consistency
    def __init__(self, topic: _Optional[str] = ..., queue: _Optional[int] = ..., offset: _Optional[int] = ..., consistency: _Optional[_Union[_log_pb2.Consistency, str]] = ...) -> None: ...

class ReadQueueRequest(_message.Message):
    __slots__ = ("topic", "queue", "offset", "group", "limit", "tags", "follow", "consistency")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    GROUP_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    TAGS_FIELD_NUMBER: _ClassVar[int]
    FOLLOW_FIELD_NUMBER: _ClassVar[int]
    CONSISTENCY_FIELD_NUMBER: _ClassVar[int]
    topic: str
    queue: int
    offset: int
    group: str
    limit: int
    tags: _containers.RepeatedScalarFieldContainer[str]
    follow: bool
    consistency: _log_pb2.Consistency
    def __init__(self, topic: _Optional[str] = ..., queue: _Optional[int] = ..., offset: _Optional[int] = ..., group: _Optional[str] = ..., limit: _Optional[int] = ..., tags: _Optional[_Iterable[str]] = ..., follow: _Optional[bool] = ..., consistency: _Optional[_Union[_log_pb2.Consistency, str]] = ...) -> None: ...

class ListQueuesRequest(_message.Message):
    __slots__ = ("topic", "group", "consistency")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    GROUP_FIELD_NUMBER: _ClassVar[int]
    CONSISTENCY_FIELD_NUMBER: _ClassVar[int]
    topic: str
    group: str
    consistency: _log_pb2.Consistency
    def __init__(self, topic: _Optional[str] = ..., group: _Optional[str] = ..., consistency: _Optional[_Union[_log_pb2.Consistency, str]] = ...) -> None: ...

class TopicQueue(_message.Message):
    __slots__ = ("queue", "min_offset", "next_offset", "group_offset", "lag")
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    MIN_OFFSET_FIELD_NUMBER: _ClassVar[int]
    NEXT_OFFSET_FIELD_NUMBER: _ClassVar[int]
    GROUP_OFFSET_FIELD_NUMBER: _ClassVar[int]
    LAG_FIELD_NUMBER: _ClassVar[int]
    queue: int
    min_offset: int
    next_offset: int
    group_offset: int
    lag: int
    def __init__(self, queue: _Optional[int] = ..., min_offset: _Optional[int] = ..., next_offset: _Optional[int] = ..., group_offset: _Optional[int] = ..., lag: _Optional[int] = ...) -> None: ...

class QueueList(_message.Message):
    __slots__ = ("topic", "topic_id", "queues")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    TOPIC_ID_FIELD_NUMBER: _ClassVar[int]
    QUEUES_FIELD_NUMBER: _ClassVar[int]
    topic: str
    topic_id: int
    queues: _containers.RepeatedCompositeFieldContainer[TopicQueue]
    def __init__(self, topic: _Optional[str] = ..., topic_id: _Optional[int] = ..., queues: _Optional[_Iterable[_Union[TopicQueue, _Mapping]]] = ...) -> None: ...
