"""What the routes do, apart from HTTP: appends through the leader, consistent reads,
cluster status, leadership transfer. The public routes and the peer port share it.

Reads serve committed entries only. A committed entry never changes, so a
member whose own commit index has reached I answers at once; otherwise a
linearizable read asks the leader for its confirmed commit index (read index)
and waits for its own log to reach I, or answers INDEX_OUT_OF_RANGE when the
leader has not committed I either.
"""

from __future__ import annotations

import asyncio
import secrets
import sys
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, NamedTuple, TypeVar

from raftlog.api.answers import (
    AppendAnswer,
    DiskStatus,
    MembershipAnswer,
    MemberStatus,
    ProducerAnswer,
    StatusAnswer,
    TransferAnswer,
)
from raftlog.api.auth import LOCAL_CALLER, is_loopback
from raftlog.api.errors import ApiError, api_error, bad_request, too_large
from raftlog.api.limits import ApiLimits, ByteBudget
from raftlog.api.peer_client import PeerClient
from raftlog.api.shared_rounds import SharedRounds
from raftlog.raft.config import Peer
from raftlog.raft.errors import NotLeaderError
from raftlog.raft.messages import Code, Role
from raftlog.raft.node import RaftNode
from raftlog.raft.producers import PRODUCER_ID_MAX, Sequenced, out_of_range
from raftlog.raft.waiting import wait_event
from raftlog.storage.codec import Entry, iter_entries
from raftlog.storage.protocol import LogStore

T = TypeVar("T")
STATUS_TIMEOUT_S = 0.5  # how long the cluster status waits for each member's own answer


class RawRead(NamedTuple):
    chunks: list[memoryview]  # consecutive stored entries, byte for byte
    next: int  # the index after the last entry read
    committed: int


class LogService:
    def __init__(self, node: RaftNode, peers: PeerClient, limits: ApiLimits, *, client_url: str,
                 grpc_address: str | None = None, describe: Callable[[], tuple[str, DiskStatus]],
                 remote_members: bool = True) -> None:
        self.node = node
        self.peers = peers
        self.limits = limits
        self.client_url = client_url
        self.grpc_address = grpc_address
        self.describe = describe  # node facts beyond raft: flush mode, disk
        self.remote_members = remote_members  # members beyond loopback may join (a cluster secret, or insecure)
        self.closing = False  # the member is stopping: readers following the log end
        self.follow_budget = ByteBudget(limits.follow_buffer_bytes_max)  # shared by REST and gRPC streams
        self._read_index_rounds = SharedRounds(self._read_index_round)

    def close(self) -> None:
        """End the streams that follow the log (they would hold the stop until its deadline)."""
        self.closing = True
        self.node.commit_moved.fire()

    @property
    def store(self) -> LogStore:
        return self.node.store

    # -- appends -----------------------------------------------------------------------

    def check_bodies(self, bodies: Sequence[bytes], producer: Sequenced | None = None) -> None:
        if producer is not None and (problem := out_of_range(producer, len(bodies))) is not None:
            raise bad_request(problem)
        if not bodies:
            raise ApiError(Code.REQUEST_WITH_EMPTY_BODYS, "a batch needs at least one entry")
        if len(bodies) > self.limits.max_batch_entries:
            raise too_large(f"{len(bodies)} entries in one batch; the limit is {self.limits.max_batch_entries}")
        sizes = list(map(len, bodies))  # C loops; the one at fault is looked for only when there is one
        if min(sizes) == 0:
            raise ApiError(Code.REQUEST_WITH_EMPTY_BODYS, f"entry {sizes.index(0)} has an empty body")
        if max(sizes) > self.limits.max_entry_bytes:
            i = next(i for i, size in enumerate(sizes) if size > self.limits.max_entry_bytes)
            raise too_large(f"entry {i} has {sizes[i]} bytes; max_entry_bytes is {self.limits.max_entry_bytes}")

    async def append(self, bodies: Sequence[bytes], producer: Sequenced | None = None,
                     caller: str = LOCAL_CALLER) -> AppendAnswer:
        """Append on the leader, here or through the peer connection, once committed. `caller`: who
        sends it, the owner a producer's session must have."""
        self.check_bodies(bodies, producer)
        if self.node.role is Role.LEADER:
            return await self._append_here(bodies, producer, caller)
        return await self.through_leader(lambda leader: self.peers.forward_append(leader, bodies, producer, caller))

    async def through_leader(self, call: Callable[[str], Awaitable[T]]) -> T:
        """`call` made to the leader this member knows, and once more to the leader that one names."""
        leader, tried = self.node.leader_id, set[str]()
        while True:
            if leader is None or leader in tried or leader == self.node.config.self_id:
                raise ApiError(Code.NOT_LEADER, "no leader is known; retry later", leader)
            tried.add(leader)
            try:
                return await call(leader)
            except ApiError as exc:
                if exc.code is not Code.NOT_LEADER:  # NOT_LEADER: nothing was written there
                    raise
                leader = exc.leader  # it names the leader it knows of: follow once more

    async def append_forwarded(self, bodies: Sequence[bytes], producer: Sequenced | None = None,
                               caller: str = LOCAL_CALLER) -> AppendAnswer:
        """A batch another member's clients sent: checked against this member's limits too (each
        member has its own settings), and appended here if this member leads."""
        self.check_bodies(bodies, producer)
        return await self._append_here(bodies, producer, caller)

    async def _append_here(self, bodies: Sequence[bytes], producer: Sequenced | None, caller: str) -> AppendAnswer:
        try:
            appended = await self.node.append(bodies, producer, caller)
        except Exception as exc:
            raise api_error(exc, self.node.leader_id) from None
        return AppendAnswer(appended.first_index, appended.last_index, appended.term, appended.positions,
                            self.node.config.self_id, appended.duplicate)

    async def new_producer(self, producer_id: int | None, caller: str) -> ProducerAnswer:
        """A producer session owned by `caller`: a new random id at epoch 0, or for `producer_id` (a
        producer restarting under its own id) its next epoch, which fences the older one. In the log
        once committed, so every member knows its owner."""
        return await self.change_session(secrets.randbits(63) if producer_id is None else producer_id, caller)

    async def change_session(self, producer_id: int, caller: str, close: bool = False) -> ProducerAnswer:
        """A producer session opened (or closed) by the leader, here or through the peer connection."""
        if producer_id > PRODUCER_ID_MAX:
            raise bad_request(f"a producer's id is at most {PRODUCER_ID_MAX}")
        if self.node.role is not Role.LEADER:
            return await self.through_leader(lambda leader: self.peers.change_session(leader, producer_id, caller,
                                                                                        close))
        try:
            change = await self.node.change_session(producer_id, caller, close)
        except Exception as exc:
            raise api_error(exc, self.node.leader_id) from None
        return ProducerAnswer(change.producer_id, change.epoch)

    # -- reads -------------------------------------------------------------------------

    async def read_index(self) -> int:
        """The leader's commit index, confirmed by a quorum (asked over the peer port if needed). Reads
        that arrive together share one round (a thousand consumers starting at once cost one)."""
        return await self._read_index_rounds()

    async def _read_index_round(self) -> int:
        if self.node.role is Role.LEADER:
            term = self.node.term
            try:
                return await self.node.read_index()
            except NotLeaderError:
                if self.node.role is Role.LEADER and self.node.term == term:  # it leads, but no quorum said so
                    raise ApiError(Code.TIMEOUT, "no quorum confirmed this leader within max_wait_ack_ms",
                                   self.node.leader_id) from None
                raise ApiError(Code.NOT_LEADER, "leadership was lost while confirming it; retry later",
                               self.node.leader_id) from None
            except Exception as exc:
                raise api_error(exc, self.node.leader_id) from None
        leader = self.node.leader_id
        if leader is None:
            raise ApiError(Code.NOT_LEADER, "no leader is known to confirm the commit index; retry later")
        return await self.peers.read_index(leader)

    async def readable_end(self, first: int, last: int, linearizable: bool) -> int:
        """The last index this member may serve to a reader of `first`..`last`.

        Linearizable: when the range reaches past this member's commit index, the leader's commit
        index as a quorum confirmed it after the read began, so that a short answer (the log ends
        here) is never older than an acknowledged append. A range within the local commit index
        needs no round: committed entries never change."""
        committed = self.node.committed_index
        if committed >= last or not linearizable:
            return committed
        confirmed = await self.read_index()
        if confirmed < first:
            return confirmed
        target = min(confirmed, last)
        wait_s = self.limits.read_wait_ms / 1000
        if not await self.node.wait_committed(target, wait_s):
            raise ApiError(Code.TIMEOUT, f"this member did not reach index {target} within {wait_s:g} s",
                           self.node.leader_id)
        return self.node.committed_index

    async def get(self, index: int, linearizable: bool) -> Entry:
        if index < 0:
            raise bad_request(f"index must be at least 0, not {index}")
        end = await self.readable_end(index, index, linearizable)
        if index > end:
            raise ApiError(Code.INDEX_OUT_OF_RANGE, f"index {index} is not committed (committed index {end})",
                           self.node.leader_id)
        try:
            return self.store.get(index)
        except Exception as exc:
            raise api_error(exc, self.node.leader_id) from None

    async def read(self, start: int, limit: int, linearizable: bool) -> tuple[list[Entry], int]:
        """Up to `limit` committed entries from `start`, at most range_bytes_max of log (but at
        least one entry); none when start is past the commit index."""
        raw = await self.read_raw(start, limit, linearizable)
        return [entry for chunk in raw.chunks for entry in iter_entries(chunk)], raw.committed

    async def read_raw(self, start: int, limit: int, linearizable: bool, max_bytes: int | None = None) -> RawRead:
        """`read` as stored bytes (CRC-checked, zero-copy views): what bulk readers decode themselves;
        at most `max_bytes` of log (default range_bytes_max), but at least one entry."""
        if start < 0 or limit < 1:
            raise bad_request("start must be at least 0 and limit at least 1")
        committed = await self.readable_end(start, start + limit - 1, linearizable)
        end = min(committed, start + limit - 1)
        chunks: list[memoryview] = []
        index = start
        budget = max_bytes or self.limits.range_bytes_max
        try:
            while index <= end and (budget > 0 or not chunks):
                raw = self.store.read_range(index, end - index + 1, max(budget, 1))
                chunks.append(raw.data)
                index += raw.count
                budget -= len(raw.data)
        except Exception as exc:
            raise api_error(exc, self.node.leader_id) from None
        return RawRead(chunks, index, committed)

    async def await_entry(self, index: int, timeout_s: float | None) -> bool:
        """Wait until entry `index` is committed here (True), for at most `timeout_s` (None: no limit),
        or until the member stops: a long-poll, or a stream that follows the log."""
        return await self.await_commit(lambda: self.node.committed_index >= index, timeout_s)

    async def await_commit(self, reached: Callable[[], bool], timeout_s: float | None) -> bool:
        """Wait until `reached()`, asked each time this member's commit index moves (True), for at
        most `timeout_s` (None: no limit), or until the member stops."""
        node = self.node
        deadline = None if timeout_s is None else node.now() + timeout_s
        while True:
            moved = node.commit_moved.current()
            if reached() or self.closing:
                return reached()
            left = None if deadline is None else deadline - node.now()
            if not await wait_event(moved, left) and deadline is not None and node.now() >= deadline:
                return reached()

    async def index_at_pos(self, pos: int, linearizable: bool) -> int:
        """The index of the committed entry that starts at byte `pos` of the log, as RocketMQ reads its
        commitlog by offset (Store.get_at: its header names it). Positions are the same on every member."""
        if pos < 0:
            raise bad_request(f"pos must be at least 0, not {pos}")
        committed = self.node.committed_index
        if linearizable and pos >= self._end_pos(committed):  # maybe committed on the leader: ask it
            committed = max(committed, await self.readable_end(committed + 1, sys.maxsize, linearizable))
        store, leader = self.store, self.node.leader_id
        first = store.pos_at(store.begin_index) if store.begin_index <= store.end_index else store.write_pos
        if first is not None and pos < first:
            raise ApiError(Code.INDEX_LESS_THAN_LOCAL_BEGIN, f"position {pos} was cleaned away; the log now "
                           f"starts at position {first} (index {store.begin_index})", leader)
        if first is None or committed < store.begin_index or pos >= self._end_pos(committed):
            raise ApiError(Code.INDEX_OUT_OF_RANGE, f"position {pos} is not committed (committed index "
                           f"{committed})", leader)
        found = store.get_at(pos)
        if found is not None:
            assert found.index <= committed  # pos is before the end of the committed log
            return found.index
        low, high = store.begin_index, committed  # for the refusal: the last entry starting before pos
        while low < high:
            middle = (low + high + 1) // 2
            if store.pos_at(middle) <= pos:
                low = middle
            else:
                high = middle - 1
        raise bad_request(f"position {pos} is not the start of an entry (entry {low} starts at {store.pos_at(low)})")

    def _end_pos(self, committed: int) -> int:
        """Where the log after entry `committed` begins, on this member (-1: nowhere known yet)."""
        store = self.store
        if committed < store.end_index and committed + 1 >= store.begin_index:
            return store.pos_at(committed + 1)
        if committed >= store.end_index and store.write_pos is not None:
            return store.write_pos
        return -1

    # -- cluster -------------------------------------------------------------------------

    async def transfer_leadership(self, target: str) -> TransferAnswer:
        if target not in self.node.configuration.ids:
            raise ApiError(Code.UNKNOWN_MEMBER, f"{target!r} is not a member of this group")
        if self.node.role is not Role.LEADER:
            leader = self.node.leader_id
            if leader is None:
                raise ApiError(Code.NOT_LEADER, "no leader is known; retry later")
            return await self.peers.transfer_leadership(leader, target)
        try:
            code = await self.node.transfer_leadership(target)
        except Exception as exc:
            raise api_error(exc, self.node.leader_id) from None
        if code is not Code.SUCCESS:
            raise ApiError(code, f"transfer to {target} failed: {code.name}", self.node.leader_id,
                           status=None if code in (Code.UNKNOWN_MEMBER, Code.FALL_BEHIND_TOO_MUCH) else 409)
        return TransferAnswer(target, self.node.config.self_id)

    # -- membership (raft.membership) --------------------------------------------------------

    def members(self) -> MembershipAnswer:
        """The configuration in force on this member, and whether it knows it committed."""
        configuration = self.node.configuration
        return MembershipAnswer(configuration, configuration.index <= self.node.committed_index)

    async def change_membership(self, action: str, member_id: str, new: Peer | None = None) -> MembershipAnswer:
        """Add (`new`, a learner unless said otherwise), promote or remove a member, through the leader;
        the new configuration once committed. The leader's own removal hands leadership over first."""
        node = self.node
        if action not in ("add", "promote", "remove") or (action == "add") != (new is not None):
            raise bad_request(f"no membership change {action!r}")
        if new is not None and not self.remote_members and not is_loopback(new.address.rpartition(":")[0]):
            raise ApiError(Code.SECRET_REQUIRED, f"{new.id} at {new.address} is beyond loopback, and this group "
                           "has no cluster secret: anyone could join its peer calls (set cluster_secret on every "
                           "member, or insecure=true)")
        if action == "remove" and member_id == node.config.self_id and node.role is Role.LEADER:
            await self._hand_over(member_id)
            return await self._forward_change(action, member_id, new, retry_in_flight=True)
        if node.role is not Role.LEADER:
            return await self._forward_change(action, member_id, new)
        change: dict[str, Any] = {"add": new} if action == "add" else {action: member_id}
        try:
            configuration = await node.change_membership(**change)
        except Exception as exc:
            raise api_error(exc, node.leader_id) from None
        return MembershipAnswer(configuration, True)

    async def _forward_change(self, action: str, member_id: str, new: Peer | None, *,
                              retry_in_flight: bool = False) -> MembershipAnswer:
        """The change, made by the leader. Just after a hand-over, the new leader refuses changes until
        its first entry commits (CHANGE_IN_FLIGHT): then it is asked again as this member's commit moves."""
        deadline = self.node.now() + self.node.config.max_wait_ack_ms / 1000
        while True:
            moved = self.node.commit_moved.current()
            leader = self.node.leader_id
            if leader is None or leader == self.node.config.self_id:
                raise ApiError(Code.NOT_LEADER, "no leader is known; retry later")
            try:
                return await self.peers.change_membership(leader, action, member_id, new)
            except ApiError as exc:
                left = deadline - self.node.now()
                if not (retry_in_flight and exc.code is Code.CHANGE_IN_FLIGHT and left > 0):
                    raise
            await wait_event(moved, left)

    async def _hand_over(self, leaving: str) -> None:
        """Hand leadership to the most caught-up voter that answers, and wait until it leads."""
        node = self.node
        peers = node.snapshot().peers
        candidates = [v for v in node.voters if v != leaving and v in peers and peers[v].alive]
        if not candidates:
            raise ApiError(Code.QUORUM_AT_RISK, f"no other voter answers: {leaving} cannot hand leadership over")
        target = max(candidates, key=lambda v: peers[v].watermark)
        try:
            code = await node.transfer_leadership(target)
        except Exception as exc:
            raise api_error(exc, node.leader_id) from None
        if code is not Code.SUCCESS:
            raise ApiError(code, f"handing leadership to {target} before removing {leaving} failed: {code.name}",
                           node.leader_id, status=409)
        deadline = node.now() + node.config.max_wait_ack_ms / 1000
        while node.leader_id in (None, leaving):
            changed = node.role_changed
            changed.clear()
            if not await wait_event(changed, deadline - node.now()) and node.now() >= deadline:
                raise ApiError(Code.TIMEOUT, f"{target} did not take leadership in time; {leaving} is still a member")

    def own_status(self) -> dict[str, Any]:
        """What this member says about itself (the peer port's Status), with its followers if it leads."""
        progress, store = self.node.snapshot(), self.store
        status: dict[str, Any] = {
            "id": self.node.config.self_id, "client_url": self.client_url, "grpc_address": self.grpc_address,
            "role": progress.role.value,
            "term": progress.term, "leader": progress.leader_id, "end_index": store.end_index,
            "committed_index": progress.committed_index, "applied_index": progress.applied_index,
            "rejoining": progress.rejoining, "level": self.node.config.reported_level}
        if progress.role is Role.LEADER:
            now = self.node.now()
            status["progress"] = {
                peer: {"match_index": p.match_index, "lag_bytes": self.bytes_between(p.match_index, store.end_index),
                       "inflight_bytes": p.inflight_bytes,
                       "last_contact_ms": _age_ms(now, self.peers.last_contact.get(peer))}
                for peer, p in progress.peers.items()}
        return status

    def bytes_between(self, after: int, through: int) -> int | None:
        """Log bytes of the entries after `after` up to `through` (a follower's or a consumer's lag in
        bytes); None when some of them were cleaned away."""
        store = self.store
        if after >= min(through, store.end_index):
            return 0
        end = self._end_pos(through)
        if end < 0 or after + 1 < store.begin_index:
            return None
        return end - store.pos_at(after + 1)

    async def cluster_status(self) -> StatusAnswer:
        node, store = self.node, self.store
        me = self.own_status()
        configuration = node.configuration
        others = [p for p in configuration.members if p.id != node.config.self_id]
        answers = await asyncio.gather(*(self._peer_status(p.id) for p in others))
        said = {p.id: a for p, a in zip(others, answers, strict=True)}
        said[me["id"]] = me
        leader = node.leader_id
        progress = (said.get(leader) or {}).get("progress", {}) if leader else {}
        leader_end = (said.get(leader) or {}).get("end_index", store.end_index) if leader else store.end_index
        members = []
        for peer in configuration.members:
            answer = said.get(peer.id) or {}
            follower = progress.get(peer.id, {})
            match = leader_end if peer.id == leader else follower.get("match_index")
            members.append(MemberStatus(
                id=peer.id, peer_url=f"http://{peer.address}", client_url=answer.get("client_url", peer.client_url),
                grpc_address=answer.get("grpc_address", peer.grpc_address), voter=not peer.learner,
                role=answer.get("role"), term=answer.get("term"), end_index=answer.get("end_index"),
                committed_index=answer.get("committed_index"), applied_index=answer.get("applied_index"),
                match_index=match, lag=None if match is None else max(leader_end - match, 0),
                lag_bytes=0 if peer.id == leader else follower.get("lag_bytes"),
                inflight_bytes=follower.get("inflight_bytes"),
                last_contact_ms=0 if peer.id == leader else follower.get("last_contact_ms"),
                rejoining=answer.get("rejoining"), reachable=bool(answer), level=answer.get("level")))
        flush_mode, disk = self.describe()
        uptime_s = 0.0 if node.started_at is None else round(node.now() - node.started_at, 3)
        return StatusAnswer(
            group=node.config.group, self_id=node.config.self_id, role=node.role.value, term=node.term,
            leader=leader, members=members, configuration_index=configuration.index,
            begin_index=store.begin_index, end_index=store.end_index, committed_index=node.committed_index,
            applied_index=node.applied_index, uptime_s=uptime_s,
            flush_mode=flush_mode, disk=disk, cluster_version=node.version.level)

    async def _peer_status(self, peer_id: str) -> dict[str, Any] | None:
        try:
            return await self.peers.status(peer_id, STATUS_TIMEOUT_S)
        except ApiError:
            return None


def _age_ms(now: float, then: float | None) -> int | None:
    return None if then is None else int((now - then) * 1000)
