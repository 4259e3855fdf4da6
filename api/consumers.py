"""Named consumers as the API offers them (raft.consumers keeps their positions in the log).

A consumer's commit goes through the leader, as an append does. Plain commits
of one consumer that reach a member within `consumer_commit_interval_ms` are
combined into one entry, the latest position winning (api.combining); every
caller gets the answer of that entry. A compare-and-set, or a commit that
sets the retention-floor flag, is never combined: it is judged alone, by the
leader, against the latest position.

Who may move which consumer is checked here, on the member the client
called, before anything goes to the leader (api.auth's `consumer_refusal`);
the leader then judges the commit against its log (raft.consumers).

Reads of positions are linearizable unless asked otherwise: the member
catches up to the leader's confirmed commit index first, as reads of entries do.
"""

from __future__ import annotations

from raftlog.api.answers import ConsumerAnswer
from raftlog.api.auth import Caller, consumer_refusal
from raftlog.api.combining import CommitCombiner
from raftlog.api.errors import ApiError, api_error, bad_request
from raftlog.api.service import LogService
from raftlog.raft.cluster_version import CONSUMER_OWNERS
from raftlog.raft.consumers import ConsumerAsk, ConsumerPosition, commit_problem
from raftlog.raft.messages import Code, Role


class ConsumerCommits:
    def __init__(self, service: LogService) -> None:
        self.service = service
        self._combined = CommitCombiner(service.limits.consumer_commit_interval_ms / 1000, self.write,
                                        lambda _combined, latest: latest)

    # -- commits -------------------------------------------------------------------------

    async def commit(self, name: str, position: int, metadata: str = "", expected: int | None = None, *,
                     caller: Caller, floor: bool | None = None) -> ConsumerAnswer:
        """Commit `position` for consumer `name` as `caller` (a new consumer's owner); `expected`: a
        compare-and-set (-1: the consumer must not exist); `floor`: set or clear its retention-floor
        flag (an admin's; None: as it is)."""
        if (problem := commit_problem(name, position, metadata)) is not None:
            raise bad_request(problem)
        _check_expected(expected)
        if (refused := consumer_refusal(caller, name, floor)) is not None:
            raise refused
        ask = ConsumerAsk(name, position, metadata, expected, caller.name, floor)
        if expected is not None or floor is not None:
            return await self.write(ask)
        return await self._combined.commit(name, ask)

    async def delete(self, name: str, expected: int | None = None, *, caller: Caller) -> ConsumerAnswer:
        """Remove consumer `name` (CONSUMER_NOT_FOUND if there is none); answered with position -1 and the
        removal's entry."""
        if (problem := commit_problem(name, 0, "")) is not None:
            raise bad_request(problem)
        _check_expected(expected)
        if (refused := consumer_refusal(caller, name, None)) is not None:
            raise refused
        return await self.write(ConsumerAsk(name, -1, expected=expected, caller=caller.name))

    async def write(self, ask: ConsumerAsk) -> ConsumerAnswer:
        """One CONSUMER entry, written by the leader: here, or through the peer connection."""
        node = self.service.node
        if node.role is Role.LEADER:
            try:
                appended, commit = await node.commit_consumer(ask)
            except Exception as exc:
                raise api_error(exc, node.leader_id) from None
            return self._answer(commit.name, ConsumerPosition(commit.position, commit.metadata, appended.first_index,
                                                              commit.owner or "", commit.floor))
        if ask.floor:
            await self._floor_writable()
        return await self.service.through_leader(lambda leader: self.service.peers.commit_consumer(leader, ask))

    async def _floor_writable(self) -> None:
        """On a follower, before a commit that sets the retention-floor flag goes to the leader: this
        member's log must be at the cluster version that writes it (a leader of the release before
        would drop the flag unsaid; the group's version is raised only once every member knows it)."""
        node = self.service.node
        await node.version.wait_for(CONSUMER_OWNERS, node.config.max_wait_ack_ms / 1000)
        if node.version.level < CONSUMER_OWNERS:
            raise ApiError(Code.CLUSTER_VERSION_TOO_LOW, f"a consumer's retention_floor needs cluster version "
                           f"{CONSUMER_OWNERS}; this member's log is at {node.version.level} (the leader names the "
                           "members holding it back)", node.leader_id)

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
                              self.service.bytes_between(found.position, committed) if lag else 0,
                              found.owner or None, found.floor)


def _check_expected(expected: int | None) -> None:
    """400 for an expected position no entry can hold (a follower forwards it as a signed 64-bit number)."""
    if expected is not None and not -1 <= expected < 1 << 63:
        raise bad_request(f"an expected position is -1 (no such consumer) to 2^63 - 1, not {expected}")
