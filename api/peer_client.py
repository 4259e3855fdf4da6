"""The peer client: raft's Transport over gRPC (HTTP/2, cleartext or mutual TLS), and the calls
a node's public API makes to its peers (forwarded appends, read index, leadership transfer,
status). Every call carries the cluster secret, when there is one.

One channel (one HTTP/2 connection) per peer for unary calls, each with a
deadline. Replication is one long-lived bidirectional stream per follower, on a
connection of its own driven by h2 (`api.peer_stream.H2PushStream`), to the
same service's Replicate method (served on h2 too: api.peer_port); appends a
follower takes go to its leader the same way, many in one message
(`api.forward_stream.ForwardStream`). Keepalive
pings find a dead or silent peer, and
the channel reconnects on its own, quickly (RECONNECT_BACKOFF_MS). While a peer
is known down, calls to it fail at once, as a refused connection does: a vote
round must not wait for a dead member's answer, nor a client for a forward to a
dead leader (it gets NETWORK_ERROR and asks again, or another member). A peer that
is down, slow or answers garbage raises PeerUnavailable: a failed call the
caller retries on its own timer. A call that failed is never sent again: the
peer may have acted on it.
"""

from __future__ import annotations

import asyncio
import json
import logging
import ssl
import tempfile
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import grpc
import grpc.aio
from google.protobuf.message import DecodeError, Message

from raftlog.api import peer_pb2 as pb
from raftlog.api.answers import (
    AppendAnswer,
    ConsumerAnswer,
    GroupCommitted,
    MembershipAnswer,
    MessagesAnswer,
    ProducerAnswer,
    TransferAnswer,
    topic_from_json,
)
from raftlog.api.errors import ApiError, too_large
from raftlog.api.forward_stream import ForwardStream
from raftlog.api.peer_codec import (
    PeerMessageError,
    append_answer_share,
    consumer_commit_request,
    decode_message,
    encode_message,
    group_commit_request,
    messages_answer,
    messages_request,
    topic_change_request,
)
from raftlog.api.peer_stream import H2PushStream
from raftlog.api.peer_wire import FRAME_BYTES_MAX, KEEPALIVE_MS, KEEPALIVE_TIMEOUT_MS, SERVICE
from raftlog.raft.cluster_version import TOPICS
from raftlog.raft.config import Peer
from raftlog.raft.consumers import ConsumerAsk
from raftlog.raft.group_offsets import GroupAsk
from raftlog.raft.messages import (
    Code,
    FetchRequest,
    HeartbeatRequest,
    HeartbeatResponse,
    TransferRequest,
    TransferResponse,
    VoteRequest,
    VoteResponse,
)
from raftlog.raft.producers import Sequenced
from raftlog.raft.topic_appends import MessageBatch
from raftlog.raft.topics import Topic
from raftlog.raft.transport import PeerUnavailable
from raftlog.raft.waiting import loop_time

log = logging.getLogger("raftlog.api.peers")

UNREACHABLE_WARN_S = 10.0
FORWARD_FIELD_BYTES_MAX = 6  # a body's tag and length in a forwarded message
RECONNECT_BACKOFF_MS = (100, 250)  # first and longest wait before connecting again (gRPC's default: 1 s, 120 s)

M = TypeVar("M")
A = TypeVar("A", MembershipAnswer, TransferAnswer, ConsumerAnswer, ProducerAnswer, GroupCommitted)


@dataclass(frozen=True)
class PeerTls:
    """PEM bytes for mutual TLS on the peer port: the CA every member's certificate is signed by,
    and this member's own key and certificate (it serves and calls with the same one)."""

    ca: bytes
    key: bytes
    cert: bytes


def channel_options(max_message_bytes: int) -> list[tuple[str, int]]:
    """What both ends of a peer connection agree on: message size, keepalive, quick reconnects."""
    return [("grpc.max_send_message_length", max_message_bytes),
            ("grpc.max_receive_message_length", max_message_bytes),
            ("grpc.keepalive_time_ms", KEEPALIVE_MS), ("grpc.keepalive_timeout_ms", KEEPALIVE_TIMEOUT_MS),
            ("grpc.keepalive_permit_without_calls", 1), ("grpc.http2.max_pings_without_data", 0),
            ("grpc.http2.min_time_between_pings_ms", KEEPALIVE_MS),
            ("grpc.http2.ping_timeout_ms", KEEPALIVE_TIMEOUT_MS),
            ("grpc.http2.max_frame_size", FRAME_BYTES_MAX)]


class UnimplementedCall(PeerUnavailable):
    """A call the peer's release does not have (gRPC's UNIMPLEMENTED)."""


class PeerClient:
    def __init__(self, self_id: str, peers: Sequence[Peer], *, rpc_timeout_ms: int,
                 push_timeout_ms: int, wait_timeout_ms: int, max_message_bytes: int, max_batch_entries: int,
                 secret: bytes | None = None, tls: PeerTls | None = None,
                 on_push: Callable[[str, float, int], None] | None = None,
                 routes: dict[str, str] | None = None) -> None:
        self.self_id = self_id
        self.routes = routes or {}  # where to reach some peers, over their configured address
        self.metadata: tuple[tuple[str, str], ...] = (("authorization", f"Bearer {secret.decode()}"),) if secret else ()
        self.on_push = on_push  # (peer, seconds, bytes) of each answered push, for metrics
        self.rpc_timeout_s = rpc_timeout_ms / 1000
        self.push_timeout_s = push_timeout_ms / 1000  # an overdue push answer breaks its stream
        self.wait_timeout_s = wait_timeout_ms / 1000  # calls that wait for a quorum on the leader
        self.keepalive_s = KEEPALIVE_MS / 1000  # the replication stream's, as gRPC's channels keep theirs
        self.keepalive_timeout_s = KEEPALIVE_TIMEOUT_MS / 1000
        self._stream_tls = None if tls is None else _stream_tls(tls)
        self.max_batch_entries = max_batch_entries  # a forwarded message's entries, as the leader takes them
        self.max_forward_bytes = max_message_bytes - FORWARD_FIELD_BYTES_MAX * max_batch_entries - 64
        self._forwards: dict[str, ForwardStream] = {}  # to each peer that led when this member took an append
        self._streams: weakref.WeakSet[H2PushStream] = weakref.WeakSet()  # closed with the client
        self._options = [*channel_options(max_message_bytes),
                         ("grpc.initial_reconnect_backoff_ms", RECONNECT_BACKOFF_MS[0]),
                         ("grpc.min_reconnect_backoff_ms", RECONNECT_BACKOFF_MS[0]),
                         ("grpc.max_reconnect_backoff_ms", RECONNECT_BACKOFF_MS[1])]
        self._credentials = None if tls is None else grpc.ssl_channel_credentials(tls.ca, tls.key, tls.cert)
        self.addresses: dict[str, str] = {}
        self._channels: dict[str, grpc.aio.Channel] = {}
        self._closing: set[asyncio.Task[None]] = set()
        self.last_contact: dict[str, float] = {}  # when a peer last answered (the loop's clock)
        self._failing_since: dict[str, float] = {}  # a peer's first failed call, for one that never answered
        self._warned: dict[str, float] = {}  # when each silent peer was last warned about
        self.set_members(peers)

    def set_members(self, peers: Sequence[Peer]) -> None:
        """The group's members changed (raft.node's configuration listener): a channel to each new
        member or new address; those to members that left are closed."""
        wanted = {p.id: self.routes.get(p.id, p.address) for p in peers if p.id != self.self_id}
        for peer in [p for p, address in self.addresses.items() if wanted.get(p) != address]:
            del self.addresses[peer]
            self._close_later(self._channels.pop(peer))
            forward = self._forwards.pop(peer, None)
            if forward is not None:
                forward.close("the member left the group, or moved")
        for peer, address in wanted.items():
            if peer not in self.addresses:
                self.addresses[peer] = address
                self._channels[peer] = (
                    grpc.aio.insecure_channel(address, options=self._options) if self._credentials is None
                    else grpc.aio.secure_channel(address, self._credentials, options=self._options))

    def _close_later(self, channel: grpc.aio.Channel) -> None:
        """Close a channel once its calls in flight are answered (a change forwarded to a leader that is
        leaving waits for its answer), or have had as long as the longest of them may take."""
        task = asyncio.ensure_future(channel.close(self.wait_timeout_s))
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    async def close(self) -> None:
        for stream in [*self._streams, *self._forwards.values()]:
            stream.close()
        for channel in self._channels.values():
            await channel.close(None)
        await asyncio.gather(*self._closing, return_exceptions=True)

    # -- raft.transport.Transport ------------------------------------------------------

    def open_stream(self, peer_id: str) -> H2PushStream:
        address = self.addresses.get(peer_id)
        if address is None:
            raise PeerUnavailable(f"Replicate: unknown peer {peer_id!r}")
        stream = H2PushStream(self, peer_id, address, self._stream_tls)
        self._streams.add(stream)
        return stream

    async def vote(self, peer_id: str, request: VoteRequest) -> VoteResponse:
        return await self._raft_call(peer_id, "Vote", request, VoteResponse)

    async def heartbeat(self, peer_id: str, request: HeartbeatRequest) -> HeartbeatResponse:
        return await self._raft_call(peer_id, "Heartbeat", request, HeartbeatResponse)

    async def transfer(self, peer_id: str, request: TransferRequest) -> TransferResponse:
        return await self._raft_call(peer_id, "Transfer", request, TransferResponse)

    async def fetch(self, peer_id: str, request: FetchRequest) -> bytes:
        answer = await self._unary(peer_id, "Fetch", encode_message(request), self.rpc_timeout_s)
        return _parse(pb.RawEntry, answer, peer_id).data

    # -- the public API's calls to other members ----------------------------------------

    async def forward_append(self, leader_id: str, bodies: Sequence[bytes],
                             producer: Sequenced | None = None, caller: str = "") -> AppendAnswer:
        """Append through the leader, with the appends around it; its answer, or its error as an ApiError."""
        stream = self._forwards.get(leader_id)
        if stream is None or stream.broken:
            address = self.addresses.get(leader_id)
            if address is None:
                raise ApiError(Code.NETWORK_ERROR, f"no answer from {leader_id}: not a known member")
            stream = self._forwards[leader_id] = ForwardStream(
                self, leader_id, address, self._stream_tls, max_entries=self.max_batch_entries,
                max_bytes=self.max_forward_bytes)
        try:
            answer, offset, count = await stream.append(bodies, producer, caller)
        except PeerUnavailable as exc:
            raise ApiError(Code.NETWORK_ERROR, f"no answer from {leader_id}: {exc}") from None
        if answer.HasField("error"):
            raise _api_error(answer.error, leader_id)
        return append_answer_share(answer, offset, count)

    async def read_index(self, leader_id: str) -> int:
        answer = await self._api_call(leader_id, "ReadIndex", pb.ReadIndexRequest(), pb.ReadIndexResponse)
        return answer.committed_index

    async def transfer_leadership(self, leader_id: str, target: str) -> TransferAnswer:
        answer = await self._api_call(leader_id, "TransferLeadership", pb.TransferLeadershipRequest(target=target),
                                      pb.JsonAnswer)
        return _typed(TransferAnswer, answer.json, leader_id)

    async def change_membership(self, leader_id: str, action: str, member_id: str,
                                new: Peer | None) -> MembershipAnswer:
        request = pb.MembershipChange(action=action, id=member_id)
        if new is not None:
            request.peer_address, request.learner = new.address, new.learner
            request.client_url, request.grpc_address = new.client_url or "", new.grpc_address or ""
        answer = await self._api_call(leader_id, "ChangeMembership", request, pb.JsonAnswer)
        return _typed(MembershipAnswer, answer.json, leader_id)

    async def commit_consumer(self, leader_id: str, ask: ConsumerAsk) -> ConsumerAnswer:
        answer = await self._api_call(leader_id, "CommitConsumer", consumer_commit_request(ask), pb.JsonAnswer)
        return _typed(ConsumerAnswer, answer.json, leader_id)

    async def change_session(self, leader_id: str, producer_id: int, caller: str, close: bool) -> ProducerAnswer:
        """A producer session opened or closed by the leader. A leader of a release before cluster
        versions has no such call: its group is below the version sessions need."""
        request = pb.SessionChange(producer_id=producer_id, caller=caller, close=close)
        try:
            answer = await self._api_call(leader_id, "ChangeSession", request, pb.JsonAnswer)
        except UnimplementedCall:
            raise ApiError(Code.CLUSTER_VERSION_TOO_LOW, f"producer sessions with owners need cluster version 1; "
                           f"the leader {leader_id} runs a release before cluster versions", leader_id) from None
        return _typed(ProducerAnswer, answer.json, leader_id)

    async def change_topic(self, leader_id: str, op: str, name: str, fields: Mapping[str, Any],
                           caller: str) -> Topic | None:
        """A topic created, changed or deleted by the leader: the topic then (None: deleted)."""
        request = topic_change_request(op, name, fields, caller)
        try:
            answer = await self._api_call(leader_id, "ChangeTopic", request, pb.JsonAnswer)
        except UnimplementedCall:
            raise _before_topics(leader_id) from None
        fields = _json(answer.json, leader_id)
        try:
            return topic_from_json(fields) if fields else None
        except ValueError as exc:
            raise ApiError(Code.NETWORK_ERROR, f"{leader_id} answered something else than a topic: {exc}") from None

    async def append_messages(self, leader_id: str, batch: MessageBatch, caller: str,
                              producer: Sequenced | None = None) -> MessagesAnswer:
        """One queue's batch of messages, appended by the leader once committed."""
        request = messages_request(batch, caller, producer)
        if request.ByteSize() > self.max_forward_bytes:
            raise too_large(f"a batch of {request.ByteSize()} bytes with its messages' keys, tags and properties: "
                            f"the leader takes at most {self.max_forward_bytes}")
        try:
            answer = await self._api_call(leader_id, "AppendMessages", request, pb.MessagesResponse)
        except UnimplementedCall:
            raise _before_topics(leader_id) from None
        return messages_answer(answer)

    async def commit_group(self, leader_id: str, ask: GroupAsk) -> GroupCommitted:
        """A consumer group's commit (or removal), one entry written by the leader once committed."""
        try:
            answer = await self._api_call(leader_id, "CommitGroup", group_commit_request(ask), pb.JsonAnswer)
        except UnimplementedCall:
            raise _before_topics(leader_id) from None
        return _typed(GroupCommitted, answer.json, leader_id)

    async def status(self, peer_id: str, timeout_s: float) -> dict[str, Any]:
        answer = await self._api_call(peer_id, "Status", pb.StatusRequest(), pb.JsonAnswer, timeout_s)
        return _json(answer.json, peer_id)

    # -- plumbing ----------------------------------------------------------------------

    async def _raft_call(self, peer_id: str, method: str, request: object, answer_type: type[M]) -> M:
        answer = await self._unary(peer_id, method, encode_message(request), self.rpc_timeout_s)
        try:
            return decode_message(answer_type, answer)
        except PeerMessageError as exc:
            raise PeerUnavailable(f"{peer_id} {method}: {exc}") from None

    async def _api_call(self, peer_id: str, method: str, request: Message, answer_type: type[Any],
                        timeout_s: float | None = None) -> Any:
        """An API call; transport failures become NETWORK_ERROR (but a call the peer's release does not
        have: UnimplementedCall), the peer's errors pass through with their code and status, so a
        member answers as the leader did."""
        try:
            data = await self._unary(peer_id, method, request.SerializeToString(), timeout_s or self.wait_timeout_s)
            answer = _parse(answer_type, data, peer_id)
        except UnimplementedCall:
            raise
        except PeerUnavailable as exc:
            raise ApiError(Code.NETWORK_ERROR, f"no answer from {peer_id}: {exc}") from None
        if answer.HasField("error"):
            raise _api_error(answer.error, peer_id)
        return answer

    async def _unary(self, peer_id: str, method: str, request: bytes, timeout_s: float) -> bytes:
        call: grpc.aio.UnaryUnaryMultiCallable[bytes, bytes] = self._channel(peer_id, method).unary_unary(
            SERVICE + method)
        try:
            answer: bytes = await call(request, timeout=timeout_s, metadata=self.metadata)
        except grpc.aio.AioRpcError as exc:  # refused, reset, timed out, a protocol error, a wrong secret
            failure = UnimplementedCall if exc.code() is grpc.StatusCode.UNIMPLEMENTED else PeerUnavailable
            raise failure(f"{peer_id} {method}: {self.failed(peer_id, method, exc)}") from None
        self.answered(peer_id)
        return answer

    def _channel(self, peer_id: str, method: str) -> grpc.aio.Channel:
        channel = self._channels.get(peer_id)
        if channel is None:
            raise PeerUnavailable(f"{method}: unknown peer {peer_id!r}")
        return channel

    def answered(self, peer_id: str) -> None:
        self.last_contact[peer_id] = loop_time()

    def failed(self, peer_id: str, what: str, exc: Exception) -> str:
        """Why a call failed, in a line; a peer silent for UNREACHABLE_WARN_S gets a warning, once
        per UNREACHABLE_WARN_S."""
        reason = _describe(exc)
        now = loop_time()
        since = self.last_contact.get(peer_id)
        if since is None:  # never answered: silent since its first failed call
            since = self._failing_since.setdefault(peer_id, now)
        silent = now - since
        if silent >= UNREACHABLE_WARN_S and now - self._warned.get(peer_id, -UNREACHABLE_WARN_S) >= UNREACHABLE_WARN_S:
            self._warned[peer_id] = now
            log.warning("%s has not answered for %.0f s; last error (%s): %s", peer_id, silent, what, reason)
        return reason


def _stream_tls(tls: PeerTls) -> ssl.SSLContext:
    """The replication stream's TLS, as the gRPC channels have it: the group's CA, this member's
    certificate, the peer's address checked against its certificate, HTTP/2 by ALPN."""
    context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cadata=tls.ca.decode())
    load_identity(context, tls)
    context.set_alpn_protocols(["h2"])
    return context


def load_identity(context: ssl.SSLContext, tls: PeerTls) -> None:
    """This member's certificate and key, which it serves and calls with."""
    with tempfile.NamedTemporaryFile() as chain:  # ssl loads a key from a file only; this one is 0600
        chain.write(tls.cert + b"\n" + tls.key)
        chain.flush()
        context.load_cert_chain(chain.name)


def _describe(exc: Exception) -> str:
    if isinstance(exc, grpc.aio.AioRpcError):
        return f"{exc.code().name}: {exc.details()}"
    return f"{type(exc).__name__}: {exc}"


def _parse(answer_type: type[Any], data: bytes, peer_id: str) -> Any:
    try:
        return answer_type.FromString(data)
    except DecodeError as exc:
        raise PeerUnavailable(f"{peer_id} answered garbage: {exc}") from None


def _json(text: str, peer_id: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except ValueError:
        value = None
    if not isinstance(value, dict):
        raise ApiError(Code.NETWORK_ERROR, f"{peer_id} answered something else than a JSON object")
    return value


def _before_topics(leader_id: str) -> ApiError:
    return ApiError(Code.CLUSTER_VERSION_TOO_LOW, f"topics need cluster version {TOPICS}; the leader {leader_id} "
                    "runs a release before topics", leader_id)


def _typed(answer_type: type[A], text: str, peer_id: str) -> A:
    """A typed answer from its JSON in a peer's message (api.answers maps both ways)."""
    try:
        return answer_type.from_json(_json(text, peer_id))
    except ValueError as exc:
        raise ApiError(Code.NETWORK_ERROR, f"{peer_id} answered something else than a {answer_type.__name__}: {exc}") \
            from None


def api_error_message(error: ApiError) -> pb.ApiError:
    """How a peer answers an error of a served call: the public code, message, leader and status."""
    return pb.ApiError(code=error.code.name, message=error.message, leader=error.leader or "", status=error.status)


def _api_error(error: pb.ApiError, peer_id: str) -> ApiError:
    try:
        return ApiError(Code[error.code], error.message, error.leader or None, error.status)
    except KeyError:
        return ApiError(Code.NETWORK_ERROR, f"{peer_id} answered an unknown error code {error.code!r}")


