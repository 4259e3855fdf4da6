"""The peer service `raftlog.peer.v1.Peer` (proto/raftlog/peer/v1/peer.proto), as the peer port
serves it (api.peer_port).

Raft's calls go to the node as typed messages. Two long-lived streams are
served on h2 by api.stream_server, which hands each message here
(`stream_method`): `Replicate`, a leader's pushes (`take_push`), and `Forward`,
a follower's clients' appends, many in one message (`take_forward`). The other
calls serve a member's public API (read index, leadership transfer, status);
forwarded appends and these answer errors in the public error shape, so a
member answers as the leader did.

Requests are parsed here, not by gRPC: a message that does not decode ends
the call with INVALID_ARGUMENT, and the node sees nothing of it. Every call
must carry the cluster secret, when there is one: SecretGuard checks it from
the call's metadata before the message is read (as api.grpc_api.CallGuard
does tokens). The public API's calls draw their message's bytes from the
member's request budget (InflightBytes, shared with the client and gRPC
ports); Raft's own calls are small and never wait on clients.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any, NamedTuple

import grpc
import grpc.aio
from google.protobuf.message import DecodeError, Message

from raftlog.api import peer_pb2 as pb
from raftlog.api.auth import AuthFailures, bearer_credentials, is_secret, secret_digest
from raftlog.api.consumers import ConsumerCommits
from raftlog.api.errors import ApiError, too_large
from raftlog.api.groups import ConsumerGroups
from raftlog.api.limits import InflightBytes, batch_entries
from raftlog.api.peer_client import api_error_message
from raftlog.api.peer_codec import (
    PeerMessageError,
    append_answer_message,
    decode_message,
    decode_push,
    encode_message,
    encode_push_response,
    forwarded_append,
    forwarded_consumer_commit,
    forwarded_group_commit,
    forwarded_messages,
    forwarded_topic_change,
    messages_answer_message,
)
from raftlog.api.peer_wire import FORWARD_PATH, REPLICATE_PATH
from raftlog.api.service import LogService
from raftlog.api.topics import TopicService
from raftlog.raft.config import Peer
from raftlog.raft.messages import (
    Code,
    FetchRequest,
    HeartbeatRequest,
    PushRequest,
    PushResponse,
    TransferRequest,
    VoteRequest,
)
from raftlog.raft.node import RaftNode
from raftlog.raft.producers import Sequenced
from raftlog.storage.message import MessageFormatError

log = logging.getLogger("raftlog.api.peer_server")


Handler = Callable[[bytes, grpc.aio.ServicerContext], Awaitable[bytes]]
RAFT_CALLS = frozenset({"Vote", "Heartbeat", "Transfer", "Fetch"})  # outside the request budget


class StreamMethod(NamedTuple):
    """A method served as a long-lived stream on h2 (api.stream_server)."""

    name: str
    take: Callable[[bytes], asyncio.Future[Any]]  # a message, to its answer (PeerMessageError: it does not decode)
    encode: Callable[[Any], bytes]  # an answer, to its message


class PeerService:
    def __init__(self, node: RaftNode, service: LogService, secret: bytes | None,
                 failures: AuthFailures | None = None, budget: InflightBytes | None = None,
                 consumers: ConsumerCommits | None = None, topics: TopicService | None = None,
                 groups: ConsumerGroups | None = None) -> None:
        self.node = node
        self.service = service
        self.consumers = consumers  # None: this member's API keeps no named consumers (tests)
        self.topics = topics  # None: this member's API offers no topics (tests)
        self.groups = groups  # None: this member's API keeps no consumer groups (tests)
        self._digest = None if secret is None else secret_digest(secret)
        self._failures = failures
        self.budget = budget or InflightBytes(service.limits.max_inflight_body_bytes)
        self._handling: set[asyncio.Future[Any]] = set()  # messages handed to the node, whoever waits
        self._streams = {REPLICATE_PATH: StreamMethod("Replicate", self._take_push_message, encode_push_response),
                         FORWARD_PATH: StreamMethod("Forward", self.take_forward, pb.AppendResponse.SerializeToString)}
        self.peer_name: Callable[[str], str] = lambda peer: peer  # a caller's address, from gRPC's name of it

    def handler(self) -> grpc.GenericRpcHandler:
        unary: dict[str, Handler] = {
            "Vote": self._raft(VoteRequest, self.node.handle_vote),
            "Heartbeat": self._raft(HeartbeatRequest, self.node.handle_heartbeat),
            "Transfer": self._raft(TransferRequest, self.node.handle_transfer),
            "Fetch": self._fetch, "ReadIndex": self._read_index,
            "TransferLeadership": self._transfer_leadership, "Status": self._status,
            "ChangeMembership": self._change_membership, "CommitConsumer": self._commit_consumer,
            "ChangeSession": self._change_session, "ChangeTopic": self._change_topic,
            "AppendMessages": self._append_messages, "CommitGroup": self._commit_group,
        }
        methods: dict[str, grpc.RpcMethodHandler[Any, Any]] = {
            name: grpc.unary_unary_rpc_method_handler(self._guarded(call, budgeted=name not in RAFT_CALLS))
            for name, call in unary.items()}
        return grpc.method_handlers_generic_handler("raftlog.peer.v1.Peer", methods)

    def guard(self) -> grpc.aio.ServerInterceptor:
        """The interceptor of the peer port's gRPC server: the secret, before a message is read."""
        return SecretGuard(self)

    # -- the cluster secret -------------------------------------------------------------

    def refused(self, authorization: bytes | None) -> tuple[str, grpc.StatusCode, str] | None:
        """Why a call with this authorization header is refused: (reason, code, message); None: it is not."""
        if self._digest is None:
            return None
        given = bearer_credentials(authorization)
        if given is not None and is_secret(given, self._digest):
            return None
        if given is None:
            return "missing", grpc.StatusCode.UNAUTHENTICATED, "a peer call needs the cluster secret"
        return "invalid", grpc.StatusCode.PERMISSION_DENIED, "wrong cluster secret"

    def refusal(self, authorization: bytes | None, method: str, peer: str) -> tuple[grpc.StatusCode, str] | None:
        """Why a call with this authorization header is refused (counted and logged), or None."""
        refused = self.refused(authorization)
        if refused is None:
            return None
        self.note_refusal(refused[0], method, peer)
        return refused[1], refused[2]

    def note_refusal(self, reason: str, method: str, peer: str) -> None:
        if self._failures is not None:
            self._failures.note(reason, method, peer)

    def _guarded(self, call: Handler, budgeted: bool = False) -> Callable[[bytes, grpc.aio.ServicerContext],
                                                                          Awaitable[bytes]]:
        """The call, its message's bytes held in the budget while it runs (`budgeted`), a message that
        does not decode answered INVALID_ARGUMENT. (The secret was SecretGuard's, before.)"""
        budget = self.budget

        async def guarded(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
            held = len(request) if budgeted else 0
            if not budget.take(held):
                await context.abort(grpc.StatusCode.UNAVAILABLE, budget.refusal().message)
            try:
                return await call(request, context)
            except (PeerMessageError, DecodeError) as exc:
                await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
                raise  # not reached: abort raises
            finally:
                budget.give(held)

        return guarded

    # -- the streams (api.stream_server serves them) -------------------------------------

    def stream_method(self, path: bytes) -> StreamMethod | None:
        return self._streams.get(path)

    def take_push(self, request: PushRequest) -> asyncio.Future[PushResponse]:
        """Hand a push to the node; it runs to its end even if its stream goes, as a server's call would."""
        return self._keep(self.node.take_push(request))

    def _take_push_message(self, message: bytes) -> asyncio.Future[PushResponse]:
        return self.take_push(decode_push(message))

    def take_forward(self, message: bytes) -> asyncio.Future[pb.AppendResponse]:
        """A follower's clients' appends, one batch: appended here, if this member leads, and answered
        once committed, or with the error a client of this member would get. The message's bytes are
        held in the request budget until then; a batch over max_batch_entries is refused as it is
        counted, before it is built."""
        limit, size = self.service.limits.max_batch_entries, len(message)
        refused = None
        if size >= 2 * (limit + 1) and batch_entries(message, limit + 1) > limit:
            refused = too_large(f"over {limit} entries in one batch: max_batch_entries")
        elif not self.budget.take(size):
            refused = self.budget.refusal()
        if refused is not None:
            answer: asyncio.Future[pb.AppendResponse] = asyncio.get_running_loop().create_future()
            answer.set_result(pb.AppendResponse(error=api_error_message(refused)))
            return answer
        try:
            bodies, producer, caller = forwarded_append(message)
        except DecodeError as exc:
            self.budget.give(size)
            raise PeerMessageError(f"a forwarded append that does not decode: {exc}") from None
        appending = self._keep(asyncio.ensure_future(self._append(bodies, producer, caller)))
        appending.add_done_callback(lambda _: self.budget.give(size))  # the message itself is not held
        return appending

    async def _append(self, bodies: list[bytes], producer: Sequenced | None, caller: str) -> pb.AppendResponse:
        try:
            answer = await self.service.append_forwarded(bodies, producer, caller)
        except ApiError as exc:
            return pb.AppendResponse(error=api_error_message(exc))
        return append_answer_message(answer)

    def _keep(self, handling: asyncio.Future[Any]) -> asyncio.Future[Any]:
        """Keep what a stream handed over until it ends, even if its stream goes, as a server's call would."""
        self._handling.add(handling)
        handling.add_done_callback(self._handled)
        return handling

    def _handled(self, handling: asyncio.Future[Any]) -> None:
        self._handling.discard(handling)
        if not handling.cancelled() and handling.exception() is not None:
            log.error("a stream's message failed on this member", exc_info=handling.exception())

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
            return _json_answer((await self.service.transfer_leadership(target)).json())
        except ApiError as exc:
            return _answer(pb.JsonAnswer(error=api_error_message(exc)))

    async def _change_membership(self, request: bytes, _context: grpc.aio.ServicerContext) -> bytes:
        change = pb.MembershipChange.FromString(request)
        new = None
        if change.action == "add":
            new = Peer(change.id, change.peer_address, change.learner, change.client_url or None,
                       change.grpc_address or None)
        try:
            self._check_leader()
            return _json_answer((await self.service.change_membership(change.action, change.id, new)).json())
        except ApiError as exc:
            return _answer(pb.JsonAnswer(error=api_error_message(exc)))

    async def _commit_consumer(self, request: bytes, _context: grpc.aio.ServicerContext) -> bytes:
        ask = forwarded_consumer_commit(request)
        try:
            self._check_leader()
            if self.consumers is None:
                raise ApiError(Code.INTERNAL_ERROR, "this member keeps no named consumers")
            return _json_answer((await self.consumers.write(ask)).json())
        except ApiError as exc:
            return _answer(pb.JsonAnswer(error=api_error_message(exc)))

    async def _change_session(self, request: bytes, _context: grpc.aio.ServicerContext) -> bytes:
        change = pb.SessionChange.FromString(request)
        try:
            self._check_leader()
            answer = await self.service.change_session(change.producer_id, change.caller, change.close)
            return _json_answer(answer.json())
        except ApiError as exc:
            return _answer(pb.JsonAnswer(error=api_error_message(exc)))

    async def _change_topic(self, request: bytes, _context: grpc.aio.ServicerContext) -> bytes:
        op, name, fields, caller = forwarded_topic_change(request)
        try:
            topics = self._topics()
            topic = await topics.change_here(op, name, fields, caller)
            return _json_answer({} if topic is None else topic.json())
        except ApiError as exc:
            return _answer(pb.JsonAnswer(error=api_error_message(exc)))

    async def _append_messages(self, request: bytes, _context: grpc.aio.ServicerContext) -> bytes:
        """A follower's client's batch for one queue; its messages are counted before they are decoded,
        as a forwarded append's are (its bytes are held in the request budget: _guarded)."""
        limit = self.service.limits.max_batch_entries
        if len(request) >= 2 * (limit + 1) and batch_entries(request, limit + 1) > limit:
            refused = too_large(f"over {limit} messages in one batch: max_batch_entries")
            return _answer(pb.MessagesResponse(error=api_error_message(refused)))
        try:
            batch, caller, producer = forwarded_messages(request)
        except MessageFormatError as exc:
            raise PeerMessageError(f"a forwarded message that does not decode: {exc}") from None
        try:
            answer = await self._topics().append_forwarded(batch, caller, producer)
        except ApiError as exc:
            return _answer(pb.MessagesResponse(error=api_error_message(exc)))
        return _answer(messages_answer_message(answer))

    async def _commit_group(self, request: bytes, _context: grpc.aio.ServicerContext) -> bytes:
        ask = forwarded_group_commit(request)
        try:
            self._check_leader()
            if self.groups is None:
                raise ApiError(Code.INTERNAL_ERROR, "this member keeps no consumer groups")
            return _json_answer((await self.groups.write_here(ask)).json())
        except ApiError as exc:
            return _answer(pb.JsonAnswer(error=api_error_message(exc)))

    def _topics(self) -> TopicService:
        """The topics of this member, which leads (else NOT_LEADER)."""
        self._check_leader()
        if self.topics is None:
            raise ApiError(Code.INTERNAL_ERROR, "this member offers no topics")
        return self.topics

    async def _status(self, _request: bytes, _context: grpc.aio.ServicerContext) -> bytes:
        return _json_answer(self.service.own_status())

    def _check_leader(self) -> None:
        """A call forwarded to the leader is never forwarded again."""
        if not self.node.state.is_leader:
            raise ApiError(Code.NOT_LEADER, "this member is not the leader", self.node.leader_id)


class SecretGuard(grpc.aio.ServerInterceptor):
    """The cluster secret, from a call's metadata, before its message is read: a refused call gets a
    client-streaming handler, which grpc.aio runs without receiving a message (api.grpc_api.CallGuard
    says more), and which ends the call with the refusal, counted and logged as every refusal is."""

    def __init__(self, service: PeerService) -> None:
        self.service = service

    async def intercept_service(self, continuation: Any, details: grpc.HandlerCallDetails) -> Any:
        authorization = next((v for k, v in details.invocation_metadata or () if k == "authorization"), None)
        if isinstance(authorization, str):
            authorization = authorization.encode("latin-1")
        refused = self.service.refused(authorization)
        if refused is None:
            return await continuation(details)
        reason, code, message = refused
        method = details.method.rpartition("/")[2]
        service = self.service

        async def refuse(_requests: Any, context: grpc.aio.ServicerContext) -> None:
            service.note_refusal(reason, method, service.peer_name(context.peer()))
            await context.abort(code, message)

        return grpc.stream_unary_rpc_method_handler(refuse)


def _answer(message: Message) -> bytes:
    return message.SerializeToString()


def _json_answer(value: dict[str, Any]) -> bytes:
    return _answer(pb.JsonAnswer(json=json.dumps(value, separators=(",", ":"))))
