"""Bugs planted into every node process of a fault run (`python -m tests.faults --mutant NAME`), to show
that the suite catches them; `python -m tests.faults.mutation` (make mutants) runs the whole table.

The simulation's bugs (tests.sim.mutants; its topics' bugs the topic writers catch here too), and bugs
in code only real processes run: the peer port's replication stream at both ends, the gRPC API (the
simulation's retried append, planted in the gRPC API's own appends and retried on every error of
unknown outcome, as a retry policy on UNAVAILABLE, UNKNOWN and DEADLINE_EXCEEDED would), the client
port's fast path, and a topic's messages forwarded to the leader. Each is (owner, attribute, make) as
there. A node started with RAFTLOG_TEST_MUTANT=NAME by `python -m tests.faults.node` plants
it before the node starts and says so in one line of its log (MARKER).
"""

from __future__ import annotations

import asyncio
import os
import re
from collections.abc import Callable
from functools import partial
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Scope

from raftlog.api.fast_path import ENTRY_PREFIX, EntryFastPath, Handling
from raftlog.api.grpc_api import LogServicer
from raftlog.api.peer_server import PeerService
from raftlog.api.peer_stream import H2PushStream
from raftlog.api.topics import TopicService
from raftlog.raft.messages import Code, PushRequest, PushResponse, PushType
from raftlog.raft.producers import Sequenced
from raftlog.raft.topic_appends import MessageBatch
from raftlog.storage.codec import client_body
from tests.sim.mutants import MUTANTS, retries_forwarded_appends

ENV = "RAFTLOG_TEST_MUTANT"
MARKER = "mutant {name} planted in process {pid}"
UNKNOWN = frozenset({Code.NETWORK_ERROR, Code.TIMEOUT, Code.WAIT_QUORUM_ACK_TIMEOUT})  # errors of unknown outcome


def acks_pushes_before_handling(original: Callable[..., Any]) -> Callable[..., Any]:
    """The peer port answers an append push SUCCESS as it arrives; the node handles it after."""

    def take_push(self: PeerService, request: PushRequest) -> asyncio.Future[PushResponse]:
        handling = original(self, request)
        if request.type is not PushType.APPEND or request.count <= 0:
            return handling
        answer: asyncio.Future[PushResponse] = asyncio.get_running_loop().create_future()
        answer.set_result(PushResponse(Code.SUCCESS, self.node.state.current_term, request.first_index,
                                       end_index=request.last_index, end_term=request.term,
                                       ack_index=request.last_index))
        return answer

    return take_push


def drops_push_on_reconnect(original: Callable[..., Any]) -> Callable[..., Any]:
    """A leader's new stream to a follower it was connected to before loses the first push queued
    while it connected (its answer is still awaited)."""
    connected: set[str] = set()

    def connection_made(self: H2PushStream, transport: asyncio.BaseTransport) -> None:
        if self.peer_id in connected and len(self._outbox) >= 2:
            self._outbox.popleft()  # the message's prefix
            self._outbox.popleft()  # and the message
        connected.add(self.peer_id)
        original(self, transport)

    return connection_made


def fast_path_reads_past_commit(original: Callable[..., Any]) -> Callable[..., Any]:
    """The client port's fast path answers a get of any index its member's log holds, committed or not."""

    def match(self: EntryFastPath, scope: Scope) -> tuple[str, Handling] | None:
        hot = original(self, scope)
        if hot is None or scope["method"] != "GET":
            return hot
        template, handling = hot
        index = int(scope["path"][len(ENTRY_PREFIX):])

        async def past_commit(request: Request) -> Response:
            service = self.handlers.service
            if service.node.committed_index < index <= service.store.end_index:
                body = client_body(service.store.get(index))  # as a committed one is read: without a stamp
                return Response(bytes(body), media_type="application/octet-stream")
            return await handling(request)

        return template, past_commit

    return match


def forwards_messages_unstamped(original: Callable[..., Any]) -> Callable[..., Any]:
    """The leader appends a topic's batch that a follower forwarded without its producer's stamp (as if
    the peer call lost it): a retry through a follower of a batch that went in goes in again, and the
    producer's next batch in that queue no longer follows its session."""

    async def append_forwarded(self: TopicService, batch: MessageBatch, caller: str,
                               producer: Sequenced | None = None) -> Any:
        return await original(self, batch, caller, None)

    return append_forwarded


FAULT_MUTANTS: dict[str, tuple[object, str, Callable[[Any], Any]]] = {
    "acks-pushes-before-handling": (PeerService, "take_push", acks_pushes_before_handling),
    "drops-push-on-reconnect": (H2PushStream, "connection_made", drops_push_on_reconnect),
    "retries-grpc-forwarded-appends": (LogServicer, "_append", partial(retries_forwarded_appends, codes=UNKNOWN)),
    "fast-path-reads-past-commit": (EntryFastPath, "match", fast_path_reads_past_commit),
    "forwards-messages-unstamped": (TopicService, "append_forwarded", forwards_messages_unstamped),
}
ALL = {**MUTANTS, **FAULT_MUTANTS}


def plant(name: str) -> str:
    """Replace the attribute `name` names with its buggy version; the marker line to log."""
    owner, attribute, make = ALL[name]
    setattr(owner, attribute, make(getattr(owner, attribute)))
    return MARKER.format(name=name, pid=os.getpid())


def planted_pids(name: str, log: str) -> set[int]:
    """The processes whose log lines say `name` was planted in them."""
    return {int(pid) for pid in re.findall(MARKER.format(name=re.escape(name), pid=r"(\d+)"), log)}
