"""The producer table: what a leader answers a producer's batch, from what the log holds; and the
sessions that keep it in step with the log through restarts and snapshot installs."""

from __future__ import annotations

import pytest

from raftlog.raft.config import RaftConfig, parse_peers
from raftlog.raft.member_state import MemberState
from raftlog.raft.producers import Checked, ProducedBatch, ProducerSessions, ProducerTable, SessionChange, Verdict
from raftlog.raft.tables import Tables
from raftlog.storage import StoreConfig
from raftlog.storage.codec import Magic, Stamp
from raftlog.storage.memory import MemoryCheckpoint, MemoryStore


def unowned(table: ProducerTable, producer_id: int, epoch: int, first_seq: int, count: int) -> Checked:
    """The verdict below cluster version 1: sessions opened by their first batch, without owners."""
    return table.check(producer_id, epoch, first_seq, count, caller="app", owned=False)


def test_a_batch_appended_again_is_a_duplicate_of_the_first_and_the_next_one_is_new() -> None:
    table = ProducerTable()
    assert unowned(table, 7, 0, 0, 3).verdict is Verdict.NEW
    table.record(7, 0, 0, first_index=10, last_index=12, committed_index=12)
    retried = unowned(table, 7, 0, 0, 3)
    assert retried.verdict is Verdict.DUPLICATE and retried.original == ProducedBatch(0, 10, 12)
    assert unowned(table, 7, 0, 1, 1).verdict is Verdict.DUPLICATE  # a part of it, retried alone
    assert unowned(table, 7, 0, 3, 5).verdict is Verdict.NEW


def test_a_gap_in_the_sequences_is_out_of_order_and_an_older_epoch_is_fenced() -> None:
    table = ProducerTable()
    table.record(7, 2, 0, 10, 12, 12)
    gap = unowned(table, 7, 2, 5, 1)
    assert gap.verdict is Verdict.OUT_OF_ORDER and gap.expected_seq == 3
    fenced = unowned(table, 7, 1, 3, 1)
    assert fenced.verdict is Verdict.FENCED and fenced.epoch == 2
    ahead = unowned(table, 7, 3, 100, 1)  # a new epoch starts at 0: its second batch may not go first
    assert ahead.verdict is Verdict.OUT_OF_ORDER and ahead.expected_seq == 0
    assert unowned(table, 7, 3, 0, 1).verdict is Verdict.NEW
    assert unowned(table, 8, 0, 0, 1).verdict is Verdict.NEW  # a producer with no record starts at 0
    assert unowned(table, 8, 0, 100, 1).verdict is Verdict.UNKNOWN  # never anywhere else: a retry, or a flood's victim
    table.record(7, 3, 0, 13, 13, 13)
    assert unowned(table, 7, 2, 3, 1).verdict is Verdict.FENCED


def test_only_the_last_batches_are_kept_once_committed() -> None:
    table = ProducerTable(batches_kept=2)
    for n in range(4):  # another producer's entries between them: four batches
        table.record(1, 0, n, 10 + 2 * n, 10 + 2 * n, committed_index=13)  # 14 and 16 not committed yet
    assert [b.first_seq for b in table.producers[1].batches] == [2, 3]  # none above the commit is dropped
    assert unowned(table, 1, 0, 0, 1).verdict is Verdict.OUT_OF_ORDER  # too old to tell: not a duplicate
    table.truncate(14)
    assert [b.first_seq for b in table.producers[1].batches] == [2]
    assert unowned(table, 1, 0, 3, 1).verdict is Verdict.NEW


def test_entries_back_to_back_in_log_and_sequence_are_one_batch() -> None:
    """A push that cut a batch, or appends of one producer with nothing between them."""
    table = ProducerTable(batches_kept=1)
    table.record(1, 0, 0, 10, 14, 20)
    table.record(1, 0, 5, 15, 19, 20)
    assert table.producers[1].batches == [ProducedBatch(0, 10, 19)]
    assert unowned(table, 1, 0, 2, 8).verdict is Verdict.DUPLICATE


def test_the_least_recently_appended_and_the_idle_producers_are_forgotten_by_log_time() -> None:
    table = ProducerTable(producers_max=2, idle_entries=100)
    table.record(1, 0, 0, 10, 10, 300)
    table.record(2, 0, 0, 11, 11, 300)
    table.record(3, 0, 0, 12, 12, 300)
    assert list(table.producers) == [2, 3]
    table.record(3, 0, 1, 200, 200, 300)  # over 100 entries later in the log: producer 2 is idle
    assert list(table.producers) == [3]


def test_an_idle_producer_with_entries_above_the_commit_index_is_kept() -> None:
    table = ProducerTable(idle_entries=1)
    table.record(1, 0, 0, 10, 10, committed_index=9)
    table.record(2, 0, 0, 50, 50, committed_index=9)
    assert list(table.producers) == [1, 2]


def test_entries_recorded_already_are_not_recorded_twice() -> None:
    """A table installed with a snapshot, then the entries after the snapshot pushed again."""
    table = ProducerTable()
    table.record(1, 0, 0, 10, 14, 20)
    installed = ProducerTable()
    installed.load(table.encode(14))
    installed.record(1, 0, 0, 10, 14, 20)
    installed.record(1, 0, 3, 13, 16, 20)  # overlaps the end: only 15 and 16 are new
    assert installed.producers[1].batches == [ProducedBatch(0, 10, 16)]
    installed.truncate(12)  # entries 13..16 are gone; 10..12 stay, and so do their sequences
    assert installed.end_index == 12 and installed.producers[1].batches == [ProducedBatch(0, 10, 12)]
    assert unowned(installed, 1, 0, 2, 1).verdict is Verdict.DUPLICATE
    assert unowned(installed, 1, 0, 3, 4).verdict is Verdict.NEW
    installed.truncate(9)
    assert installed.producers == {}


def test_the_table_round_trips_through_its_encoding() -> None:
    table = ProducerTable()
    table.record(1, 4, 0, 10, 12, 12)
    table.record(2**63 - 1, 0, 7, 13, 13, 12)
    copy = ProducerTable()
    copy.load(table.encode(12))
    assert copy.producers == table.producers and copy.end_index == 13
    assert list(copy.producers) == list(table.producers)  # the eviction order too
    with pytest.raises(ValueError, match="not a producer table"):
        copy.load(b'{"producers": [[1]]}')


def sessions_on(store: MemoryStore) -> ProducerSessions:
    config = RaftConfig(self_id="n1", peers=parse_peers("n1-127.0.0.1:1"))
    return ProducerSessions(config, MemberState("n1", MemoryCheckpoint(), 1, None), store)


def restart(sessions: ProducerSessions, saved: bytes | None) -> None:
    Tables("n1", sessions.store, [sessions]).restore({sessions.name: saved}, MemoryCheckpoint())  # as a node starts


async def test_a_restart_cuts_the_saved_table_at_its_commit_index_and_replays_the_log_after_it() -> None:
    """The table was saved with entry 3 in it, uncommitted; the log then lost entry 3 to a truncation
    and took another producer's there. A restart must not believe the first producer wrote it."""
    store = MemoryStore(StoreConfig())
    await store.append_as_leader([b""], 1, Magic.NOOP)
    await store.append_as_leader([b"a", b"b"], 1, Magic.PRODUCED, stamp=Stamp(7, 0, 0))
    await store.append_as_leader([b"c"], 1, Magic.PRODUCED, stamp=Stamp(7, 0, 2))
    before = sessions_on(store)
    restart(before, None)  # nothing saved: the whole log replayed
    assert before.table.producers[7].batches == [ProducedBatch(0, 1, 3)]
    before.state.committed_index = 2
    saved = before.encode()  # entries up to 2 committed
    await store.truncate(3)
    await store.append_as_leader([b"x"], 2, Magic.PRODUCED, stamp=Stamp(8, 0, 0))
    after = sessions_on(store)
    restart(after, saved)
    assert after.table.producers[7].batches == [ProducedBatch(0, 1, 2)]
    assert after.table.producers[8].batches == [ProducedBatch(0, 3, 3)]
    assert unowned(after.table, 7, 0, 2, 1).verdict is Verdict.NEW  # entry 3 is not the first producer's
    assert unowned(after.table, 8, 0, 0, 1).verdict is Verdict.DUPLICATE


def test_a_snapshot_install_takes_the_leaders_table_up_to_the_snapshot() -> None:
    store = MemoryStore(StoreConfig())
    leader = ProducerTable()
    leader.record(7, 0, 0, 10, 12, 12)
    leader.record(7, 0, 3, 13, 14, 12)  # past the snapshot: pushed again after the install
    sessions = sessions_on(store)
    sessions.installed(12, leader.encode(12))
    assert sessions.table.producers[7].batches == [ProducedBatch(0, 10, 12)]
    sessions.produced((7, 0, 3, 13, 14))
    assert sessions.table.producers == leader.producers
    sessions.installed(12, b"garbage")  # logged, and the producers start afresh
    assert not sessions.table.producers


# -- sessions with owners (cluster version 1) ---------------------------------------------


def owned(table: ProducerTable, producer_id: int, epoch: int, first_seq: int, count: int = 1,
          caller: str = "app") -> Verdict:
    return table.check(producer_id, epoch, first_seq, count, caller=caller, owned=True).verdict


def test_an_owned_session_takes_batches_from_its_owner_only() -> None:
    """Audit H2: a producer's id is seen by every reader, so the id alone must not let anyone append
    under it, take its next sequence, or fence it."""
    table = ProducerTable()
    assert owned(table, 7, 0, 0) is Verdict.UNKNOWN  # no session yet: opened first, by an entry
    table.change(SessionChange(7, 0, "app"), 10, committed_index=10)
    assert owned(table, 7, 0, 0) is Verdict.NEW
    assert owned(table, 7, 0, 0, caller="mallory") is Verdict.NOT_OWNER
    assert owned(table, 7, 65535, 0, caller="mallory") is Verdict.NOT_OWNER  # the audit's fence
    assert owned(table, 7, 1, 0) is Verdict.UNKNOWN  # an epoch never opened, even by its owner
    table.record(7, 0, 0, 11, 12, 12)
    assert owned(table, 7, 0, 0, 2) is Verdict.DUPLICATE
    table.change(SessionChange(7, 1, "app"), 13, committed_index=13)  # its owner's next epoch fences epoch 0
    assert owned(table, 7, 0, 2) is Verdict.FENCED and owned(table, 7, 1, 0) is Verdict.NEW
    table.change(SessionChange(7, 1, "app", closed=True), 14, committed_index=14)
    assert owned(table, 7, 1, 0) is Verdict.UNKNOWN and 7 not in table.producers and not table.owned


def test_a_full_table_refuses_new_sessions_and_forgets_none_of_the_owned() -> None:
    """Audit M4: a flood of new producers evicted the others, and a retry of theirs was then new.
    Now a session is opened by an entry the leader writes only where there is room for it."""
    table = ProducerTable(producers_max=4, sessions_per_name_max=2)
    table.change(SessionChange(1, 0, "app"), 10, 10)
    table.record(1, 0, 0, 11, 11, 11)
    table.change(SessionChange(2, 0, "flood"), 12, 12)
    table.change(SessionChange(3, 0, "flood"), 13, 13)
    assert "producer_sessions_per_name_max" in (table.room_for(4, "flood") or "")
    assert table.room_for(3, "flood") is None  # its own next epoch takes no more room
    table.change(SessionChange(4, 0, "other"), 14, 14)
    assert "producers_max" in (table.room_for(5, "app") or "")
    sequences = {1: 1, 2: 0, 3: 0, 4: 0}
    for n in range(100):  # the sessions' batches go on: nobody is forgotten
        producer_id = 1 + n % 4
        table.record(producer_id, 0, sequences[producer_id], 15 + n, 15 + n, 15 + n)
        sequences[producer_id] += 1
    assert set(table.producers) == {1, 2, 3, 4} and table.owned == {"app": 1, "flood": 2, "other": 1}
    assert owned(table, 1, 0, sequences[1] - 1) is Verdict.DUPLICATE  # the last batch's retry is answered


def test_an_idle_owned_session_expires_by_log_time_and_a_new_open_or_truncation_counts_right() -> None:
    table = ProducerTable(idle_entries=100)
    table.change(SessionChange(1, 0, "app"), 10, 10)
    table.change(SessionChange(2, 0, "app"), 50, 50)
    table.record(2, 0, 0, 120, 120, 120)  # 110 entries after session 1 did anything: it expired
    assert list(table.producers) == [2] and table.owned == {"app": 1}
    table.change(SessionChange(3, 0, "app"), 130, 125)
    table.truncate(125)  # its open is gone with the entry (never committed): so is the session
    assert list(table.producers) == [2] and table.owned == {"app": 1}


def test_owners_round_trip_and_a_table_of_the_release_before_owners_loads() -> None:
    table = ProducerTable()
    table.change(SessionChange(7, 3, "app"), 10, 10)
    table.record(7, 3, 0, 11, 12, 12)
    table.record(8, 0, 0, 13, 13, 13)  # of the release before owners
    copy = ProducerTable()
    copy.load(table.encode(13))
    assert copy.producers == table.producers and copy.owned == {"app": 1}
    old = ProducerTable()
    old.load(b'{"end_index":13,"stable_index":13,"producers":[[8,0,[[0,13,13]]]]}')
    assert old.producers[8].owner is None


@pytest.mark.parametrize("body", [b"", b"\x00" * 10, SessionChange(1, 0, "a").encode()[:-2] + b"\x02a",
                                  b"\xff" * 8 + b"\x00\x00\x00"])
def test_a_session_entry_that_is_not_one_is_refused(body: bytes) -> None:
    with pytest.raises(ValueError):
        SessionChange.decode(body)


def test_a_session_entry_round_trips() -> None:
    for change in (SessionChange(2**63 - 1, 65535, "x" * 255), SessionChange(0, 0, "", closed=True)):
        assert SessionChange.decode(change.encode()) == change
