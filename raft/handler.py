"""DLedger's EntryHandler: a follower applies pushes strictly in index order.

APPEND pushes wait in a map keyed by first index until the log reaches them;
a second push with the same first index is REPEATED_PUSH. COMPARE, TRUNCATE,
COMMIT and INSTALL_SNAPSHOT go through a bounded queue (PUSH_REQUEST_IS_FULL
when full) and are handled first; COMPARE and TRUNCATE drop the waiting
appends. The abnormal-push check answers a push already in the log (a lost
ack) by its chain CRC, and a push stuck behind a gap for longer than
max_push_timeout_ms with INCONSISTENT_STATE, so the leader compares again.
An append is acknowledged only once durable under the flush mode. The commit
index never passes what is known to match the leader.
(DLedger's DLedgerEntryPusher.EntryHandler.)
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import Iterator
from typing import Protocol

from raftlog.raft.config import RaftConfig
from raftlog.raft.member_state import MemberState
from raftlog.raft.membership import Configuration, MembershipError
from raftlog.raft.messages import Code, PushRequest, PushResponse, PushType
from raftlog.raft.tables import Tables
from raftlog.raft.waiting import Clock, Wakeup
from raftlog.storage.codec import HEADER, HEADER_SIZE
from raftlog.storage.errors import AppendRejectedError, DiskFullError, StorageError
from raftlog.storage.protocol import LogStore

log = logging.getLogger("raftlog.raft.handler")


class PushShapeError(ValueError):
    """A push whose numbers cannot be true: entries that do not fit its bytes, an index before 0."""


class Following(Protocol):
    """What the handler tells its member as the log follows the leader's."""

    def snapshot_installed(self, index: int, term: int, configuration: Configuration | None = None) -> None: ...

    def follower_commit(self, leader_commit: int, matched_end: int) -> None: ...

    def durable_moved(self) -> None: ...


class EntryHandler:
    def __init__(self, config: RaftConfig, state: MemberState, store: LogStore, clock: Clock,
                 member: Following, tables: Tables) -> None:
        self.config = config
        self.tables = tables  # what the log's entries make (raft.tables)
        self.state = state
        self.store = store
        self.clock = clock
        self.member = member
        self.waiting: dict[int, tuple[PushRequest, asyncio.Future[PushResponse], float]] = {}
        self.control: deque[tuple[PushRequest, asyncio.Future[PushResponse]]] = deque()
        self.matched_end = -1  # last index known equal to the current leader's log
        self.wake = Wakeup()

    def _answer(self, request: PushRequest, code: Code, **fields: int) -> PushResponse:
        index = request.first_index if request.type is PushType.APPEND else request.pre_log_index
        values = {"end_index": self.store.end_index, "end_term": self.store.end_term,
                  "ack_index": self.store.ack_end_index, **fields}
        return PushResponse(code, self.state.current_term, index, **values)

    # -- intake --------------------------------------------------------------------

    def take(self, request: PushRequest) -> asyncio.Future[PushResponse]:
        """The push's answer, to come. An append that continues the log with nothing ahead of it (pushes
        arrive in order, one at a time under light load) is written now and answered when its flush
        ends, without a task; any other push is handled in a task of its own."""
        if request.type is PushType.APPEND and self._in_turn(request) and _impossible(request) is None:
            answer = self._append_in_turn(request)
            if answer is not None:
                return answer
        return asyncio.ensure_future(self.handle(request))

    def _in_turn(self, request: PushRequest) -> bool:
        """The push continues the log and nothing is ahead of it: no control push, no waiting append,
        no vote or drain holding the node's lock."""
        return (request.first_index == self.store.end_index + 1 and not self.control and not self.waiting
                and not self.state.lock.locked())

    def _append_in_turn(self, request: PushRequest) -> asyncio.Future[PushResponse] | None:
        """Write an in-turn push now (nothing else runs meanwhile: the node's lock is not needed); None
        when the store would have to wait for it (files to create), and then nothing was written."""
        answer: asyncio.Future[PushResponse] = asyncio.get_running_loop().create_future()
        try:
            appended = self.store.append_as_follower_now(request.data)
            if appended is None:
                return None
            self.tables.took(appended)
            self.matched_end = request.last_index
            self._follow_commit(request.commit_index)
            self._ack(request, answer, self._answer(request, Code.SUCCESS))
        except AppendRejectedError as exc:
            log.warning("push %d-%d rejected: %s", request.first_index, request.last_index, exc)
            answer.set_result(self._answer(request, Code.INCONSISTENT_STATE))
        except DiskFullError:
            answer.set_result(self._answer(request, Code.DISK_FULL))
        except Exception:  # answered all the same, as a drain answers what fails (the leader compares again)
            log.exception("push handling failed; answering it")
            if not answer.done():
                answer.set_result(self._answer(request, Code.INCONSISTENT_STATE))
        return answer

    async def handle(self, request: PushRequest) -> PushResponse:
        """Queue a push from the current leader and wait for its answer."""
        if (problem := _impossible(request)) is not None:
            log.warning("%s push from %s refused: %s", request.type.name, request.leader_id, problem)
            return self._answer(request, Code.UNEXPECTED_ARGUMENT)
        future: asyncio.Future[PushResponse] = asyncio.get_running_loop().create_future()
        if request.type is PushType.APPEND:
            try:
                request = self._trim_overlap(request)
                lost_ack = request.count == 0 or request.last_index <= self.store.end_index
                response = self._lost_ack(request) if lost_ack else None
            except PushShapeError as exc:
                log.warning("push %d+%d from %s refused: %s", request.first_index, request.count,
                            request.leader_id, exc)
                return self._answer(request, Code.UNEXPECTED_ARGUMENT)
            if response is not None:
                if response.code is Code.SUCCESS and request.last_index > self.store.ack_end_index:
                    await self.store.wait_durable()  # never acknowledge what is not durable
                    response = self._answer(request, Code.SUCCESS)
                return response
            if request.first_index in self.waiting:
                return self._answer(request, Code.REPEATED_PUSH)
            if len(self.waiting) >= self.config.waiting_pushes_max:
                return self._answer(request, Code.PUSH_REQUEST_IS_FULL)
            self.waiting[request.first_index] = (request, future, self.clock())
        else:
            if request.type in (PushType.COMPARE, PushType.TRUNCATE, PushType.INSTALL_SNAPSHOT):
                self.drop_waiting(Code.INCONSISTENT_STATE)
            if len(self.control) >= self.config.control_queue_max:
                return self._answer(request, Code.PUSH_REQUEST_IS_FULL)
            self.control.append((request, future))
        self.wake.set()
        return await future

    def _trim_overlap(self, request: PushRequest) -> PushRequest:
        """A push that starts inside the log: keep what follows it, if the overlap agrees."""
        end = self.store.end_index
        if not request.first_index <= end < request.last_index:
            return request
        data = memoryview(request.data)
        last_shared = _entry_offset(data, end - request.first_index)
        header = HEADER.unpack_from(data, last_shared)
        if end < self.store.begin_index or header[6] != self.store.get(end).chain_crc:
            return request  # disagrees: the lost-ack check answers INCONSISTENT_STATE
        offset = last_shared + header[1]
        return PushRequest(request.group, request.leader_id, request.term, request.type,
                           request.commit_index, end + 1, request.last_index - end, data[offset:])

    def _lost_ack(self, request: PushRequest) -> PushResponse:
        """The push is already in the log (its ack was lost): equal chain CRCs mean equal logs."""
        if request.count == 0:
            return self._answer(request, Code.SUCCESS)
        data = memoryview(request.data)
        last = HEADER.unpack_from(data, _entry_offset(data, request.count - 1))
        try:
            same = last[6] == self.store.get(request.last_index).chain_crc
        except StorageError:
            same = False
        if same:
            self.matched_end = max(self.matched_end, request.last_index)
            self._follow_commit(request.commit_index)
            return self._answer(request, Code.SUCCESS)
        return self._answer(request, Code.INCONSISTENT_STATE)

    def drop_waiting(self, code: Code) -> None:
        """Answer and forget every waiting append (a compare, truncate, or new leader)."""
        for request, future, _ in self.waiting.values():
            if not future.done():
                future.set_result(self._answer(request, code))
        self.waiting.clear()

    def reset(self) -> None:
        """The leader or term changed: nothing waiting is valid, nothing is known to match."""
        self.drop_waiting(Code.INCONSISTENT_LEADER)
        while self.control:
            request, future = self.control.popleft()
            if not future.done():
                future.set_result(self._answer(request, Code.INCONSISTENT_LEADER))
        self.matched_end = -1

    # -- the task --------------------------------------------------------------------

    async def run(self) -> None:
        timeout = self.config.max_push_timeout_ms / 1000
        while True:
            await self.wake.wait(timeout)
            self.wake.clear()  # before draining: what arrives meanwhile wakes the next pass
            try:
                await self._drain()
            except Exception:
                log.exception("push handling failed; answering the rest")

    async def _drain(self) -> None:
        """Every push taken here is answered, whatever happens to it: a failure answers
        INCONSISTENT_STATE (the leader compares again) and goes on to run's log."""
        while self.control:
            request, future = self.control.popleft()
            with self._answered_anyway(request, future):
                response = await self._control(request)
                if not future.done():
                    future.set_result(response)
        while (self.store.end_index + 1) in self.waiting:
            request, future, _ = self.waiting.pop(self.store.end_index + 1)
            with self._answered_anyway(request, future):
                await self._append(request, future)
        for first in [f for f in self.waiting if f <= self.store.end_index]:  # overtaken meanwhile
            request, future, _ = self.waiting.pop(first)
            with self._answered_anyway(request, future):
                self._ack(request, future, self._lost_ack(self._trim_overlap(request)))
        self._check_abnormal()

    @contextlib.contextmanager
    def _answered_anyway(self, request: PushRequest, future: asyncio.Future[PushResponse]) -> Iterator[None]:
        try:
            yield
        except BaseException:
            if not future.done():
                future.set_result(self._answer(request, Code.INCONSISTENT_STATE))
            raise

    def _ack(self, request: PushRequest, future: asyncio.Future[PushResponse],
             response: PushResponse) -> None:
        """Answer now, or once durable if the answer is a SUCCESS for entries not yet durable (a
        callback on the flush that covers them)."""
        if response.code is not Code.SUCCESS or request.last_index <= self.store.ack_end_index:
            if not future.done():
                future.set_result(response)
            return
        self.store.flushed().add_done_callback(lambda flush: self._durable(request, future, flush))

    def _durable(self, request: PushRequest, future: asyncio.Future[PushResponse],
                 flush: asyncio.Future[None]) -> None:
        if future.done():
            return
        failure = RuntimeError("the flush was cancelled") if flush.cancelled() else flush.exception()
        if failure is not None:  # the store refuses appends from now on: the push is not acknowledged
            future.set_exception(failure)
            return
        self.member.durable_moved()
        self._follow_commit(request.commit_index)
        future.set_result(self._answer(request, Code.SUCCESS))

    def _current(self, request: PushRequest) -> bool:
        state = self.state
        return (request.term == state.current_term and state.is_follower
                and request.leader_id == state.leader_id)

    async def _append(self, request: PushRequest, future: asyncio.Future[PushResponse]) -> None:
        async with self.state.lock:  # a vote never sees a log an append is changing
            if not self._current(request):
                self._ack(request, future, self._answer(request, Code.INCONSISTENT_LEADER))
                return
            try:
                appended = await self.store.append_as_follower(request.data)
            except AppendRejectedError as exc:
                log.warning("push %d-%d rejected: %s", request.first_index, request.last_index, exc)
                self._ack(request, future, self._answer(request, Code.INCONSISTENT_STATE))
                return
            except DiskFullError:
                self._ack(request, future, self._answer(request, Code.DISK_FULL))
                return
            self.tables.took(appended)
        self.matched_end = request.last_index
        self._follow_commit(request.commit_index)
        self._ack(request, future, self._answer(request, Code.SUCCESS))

    async def _control(self, request: PushRequest) -> PushResponse:
        try:
            return await self._control_locked(request)
        except StorageError as exc:  # a damaged entry here (the repairer was told): the leader asks again later
            log.warning("%s from %s: %s", request.type.name, request.leader_id, exc)
            return self._answer(request, Code.DISK_ERROR)

    async def _control_locked(self, request: PushRequest) -> PushResponse:
        async with self.state.lock:
            if not self._current(request):
                return self._answer(request, Code.INCONSISTENT_LEADER)
            if request.type is PushType.COMPARE:
                return self._compare(request)
            if request.type is PushType.TRUNCATE:
                return await self._truncate(request)
            if request.type is PushType.INSTALL_SNAPSHOT:
                return await self._install_snapshot(request)
            if self.matched_end < request.commit_index:
                # a COMMIT is sent once every push was acknowledged: a log that does not match up to it
                # (restarted, or lost entries) has the leader compare again
                return self._answer(request, Code.INCONSISTENT_STATE, end_index=self.store.end_index)
            self._follow_commit(request.commit_index)
            return self._answer(request, Code.SUCCESS)

    def _compare(self, request: PushRequest) -> PushResponse:
        store, index = self.store, request.pre_log_index
        if index > store.end_index:
            return self._answer(request, Code.INCONSISTENT_STATE)
        if index < store.before_begin_index:  # cleaned here: start from what is kept
            return self._answer(request, Code.INCONSISTENT_STATE, end_index=store.before_begin_index)
        local_term = store.term_at(index)
        if local_term == request.pre_log_term and self._same_chain(index, request.chain_crc):
            self.matched_end = max(self.matched_end, index)  # a late compare never unlearns a match
            self._follow_commit(request.commit_index)
            return self._answer(request, Code.SUCCESS)
        first = store.first_index_of_term(local_term, index)
        return self._answer(request, Code.INCONSISTENT_STATE, x_term=local_term,
                            x_index=first if first is not None else store.begin_index)

    def _same_chain(self, index: int, leader_chain: int | None) -> bool:
        """Equal chain CRCs at an index mean equal logs up to it; unknown ones cannot differ."""
        if leader_chain is None:
            return True
        local = (self.store.before_begin_chain_crc if index == self.store.before_begin_index
                 else self.store.get(index).chain_crc)
        return local is None or local == leader_chain

    async def _truncate(self, request: PushRequest) -> PushResponse:
        index = request.pre_log_index
        if index <= self.matched_end:  # a late truncate: entries since matched would go
            return self._answer(request, Code.INCONSISTENT_STATE)
        if index <= self.state.committed_index:
            log.error("BUG: leader %s asked to truncate committed entries from %d (committed %d)",
                      request.leader_id, index, self.state.committed_index)
            return self._answer(request, Code.INCONSISTENT_STATE)
        truncated_to = await self.store.truncate(index)
        self.tables.truncated(truncated_to + 1)
        if truncated_to != index - 1:
            return self._answer(request, Code.INCONSISTENT_STATE)
        self.matched_end = index - 1
        self._follow_commit(request.commit_index)
        return self._answer(request, Code.SUCCESS)

    async def _install_snapshot(self, request: PushRequest) -> PushResponse:
        if request.pre_log_index < max(self.matched_end, self.state.committed_index):
            return self._answer(request, Code.INCONSISTENT_STATE)  # late: this log is further
        configuration = None
        if request.data:
            try:
                configuration = Configuration.decode_with_index(request.data)
            except MembershipError as exc:
                log.warning("snapshot from %s: %s", request.leader_id, exc)
                return self._answer(request, Code.UNEXPECTED_ARGUMENT)
        try:
            await self.store.reset_begin(request.pre_log_index, request.pre_log_term,
                                         chain_crc=request.chain_crc, next_pos=request.next_pos)
        except ValueError as exc:  # a position no log can start at: nothing was changed
            log.warning("snapshot from %s refused: %s", request.leader_id, exc)
            return self._answer(request, Code.UNEXPECTED_ARGUMENT)
        self.matched_end = request.pre_log_index
        self.tables.installed(request.pre_log_index, request.tables)
        self.member.snapshot_installed(request.pre_log_index, request.pre_log_term, configuration)
        return self._answer(request, Code.SUCCESS)

    def _follow_commit(self, leader_commit: int) -> None:
        self.member.follower_commit(leader_commit, self.matched_end)

    def _check_abnormal(self) -> None:
        """A push stuck behind a gap for too long: INCONSISTENT_STATE to the smallest, so the
        leader compares again (DLedger's checkAbnormalFuture)."""
        limit = self.clock() - self.config.max_push_timeout_ms / 1000
        stuck = [first for first, (_, _, since) in self.waiting.items() if since < limit]
        if stuck:
            request, future, _ = self.waiting.pop(min(stuck))
            log.info("push from %d waited behind a gap at %d: asking for a compare",
                        request.first_index, self.store.end_index + 1)
            if not future.done():
                future.set_result(self._answer(request, Code.INCONSISTENT_STATE))


def _impossible(request: PushRequest) -> str | None:
    """Why a push's numbers cannot be true, checked in constant time before anything walks its
    entries; None: they may be (the store checks every entry before it writes one)."""
    if request.type is PushType.APPEND:
        if request.count <= 0:
            return f"a count of {request.count}"
        if request.first_index < 0:
            return f"a first index of {request.first_index}"
        if request.count > len(request.data) // HEADER_SIZE:
            return f"{request.count} entries in {len(request.data)} bytes"
    elif request.pre_log_index < -1:
        return f"a previous index of {request.pre_log_index}"
    if request.commit_index < -1:
        return f"a commit index of {request.commit_index}"
    return None


def _entry_offset(data: memoryview, skip: int) -> int:
    """Byte offset of the entry `skip` entries into raw entries. Each entry's size must hold at
    least its header and fit in what is left: the walk moves forward through the bytes, so it ends."""
    offset = 0
    for _ in range(skip):
        size = HEADER.unpack_from(data, offset)[1] if offset + HEADER_SIZE <= len(data) else 0
        if not HEADER_SIZE <= size <= len(data) - offset:
            raise PushShapeError(f"the entry at byte {offset} has a size of {size}, "
                                 f"with {len(data) - offset} bytes left")
        offset += size
    if offset + HEADER_SIZE > len(data):
        raise PushShapeError(f"no entry at byte {offset} of {len(data)}")
    return offset
