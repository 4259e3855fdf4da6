"""Named consumers' positions: folded from the log's CONSUMER entries as they commit, judged by the
leader against the latest log, expired by log time, saved and restored with the log after them."""

from __future__ import annotations

import pytest

from raftlog.raft.apply import restore_tables
from raftlog.raft.config import RaftConfig, parse_peers
from raftlog.raft.consumers import ABSENT, ConsumerCommit, ConsumerPositions, commit_problem
from raftlog.raft.errors import ConsumerConflictError, ConsumerNotFoundError, ConsumersFullError
from raftlog.raft.member_state import MemberState
from raftlog.storage import StoreConfig
from raftlog.storage.codec import Magic
from raftlog.storage.memory import MemoryCheckpoint, MemoryStore


def positions_on(store: MemoryStore, **settings: int) -> ConsumerPositions:
    config = RaftConfig(self_id="n1", peers=parse_peers("n1-127.0.0.1:1"), **settings)
    return ConsumerPositions(config, MemberState("n1", MemoryCheckpoint(), 1, None), store)


async def commit(store: MemoryStore, consumers: ConsumerPositions, name: str, position: int) -> int:
    """A CONSUMER entry appended, as the leader appends one; its index."""
    appended = await store.append_as_leader([ConsumerCommit(name, position, f"m{position}").encode()], 1,
                                            Magic.CONSUMER)
    consumers.appended([appended.first_index])
    return appended.first_index


def test_a_commit_reads_back_and_a_malformed_one_is_named() -> None:
    commit_ = ConsumerCommit("billing.v2", 41, "batch 7 ✓")
    assert ConsumerCommit.decode(commit_.encode()) == commit_
    assert ConsumerCommit.decode(ConsumerCommit("x", -1).encode()).position == -1  # a removal
    with pytest.raises(ValueError):
        ConsumerCommit.decode(b"\x00" * 9 + b"\xff")  # a name longer than the entry
    assert commit_problem("no spaces", 1, "") is not None
    assert commit_problem("a" * 129, 1, "") is not None
    assert commit_problem("ok", -1, "") is not None
    assert commit_problem("ok", 1, "x" * 1025) is not None
    assert commit_problem("ok-1_b.c", 0, "x" * 1024) is None


async def test_positions_count_once_committed_and_truncated_entries_never() -> None:
    store = MemoryStore(StoreConfig())
    await store.append_as_leader([b""], 1, Magic.NOOP)
    consumers = positions_on(store)
    first = await commit(store, consumers, "a", 0)
    second = await commit(store, consumers, "a", 5)
    consumers.state.committed_index = first
    assert {n: p.position for n, p in consumers.live().items()} == {"a": 0}
    await store.truncate(second)  # a new leader's log replaced the second commit
    consumers.truncated(second)
    consumers.state.committed_index = store.end_index
    assert consumers.live()["a"].position == 0 and consumers.live()["a"].entry_index == first


async def test_the_leader_compares_and_sets_against_the_latest_log() -> None:
    store = MemoryStore(StoreConfig())
    consumers = positions_on(store, consumers_max=2)
    consumers.check(ConsumerCommit("a", 3), ABSENT)  # a new consumer: none yet, as expected
    await commit(store, consumers, "a", 3)  # not committed yet, but ahead in the log: the latest
    with pytest.raises(ConsumerConflictError) as conflict:
        consumers.check(ConsumerCommit("a", 9), 2)
    assert conflict.value.found == 3
    consumers.check(ConsumerCommit("a", 9), 3)
    with pytest.raises(ConsumerNotFoundError):
        consumers.check(ConsumerCommit("b", -1), None)  # removing one that does not exist
    await commit(store, consumers, "b", 1)
    with pytest.raises(ConsumersFullError):
        consumers.check(ConsumerCommit("c", 1), None)
    consumers.check(ConsumerCommit("b", 2), None)  # known ones go on


async def test_a_consumer_that_commits_nothing_for_idle_entries_expires() -> None:
    store = MemoryStore(StoreConfig())
    consumers = positions_on(store, consumer_idle_entries=10)
    await commit(store, consumers, "idle", 0)
    await store.append_as_leader([b"x"] * 5, 1, Magic.NORMAL)
    await commit(store, consumers, "busy", 4)
    consumers.state.committed_index = store.end_index
    assert consumers.floor() == 0  # the slowest live consumer holds retention back
    await store.append_as_leader([b"x"] * 6, 1, Magic.NORMAL)
    consumers.state.committed_index = store.end_index
    assert list(consumers.live()) == ["busy"] and consumers.floor() == 4  # 12 entries since "idle" committed


async def test_a_restart_takes_the_saved_table_and_the_log_after_it() -> None:
    store = MemoryStore(StoreConfig())
    before = positions_on(store)
    await commit(store, before, "a", 0)
    before.state.committed_index = store.end_index
    saved = before.encode()
    await commit(store, before, "b", 0)  # after the save: found again in the log
    await commit(store, before, "a", -1)  # removed
    before.state.committed_index = store.end_index
    after = positions_on(store)
    after.state.committed_index = store.end_index
    restore_tables("n1", store, (after, saved))
    assert after.live() == before.live() and list(after.live()) == ["b"]
    broken = positions_on(store)
    broken.state.committed_index = store.end_index
    restore_tables("n1", store, (broken, b"garbage"))  # said, and rebuilt from the whole log
    assert broken.live() == before.live()
