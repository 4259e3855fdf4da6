"""DLedger's EntryDispatcher: one task per follower (and learner) on the leader.

COMPARE finds the last index both logs share, using the follower's hints
(x_term / x_index: the first index of the term it holds there; end_index when
it is shorter); TRUNCATE drops the follower's entries after it; APPEND streams
raw stored bytes with up to `push_window_max` pushes in flight, comparing
again when the oldest push waited longer than `max_push_timeout_ms`; COMMIT notices carry the commit index when there is
nothing to append; INSTALL_SNAPSHOT restarts a follower whose log ends below
the leader's first kept index (DLedger's DLedgerEntryPusher.EntryDispatcher).

Every push goes on one long-lived stream to the follower (raft.transport.PushStream),
sent in index order without waiting for the answers before it. When the stream
breaks, every push on it failed: the dispatcher compares again on a new one.
"""

from __future__ import annotations

import asyncio
import logging
from enum import Enum
from typing import Protocol

from raftlog.raft.commitment import Commitment
from raftlog.raft.config import RaftConfig
from raftlog.raft.member_state import MemberState
from raftlog.raft.membership import ConfigLog
from raftlog.raft.messages import Code, PushRequest, PushResponse, PushType
from raftlog.raft.tables import Tables
from raftlog.raft.transport import PeerUnavailable, PushStream, Transport
from raftlog.raft.waiting import Clock, Wakeup
from raftlog.storage.codec import POS_OFFSET
from raftlog.storage.errors import StorageError
from raftlog.storage.protocol import LogStore

log = logging.getLogger("raftlog.raft.dispatcher")

COMMIT_NOTICE_INTERVAL_S = 1.0  # DLedger's doCommit: at least this often when there is nothing to push
# A follower behind on the commit index is told by the next push when appends come more often than this
# (a notice per commit doubled the peer messages), else by a COMMIT notice at once: readers that follow
# the log on a follower see a lone entry as soon as it commits, not this much later.
COMMIT_NOTICE_DELAY_S = 0.005
APPEND_GAP_WEIGHT = 0.2  # of the latest gap between two pushes of new entries, in their moving average


class DispatcherState(Enum):
    COMPARE = "COMPARE"
    TRUNCATE = "TRUNCATE"
    APPEND = "APPEND"
    INSTALL_SNAPSHOT = "INSTALL_SNAPSHOT"


class PushRejected(Exception):
    """The follower answered a compare or truncate with something else than expected."""


class Quota:
    """Bytes per second to a far-behind follower (DLedger's Quota, a one-second window)."""

    def __init__(self, per_second: int) -> None:
        self.per_second = per_second
        self.window_start = 0.0
        self.used = 0

    def wait(self, now: float) -> float:
        """Seconds to wait before sending more in this window."""
        if now - self.window_start >= 1.0:
            self.window_start, self.used = now, 0
        return self.window_start + 1.0 - now if self.used >= self.per_second else 0.0

    def sample(self, size: int) -> None:
        self.used += size


class Leadership(Protocol):
    """What a dispatcher asks of its member: to wait until it leads, and to hear of a larger term."""

    async def wait_for_leadership(self) -> None: ...

    def note_larger_term(self, term: int) -> None: ...


class EntryDispatcher:
    def __init__(self, peer_id: str, config: RaftConfig, member: MemberState, store: LogStore,
                 members: ConfigLog, commitment: Commitment, transport: Transport, clock: Clock,
                 leadership: Leadership, tables: Tables) -> None:
        self.peer_id = peer_id
        self.tables = tables  # a snapshot install carries the log's tables
        self.config = config
        self.member = member
        self.store = store
        self.members = members
        self.commitment = commitment
        self.transport = transport
        self.clock = clock
        self.leadership = leadership
        self.state = DispatcherState.COMPARE
        self.write_index = 0
        self.match_index = -1
        self.pending: dict[int, float] = {}  # first index of a push in flight -> send time
        self.epoch = 0  # bumped whenever in-flight pushes are written off
        self.peer_commit_index = -1  # the commit index the follower was last told
        self._last_notice = float("-inf")  # when the last COMMIT notice went out
        self._notice_due: float | None = None  # when a COMMIT notice goes out unless a push carries it first
        self._last_append = float("-inf")  # when the last push of new entries went out
        self._append_gap = float("inf")  # the moving average of the time between those pushes
        self.quota = Quota(self.config.peer_push_quota)
        self.wake = Wakeup()
        self._stream: PushStream | None = None
        self.inflight_bytes = 0  # raw log of the pushes still on the wire, written off or not
        self._read_checked = True  # the next push's entries are read checked: the first after a (re-)match

    async def run(self) -> None:
        try:
            await self._dispatch()
        finally:
            self._close_stream()  # the pushes on it fail, and their answers are ignored

    async def _dispatch(self) -> None:
        while True:
            await self.leadership.wait_for_leadership()
            term = self.member.current_term
            self._change_state(DispatcherState.COMPARE)
            while self.member.is_leader and self.member.current_term == term:
                try:
                    await self._step(term)
                except (PeerUnavailable, PushRejected, StorageError) as exc:
                    # StorageError: an entry to send is damaged here; the repairer was told of it
                    log.debug("push to %s failed: %s", self.peer_id, exc)
                    self._change_state(DispatcherState.COMPARE)
                    await self._wait(self.config.heartbeat_interval_ms / 1000)
            self._close_stream()  # the pushes of the lost term fail, and are ignored (their term is checked)

    def _change_state(self, target: DispatcherState) -> None:
        if target is DispatcherState.COMPARE:
            self.write_index = self.store.end_index + 1
            self._read_checked = True
        if target is not DispatcherState.APPEND:
            self._write_off_pending()
        self.state = target

    def _write_off_pending(self) -> None:
        """Forget the pushes in flight: their late answers must not disturb what follows.

        They stay on the stream (whatever follows them is sent behind them), and their
        answers are ignored.
        """
        self.pending.clear()
        self.epoch += 1

    async def _wait(self, timeout: float) -> None:
        self.wake.clear()
        await self.wake.wait(timeout)

    async def _step(self, term: int) -> None:
        if self.state is DispatcherState.COMPARE:
            await self._compare(term)
        elif self.state is DispatcherState.TRUNCATE:
            await self._truncate(term)
        elif self.state is DispatcherState.INSTALL_SNAPSHOT:
            await self._install_snapshot(term)
        else:
            await self._append(term)

    def _request(self, term: int, type_: PushType, **fields: object) -> PushRequest:
        return PushRequest(self.config.group, self.config.self_id, term, type_,
                           self.member.committed_index, **fields)  # type: ignore[arg-type]

    def _send(self, request: PushRequest) -> asyncio.Future[PushResponse]:
        """Put a push on the stream to the follower, opening a new one if it broke."""
        if self._stream is None or self._stream.broken:
            self._stream = self.transport.open_stream(self.peer_id)
        return self._stream.send(request)

    def _close_stream(self) -> None:
        if self._stream is not None:
            self._stream.close()
            self._stream = None

    async def _call(self, request: PushRequest) -> PushResponse:
        response = await self._send(request)
        self._check_term(request, response)
        return response

    def _check_term(self, request: PushRequest, response: PushResponse) -> None:
        if response.term > request.term:
            self.leadership.note_larger_term(response.term)

    # -- COMPARE / TRUNCATE / INSTALL_SNAPSHOT ---------------------------------------

    async def _compare(self, term: int) -> None:
        store = self.store
        compare_index = min(self.write_index, store.end_index + 1) - 1
        if compare_index < store.before_begin_index:
            self._change_state(DispatcherState.INSTALL_SNAPSHOT)
            return
        compare_term = store.term_at(compare_index)
        chain = (store.before_begin_chain_crc if compare_index == store.before_begin_index
                 else store.get(compare_index).chain_crc)
        response = await self._call(self._request(term, PushType.COMPARE, pre_log_index=compare_index,
                                                  pre_log_term=compare_term, chain_crc=chain))
        log.debug("compare %s at %d (term %d): %s x_term %d x_index %d end %d", self.peer_id,
                  compare_index, compare_term, response.code.name, response.x_term, response.x_index,
                  response.end_index)
        if response.code is Code.SUCCESS:
            self.match_index = compare_index
            # what it holds counts for the quorum only once durable there
            self.commitment.update_watermark(term, self.peer_id, min(compare_index, response.ack_index))
            self.state = DispatcherState.TRUNCATE
        elif response.code is Code.INCONSISTENT_STATE:
            self.write_index = self._next_compare(compare_index, response) + 1
        else:
            raise PushRejected(f"compare at {compare_index}: {response.code.name}")

    def _next_compare(self, compare_index: int, response: PushResponse) -> int:
        """Where to compare next, from the follower's hints (etcd's fast backup).

        Shorter follower: at its end. A different term x_term there: if the leader
        also holds x_term, at its last entry of it (both may agree up to there),
        else just before the follower's first entry of x_term.
        """
        if response.x_term == -1:
            candidate = response.end_index
        else:
            candidate = response.x_index - 1
            store = self.store
            first = store.first_index_of_term(response.x_term, compare_index)
            if first is not None:
                lo, hi = first, compare_index - 1  # the last index of x_term below compare_index
                while lo < hi:
                    mid = (lo + hi + 1) // 2
                    lo, hi = (mid, hi) if store.term_at(mid) <= response.x_term else (lo, mid - 1)
                candidate = max(candidate, lo)
        return min(candidate, compare_index - 1)  # always move back

    async def _truncate(self, term: int) -> None:
        truncate_index = self.match_index + 1
        response = await self._call(self._request(term, PushType.TRUNCATE, pre_log_index=truncate_index))
        if response.code is not Code.SUCCESS:
            raise PushRejected(f"truncate at {truncate_index}: {response.code.name}")
        self.write_index = truncate_index
        self._write_off_pending()
        self.state = DispatcherState.APPEND

    async def _install_snapshot(self, term: int) -> None:
        store = self.store
        response = await self._call(self._request(
            term, PushType.INSTALL_SNAPSHOT, pre_log_index=store.before_begin_index,
            pre_log_term=store.before_begin_term, chain_crc=store.before_begin_chain_crc,
            next_pos=store.begin_pos, data=self.members.base.encode_with_index(), tables=self.tables.encode()))
        if response.code is not Code.SUCCESS:
            raise PushRejected(f"install snapshot: {response.code.name}")
        self.match_index = store.before_begin_index
        self.commitment.update_watermark(term, self.peer_id, self.match_index)
        self.write_index = self.match_index + 1
        self._write_off_pending()
        self.state = DispatcherState.APPEND

    # -- APPEND ------------------------------------------------------------------------

    async def _append(self, term: int) -> None:
        store = self.store
        if self._push_timed_out():
            log.info("a push to %s timed out: comparing again", self.peer_id)
            self._change_state(DispatcherState.COMPARE)
            return
        if self.write_index <= store.before_begin_index:
            self._change_state(DispatcherState.INSTALL_SNAPSHOT)
            return
        if (self.write_index > store.end_index or len(self.pending) >= self.config.push_window_max
                or self.inflight_bytes >= self.config.push_inflight_bytes_max):
            wait = self.config.max_push_timeout_ms / 1000
            if not self.pending:
                notice_in = self._notice_in()
                if notice_in <= 0:
                    await self._commit_notice(term)
                    return
                wait = min(wait, notice_in)
            await self._wait(wait)
            return
        raw = store.read_range(self.write_index, self.config.push_entries_max, self.config.push_bytes_max,
                               trust_own_writes=not self._read_checked)
        self._read_checked = False
        delay = self._throttle(raw.data)
        if delay:
            await asyncio.sleep(delay)
            return
        request = self._request(term, PushType.APPEND, first_index=raw.first_index, count=raw.count,
                                data=raw.data)
        now = self.clock()
        self.pending[raw.first_index] = now
        gap = now - self._last_append
        self._append_gap = gap if self._append_gap == float("inf") else (
            (1 - APPEND_GAP_WEIGHT) * self._append_gap + APPEND_GAP_WEIGHT * min(gap, COMMIT_NOTICE_INTERVAL_S))
        self._last_append = now
        self.write_index = raw.first_index + raw.count
        self.peer_commit_index = request.commit_index
        self._notice_due = None
        size = len(raw.data)
        self.inflight_bytes += size  # counted now: a burst of pushes is made before any of them runs
        epoch = self.epoch
        self._send(request).add_done_callback(lambda answer: self._answered(term, epoch, request, size, answer))

    def _throttle(self, data: memoryview) -> float:
        """DLedger's quota: only a follower more than peer_push_throttle_point bytes behind is slowed."""
        first_pos = int.from_bytes(data[POS_OFFSET:POS_OFFSET + 8], "big")
        if (self.store.write_pos or 0) - first_pos <= self.config.peer_push_throttle_point:
            return 0.0
        delay = self.quota.wait(self.clock())
        if not delay:
            self.quota.sample(len(data))
        return delay

    def _answered(self, term: int, epoch: int, request: PushRequest, size: int,
                  answer: asyncio.Future[PushResponse]) -> None:
        """A push of entries answered, or failed with its stream (a callback: no task per push)."""
        self.inflight_bytes -= size
        self.wake.set()
        if answer.cancelled():
            return
        exc = answer.exception()
        if exc is not None:
            if not isinstance(exc, PeerUnavailable):
                log.error("push %d-%d to %s failed", request.first_index, request.last_index, self.peer_id,
                          exc_info=exc)
            elif epoch == self.epoch and self.member.is_leader and self.member.current_term == term:
                log.debug("push %d-%d to %s failed: %s; comparing again", request.first_index,
                          request.last_index, self.peer_id, exc)
                self._change_state(DispatcherState.COMPARE)  # the stream broke: nothing after it arrived
            return
        response = answer.result()
        self._check_term(request, response)
        if not self.member.is_leader or self.member.current_term != term:
            return
        if epoch != self.epoch:
            return  # written off: even a SUCCESS may describe entries a truncate has since removed
        if response.code is Code.SUCCESS:
            self.pending.pop(request.first_index, None)
            if request.last_index > self.match_index:
                self.match_index = request.last_index
                self.commitment.update_watermark(term, self.peer_id, self.match_index)
        elif response.code is Code.INCONSISTENT_STATE:
            log.info("push %d-%d to %s: INCONSISTENT_STATE, comparing again", request.first_index,
                     request.last_index, self.peer_id)
            self._change_state(DispatcherState.COMPARE)
        elif response.code is not Code.REPEATED_PUSH:
            log.debug("push to %s: %s", self.peer_id, response.code.name)

    def _push_timed_out(self) -> bool:
        """A push waited longer than max_push_timeout_ms: the leader compares again.

        DLedger re-pushes from the follower's watermark + 1, but a follower that lost its tail
        (a restart after a torn or damaged file) holds less than that watermark: it keeps every
        such push waiting behind its gap, and its own answer to that comes when the re-push has
        already written the push off. A compare finds where it really ends.
        """
        return bool(self.pending) and (self.clock() - min(self.pending.values())
                                       > self.config.max_push_timeout_ms / 1000)

    def _notice_in(self) -> float:
        """Seconds until a COMMIT notice is due: once the follower fell behind on the commit index, at
        once when appends are sparse, else COMMIT_NOTICE_DELAY_S later unless a push carries it first;
        and now and then anyway (a follower may have restarted)."""
        now = self.clock()
        if self.peer_commit_index < self.member.committed_index and self._notice_due is None:
            steady = self._append_gap < COMMIT_NOTICE_DELAY_S  # the next push is likely to come first
            self._notice_due = now + (COMMIT_NOTICE_DELAY_S if steady else 0.0)
        due = self._last_notice + COMMIT_NOTICE_INTERVAL_S
        if self._notice_due is not None:
            due = min(due, self._notice_due)
        return due - now

    async def _commit_notice(self, term: int) -> None:
        self._last_notice = self.clock()
        self._notice_due = None
        request = self._request(term, PushType.COMMIT)
        response = await self._call(request)
        if response.code is Code.SUCCESS:
            self.peer_commit_index = request.commit_index
        else:
            raise PushRejected(f"commit notice: {response.code.name}")
