"""The public gRPC API `raftlog.v1.Log` (proto/raftlog/v1/log.proto), REST's twin on the grpc_port.

Each method does what its REST route does, through the same LogService and
EntryHandlers, with the same tokens and roles (`authorization: Bearer` in the
call's metadata) and the same errors: the DLedger code's name is the `reason`
of a google.rpc.ErrorInfo in the status details, so a client in any language
can branch on it. Beside it, as every gRPC user expects: server reflection
(grpcurl needs no .proto) and grpc.health.v1 (the empty service: the process
is up, as /healthz; `raftlog.v1.Log`: ready, as /readyz).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Mapping, Sequence
from typing import Any, NamedTuple

import grpc
import grpc.aio
from google.protobuf import json_format
from google.rpc import error_details_pb2, status_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection
from grpc_status import rpc_status

from raftlog.api import log_pb2 as pb
from raftlog.api import log_pb2_grpc
from raftlog.api.answers import AppendAnswer, ConsumerAnswer, MembershipAnswer
from raftlog.api.auth import LOCAL, AuthFailures, Caller, Role, Tokens, bearer_credentials, refusal
from raftlog.api.connection_slots import CreditCalls
from raftlog.api.entry_handlers import EntryHandlers, parse_model
from raftlog.api.errors import ApiError, api_error
from raftlog.api.grpc_budget import Held, Refused, bounded, decoder, streamed
from raftlog.api.grpc_health import Readiness
from raftlog.api.grpc_port import GrpcPort
from raftlog.api.limits import InflightBytes
from raftlog.api.read_plan import LogRead, Stream
from raftlog.api.schemas import NewMember
from raftlog.api.service import LogService
from raftlog.raft.messages import Code
from raftlog.raft.messages import Role as RaftRole
from raftlog.raft.producers import Sequenced
from raftlog.raft.waiting import consume
from raftlog.storage.record import Record

log = logging.getLogger("raftlog.api.grpc")

SERVICE = "raftlog.v1.Log"
ERROR_DOMAIN = "raftlog"
STREAMS_MAX = 1024  # concurrent calls on one connection
KEEPALIVE_MS = 30_000  # the server pings a connection silent this long (a follow stream's dead client)
KEEPALIVE_TIMEOUT_MS = 10_000  # ... and closes it when the ping is not answered in this time
MIN_CLIENT_PING_MS = 10_000  # clients that ping more often are told to go away (keepalive enforcement)
BODY_FRAMING_MAX = 6  # a repeated bytes field's tag and varint length, per body
HANDSHAKE_TIMEOUT_MS = 10_000  # a connection's TLS and HTTP/2 handshakes must be done by then
BATCHES = frozenset({"AppendBatch", "AppendStream"})  # methods whose messages' bodies are counted before decoding

# gRPC's status for each HTTP status of a code (api.errors.STATUS); a few codes are told apart below
BY_HTTP_STATUS = {
    400: grpc.StatusCode.INVALID_ARGUMENT, 401: grpc.StatusCode.UNAUTHENTICATED,
    403: grpc.StatusCode.PERMISSION_DENIED, 404: grpc.StatusCode.NOT_FOUND, 409: grpc.StatusCode.ABORTED,
    410: grpc.StatusCode.OUT_OF_RANGE, 413: grpc.StatusCode.RESOURCE_EXHAUSTED, 500: grpc.StatusCode.INTERNAL,
    502: grpc.StatusCode.UNKNOWN, 503: grpc.StatusCode.UNAVAILABLE, 504: grpc.StatusCode.DEADLINE_EXCEEDED,
    507: grpc.StatusCode.RESOURCE_EXHAUSTED,
}
BY_CODE = {Code.FALL_BEHIND_TOO_MUCH: grpc.StatusCode.FAILED_PRECONDITION,
           Code.MEMBER_EXISTS: grpc.StatusCode.ALREADY_EXISTS,
           **dict.fromkeys((Code.ALREADY_VOTER, Code.LAST_VOTER, Code.LEARNER_BEHIND, Code.QUORUM_AT_RISK,
                            Code.CHANGE_IN_FLIGHT, Code.SECRET_REQUIRED, Code.PRODUCER_FENCED),
                           grpc.StatusCode.FAILED_PRECONDITION)}  # OUT_OF_ORDER_SEQUENCE: ABORTED, as its 409
ROLES = {"Append": Role.WRITER, "AppendBatch": Role.WRITER, "AppendStream": Role.WRITER, "Get": Role.READER,
         "Read": Role.READER, "Cluster": Role.READER, "TransferLeader": Role.ADMIN, "Members": Role.READER,
         "AddMember": Role.ADMIN, "PromoteMember": Role.ADMIN, "RemoveMember": Role.ADMIN, "NewProducer": Role.WRITER,
         "CloseProducer": Role.WRITER,
         "CommitConsumer": Role.CONSUMER, "GetConsumer": Role.READER, "ListConsumers": Role.READER,
         "DeleteConsumer": Role.CONSUMER}  # a consumer token: the consumers its name covers (api.auth)


class PortService(NamedTuple):
    """Another service of the gRPC port (api.grpc_topics), guarded, credited and listed as Log is."""

    name: str
    roles: Mapping[str, Role]  # the role each method needs
    batches: frozenset[str]  # the methods whose messages' field 1 is counted before they are decoded
    add_to: Callable[[grpc.aio.Server], None]  # its servicer, added to the server


def grpc_code(error: ApiError) -> grpc.StatusCode:
    return BY_CODE.get(error.code) or BY_HTTP_STATUS.get(error.status, grpc.StatusCode.UNKNOWN)


def error_status(error: ApiError) -> grpc.Status:
    """The call's status: gRPC's code, the message, and the DLedger code's name in an ErrorInfo."""
    info = error_details_pb2.ErrorInfo(reason=error.code.name, domain=ERROR_DOMAIN,
                                       metadata={"leader": error.leader} if error.leader else {})
    status = status_pb2.Status(code=grpc_code(error).value[0], message=error.message)
    status.details.add().Pack(info)
    return rpc_status.to_status(status)


class LogServicer(log_pb2_grpc.LogServicer):
    """The methods, for calls that CallGuard let through (tokens and bounds are its concern)."""

    def __init__(self, service: LogService, handlers: EntryHandlers, tokens: Tokens | None) -> None:
        self.service = service
        self.handlers = handlers
        self.peer_name = _same  # a caller's address, from gRPC's name of it (GrpcApi sets it)
        self.tokens = tokens  # whose the call is: a producer session's owner

    # -- appends ---------------------------------------------------------------------------

    async def Append(self, request: pb.AppendRequest, context: grpc.aio.ServicerContext) -> pb.AppendResponse:
        answer = await self._answer(context, self._append([request.body], request, self._caller(context).name))
        return pb.AppendResponse(index=answer.first_index, term=answer.term, pos=answer.positions[0],
                                 leader=answer.leader, duplicate=answer.duplicate)

    async def AppendBatch(self, request: pb.AppendBatchRequest,
                          context: grpc.aio.ServicerContext) -> pb.AppendBatchResponse:
        return _batch_response(await self._answer(context, self._append(list(request.bodies), request,
                                                                         self._caller(context).name)))

    async def AppendStream(self, requests: AsyncIterator[pb.AppendBatchRequest],
                           context: grpc.aio.ServicerContext) -> AsyncIterator[pb.AppendBatchResponse]:
        """Batches are appended as they arrive, up to append_stream_window_batches ahead of their answers.
        On the leader they go into the log in arrival order (its append lock is first come, first
        served); a follower forwards one batch at a time, so that order holds there too."""
        window: asyncio.Queue[asyncio.Future[AppendAnswer] | None] = asyncio.Queue(
            self.service.limits.append_stream_window_batches)
        caller = self._caller(context).name

        async def take() -> None:
            previous: asyncio.Future[Any] | None = None
            forwarded = False  # the previous batch went to the leader through the peer port
            try:
                async for item in requests:
                    if isinstance(item, Refused):  # a batch over max_batch_entries, garbage, or the budget full
                        await window.put(asyncio.ensure_future(_fail(item.error)))
                        break
                    request = item.request if isinstance(item, Held) else item
                    bodies = list(request.bodies)
                    behind_a_forward = forwarded and previous is not None and not previous.done()
                    if self.service.node.role is RaftRole.LEADER and not behind_a_forward:
                        previous, forwarded = asyncio.ensure_future(self._append(bodies, request, caller)), False
                    else:  # behind the batch before it, wherever that one went
                        previous = asyncio.ensure_future(_after(previous, self._append(bodies, request, caller)))
                        forwarded = True
                    if isinstance(item, Held):  # its bytes are the budget's until its append is done
                        previous.add_done_callback(item.release)
                    await window.put(previous)
            finally:
                await window.put(None)  # the answers end here, the client's half ended or broke

        taking = asyncio.ensure_future(take())
        try:
            while (appending := await window.get()) is not None:
                yield _batch_response(await self._answer(context, appending))
            await taking  # the client's half ended cleanly
        finally:
            taking.cancel()
            while not window.empty():  # appends whose answers will not be sent still finish
                if (left := window.get_nowait()) is not None:
                    left.add_done_callback(consume)

    async def _append(self, bodies: list[bytes], request: pb.AppendRequest | pb.AppendBatchRequest | None,
                      caller: str) -> AppendAnswer:
        async def given() -> list[bytes]:
            return bodies

        return await self.handlers.appending(given, _producer(request), caller)

    def _caller(self, context: grpc.aio.ServicerContext) -> Caller:
        """The call's caller (CallGuard let it through: its token, if needed, is valid)."""
        if self.tokens is None:
            return LOCAL
        token = _bearer(context.invocation_metadata())
        caller = None if token is None else self.tokens.caller_of(token)
        return LOCAL if caller is None else caller

    # -- reads -----------------------------------------------------------------------------

    async def Get(self, request: pb.GetRequest, context: grpc.aio.ServicerContext) -> pb.Entry:
        at_pos = request.WhichOneof("at") == "pos"
        read = LogRead(start=request.index, pos=request.pos if at_pos else None,
                       linearizable=request.consistency == pb.LINEARIZABLE)
        return entry_of(await self._answer(context, self.handlers.reads.one(read)))

    async def Read(self, request: pb.ReadRequest, context: grpc.aio.ServicerContext) -> None:
        """Entries written one by one with context.write, each within follow_stall_ms: a reader
        that takes nothing that long is cut off (api.follow)."""
        limits = self.service.limits
        if request.limit < 0:
            await _abort(context, ApiError(Code.UNEXPECTED_ARGUMENT, "limit must be at least 0"))
        at_pos = request.WhichOneof("from") == "pos"
        read = LogRead(start=request.start, pos=request.pos if at_pos else None,
                       consumer=request.consumer if request.HasField("consumer") else None, limit=request.limit,
                       linearizable=request.consistency == pb.LINEARIZABLE, control=request.include_control,
                       follow=request.follow)
        stream: Stream = await self._answer(context, self.handlers.reads.stream(read))
        await write_stream(context, stream, request.follow, limits.follow_stall_ms, self.peer_name(context.peer()))

    # -- the group -------------------------------------------------------------------------

    async def Cluster(self, request: pb.ClusterRequest, context: grpc.aio.ServicerContext) -> pb.ClusterResponse:
        status = await self._answer(context, self.service.cluster_status())
        return json_format.ParseDict(status.json(), pb.ClusterResponse(), ignore_unknown_fields=True)

    async def TransferLeader(self, request: pb.TransferLeaderRequest,
                             context: grpc.aio.ServicerContext) -> pb.TransferLeaderResponse:
        transferred = await self._answer(context, self.service.transfer_leadership(request.target))
        return pb.TransferLeaderResponse(leader=transferred.leader, previous=transferred.previous)

    async def NewProducer(self, request: pb.NewProducerRequest, context: grpc.aio.ServicerContext) -> pb.Producer:
        answer = await self._answer(context, self.service.new_producer(request.id if request.HasField("id") else None,
                                                                       self._caller(context).name))
        return pb.Producer(id=answer.id, epoch=answer.epoch, sequence=0)

    async def CloseProducer(self, request: pb.CloseProducerRequest,
                            context: grpc.aio.ServicerContext) -> pb.Producer:
        answer = await self._answer(context, self.service.change_session(request.id, self._caller(context).name,
                                                                         close=True))
        return pb.Producer(id=answer.id, epoch=answer.epoch, sequence=0)

    async def CommitConsumer(self, request: pb.CommitConsumerRequest, context: grpc.aio.ServicerContext) -> pb.Consumer:
        floor = request.retention_floor if request.HasField("retention_floor") else None
        return _consumer(await self._answer(context, self.handlers.consumers.commit(
            request.name, request.position, request.metadata, _expected(request), caller=self._caller(context),
            floor=floor)))

    async def GetConsumer(self, request: pb.ConsumerRequest, context: grpc.aio.ServicerContext) -> pb.Consumer:
        consumers, linearizable = self.handlers.consumers, request.consistency == pb.LINEARIZABLE
        return _consumer(await self._answer(context, consumers.get(request.name, linearizable)))

    async def ListConsumers(self, request: pb.ListConsumersRequest,
                            context: grpc.aio.ServicerContext) -> pb.ConsumerList:
        answers = await self._answer(context, self.handlers.consumers.list_all(request.consistency == pb.LINEARIZABLE))
        return pb.ConsumerList(consumers=[_consumer(answer) for answer in answers])

    async def DeleteConsumer(self, request: pb.DeleteConsumerRequest, context: grpc.aio.ServicerContext) -> pb.Consumer:
        return _consumer(await self._answer(context, self.handlers.consumers.delete(request.name, _expected(request),
                                                                                     caller=self._caller(context))))

    async def Members(self, request: pb.MembersRequest, context: grpc.aio.ServicerContext) -> pb.Configuration:
        return _configuration(self.service.members())

    async def AddMember(self, request: pb.AddMemberRequest, context: grpc.aio.ServicerContext) -> pb.Configuration:
        fields = {"id": request.id, "peer_address": request.peer_address, "learner": not request.voter,
                  **{name: getattr(request, name) for name in ("client_url", "grpc_address") if request.HasField(name)}}
        try:
            member = parse_model(NewMember, fields).as_peer()
        except ApiError as exc:
            await _abort(context, exc)
        return _configuration(await self._answer(context, self.service.change_membership("add", member.id, member)))

    async def PromoteMember(self, request: pb.MemberRequest, context: grpc.aio.ServicerContext) -> pb.Configuration:
        return _configuration(await self._answer(context, self.service.change_membership("promote", request.id)))

    async def RemoveMember(self, request: pb.MemberRequest, context: grpc.aio.ServicerContext) -> pb.Configuration:
        return _configuration(await self._answer(context, self.service.change_membership("remove", request.id)))

    # -- errors ----------------------------------------------------------------------------

    async def _answer(self, context: grpc.aio.ServicerContext, call: Awaitable[Any]) -> Any:
        """What `call` returns; its error ends the call with that error's status."""
        try:
            return await call
        except Exception as exc:  # every error has one shape, as on REST
            await _abort(context, api_error(exc, self.service.node.leader_id))  # logs an unexpected one


class CallGuard(grpc.aio.ServerInterceptor):
    """Every call of raftlog.v1.Log passes here before its message is read.

    The token comes from the call's metadata, with the role each method needs (ROLES). A call
    without one gets a handler that reads no message and ends the call: grpc.aio receives a
    request for a unary call before its handler runs, and for a client-streaming one only when the
    handler asks, so the refusing handler is a client-streaming one, whatever the method is.
    Whatever the client sends then is never taken from the connection, let alone decoded.

    A call let through is bounded while its message is decoded and served (api.grpc_budget): its
    bytes draw on the member's request budget, each AppendStream message's until its append is
    done, and a batch's bodies are counted on the wire first. Reflection and health checks are
    open, as on REST.
    """

    def __init__(self, tokens: Tokens | None, failures: AuthFailures | None, budget: InflightBytes,
                 max_batch_entries: int, services: Sequence[PortService] = ()) -> None:
        log_service = PortService(SERVICE, ROLES, BATCHES, lambda _server: None)  # guarded: each service's roles
        self.services = {SERVICE: log_service, **{service.name: service for service in services}}
        self.tokens = tokens
        self.failures = failures
        self.budget = budget
        self.max_batch_entries = max_batch_entries
        self.peer_name = _same  # a caller's address, from gRPC's name of it (GrpcApi sets it)

    async def intercept_service(self, continuation: Any, details: grpc.HandlerCallDetails) -> Any:
        name, _, method = details.method[1:].rpartition("/")
        service = self.services.get(name)
        if service is None:
            return await continuation(details)
        if self.tokens is not None:
            refusal = self.refusal(method, details.invocation_metadata, service.roles)
            if refusal is not None:
                return self._refusing(f"{name}/{method}", *refusal)
        handler = await continuation(details)
        if handler is None:
            return None
        decode = decoder(handler.request_deserializer, method in service.batches, self.max_batch_entries)
        if method == "AppendStream":
            return streamed(handler, self.budget, decode)
        if handler.unary_unary is not None:
            return bounded(handler, self.budget, decode, _abort)
        if handler.unary_stream is not None:  # Read: its request (a few bytes) held while it streams
            return bounded(handler, self.budget, decode, _abort, streams=True)
        return handler

    def refusal(self, method: str, metadata: Any, roles: Mapping[str, Role] = ROLES) -> tuple[str, ApiError] | None:
        """Why a call of `method` with this metadata is refused (the reason counted, the error), or None."""
        assert self.tokens is not None
        return refusal(self.tokens, _bearer(metadata), roles.get(method, Role.ADMIN), method)

    def _refusing(self, call: str, reason: str, error: ApiError) -> grpc.RpcMethodHandler:
        failures, peer_name = self.failures, self.peer_name

        async def refuse(_requests: Any, context: grpc.aio.ServicerContext) -> None:
            if failures is not None:
                failures.note(reason, call, peer_name(context.peer()))
            await _abort(context, error)

        return grpc.stream_unary_rpc_method_handler(refuse)


class GrpcApi:
    """The gRPC server of the public API, in the node's event loop, behind its port's listener
    (api.grpc_port: connections per address, and closed unless a call passes CallGuard soon)."""

    def __init__(self, service: LogService, handlers: EntryHandlers, tokens: Tokens | None,
                 failures: AuthFailures | None, address: str,
                 credentials: grpc.ServerCredentials | None = None, budget: InflightBytes | None = None,
                 services: Sequence[PortService] = ()) -> None:
        limits = service.limits
        # a batch of max_request_bytes of bodies, with each body's tag and length (at most 6 bytes)
        message_max = limits.max_request_bytes + BODY_FRAMING_MAX * limits.max_batch_entries + 1024
        options = [
            ("grpc.max_receive_message_length", message_max),
            ("grpc.max_send_message_length", max(message_max, limits.range_bytes_max + (1 << 20))),
            ("grpc.max_concurrent_streams", STREAMS_MAX),
            ("grpc.max_allowed_incoming_connections", limits.grpc_connections_max),  # counted before handshakes
            ("grpc.server_handshake_timeout_ms", HANDSHAKE_TIMEOUT_MS),
            ("grpc.max_metadata_size", limits.max_header_bytes),
            ("grpc.absolute_max_metadata_size", limits.max_header_bytes),
            ("grpc.keepalive_time_ms", KEEPALIVE_MS),
            ("grpc.keepalive_timeout_ms", KEEPALIVE_TIMEOUT_MS),
            ("grpc.keepalive_permit_without_calls", 1),
            ("grpc.http2.min_ping_interval_without_data_ms", MIN_CLIENT_PING_MS),
            ("grpc.http2.max_ping_strikes", 2),
            ("grpc.so_reuseport", 0),
            ("grpc.max_connection_idle_ms", limits.grpc_idle_connection_ms),
            ("grpc.max_connection_age_ms", limits.grpc_connection_age_ms),  # its grace: none, a follow stream goes on
        ]
        self.port = GrpcPort(address, limits)  # OSError when the port is taken
        self.guard = CallGuard(tokens, failures, budget or InflightBytes(limits.max_inflight_body_bytes),
                               limits.max_batch_entries, services)
        self.guard.peer_name = self.port.slots.peer_name
        names = (SERVICE, *(extra.name for extra in services))
        credit = CreditCalls(self.port.slots.credit_name, frozenset(names))  # after the token check
        self.server = grpc.aio.server(options=options, interceptors=(self.guard, credit),
                                      # beyond the calls at once: RESOURCE_EXHAUSTED
                                      maximum_concurrent_rpcs=limits.max_inflight_requests + limits.max_followers)
        self.readiness = Readiness(service, *names)
        servicer = LogServicer(service, handlers, tokens)
        servicer.peer_name = self.port.slots.peer_name
        log_pb2_grpc.add_LogServicer_to_server(servicer, self.server)
        for extra in services:
            extra.add_to(self.server)
        health_pb2_grpc.add_HealthServicer_to_server(self.readiness, self.server)
        reflection.enable_server_reflection((*names, health_pb2.DESCRIPTOR.services_by_name["Health"].full_name,
                                             reflection.SERVICE_NAME), self.server)
        inner = self.port.server_address  # TLS passes the port's listener, for gRPC's server to do
        bound = (self.server.add_secure_port(inner, credentials) if credentials is not None
                 else self.server.add_insecure_port(inner))
        if bound == 0:
            self.port.close()
            raise OSError(f"cannot listen on {inner}")
        self._watch: asyncio.Task[None] | None = None

    async def start(self) -> None:
        await self.server.start()
        self.port.start()
        self._watch = asyncio.create_task(self.readiness.watch_loop(), name="grpc-readiness")

    async def stop(self, grace_s: float) -> None:
        if self._watch is not None:
            self._watch.cancel()
        await self.readiness.enter_graceful_shutdown()
        self.port.stop_accepting()
        await self.server.stop(grace_s)
        self.port.close()


def _same(peer: str) -> str:
    return peer


def _bearer(metadata: Any) -> bytes | None:
    value = next((v for k, v in metadata or () if k == "authorization"), None)
    return bearer_credentials(value.encode("latin-1") if isinstance(value, str) else value)


async def write_stream(context: grpc.aio.ServicerContext, stream: Stream, follow: bool, stall_ms: int,
                       reader: str) -> None:
    """A read plan's stream as a Read call sends it (the log's, a topic queue's): its records written one
    by one with context.write, each within `stall_ms` (follow_stall_ms): a reader that takes nothing that
    long is cut off (api.follow); an error after the first entry ends the call with its status."""
    if follow:
        await context.send_initial_metadata(())  # the client knows the tail is open before an entry comes
    try:
        async for chunk in stream.chunks:
            for record in stream.records(chunk or ()):
                async with asyncio.timeout(stall_ms / 1000):
                    await context.write(entry_of(record))
    except ApiError as exc:
        await _abort(context, exc)
    except TimeoutError:
        log.info("cut off a gRPC follow stream to %s: it took nothing for %d ms (follow_stall_ms)", reader, stall_ms)
        await _abort(context, ApiError(Code.SERVER_BUSY, "the reader took nothing for follow_stall_ms"))
    finally:
        await stream.chunks.aclose()  # type: ignore[attr-defined]  # its chunk's budget is given back


async def _abort(context: grpc.aio.ServicerContext, error: ApiError) -> None:
    status = error_status(error)
    await context.abort(status.code, status.details, status.trailing_metadata)


async def _fail(error: ApiError) -> Any:
    raise error


async def _after(previous: asyncio.Future[Any] | None, call: Coroutine[Any, Any, Any]) -> Any:
    """`call`, once `previous` has succeeded; nothing if it failed (the stream ends at its answer)."""
    if previous is not None:
        try:
            await asyncio.shield(previous)
        except BaseException:
            call.close()
            raise
    return await call


def _configuration(answer: MembershipAnswer) -> pb.Configuration:
    return json_format.ParseDict(answer.json(), pb.Configuration(), ignore_unknown_fields=True)


def _batch_response(answer: AppendAnswer) -> pb.AppendBatchResponse:
    return pb.AppendBatchResponse(first_index=answer.first_index, last_index=answer.last_index, term=answer.term,
                                  positions=answer.positions, leader=answer.leader, duplicate=answer.duplicate)


def _producer(request: pb.AppendRequest | pb.AppendBatchRequest | None) -> Sequenced | None:
    if request is None or not request.HasField("producer"):
        return None
    producer = request.producer  # its numbers are checked with the bodies (LogService.check_bodies)
    return Sequenced(producer.id, producer.epoch, producer.sequence)


def _expected(request: pb.CommitConsumerRequest | pb.DeleteConsumerRequest) -> int | None:
    return request.expected if request.HasField("expected") else None


def entry_of(record: Record) -> pb.Entry:
    """A record as gRPC readers get it; its type by name (storage.record's, as EntryType spells them)."""
    producer = record.producer
    return pb.Entry(index=record.index, term=record.term, pos=record.pos, type=record.type.upper(),
                    body=record.body, body_crc=record.body_crc,
                    producer=None if producer is None else pb.Producer(id=producer.producer_id, epoch=producer.epoch,
                                                                       sequence=producer.sequence),
                    topic_id=record.topic_id, topic=record.topic, queue=record.queue, queue_offset=record.queue_offset,
                    keys=record.keys, tags=record.tags, properties=record.properties)


def _consumer(answer: ConsumerAnswer) -> pb.Consumer:
    return json_format.ParseDict(answer.json(), pb.Consumer())  # lag_bytes None: absent
