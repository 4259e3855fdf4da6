"""The peer port: the gRPC service `raftlog.peer.v1.Peer` (proto/raftlog/peer/v1/peer.proto).

Raft's calls go to the node as typed messages. `Replicate` is the long-lived
replication stream: each push is handed to the node as soon as it arrives
(the follower's handler orders them by index), and the answers go back in the
order the pushes came. The other calls serve a member's public API
(forwarded appends, read index, leadership transfer, status); their errors
travel as the public error shape, so a member answers as the leader did.

Requests are parsed here, not by gRPC: a message that does not decode ends
the call with INVALID_ARGUMENT, its stream included, and the node sees
nothing of it. Every call must carry the cluster secret, when there is one.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc
import grpc.aio
from google.protobuf.message import DecodeError, Message

from api import peer_pb2 as pb
from api.auth import AuthFailures, is_secret, secret_digest
from api.errors import ApiError
from api.peer_client import PeerTls, api_error_message, channel_options
from api.peer_codec import PeerMessageError, decode_message, decode_push, encode_message, encode_push_response
from api.service import LogService
from raft.messages import Code, FetchRequest, HeartbeatRequest, PushResponse, TransferRequest, VoteRequest
from raft.node import RaftNode

log = logging.getLogger("raftlog.api.peer_server")

PEER_STREAMS_MAX = 256  # concurrent calls per peer connection
ANSWERS_AHEAD_MAX = 1024  # pushes of one stream handed to the node and not yet answered: then it reads no more
IDLE_CONNECTION_MS = 75_000  # a peer connection with no call for this long is closed
GRACE_S = 1.0  # at stop, calls under way get this long to finish

Handler = Callable[[bytes, grpc.aio.ServicerContext], Awaitable[bytes]]


class PeerService:
    def __init__(self, node: RaftNode, service: LogService, secret: bytes | None,
                 failures: AuthFailures | None = None) -> None:
        self.node = node
        self.service = service
        self._digest = None if secret is None else secret_digest(secret)
        self._failures = failures
        self._handling: set[asyncio.Future[Any]] = set()  # pushes handed to the node, whoever waits

    def handler(self) -> grpc.GenericRpcHandler:
        unary: dict[str, Handler] = {
            "Vote": self._raft(VoteRequest, self.node.handle_vote),
            "Heartbeat": self._raft(HeartbeatRequest, self.node.handle_heartbeat),
            "Transfer": self._raft(TransferRequest, self.node.handle_transfer),
            "Fetch": self._fetch, "Append": self._append, "ReadIndex": self._read_index,
            "TransferLeadership": self._transfer_leadership, "Status": self._status,
        }
        methods = {name: grpc.unary_unary_rpc_method_handler(self._guarded(call)) for name, call in unary.items()}
        methods["Replicate"] = grpc.stream_stream_rpc_method_handler(self._replicate)
        return grpc.method_handlers_generic_handler("raftlog.peer.v1.Peer", methods)

    # -- the cluster secret -------------------------------------------------------------

    async def _authorize(self, context: grpc.aio.ServicerContext, method: str) -> None:
        if self._digest is None:
            return
        given = _bearer(context.invocation_metadata())
        if given is not None and is_secret(given, self._digest):
            return
        reason = "missing" if given is None else "invalid"
        if self._failures is not None:
            self._failures.note(reason, method, context.peer())
        if given is None:
            await context.abort(grpc.StatusCode.UNAUTHENTICATED, "a peer call needs the cluster secret")
        await context.abort(grpc.StatusCode.PERMISSION_DENIED, "wrong cluster secret")

    def _guarded(self, call: Handler) -> Callable[[bytes, grpc.aio.ServicerContext], Awaitable[bytes]]:
        async def guarded(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
            await self._authorize(context, call.__name__)
            try:
                return await call(request, context)
            except (PeerMessageError, DecodeError) as exc:
                await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
                raise  # not reached: abort raises

        return guarded

    # -- replication --------------------------------------------------------------------

    async def _replicate(self, requests: AsyncIterator[bytes], context: grpc.aio.ServicerContext,
                         ) -> AsyncIterator[bytes]:
        await self._authorize(context, "Replicate")
        answers: asyncio.Queue[asyncio.Future[PushResponse] | None] = asyncio.Queue(ANSWERS_AHEAD_MAX)
        intake = asyncio.ensure_future(self._take_pushes(requests, answers))
        try:
            while (answer := await answers.get()) is not None:
                yield encode_push_response(await answer)
            intake.result()  # a push that did not decode ends the stream with its error
        except PeerMessageError as exc:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        finally:
            intake.cancel()

    async def _take_pushes(self, requests: AsyncIterator[bytes],
                           answers: asyncio.Queue[asyncio.Future[PushResponse] | None]) -> None:
        """Hand each push to the node as it arrives; its answer waits its turn in `answers`."""
        try:
            async for data in requests:
                handling = asyncio.ensure_future(self.node.handle_push(decode_push(data)))
                self._handling.add(handling)  # it runs to its end even if the stream goes: as a server's would
                handling.add_done_callback(self._handled)
                await answers.put(handling)
        except PeerMessageError:
            await answers.put(None)  # what came before it is still answered
            raise
        await answers.put(None)

    def _handled(self, handling: asyncio.Future[Any]) -> None:
        self._handling.discard(handling)
        if not handling.cancelled() and handling.exception() is not None:
            log.error("a push failed on this member", exc_info=handling.exception())

    # -- raft's calls -------------------------------------------------------------------

    @staticmethod
    def _raft(request_type: type[Any], handle: Callable[[Any], Awaitable[Any]]) -> Handler:
        async def call(request: bytes, _context: grpc.aio.ServicerContext) -> bytes:
            return encode_message(await handle(decode_message(request_type, request)))

        call.__name__ = request_type.__name__.removesuffix("Request")
        return call

    async def _fetch(self, request: bytes, _context: grpc.aio.ServicerContext) -> bytes:
        raw = await self.node.handle_fetch(decode_message(FetchRequest, request))
        return pb.RawEntry(data=bytes(raw)).SerializeToString()

    # -- the public API's calls ---------------------------------------------------------

    async def _append(self, request: bytes, _context: grpc.aio.ServicerContext) -> bytes:
        bodies = list(pb.AppendRequest.FromString(request).bodies)
        try:
            if not bodies:
                raise ApiError(Code.REQUEST_WITH_EMPTY_BODYS, "a forwarded append without entries")
            self.service.check_bodies(bodies)
            answer = await self.service.append_here(bodies)
        except ApiError as exc:
            return _answer(pb.AppendResponse(error=api_error_message(exc)))
        return _answer(pb.AppendResponse(first_index=answer["first_index"], last_index=answer["last_index"],
                                         term=answer["term"], positions=answer["positions"],
                                         leader=answer["leader"]))

    async def _read_index(self, _request: bytes, _context: grpc.aio.ServicerContext) -> bytes:
        try:
            self._check_leader()
            return _answer(pb.ReadIndexResponse(committed_index=await self.service.read_index()))
        except ApiError as exc:
            return _answer(pb.ReadIndexResponse(error=api_error_message(exc)))

    async def _transfer_leadership(self, request: bytes, _context: grpc.aio.ServicerContext) -> bytes:
        target = pb.TransferLeadershipRequest.FromString(request).target
        try:
            self._check_leader()
            return _json_answer(await self.service.transfer_leadership(target))
        except ApiError as exc:
            return _answer(pb.JsonAnswer(error=api_error_message(exc)))

    async def _status(self, _request: bytes, _context: grpc.aio.ServicerContext) -> bytes:
        return _json_answer(self.service.own_status())

    def _check_leader(self) -> None:
        """A call forwarded to the leader is never forwarded again."""
        if not self.node.state.is_leader:
            raise ApiError(Code.NOT_LEADER, "this member is not the leader", self.node.leader_id)


def create_peer_server(service: PeerService, address: str, max_message_bytes: int,
                       tls: PeerTls | None = None) -> grpc.aio.Server:
    """The peer port's server, bound to `address` ("host:port"; it fails if the port is taken)."""
    options = [*channel_options(max_message_bytes),
               ("grpc.so_reuseport", 0),  # a second member on the same port must fail, not share it
               ("grpc.max_concurrent_streams", PEER_STREAMS_MAX),
               ("grpc.max_connection_idle_ms", IDLE_CONNECTION_MS),
               ("grpc.http2.min_ping_interval_without_data_ms", 1000),  # members ping every KEEPALIVE_MS
               ("grpc.http2.max_ping_strikes", 0)]
    server = grpc.aio.server(options=options)
    server.add_generic_rpc_handlers((service.handler(),))
    if tls is None:
        port = server.add_insecure_port(address)
    else:
        port = server.add_secure_port(address, grpc.ssl_server_credentials(
            [(tls.key, tls.cert)], root_certificates=tls.ca, require_client_auth=True))
    if port == 0:
        raise OSError(f"cannot listen on {address}")
    return server


def _bearer(metadata: Any) -> bytes | None:
    for key, value in metadata or ():
        if key == "authorization":
            scheme, _, credentials = str(value).partition(" ")
            return credentials.strip().encode() if scheme.lower() == "bearer" else None
    return None


def _answer(message: Message) -> bytes:
    return message.SerializeToString()


def _json_answer(value: dict[str, Any]) -> bytes:
    return _answer(pb.JsonAnswer(json=json.dumps(value, separators=(",", ":"))))
