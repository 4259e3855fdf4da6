"""Bugs to plant in the raft code and the service layer, to show that the simulation's checks catch them.

Each entry is (owner, attribute, make): `make(original)` returns the buggy
replacement for `owner.attribute`. Planted by a test's monkeypatch, or by
`python -m tests.sim --mutant NAME` for a scan over seeds.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any

from raftlog.api.errors import ApiError
from raftlog.api.service import LogService
from raftlog.raft.client_appends import ClientAppends
from raftlog.raft.commitment import Commitment
from raftlog.raft.consume_dispatch import ConsumeQueueDispatcher
from raftlog.raft.consumers import ConsumerPositions
from raftlog.raft.handler import EntryHandler
from raftlog.raft.member_state import MemberState
from raftlog.raft.messages import Code, PushRequest, PushResponse, PushType, Role
from raftlog.raft.node import RaftNode
from raftlog.raft.producers import ProducerTable
from raftlog.raft.queues import QueueOffsets
from raftlog.raft.quorum import quorum_index
from raftlog.storage.codec import Magic
from raftlog.storage.consume_queue import ConsumeQueue
from raftlog.storage.message import QueuedRun


def votes_twice(original: Callable[..., Any]) -> Callable[..., Any]:
    """A member never remembers (nor persists) whom it voted for: it grants every vote of a term."""

    async def vote_for(self: MemberState, candidate: str) -> None:
        return None

    return vote_for


def acks_before_writing(original: Callable[..., Any]) -> Callable[..., Any]:
    """A follower answers SUCCESS to an append push, then writes it."""
    writes: set[asyncio.Future[PushResponse]] = set()

    def take(self: EntryHandler, request: PushRequest) -> asyncio.Future[PushResponse]:
        write = original(self, request)
        if request.type is not PushType.APPEND or request.count <= 0:
            return write
        writes.add(write)
        write.add_done_callback(writes.discard)
        early: asyncio.Future[PushResponse] = asyncio.get_running_loop().create_future()
        early.set_result(self._answer(request, Code.SUCCESS, ack_index=request.last_index))
        return early

    return take


def skips_truncation(original: Callable[..., Any]) -> Callable[..., Any]:
    """A follower answers a TRUNCATE with SUCCESS and keeps its entries."""

    async def truncate(self: EntryHandler, request: PushRequest) -> PushResponse:
        self.matched_end = request.pre_log_index - 1
        return self._answer(request, Code.SUCCESS)

    return truncate


def reads_without_confirming(original: Callable[..., Any]) -> Callable[..., Any]:
    """Read index answers the leader's commit index without a heartbeat round."""

    async def read_index(self: RaftNode) -> int:
        if not self.state.is_leader or not self.caught_up:
            return await original(self)
        return self.state.committed_index

    return read_index


def commits_earlier_terms(original: Callable[..., Any]) -> Callable[..., Any]:
    """The quorum check commits the median watermark whatever its entry's term."""

    def check_quorum(self: Commitment) -> None:
        if not self.state.is_leader:
            return
        self._watermarks[self.config.self_id] = self.store.ack_end_index
        index = quorum_index(self._watermarks, self.members.current.voters)
        if index > self.state.committed_index:
            self.commit(index)

    return check_quorum


def reads_local_commit_index(original: Callable[..., Any]) -> Callable[..., Any]:
    """The service serves a linearizable read from the member's own commit index."""

    async def readable_end(self: LogService, first: int, last: int, linearizable: bool) -> int:
        return self.node.committed_index

    return readable_end


def ends_ranges_at_local_commit_index(original: Callable[..., Any]) -> Callable[..., Any]:
    """A range that starts within the member's commit index ends there, without a read-index round."""

    async def readable_end(self: LogService, first: int, last: int, linearizable: bool) -> int:
        if self.node.committed_index >= first:
            return self.node.committed_index
        return await original(self, first, last, linearizable)

    return readable_end


def retries_forwarded_appends(original: Callable[..., Any],
                              codes: frozenset[Code] = frozenset({Code.NETWORK_ERROR})) -> Callable[..., Any]:
    """The service retries a forwarded append whose answer did not come back (or whose error is one of
    `codes`, each leaving the outcome unknown), as a plain append: a producer's session is dropped on
    the way, so nothing tells the retry from a new append."""

    async def append(self: LogService, bodies: Sequence[bytes], producer: Any = None, caller: str = "") -> Any:
        try:
            return await original(self, bodies, producer, caller)
        except ApiError as exc:
            if exc.code not in codes:
                raise
            return await original(self, bodies, None, caller)

    return append


def acks_before_quorum(original: Callable[..., Any]) -> Callable[..., Any]:
    """The leader acknowledges an append once it is in its own log, before a quorum holds it."""

    async def append(self: ClientAppends, bodies: Sequence[bytes], producer: Any = None, caller: str = "") -> Any:
        appended, _committed = await self.append_local(bodies, self.state.current_term, Magic.NORMAL, producer,
                                                       caller)
        return appended

    return append


def forgets_producers(original: Callable[..., Any]) -> Callable[..., Any]:
    """A new leader forgets the producer sessions its log holds: a producer's retry of an append the
    old leader wrote is written again."""

    def on_role_change(self: RaftNode, term: int, role: Role) -> None:
        if role is Role.LEADER:
            self.sessions.table = ProducerTable()
        original(self, term, role)

    return on_role_change


def forgets_saved_consumers(original: Callable[..., Any]) -> Callable[..., Any]:
    """A restarted member drops the consumer positions its checkpoint saved and reads the log after
    them only: a consumer that committed before is lost there."""

    def restore(self: ConsumerPositions, saved: bytes | None) -> int:
        start = original(self, saved)
        self.table = {}
        return start

    return restore


def offsets_from_committed(original: Callable[..., Any]) -> Callable[..., Any]:
    """The leader takes a queue's next offset from its committed messages (an applied table), not from its
    log's tail: a batch appended while another is uncommitted takes that one's offsets again."""

    def next_offset(self: QueueOffsets, topic_id: int, queue: int) -> int:
        return self.committed_offsets().get((topic_id, queue), 0)

    return next_offset


def dispatches_uncommitted(original: Callable[..., Any]) -> Callable[..., Any]:
    """The consume queues' dispatcher indexes messages as they join the log, committed or not."""

    def queued(self: ConsumeQueueDispatcher, run: QueuedRun) -> None:
        original(self, run)
        self.committed(run[4])

    return queued


def keeps_queues_past_the_log(original: Callable[..., Any]) -> Callable[..., Any]:
    """A start does not cut a consume queue where the log goes on after its dispatched point (RocketMQ's
    truncateDirtyLogicFiles left out): the units past it stay."""

    def truncate_past_pos(self: ConsumeQueue, pos: int) -> None:
        return None

    return truncate_past_pos


MUTANTS: dict[str, tuple[object, str, Callable[[Any], Any]]] = {
    "acks-before-quorum": (ClientAppends, "append", acks_before_quorum),
    "votes-twice": (MemberState, "vote_for", votes_twice),
    "acks-before-writing": (EntryHandler, "take", acks_before_writing),
    "skips-truncation": (EntryHandler, "_truncate", skips_truncation),
    "reads-without-confirming": (RaftNode, "read_index", reads_without_confirming),
    "commits-earlier-terms": (Commitment, "check_quorum", commits_earlier_terms),
    "reads-local-commit-index": (LogService, "readable_end", reads_local_commit_index),
    "ends-ranges-at-local-commit-index": (LogService, "readable_end", ends_ranges_at_local_commit_index),
    "retries-forwarded-appends": (LogService, "append", retries_forwarded_appends),
    "forgets-producers": (RaftNode, "_on_role_change", forgets_producers),
    "forgets-saved-consumers": (ConsumerPositions, "restore", forgets_saved_consumers),
    "offsets-from-committed": (QueueOffsets, "next_offset", offsets_from_committed),
    "dispatches-uncommitted": (ConsumeQueueDispatcher, "queued", dispatches_uncommitted),
    "keeps-queues-past-the-log": (ConsumeQueue, "truncate_past_pos", keeps_queues_past_the_log),
}
