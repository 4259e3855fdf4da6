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
from collections.abc import AsyncIterator, Awaitable, Coroutine
from typing import Any

import grpc
import grpc.aio
from google.protobuf import json_format
from google.rpc import error_details_pb2, status_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_health.v1.health import aio as health_aio
from grpc_reflection.v1alpha import reflection
from grpc_status import rpc_status

from api import log_pb2 as pb
from api import log_pb2_grpc
from api.auth import AuthFailures, Role, Tokens, bearer_credentials
from api.errors import ApiError, api_error
from api.follow import committed_chunks
from api.public import EntryHandlers, parse_model
from api.schemas import NewMember
from api.service import LogService
from raft.messages import Code
from raft.messages import Role as RaftRole
from raft.waiting import consume
from storage.codec import Entry, Magic, iter_entries

log = logging.getLogger("raftlog.api.grpc")

SERVICE = "raftlog.v1.Log"
ERROR_DOMAIN = "raftlog"
APPEND_STREAM_WINDOW = 32  # batches of one AppendStream appended and not yet answered
STREAMS_MAX = 1024  # concurrent calls on one connection
KEEPALIVE_MS = 30_000  # the server pings a connection silent this long (a follow stream's dead client)
KEEPALIVE_TIMEOUT_MS = 10_000  # ... and closes it when the ping is not answered in this time
MIN_CLIENT_PING_MS = 10_000  # clients that ping more often are told to go away (keepalive enforcement)
BODY_FRAMING_MAX = 6  # a repeated bytes field's tag and varint length, per body
READINESS_S = 1.0  # how often Watch subscribers of `raftlog.v1.Log` get readiness anew

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
                            Code.CHANGE_IN_FLIGHT), grpc.StatusCode.FAILED_PRECONDITION)}
ENTRY_TYPES = {Magic.NORMAL: pb.NORMAL, Magic.NOOP: pb.NOOP, Magic.CONFIG_CHANGE: pb.CONFIG_CHANGE}
ROLES = {"Append": Role.WRITER, "AppendBatch": Role.WRITER, "AppendStream": Role.WRITER, "Get": Role.READER,
         "Read": Role.READER, "Cluster": Role.READER, "TransferLeader": Role.ADMIN, "Members": Role.READER,
         "AddMember": Role.ADMIN, "PromoteMember": Role.ADMIN, "RemoveMember": Role.ADMIN}


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
    def __init__(self, service: LogService, handlers: EntryHandlers, tokens: Tokens | None,
                 failures: AuthFailures | None) -> None:
        self.service = service
        self.handlers = handlers
        self.tokens = tokens
        self.failures = failures

    # -- appends ---------------------------------------------------------------------------

    async def Append(self, request: pb.AppendRequest, context: grpc.aio.ServicerContext) -> pb.AppendResponse:
        await self._authorize(context, "Append")
        answer = await self._answer(context, self._append([request.body]))
        return pb.AppendResponse(index=answer["first_index"], term=answer["term"], pos=answer["positions"][0],
                                 leader=answer["leader"])

    async def AppendBatch(self, request: pb.AppendBatchRequest,
                          context: grpc.aio.ServicerContext) -> pb.AppendBatchResponse:
        await self._authorize(context, "AppendBatch")
        return pb.AppendBatchResponse(**await self._answer(context, self._append(list(request.bodies))))

    async def AppendStream(self, requests: AsyncIterator[pb.AppendBatchRequest],
                           context: grpc.aio.ServicerContext) -> AsyncIterator[pb.AppendBatchResponse]:
        """Batches are appended as they arrive, up to APPEND_STREAM_WINDOW ahead of their answers.
        On the leader they go into the log in arrival order (its append lock is first come, first
        served); a follower forwards one batch at a time, so that order holds there too."""
        await self._authorize(context, "AppendStream")
        window: asyncio.Queue[asyncio.Future[dict[str, Any]] | None] = asyncio.Queue(APPEND_STREAM_WINDOW)

        async def take() -> None:
            previous: asyncio.Future[Any] | None = None
            forwarded = False  # the previous batch went to the leader through the peer port
            try:
                async for request in requests:
                    bodies = list(request.bodies)
                    if self.service.node.role is RaftRole.LEADER and not (forwarded and not previous.done()):
                        previous, forwarded = asyncio.ensure_future(self._append(bodies)), False
                    else:  # behind the batch before it, wherever that one went
                        previous, forwarded = asyncio.ensure_future(_after(previous, self._append(bodies))), True
                    await window.put(previous)
            finally:
                await window.put(None)  # the answers end here, the client's half ended or broke

        taking = asyncio.ensure_future(take())
        try:
            while (appending := await window.get()) is not None:
                yield pb.AppendBatchResponse(**await self._answer(context, appending))
            await taking  # the client's half ended cleanly
        finally:
            taking.cancel()
            while not window.empty():  # appends whose answers will not be sent still finish
                if (left := window.get_nowait()) is not None:
                    left.add_done_callback(consume)

    async def _append(self, bodies: list[bytes]) -> dict[str, Any]:
        async def given() -> list[bytes]:
            return bodies

        return await self.handlers.appending(given)

    # -- reads -----------------------------------------------------------------------------

    async def Get(self, request: pb.GetRequest, context: grpc.aio.ServicerContext) -> pb.Entry:
        await self._authorize(context, "Get")
        linearizable = request.consistency == pb.LINEARIZABLE
        service = self.service

        async def get() -> Entry:
            index = request.index
            if request.WhichOneof("at") == "pos":
                index = await service.index_at_pos(request.pos, linearizable)
            return await service.get(index, linearizable)

        return _entry(await self._answer(context, get()))

    async def Read(self, request: pb.ReadRequest, context: grpc.aio.ServicerContext) -> None:
        """Entries written one by one with context.write, each within follow_stall_ms: a reader
        that takes nothing that long is cut off (api.follow)."""
        await self._authorize(context, "Read")
        service, limits = self.service, self.service.limits
        linearizable = request.consistency == pb.LINEARIZABLE
        if request.limit < 0:
            await _abort(context, ApiError(Code.UNEXPECTED_ARGUMENT, "limit must be at least 0"))
        start = request.start
        if request.WhichOneof("from") == "pos":
            start = await self._answer(context, service.index_at_pos(request.pos, linearizable))
        requested = start + request.limit - 1 if request.limit else 2**63 - 1
        end = await self._answer(context, service.readable_end(start, requested, linearizable))
        last = min(end, requested)
        first = None
        if last >= start:
            first = await self._answer(context, service.read_raw(start, last - start + 1, linearizable=False))
        chunks = committed_chunks(service, first, start, requested if request.follow else last,
                                  follow=request.follow, budget=service.follow_budget)
        if request.follow:
            await context.send_initial_metadata(())  # the client knows the tail is open before an entry comes
        try:
            async for chunk in chunks:
                for entry in (e for view in chunk or () for e in iter_entries(view)):
                    async with asyncio.timeout(limits.follow_stall_ms / 1000):
                        await context.write(_entry(entry))
        except ApiError as exc:
            await _abort(context, exc)
        except TimeoutError:
            log.info("cut off a gRPC follow stream to %s: it took nothing for %d ms (follow_stall_ms)",
                     context.peer(), limits.follow_stall_ms)
            await _abort(context, ApiError(Code.SERVER_BUSY, "the reader took nothing for follow_stall_ms"))
        finally:
            await chunks.aclose()  # type: ignore[attr-defined]  # its chunk's budget is given back

    # -- the group -------------------------------------------------------------------------

    async def Cluster(self, request: pb.ClusterRequest, context: grpc.aio.ServicerContext) -> pb.ClusterResponse:
        await self._authorize(context, "Cluster")
        status = await self._answer(context, self.service.cluster_status())
        return json_format.ParseDict(status, pb.ClusterResponse(), ignore_unknown_fields=True)

    async def TransferLeader(self, request: pb.TransferLeaderRequest,
                             context: grpc.aio.ServicerContext) -> pb.TransferLeaderResponse:
        await self._authorize(context, "TransferLeader")
        return pb.TransferLeaderResponse(**await self._answer(
            context, self.service.transfer_leadership(request.target)))

    async def Members(self, request: pb.MembersRequest, context: grpc.aio.ServicerContext) -> pb.Configuration:
        await self._authorize(context, "Members")
        return _configuration(self.service.members())

    async def AddMember(self, request: pb.AddMemberRequest, context: grpc.aio.ServicerContext) -> pb.Configuration:
        await self._authorize(context, "AddMember")
        fields = {"id": request.id, "peer_address": request.peer_address, "learner": not request.voter,
                  **{name: getattr(request, name) for name in ("client_url", "grpc_address") if request.HasField(name)}}
        try:
            member = parse_model(NewMember, fields).as_peer()
        except ApiError as exc:
            await _abort(context, exc)
        return _configuration(await self._answer(context, self.service.change_membership("add", member.id, member)))

    async def PromoteMember(self, request: pb.MemberRequest, context: grpc.aio.ServicerContext) -> pb.Configuration:
        await self._authorize(context, "PromoteMember")
        return _configuration(await self._answer(context, self.service.change_membership("promote", request.id)))

    async def RemoveMember(self, request: pb.MemberRequest, context: grpc.aio.ServicerContext) -> pb.Configuration:
        await self._authorize(context, "RemoveMember")
        return _configuration(await self._answer(context, self.service.change_membership("remove", request.id)))

    # -- tokens and errors -----------------------------------------------------------------

    async def _authorize(self, context: grpc.aio.ServicerContext, method: str) -> None:
        if self.tokens is None:
            return
        needed = ROLES[method]
        token = _bearer(context)
        role = None if token is None else self.tokens.role_of(token)
        if role is not None and role >= needed:
            return
        if role is None:
            reason = "missing" if token is None else "invalid"
            error = ApiError(Code.UNAUTHENTICATED, "no bearer token" if token is None else
                             "the bearer token is not valid")
        else:
            reason = "forbidden"
            error = ApiError(Code.PERMISSION_DENIED, f"{method} needs the {needed.name.lower()} role; this token "
                             f"is a {role.name.lower()}")
        if self.failures is not None:
            self.failures.note(reason, f"{SERVICE}/{method}", context.peer())
        await _abort(context, error)

    async def _answer(self, context: grpc.aio.ServicerContext, call: Awaitable[Any]) -> Any:
        """What `call` returns; its error ends the call with that error's status."""
        try:
            return await call
        except Exception as exc:  # every error has one shape, as on REST
            error = exc if isinstance(exc, ApiError) else api_error(exc, self.service.node.leader_id)
            if not isinstance(exc, ApiError) and error.code is Code.INTERNAL_ERROR:
                log.exception("unexpected error answering a gRPC call")
            await _abort(context, error)


class Readiness(health_aio.HealthServicer):
    """grpc.health.v1: the empty service is SERVING while the process is up; `raftlog.v1.Log` while
    the member has a leader and has caught up with it (as /readyz), asked at each Check."""

    def __init__(self, service: LogService) -> None:
        super().__init__()
        self.service = service

    async def refresh(self) -> None:
        ready = self.service.node.caught_up
        await self.set(SERVICE, health_pb2.HealthCheckResponse.SERVING if ready
                       else health_pb2.HealthCheckResponse.NOT_SERVING)

    async def Check(self, request: health_pb2.HealthCheckRequest, context: Any) -> Any:
        if request.service == SERVICE:
            await self.refresh()
        return await super().Check(request, context)

    async def watch_loop(self) -> None:
        """Watch subscribers learn a change within READINESS_S."""
        while True:
            await self.refresh()
            await asyncio.sleep(READINESS_S)


class GrpcApi:
    """The gRPC server of the public API, on its own port, in the node's event loop."""

    def __init__(self, service: LogService, handlers: EntryHandlers, tokens: Tokens | None,
                 failures: AuthFailures | None, address: str,
                 credentials: grpc.ServerCredentials | None = None) -> None:
        limits = service.limits
        # a batch of max_request_bytes of bodies, with each body's tag and length (at most 6 bytes)
        message_max = limits.max_request_bytes + BODY_FRAMING_MAX * limits.max_batch_entries + 1024
        options = [
            ("grpc.max_receive_message_length", message_max),
            ("grpc.max_send_message_length", max(message_max, limits.range_bytes_max + (1 << 20))),
            ("grpc.max_concurrent_streams", STREAMS_MAX),
            ("grpc.keepalive_time_ms", KEEPALIVE_MS),
            ("grpc.keepalive_timeout_ms", KEEPALIVE_TIMEOUT_MS),
            ("grpc.keepalive_permit_without_calls", 1),
            ("grpc.http2.min_ping_interval_without_data_ms", MIN_CLIENT_PING_MS),
            ("grpc.http2.max_ping_strikes", 2),
            ("grpc.so_reuseport", 0),
        ]
        self.server = grpc.aio.server(options=options,  # beyond the calls at once: RESOURCE_EXHAUSTED
                                      maximum_concurrent_rpcs=limits.max_inflight_requests + limits.max_followers)
        self.readiness = Readiness(service)
        log_pb2_grpc.add_LogServicer_to_server(LogServicer(service, handlers, tokens, failures), self.server)
        health_pb2_grpc.add_HealthServicer_to_server(self.readiness, self.server)
        reflection.enable_server_reflection((SERVICE, health_pb2.DESCRIPTOR.services_by_name["Health"].full_name,
                                             reflection.SERVICE_NAME), self.server)
        bound = (self.server.add_secure_port(address, credentials) if credentials is not None
                 else self.server.add_insecure_port(address))
        if bound == 0:
            raise OSError(f"cannot listen on {address}")
        self._watch: asyncio.Task[None] | None = None

    async def start(self) -> None:
        await self.server.start()
        self._watch = asyncio.create_task(self.readiness.watch_loop(), name="grpc-readiness")

    async def stop(self, grace_s: float) -> None:
        if self._watch is not None:
            self._watch.cancel()
        await self.readiness.enter_graceful_shutdown()
        await self.server.stop(grace_s)


def _bearer(context: grpc.aio.ServicerContext) -> bytes | None:
    value = next((v for k, v in context.invocation_metadata() or () if k == "authorization"), None)
    return bearer_credentials(value.encode("latin-1") if isinstance(value, str) else value)


async def _abort(context: grpc.aio.ServicerContext, error: ApiError) -> None:
    status = error_status(error)
    await context.abort(status.code, status.details, status.trailing_metadata)


async def _after(previous: asyncio.Future[Any] | None, call: Coroutine[Any, Any, Any]) -> Any:
    """`call`, once `previous` has succeeded; nothing if it failed (the stream ends at its answer)."""
    if previous is not None:
        try:
            await asyncio.shield(previous)
        except BaseException:
            call.close()
            raise
    return await call


def _configuration(answer: dict[str, Any]) -> pb.Configuration:
    return json_format.ParseDict(answer, pb.Configuration(), ignore_unknown_fields=True)


def _entry(entry: Entry) -> pb.Entry:
    return pb.Entry(index=entry.index, term=entry.term, pos=entry.pos, type=ENTRY_TYPES[entry.magic],
                    body=bytes(entry.body), body_crc=entry.body_crc)

