"""Named consumers' positions: folded from the log's CONSUMER entries as they commit, judged by the
leader against the latest log, expired by log time, saved and restored with the log after them;
from cluster version 1 with an owner, whose quota the leader checks, and a retention-floor flag."""

from __future__ import annotations

import json

import pytest

from raftlog.raft.config import RaftConfig, parse_peers
from raftlog.raft.consumers import ABSENT, RECORD, ConsumerAsk, ConsumerCommit, ConsumerPositions, commit_problem
from raftlog.raft.errors import (
    ConsumerConflictError,
    ConsumerNotFoundError,
    ConsumerPositionError,
    ConsumersFullError,
)
from raftlog.raft.member_state import MemberState
from raftlog.raft.tables import Tables
from raftlog.storage import StoreConfig
from raftlog.storage.codec import Magic
from raftlog.storage.memory import MemoryCheckpoint, MemoryStore


def positions_on(store: MemoryStore, **settings: int) -> ConsumerPositions:
    config = RaftConfig(self_id="n1", peers=parse_peers("n1-127.0.0.1:1"), **settings)
    return ConsumerPositions(config, MemberState("n1", MemoryCheckpoint(), 1, None), store)


async def commit(store: MemoryStore, consumers: ConsumerPositions, name: str, position: int) -> int:
    """A CONSUMER entry appended, as the leader appends one; its index."""
    return await write(store, consumers, ConsumerCommit(name, position, f"m{position}"))


async def write(store: MemoryStore, consumers: ConsumerPositions, entry: ConsumerCommit) -> int:
    appended = await store.append_as_leader([entry.encode()], 1, Magic.CONSUMER)
    consumers.appended(appended.first_index, Magic.CONSUMER, store.get(appended.first_index).body)
    return appended.first_index


async def decided(store: MemoryStore, consumers: ConsumerPositions, ask: ConsumerAsk, extended: bool = True) -> int:
    """What the leader does under its lock: the entry decided for `ask`, appended; its index."""
    return await write(store, consumers, consumers.decide(ask, extended))


async def filled(store: MemoryStore, count: int = 20) -> None:
    await store.append_as_leader([b"x"] * count, 1, Magic.NORMAL)


def test_a_commit_reads_back_and_a_malformed_one_is_named() -> None:
    commit_ = ConsumerCommit("billing.v2", 41, "batch 7 ✓")
    assert ConsumerCommit.decode(commit_.encode()) == commit_
    assert ConsumerCommit.decode(ConsumerCommit("x", -1).encode()).position == -1  # a removal
    with pytest.raises(ValueError):
        ConsumerCommit.decode(b"\x00" * 9 + b"\xff")  # a name longer than the entry
    for extended in (ConsumerCommit("billing", 41, "m ✓", "ops@example", True), ConsumerCommit("b", 0, "", "", False)):
        assert ConsumerCommit.decode(extended.encode()) == extended
    body = ConsumerCommit("billing", 41, "m", "app", True).encode()
    assert body[8:10] == b"\x80\x07"  # the name's length with the top bit: what a release before skips (too long)
    for broken in (body[:17], body[:18] + b"\x09" + body[19:], body[:19] + b"\xff"):  # cut; unknown flag; owner
        with pytest.raises(ValueError):
            ConsumerCommit.decode(broken)


async def test_an_old_form_entry_is_read_as_a_consumer_without_owner_or_flag() -> None:
    """The body the releases before cluster versions wrote, byte for byte: position, the name's
    length, the name, the metadata."""
    old = RECORD.pack(41, 7) + b"billing" + b"batch 7"
    assert ConsumerCommit.decode(old) == ConsumerCommit("billing", 41, "batch 7", None, False)
    store = MemoryStore(StoreConfig())
    consumers = positions_on(store)
    appended = await store.append_as_leader([old], 1, Magic.CONSUMER)
    consumers.appended(appended.first_index, Magic.CONSUMER, store.get(appended.first_index).body)
    consumers.state.committed_index = store.end_index
    found = consumers.live()["billing"]
    assert (found.position, found.metadata, found.owner, found.floor) == (41, "batch 7", "", False)
    assert consumers.floor() is None  # no flag: it holds no retention back
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
    await filled(store)
    consumers = positions_on(store, consumers_max=2)
    consumers.decide(ConsumerAsk("a", 3, expected=ABSENT), False)  # a new consumer: none yet, as expected
    await commit(store, consumers, "a", 3)  # not committed yet, but ahead in the log: the latest
    with pytest.raises(ConsumerConflictError) as conflict:
        consumers.decide(ConsumerAsk("a", 9, expected=2), False)
    assert conflict.value.found == 3
    assert consumers.decide(ConsumerAsk("a", 9, "m", expected=3, caller="app"), False) == ConsumerCommit("a", 9, "m")
    with pytest.raises(ConsumerNotFoundError):
        consumers.decide(ConsumerAsk("b", -1), False)  # removing one that does not exist
    await commit(store, consumers, "b", 1)
    with pytest.raises(ConsumersFullError):
        consumers.decide(ConsumerAsk("c", 1), False)
    consumers.decide(ConsumerAsk("b", 2), False)  # known ones go on
    assert consumers.decide(ConsumerAsk("b", -1, caller="app"), True) == ConsumerCommit("b", -1)  # the old form


async def test_a_position_past_the_log_end_is_refused() -> None:
    """Audit M3: a position had no upper bound, so a commit could make a consumer skip entries that
    were never written. The leader compares it with its log's end, under its append lock."""
    store = MemoryStore(StoreConfig())
    await filled(store, 5)  # entries 0 to 4
    consumers = positions_on(store)
    assert consumers.decide(ConsumerAsk("a", 4), True).position == 4  # the last entry: processed it all
    for position in (5, 2**63 - 1):
        with pytest.raises(ConsumerPositionError, match="past the log's end, 4"):
            consumers.decide(ConsumerAsk("a", position), True)


async def test_from_version_1_a_name_has_a_quota_of_consumers() -> None:
    """The owner is written in the entry, so every member counts a name's consumers alike; one created
    below version 1 has none, and counts against no name's quota."""
    store = MemoryStore(StoreConfig())
    await filled(store)
    consumers = positions_on(store, consumers_max=5, consumers_per_name_max=2)
    await decided(store, consumers, ConsumerAsk("old", 1, caller="app"), extended=False)
    for name in ("a1", "a2"):
        await decided(store, consumers, ConsumerAsk(name, 1, caller="app"))
    with pytest.raises(ConsumersFullError, match="app has 2 consumers; consumers_per_name_max is 2"):
        consumers.decide(ConsumerAsk("a3", 1, caller="app"), True)
    assert consumers.decide(ConsumerAsk("a3", 1, caller="app"), False).owner is None  # below version 1: no quota
    again = consumers.decide(ConsumerAsk("a1", 5, caller="ops"), True)  # a writer moves it: the owner stays
    assert (again.owner, consumers.decide(ConsumerAsk("old", 2, caller="app"), True).owner) == ("app", "")
    await decided(store, consumers, ConsumerAsk("b1", 1, caller="other"))
    await decided(store, consumers, ConsumerAsk("a1", -1))  # removed: room for another of app's
    await decided(store, consumers, ConsumerAsk("a3", 1, caller="app"))
    await decided(store, consumers, ConsumerAsk("b2", 1, caller="other"))
    with pytest.raises(ConsumersFullError, match="consumers_max is 5"):
        consumers.decide(ConsumerAsk("b3", 1, caller="third"), True)
    consumers.state.committed_index = store.end_index
    assert {n: p.owner for n, p in consumers.live().items()} == {
        "old": "", "a2": "app", "a3": "app", "b1": "other", "b2": "other"}


async def test_the_floor_is_the_lowest_flagged_position_and_a_commit_keeps_the_flag() -> None:
    """Retention's floor follows the consumers an admin flagged, only them; a commit that does not set
    the flag (a writer's, a consumer's own) keeps it as it was."""
    store = MemoryStore(StoreConfig())
    await filled(store)
    consumers = positions_on(store)
    await decided(store, consumers, ConsumerAsk("slow", 2, caller="app"))
    await decided(store, consumers, ConsumerAsk("kept", 9, caller="app", floor=True))
    consumers.state.committed_index = store.end_index
    assert consumers.floor() == 9  # "slow" is lower, but not flagged
    await decided(store, consumers, ConsumerAsk("kept", 12, caller="writer"))
    await decided(store, consumers, ConsumerAsk("also", 11, caller="ops", floor=True))
    consumers.state.committed_index = store.end_index
    assert consumers.live()["kept"].floor and consumers.floor() == 11
    await decided(store, consumers, ConsumerAsk("also", 11, floor=False))
    consumers.state.committed_index = store.end_index
    assert consumers.floor() == 12
    await decided(store, consumers, ConsumerAsk("kept", -1))
    consumers.state.committed_index = store.end_index
    assert consumers.floor() is None


async def test_a_consumer_that_commits_nothing_for_idle_entries_expires() -> None:
    store = MemoryStore(StoreConfig())
    consumers = positions_on(store, consumer_idle_entries=10)
    await commit(store, consumers, "idle", 0)
    await store.append_as_leader([b"x"] * 5, 1, Magic.NORMAL)
    await commit(store, consumers, "busy", 4)
    consumers.state.committed_index = store.end_index
    assert list(consumers.live()) == ["busy", "idle"]
    await store.append_as_leader([b"x"] * 6, 1, Magic.NORMAL)
    consumers.state.committed_index = store.end_index
    assert list(consumers.live()) == ["busy"]  # 12 entries since "idle" committed


async def test_a_restart_takes_the_saved_table_and_the_log_after_it() -> None:
    store = MemoryStore(StoreConfig())
    before = positions_on(store)
    await commit(store, before, "a", 0)
    await write(store, before, ConsumerCommit("owned", 0, "", "app", True))
    before.state.committed_index = store.end_index
    saved = before.encode()
    rows = json.loads(saved)  # each row as the releases before read it (a snapshot may go to one); the rest apart
    assert [len(row) for row in rows["consumers"]] == [4, 4] and rows["extras"] == {"owned": ["app", True]}
    await commit(store, before, "b", 0)  # after the save: found again in the log
    await commit(store, before, "a", -1)  # removed
    before.state.committed_index = store.end_index
    after = positions_on(store)
    after.state.committed_index = store.end_index
    Tables("n1", store, [after]).restore({after.name: saved}, MemoryCheckpoint())
    assert after.live() == before.live() and list(after.live()) == ["b", "owned"]
    assert after.live()["owned"][3:] == ("app", True)
    old = positions_on(store)  # a table the releases before saved: rows only
    old.state.committed_index = store.end_index
    rows_only = json.dumps({k: v for k, v in rows.items() if k != "extras"}).encode()
    Tables("n1", store, [old]).restore({old.name: rows_only}, MemoryCheckpoint())
    assert old.live()["owned"][3:] == ("", False) and list(old.live()) == ["b", "owned"]
    broken = positions_on(store)
    broken.state.committed_index = store.end_index
    # said, and rebuilt from the whole log
    Tables("n1", store, [broken]).restore({broken.name: b"garbage"}, MemoryCheckpoint())
    assert broken.live() == before.live()
