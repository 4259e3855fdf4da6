"""Consumer groups' offsets per queue as the API offers them (raft.group_offsets keeps them in the log).

A commit names a group, a topic and any number of its queues, each with the next offset the group
reads there (-1 removes the queue's offset) and, for a compare-and-set, the offset it must find
there (-1: none yet). It goes through the leader as one QUEUE_COMMIT entry, as a named consumer's
commit does (api.consumers): plain commits of one group that reach a member within
`consumer_commit_interval_ms` are combined into one entry, per queue the latest offset winning
(api.combining), and every caller gets the answer of that entry; a compare-and-set is never
combined: the leader judges it alone, all its queues or none.

Who may move which group is the named consumers' rule, checked on the member the client called
(api.auth's `consumer_refusal`): the writer role, or a consumer token whose name covers the
group's. The topic's name is resolved there too, by that member's catalog (caught up with the
leader when it holds no such topic); its id travels to the leader, which refuses it when the topic
was deleted since (raft.topic_appends).

Reads are linearizable unless asked otherwise, as reads of named consumers are. A queue's lag is
its committed end (the next offset a message would take there, as of the answering member's
commit index) minus the group's offset there.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import NamedTuple

from raftlog.api.answers import GroupAnswer, GroupCommitted, QueueLag
from raftlog.api.auth import Caller, consumer_refusal
from raftlog.api.combining import CommitCombiner
from raftlog.api.errors import ApiError, api_error, bad_request, too_large
from raftlog.api.service import LogService
from raftlog.api.topics import TopicService
from raftlog.raft.group_offsets import (
    HEAD,
    QUEUE_OFFSET,
    QUEUES_PER_COMMIT_MAX,
    Group,
    GroupAsk,
    QueueAsk,
    group_problem,
)
from raftlog.raft.messages import Code, Role
from raftlog.raft.topics import Topic

OFFSET_MAX = (1 << 63) - 1
NAMES_BYTES_MAX = 2 * 255  # a QUEUE_COMMIT entry's group and owner, at their longest


class QueueCommit(NamedTuple):
    """One queue's commit as a client asks it, in the topic its commit names."""

    queue: int
    offset: int  # the next offset the group reads there; -1 removes the group's offset there
    expected: int | None = None  # a compare-and-set: the offset it must find (-1: none)


class ConsumerGroups:
    def __init__(self, service: LogService, topics: TopicService) -> None:
        self.service = service
        self.topics = topics
        # the queues one entry holds: within max_entry_bytes, however long the group's and owner's names
        self.queues_max = min(QUEUES_PER_COMMIT_MAX,
                              (service.limits.max_entry_bytes - HEAD.size - NAMES_BYTES_MAX) // QUEUE_OFFSET.size)
        self._combined = CommitCombiner(service.limits.consumer_commit_interval_ms / 1000, self.write, self._merged)

    # -- commits -------------------------------------------------------------------------

    async def commit(self, group: str, topic: str, queues: Sequence[QueueCommit], *,
                     caller: Caller) -> GroupCommitted:
        """Commit `queues` of `topic` for `group` as `caller` (a new group's owner): answered with the
        offsets its entry wrote in these queues (a later commit combined with it may have moved one)."""
        _check_mover(group, caller)
        if not queues:
            raise bad_request("a commit names at least one queue")
        if len(queues) > self.queues_max:
            raise too_large(f"a commit of {len(queues)} queues; one entry holds at most {self.queues_max} "
                            "(max_entry_bytes)")
        found = await self.topics.local_topic(topic)
        _check_queues(found, queues)
        ask = GroupAsk(group, [QueueAsk(found.id, q.queue, q.offset, q.expected) for q in queues], caller.name)
        if any(q.expected is not None for q in queues):
            committed = await self.write(ask)
        else:
            committed = await self._combined.commit(group, ask)
        asked = {(found.id, q.queue) for q in queues}
        return dataclasses.replace(committed, offsets=tuple(o for o in committed.offsets if (o[0], o[1]) in asked))

    async def delete(self, group: str, *, caller: Caller) -> GroupCommitted:
        """Remove `group` and its offsets (CONSUMER_NOT_FOUND if there is none)."""
        _check_mover(group, caller)
        return await self.write(GroupAsk(group, (), caller.name, remove=True))

    def _merged(self, combined: GroupAsk, latest: GroupAsk) -> GroupAsk | None:
        """Both plain commits in one ask, per queue the latest offset; None when one entry cannot hold them."""
        queues = {(q.topic_id, q.queue): q for q in combined.queues}
        queues.update(((q.topic_id, q.queue), q) for q in latest.queues)
        if len(queues) > self.queues_max:
            return None
        return latest._replace(queues=list(queues.values()))

    async def write(self, ask: GroupAsk) -> GroupCommitted:
        """One QUEUE_COMMIT entry, written by the leader: here, or through the peer connection."""
        service = self.service
        if service.node.role is Role.LEADER:
            return await self.write_here(ask)
        return await service.through_leader(lambda leader: service.peers.commit_group(leader, ask))

    async def write_here(self, ask: GroupAsk) -> GroupCommitted:
        """The entry, written by this member, which leads (a forwarded commit's caller was judged where
        its client called; its size is judged again, by this member's limits)."""
        node = self.service.node
        if len(ask.queues) > self.queues_max:
            raise too_large(f"a commit of {len(ask.queues)} queues; this leader's entries hold at most "
                            f"{self.queues_max}")
        try:
            appended, commit = await node.topic_appends.commit_group(ask)
        except Exception as exc:
            raise api_error(exc, node.leader_id) from None
        return GroupCommitted(commit.group, appended.first_index, commit.offsets)

    # -- reads ---------------------------------------------------------------------------

    async def get(self, name: str, linearizable: bool = True) -> GroupAnswer:
        if (problem := group_problem(name)) is not None:
            raise bad_request(problem)
        await self.topics.catalog(linearizable)
        node = self.service.node
        found = node.groups.live().get(name)
        if found is None:
            raise ApiError(Code.CONSUMER_NOT_FOUND, f"no consumer group {name!r}", node.leader_id)
        return _answer(name, found, node.topics.by_id, node.queue_offsets.committed_offsets())

    async def list_all(self, linearizable: bool = True) -> list[GroupAnswer]:
        """Every live group, by name."""
        await self.topics.catalog(linearizable)
        return self.local()

    def local(self) -> list[GroupAnswer]:
        """Every live group as this member holds it now (the metrics)."""
        node = self.service.node
        by_id, ends = node.topics.by_id, node.queue_offsets.committed_offsets()
        return [_answer(name, group, by_id, ends) for name, group in node.groups.live().items()]

    def topic_ends(self) -> dict[str, int]:
        """Each topic's messages as of this member's commit index: its queues' end offsets together
        (the metrics)."""
        node = self.service.node
        totals: dict[int, int] = {}
        for (topic_id, _queue), end in node.queue_offsets.committed_offsets().items():
            totals[topic_id] = totals.get(topic_id, 0) + end
        return {topic.name: totals.get(topic.id, 0) for topic in node.topics.current.values()}


def _check_mover(group: str, caller: Caller) -> None:
    if (problem := group_problem(group)) is not None:
        raise bad_request(problem)
    if (refused := consumer_refusal(caller, group, None)) is not None:
        raise refused


def _check_queues(topic: Topic, queues: Sequence[QueueCommit]) -> None:
    """Each queue one of the topic's, named once, its offsets ones an entry holds."""
    seen = set()
    for q in queues:
        if not 0 <= q.queue < topic.queues:
            raise ApiError(Code.TOPIC_NOT_FOUND, f"topic {topic.name!r} has queues 0 to {topic.queues - 1}, "
                                                 f"not {q.queue}")
        if q.queue in seen:
            raise bad_request(f"queue {q.queue} is named twice in one commit")
        seen.add(q.queue)
        if not -1 <= q.offset <= OFFSET_MAX:
            raise bad_request(f"an offset is -1 (remove it) to 2^63 - 1, not {q.offset}")
        if q.expected is not None and not -1 <= q.expected <= OFFSET_MAX:
            raise bad_request(f"an expected offset is -1 (none yet) to 2^63 - 1, not {q.expected}")


def _answer(name: str, group: Group, by_id: Mapping[int, Topic], ends: Mapping[tuple[int, int], int]) -> GroupAnswer:
    """The group's offsets in live topics' queues, each with its lag (a deleted topic's are left out)."""
    queues = []
    for (topic_id, queue), offset in sorted(group.offsets.items()):
        topic = by_id.get(topic_id)
        if topic is not None:
            end = ends.get((topic_id, queue), 0)
            queues.append(QueueLag(topic.name, topic_id, queue, offset, end, max(0, end - offset)))
    return GroupAnswer(name, group.owner, group.entry_index, queues)
