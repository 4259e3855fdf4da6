"""The public gRPC service `raftlog.v1.Topics` (proto/raftlog/v1/topics.proto), the topic routes',
the queue reads' and the consumer groups' routes' twin on the grpc_port beside raftlog.v1.Log.

Each method does what its REST route does (api.topic_routes, api.queue_routes, api.group_routes),
through the same TopicService, QueueReads and ConsumerGroups, with
the same roles and bounds (api.grpc_api.CallGuard checks this service's calls as it does Log's:
`port_service` says how) and the same errors: the DLedger code's name is the `reason` of a
google.rpc.ErrorInfo in the status details.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import grpc
import grpc.aio

from raftlog.api import log_pb2, topics_pb2_grpc
from raftlog.api import topics_pb2 as pb
from raftlog.api.answers import GroupAnswer, GroupCommitted, MessageAnswer
from raftlog.api.auth import LOCAL, Caller, Role, Tokens, bearer_credentials
from raftlog.api.errors import ApiError, api_error
from raftlog.api.groups import ConsumerGroups, QueueCommit
from raftlog.api.grpc_api import PortService, entry_of, error_status, write_stream
from raftlog.api.queue_reads import QueueRead, QueueReads
from raftlog.api.topics import MessageResult, TopicService
from raftlog.raft.producers import Sequenced
from raftlog.raft.topics import Topic
from raftlog.storage.message import Meta

SERVICE = "raftlog.v1.Topics"
ROLES = {"CreateTopic": Role.ADMIN, "ChangeTopic": Role.ADMIN, "DeleteTopic": Role.ADMIN, "ListTopics": Role.READER,
         "GetTopic": Role.READER, "Append": Role.WRITER,
         "CommitGroupOffsets": Role.CONSUMER, "DeleteGroup": Role.CONSUMER,  # a consumer token: the groups its name
         "ListGroups": Role.READER, "GetGroup": Role.READER,  # covers (api.auth)
         "Get": Role.READER, "Read": Role.READER, "ListQueues": Role.READER}
BATCHES = frozenset({"Append"})  # its messages (field 1) are counted before the request is decoded
OPTIONAL = ("max_message_bytes", "readable", "writable")  # a new topic's fields that have defaults


def port_service(topics: TopicService, groups: ConsumerGroups, reads: QueueReads, tokens: Tokens | None
                 ) -> PortService:
    """The service, as the gRPC port serves and guards it."""
    servicer = TopicsServicer(topics, groups, reads, tokens)
    return PortService(SERVICE, ROLES, BATCHES, lambda server: topics_pb2_grpc.add_TopicsServicer_to_server(
        servicer, server))


class TopicsServicer(topics_pb2_grpc.TopicsServicer):
    """The methods, for calls that CallGuard let through (tokens and bounds are its concern)."""

    def __init__(self, topics: TopicService, groups: ConsumerGroups, reads: QueueReads, tokens: Tokens | None
                 ) -> None:
        self.topics = topics
        self.groups = groups
        self.reads = reads
        self.tokens = tokens  # whose the call is: an admin changes the catalog, a producer's owner appends

    async def CreateTopic(self, request: pb.CreateTopicRequest, context: grpc.aio.ServicerContext) -> pb.Topic:
        fields = {"queues": request.queues, "description": request.description,
                  **{name: getattr(request, name) for name in OPTIONAL if request.HasField(name)}}
        return _topic(await self._answer(context, self.topics.changed("create", request.name, fields,
                                                                       caller=self._caller(context))))

    async def ListTopics(self, request: pb.ListTopicsRequest, context: grpc.aio.ServicerContext) -> pb.TopicList:
        listed = await self._answer(context, self.topics.list_all(request.consistency == log_pb2.LINEARIZABLE))
        return pb.TopicList(topics=[_topic(topic) for topic in listed])

    async def GetTopic(self, request: pb.GetTopicRequest, context: grpc.aio.ServicerContext) -> pb.Topic:
        linearizable = request.consistency == log_pb2.LINEARIZABLE
        return _topic(await self._answer(context, self.topics.get(request.name, linearizable)))

    async def ChangeTopic(self, request: pb.ChangeTopicRequest, context: grpc.aio.ServicerContext) -> pb.Topic:
        fields = {name: getattr(request, name) for name in ("queues", "description", *OPTIONAL)
                  if request.HasField(name)}
        return _topic(await self._answer(context, self.topics.changed("change", request.name, fields,
                                                                       caller=self._caller(context))))

    async def DeleteTopic(self, request: pb.DeleteTopicRequest,
                          context: grpc.aio.ServicerContext) -> pb.DeleteTopicResponse:
        await self._answer(context, self.topics.change("delete", request.name, {}, caller=self._caller(context)))
        return pb.DeleteTopicResponse()

    async def Append(self, request: pb.AppendMessagesRequest,
                     context: grpc.aio.ServicerContext) -> pb.AppendMessagesResponse:
        bodies = [message.body for message in request.messages]
        metas = [Meta.of(message.keys, message.tags, dict(message.properties)) for message in request.messages]
        producer = request.producer
        results = await self._answer(context, self.topics.append(
            request.topic, bodies, metas, queue=request.queue if request.HasField("queue") else None,
            split=request.split, caller=self._caller(context).name,
            producer=Sequenced(producer.id, producer.epoch, producer.sequence) if request.HasField("producer")
            else None))
        return pb.AppendMessagesResponse(messages=[_result(result) for result in results])

    async def CommitGroupOffsets(self, request: pb.CommitGroupOffsetsRequest,
                                 context: grpc.aio.ServicerContext) -> pb.GroupOffsetsCommitted:
        queues = [QueueCommit(q.queue, q.offset, q.expected if q.HasField("expected") else None)
                  for q in request.queues]
        committed = await self._answer(context, self.groups.commit(request.group, request.topic, queues,
                                                                   caller=self._caller(context)))
        return _committed(committed, request.topic)

    async def ListGroups(self, request: pb.ListGroupsRequest, context: grpc.aio.ServicerContext) -> pb.GroupList:
        listed = await self._answer(context, self.groups.list_all(request.consistency == log_pb2.LINEARIZABLE))
        return pb.GroupList(groups=[_group(group, with_topics=False) for group in listed])

    async def GetGroup(self, request: pb.GetGroupRequest, context: grpc.aio.ServicerContext) -> pb.ConsumerGroup:
        linearizable = request.consistency == log_pb2.LINEARIZABLE
        return _group(await self._answer(context, self.groups.get(request.group, linearizable)), with_topics=True)

    async def DeleteGroup(self, request: pb.DeleteGroupRequest,
                          context: grpc.aio.ServicerContext) -> pb.DeleteGroupResponse:
        await self._answer(context, self.groups.delete(request.group, caller=self._caller(context)))
        return pb.DeleteGroupResponse()

    async def Get(self, request: pb.GetMessageRequest, context: grpc.aio.ServicerContext) -> log_pb2.Entry:
        read = QueueRead(request.topic, request.queue, offset=request.offset,
                         linearizable=request.consistency == log_pb2.LINEARIZABLE)
        return entry_of(await self._answer(context, self.reads.one(read)))

    async def Read(self, request: pb.ReadQueueRequest, context: grpc.aio.ServicerContext) -> None:
        """A queue's messages written one by one, as the Log service's Read writes entries."""
        read = QueueRead(request.topic, request.queue, offset=request.offset if request.HasField("offset") else None,
                         group=request.group if request.HasField("group") else None, limit=request.limit,
                         tags=tuple(request.tags), linearizable=request.consistency == log_pb2.LINEARIZABLE,
                         follow=request.follow)
        stream = await self._answer(context, self.reads.stream(read))
        await write_stream(context, stream, request.follow, self.reads.service.limits.follow_stall_ms,
                           context.peer())

    async def ListQueues(self, request: pb.ListQueuesRequest, context: grpc.aio.ServicerContext) -> pb.QueueList:
        listed = await self._answer(context, self.reads.queues(
            request.topic, request.group if request.HasField("group") else None,
            request.consistency == log_pb2.LINEARIZABLE))
        return pb.QueueList(topic=listed.topic, topic_id=listed.topic_id,
                            queues=[pb.TopicQueue(**dataclasses.asdict(state)) for state in listed.queues])

    def _caller(self, context: grpc.aio.ServicerContext) -> Caller:
        """The call's caller (CallGuard let it through: its token, if needed, is valid)."""
        if self.tokens is None:
            return LOCAL
        value = next((v for k, v in context.invocation_metadata() or () if k == "authorization"), None)
        token = bearer_credentials(value.encode("latin-1") if isinstance(value, str) else value)
        caller = None if token is None else self.tokens.caller_of(token)
        return LOCAL if caller is None else caller

    async def _answer(self, context: grpc.aio.ServicerContext, call: Any) -> Any:
        """What `call` returns; its error ends the call with that error's status."""
        try:
            return await call
        except Exception as exc:  # every error has one shape, as on REST
            status = error_status(api_error(exc, self.topics.service.node.leader_id))
            await context.abort(status.code, status.details, status.trailing_metadata)


def _topic(topic: Topic) -> pb.Topic:
    return pb.Topic(**topic.json())


def _result(result: MessageResult) -> pb.MessageResult:
    if isinstance(result, MessageAnswer):
        return pb.MessageResult(placed=pb.MessagePlace(**dataclasses.asdict(result)))
    assert isinstance(result, ApiError)
    return pb.MessageResult(error=pb.MessageError(code=result.code.name, message=result.message,
                                                  leader=result.leader or ""))


def _committed(committed: GroupCommitted, topic: str) -> pb.GroupOffsetsCommitted:
    return pb.GroupOffsetsCommitted(group=committed.group, index=committed.index, topic=topic,
                                    topic_id=committed.offsets[0][0] if committed.offsets else 0,
                                    queues=[pb.QueueOffset(queue=queue, offset=offset)
                                            for _, queue, offset in committed.offsets])


def _group(group: GroupAnswer, with_topics: bool) -> pb.ConsumerGroup:
    message = pb.ConsumerGroup(name=group.name, owner=group.owner, index=group.index, queue_count=len(group.queues),
                               lag=group.lag)
    if with_topics:
        for lags in group.by_topic():
            message.topics.add(topic=lags[0].topic, topic_id=lags[0].topic_id, lag=sum(q.lag for q in lags),
                               queues=[pb.QueueLag(queue=q.queue, offset=q.offset, end=q.end, lag=q.lag)
                                       for q in lags])
    return message
