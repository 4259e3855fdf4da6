"""Named consumers as the API offers them (raft.consumers keeps their positions in the log).

A consumer's commit goes through the leader, as an append does. Plain commits
of one consumer that reach a member within `consumer_commit_interval_ms` are
combined into one entry, the latest position winning (a consumer committing
after every message costs the log one entry per interval, not one per
message); every caller gets the answer of that entry. A compare-and-set is
never combined: it is judged alone, by the leader, against the latest
position. One consumer's entries from one member are written one after the
other, in the order their commits arrived.

Reads of positions are linearizable unless asked otherwise: the member
catches up to the leader's confirmed commit index first, as reads of entries do.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from raftlog.api.answers import ConsumerAnswer
from raftlog.api.errors import ApiError, api_error, bad_request
from raftlog.api.service import LogService
from raftlog.raft.consumers import ConsumerCommit, ConsumerPosition, commit_problem
from raftlog.raft.messages import Code, Role


@dataclass
class _Combined:
    """The commits of one consumer waiting for their interval to end: the latest is written."""

    commit: ConsumerCommit
    answer: asyncio.Future[ConsumerAnswer] = field(default_factory=lambda: asyncio.get_running_loop().create_future())


class ConsumerCommits:
    def __init__(self, service: LogService) -> None:
        self.service = service
        self.interval_s = service.limits.consumer_commit_interval_ms / 1000
        self._combining: dict[str, _Combined] = {}
        self._writing: dict[str, asyncio.Task[None]] = {}  # each consumer's latest write from this member

    # -- commits -------------------------------------------------------------------------

    async def commit(self, name: str, position: int, metadata: str = "", expected: int | None = None
                     ) -> ConsumerAnswer:
        """Commit `position` for consumer `name`; `expected`: a compare-and-set (-1: the consumer must not exist)."""
        if (problem := commit_problem(name, position, metadata)) is not None:
            raise bad_request(problem)
        _check_expected(expected)
        commit = ConsumerCommit(name, position, metadata)
        if expected is not None or self.interval_s <= 0:
            return await self.write(commit, expected)
        combined = self._combining.get(name)
        if combined is None:
            combined = self._combining[name] = _Combined(commit)
            combined.answer.add_done_callback(_retrieved)
            asyncio.get_running_loop().call_later(self.interval_s, self._interval_ended, name)
        combined.commit = commit
        return await asyncio.shield(combined.answer)

    async def delete(self, name: str, expected: int | None = None) -> ConsumerAnswer:
        """Remove consumer `name` (CONSUMER_NOT_FOUND if there is none); answered with position -1 and the
        removal's entry."""
        if (problem := commit_problem(name, 0, "")) is not None:
            raise bad_request(problem)
        _check_expected(expected)
        return await self.write(ConsumerCommit(name, -1), expected)

    def _interval_ended(self, name: str) -> None:
        combined = self._combining.pop(name)
        previous = self._writing.get(name)
        task = asyncio.create_task(self._write_combined(combined, previous))
        self._writing[name] = task
        task.add_done_callback(lambda _: self._writing.pop(name, None) if self._writing.get(name) is task else None)

    async def _write_combined(self, combined: _Combined, previous: asyncio.Task[None] | None) -> None:
        if previous is not None:
            await asyncio.wait((previous,))  # one consumer's entries in the order their commits came
        try:
            combined.answer.set_result(await self.write(combined.commit, None))
        except Exception as exc:
            combined.answer.set_exception(exc)

    async def write(self, commit: ConsumerCommit, expected: int | None) -> ConsumerAnswer:
        """One CONSUMER entry, written by the leader: here, or through the peer connection."""
        node = self.service.node
        if node.role is Role.LEADER:
            try:
                appended = await node.commit_consumer(commit, expected)
            except Exception as exc:
                raise api_error(exc, node.leader_id) from None
            return self._answer(commit.name, ConsumerPosition(commit.position, commit.metadata, appended.first_index))
        leader, tried = node.leader_id, set[str]()
        while True:
            if leader is None or leader in tried or leader == node.config.self_id:
                raise ApiError(Code.NOT_LEADER, "no leader is known; retry later", leader)
            tried.add(leader)
            try:
                return await self.service.peers.commit_consumer(leader, commit, expected)
            except ApiError as exc:
                if exc.code is not Code.NOT_LEADER:  # NOT_LEADER: nothing was written there
                    raise
                leader = exc.leader

    # -- reads ---------------------------------------------------------------------------

    async def get(self, name: str, linearizable: bool = True) -> ConsumerAnswer:
        found = (await self._table(linearizable)).get(name)
        if found is None:
            raise ApiError(Code.CONSUMER_NOT_FOUND, f"no consumer {name[:140]!r}", self.service.node.leader_id)
        return self._answer(name, found)

    async def list_all(self, linearizable: bool = True) -> list[ConsumerAnswer]:
        await self._table(linearizable)
        return self.local()

    def local(self) -> list[ConsumerAnswer]:
        """Every live consumer as this member holds it now (the metrics and the admin page)."""
        return [self._answer(name, p) for name, p in self.service.node.consumers.live().items()]

    async def resume_index(self, name: str, linearizable: bool) -> int | None:
        """Where consumer `name` reads on: the index after its committed position (None: no such consumer)."""
        if (problem := commit_problem(name, 0, "")) is not None:
            raise bad_request(problem)
        found = (await self._table(linearizable)).get(name)
        return None if found is None else found.position + 1

    async def _table(self, linearizable: bool) -> dict[str, ConsumerPosition]:
        service = self.service
        if linearizable:
            confirmed = await service.read_index()
            if not await service.node.wait_committed(confirmed, service.limits.read_wait_ms / 1000):
                raise ApiError(Code.TIMEOUT, f"this member did not reach index {confirmed} within "
                               f"{service.limits.read_wait_ms} ms", service.node.leader_id)
        return service.node.consumers.live()

    def _answer(self, name: str, found: ConsumerPosition) -> ConsumerAnswer:
        committed = self.service.node.committed_index
        lag = max(0, committed - found.position) if found.position >= 0 else 0
        return ConsumerAnswer(name, found.position, found.metadata, found.entry_index, lag,
                              self.service.bytes_between(found.position, committed) if lag else 0)


def _check_expected(expected: int | None) -> None:
    """400 for an expected position no entry can hold (a follower forwards it as a signed 64-bit number)."""
    if expected is not None and not -1 <= expected < 1 << 63:
        raise bad_request(f"an expected position is -1 (no such consumer) to 2^63 - 1, not {expected}")


def _retrieved(answer: asyncio.Future[ConsumerAnswer]) -> None:
    """Every caller may have left: the combined answer's error is then nobody's to read."""
    if not answer.cancelled():
        answer.exception()
