"""Consume queues (RocketMQ's ConsumeQueue over the log): what a consumer reads by queue offset is what
was dispatched, a restart or a crash keeps or rebuilds it, and retention, truncation and a dropped
topic leave what the log still holds. Small file grids, so that every test crosses files."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from raftlog.storage import Store, StoreConfig
from raftlog.storage.codec import INDEX_RECORD, Magic
from raftlog.storage.consume_queue import UNIT, UNIT_SIZE, ConsumeQueue, FileGrid, units_of
from raftlog.storage.consume_queues import ConsumeQueues, DispatchedPoint, tags_codes_of
from raftlog.storage.errors import ConsumeQueueError, QueueOffsetError
from raftlog.storage.message import Meta, encode_message

GRID = FileGrid(4, 10)  # files of 4, 8, then 10 units: offsets 0, 4, 12, 22, 32, ...


def unit(offset: int) -> bytes:
    """Offset N's unit in these tests: an entry of 100 bytes at pos 1000 + 100 N."""
    return UNIT.pack(1000 + 100 * offset, 100, offset * 7)


def units(first: int, end: int) -> bytes:
    return b"".join(unit(i) for i in range(first, end))


def pos_of(offset: int) -> int:
    return 1000 + 100 * offset


def name(offset: int, queue: int = 0) -> str:
    """The name of a queue's file named by `offset`, in its topic's directory."""
    return f"{queue}-{offset:020d}"


def files(directory: Path) -> dict[str, int]:
    return {p.name: p.stat().st_size for p in sorted(directory.iterdir())}


@pytest.fixture
def queue(tmp_path: Path) -> ConsumeQueue:
    cq = ConsumeQueue(tmp_path / "7", 0, GRID)
    cq.append(0, units(0, 30))
    return cq


# -- the file grid ---------------------------------------------------------------------------------


@given(st.integers(1, 64), st.integers(1, 300), st.integers(0, 5000))
def test_the_grid_finds_the_file_of_an_offset_by_arithmetic(first: int, extra: int, offset: int) -> None:
    grid = FileGrid(first, first + extra)
    k, start = 0, 0
    while start + grid.units_in(k) <= offset:  # the naive walk over the files
        start += grid.units_in(k)
        k += 1
    assert (grid.file_of(offset), grid.start_of(k)) == (k, start)


def test_files_start_small_and_double_up_to_their_cap() -> None:
    grid = FileGrid()  # RocketMQ's 300,000 units at most
    assert [grid.units_in(k) for k in range(11)] == [1024 << k for k in range(9)] + [300_000, 300_000]
    assert grid.file_of(10_000_000 - 1) == 40  # ten million units: 41 files


# -- appends and reads -----------------------------------------------------------------------------


def test_units_read_back_by_offset_across_files(queue: ConsumeQueue, tmp_path: Path) -> None:
    assert (queue.min_offset, queue.next_offset) == (0, 30)
    assert all(queue.unit(i) == UNIT.unpack(unit(i)) for i in range(30))
    assert queue.units(2, 15) == units(2, 17)  # a page across three files
    assert queue.units(25, 100) == units(25, 30)
    assert queue.units(30, 10) == b""  # a consumer at the end waits
    for outside in (-1, 30):
        with pytest.raises(QueueOffsetError):
            queue.unit(outside)
    # each file holds its units and no more: nothing is reserved ahead
    assert files(tmp_path / "7") == {name(0): 80, name(4): 160, name(12): 200, name(22): 160}


def test_a_file_is_as_large_as_its_units(tmp_path: Path) -> None:
    cq = ConsumeQueue(tmp_path / "7", 3, FileGrid())
    cq.append(0, unit(0))
    assert files(tmp_path / "7") == {name(0, queue=3): UNIT_SIZE}


def test_an_unused_queue_has_no_file(tmp_path: Path) -> None:
    queues = ConsumeQueues(tmp_path / "cq", GRID)
    cq = queues.queue(3, 1)
    assert (cq.min_offset, cq.next_offset, cq.units(0, 10)) == (0, 0, b"")
    queues.close()
    assert sorted(p.name for p in (tmp_path / "cq").iterdir()) == ["dispatched.json"]


def test_a_re_dispatch_of_held_units_is_skipped(queue: ConsumeQueue) -> None:
    queue.append(10, units(10, 30))
    queue.append(25, units(25, 35))  # partly held: the rest is appended
    assert queue.next_offset == 35
    assert queue.units(0, 100) == units(0, 35)


def test_a_re_dispatch_that_disagrees_is_refused(queue: ConsumeQueue) -> None:
    with pytest.raises(ConsumeQueueError, match="offset 12 holds"):
        queue.append(10, units(10, 12) + unit(99) + units(13, 32))
    assert queue.units(0, 100) == units(0, 30)


def test_a_gap_is_refused(queue: ConsumeQueue) -> None:
    with pytest.raises(ConsumeQueueError, match="gap"):
        queue.append(31, unit(31))
    with pytest.raises(ConsumeQueueError, match="whole"):
        queue.append(30, unit(30)[:-1])
    assert queue.next_offset == 30


def test_a_queue_reopens_as_it_was_closed(queue: ConsumeQueue, tmp_path: Path) -> None:
    queue.flush()
    queue.close_files()
    again = ConsumeQueue(tmp_path / "7", 0, GRID)
    assert (again.min_offset, again.next_offset) == (0, 30)
    assert again.units(0, 100) == units(0, 30)
    again.append(30, units(30, 40))
    assert again.unit(39) == UNIT.unpack(unit(39))


# -- truncation --------------------------------------------------------------------------------------


def test_truncate_drops_the_units_from_an_offset_and_their_files(queue: ConsumeQueue, tmp_path: Path) -> None:
    queue.units(0, 30)  # full files are mapped: the cut must unmap them before it shortens one
    queue.truncate(9)
    assert queue.next_offset == 9
    assert files(tmp_path / "7") == {name(0): 80, name(4): 100}
    assert ConsumeQueue(tmp_path / "7", 0, GRID).units(0, 100) == units(0, 9)
    queue.append(9, units(9, 13))
    assert queue.units(0, 100) == units(0, 13)


def test_truncate_past_pos_drops_the_units_of_entries_past_a_cut_log(queue: ConsumeQueue) -> None:
    queue.truncate_past_pos(pos_of(30))  # nothing past it
    assert queue.next_offset == 30
    queue.truncate_past_pos(pos_of(21) + 1)
    assert queue.next_offset == 22
    assert queue.units(0, 100) == units(0, 22)


# -- retention ---------------------------------------------------------------------------------------


def test_correct_min_offset_deletes_whole_files_before_the_log(queue: ConsumeQueue, tmp_path: Path) -> None:
    queue.correct_min_offset(pos_of(13))  # the log now begins with entry 13's
    assert queue.min_offset == 13
    assert list(files(tmp_path / "7")) == [name(13), name(22)]
    with pytest.raises(QueueOffsetError):
        queue.unit(12)
    assert queue.units(13, 100) == units(13, 30)
    again = ConsumeQueue(tmp_path / "7", 0, GRID)  # the first file's name keeps min_offset
    assert (again.min_offset, again.next_offset) == (13, 30)
    assert again.units(13, 100) == units(13, 30)
    again.append(10, units(10, 31))  # a re-dispatch from before min_offset: what retention took is skipped
    assert again.units(13, 100) == units(13, 31)


def test_a_queue_emptied_by_retention_keeps_its_end(queue: ConsumeQueue, tmp_path: Path) -> None:
    queue.append(30, units(30, 32))  # 32: the end of a full file
    queue.correct_min_offset(pos_of(40))
    assert (queue.min_offset, queue.next_offset) == (32, 32)
    assert files(tmp_path / "7") == {name(32): 0}
    again = ConsumeQueue(tmp_path / "7", 0, GRID)
    assert (again.min_offset, again.next_offset) == (32, 32)
    again.append(32, unit(32))
    assert again.units(32, 10) == unit(32)


def test_a_file_a_power_loss_shortened_ends_the_queue(queue: ConsumeQueue, tmp_path: Path) -> None:
    queue.close_files()
    os.truncate(tmp_path / "7" / name(4), 5 * UNIT_SIZE)  # its writeback was lost
    again = ConsumeQueue(tmp_path / "7", 0, GRID)
    assert again.units(0, 100) == units(0, 9)  # the units after the gap are dropped: the log rebuilds them
    assert list(files(tmp_path / "7")) == [name(0), name(4)]


def test_delete_removes_the_queue_and_then_its_topics_directory(tmp_path: Path) -> None:
    one, ten = ConsumeQueue(tmp_path / "7", 1, GRID), ConsumeQueue(tmp_path / "7", 10, GRID)  # "1-" is not "10-"
    one.append(0, units(0, 5))
    ten.append(0, units(0, 20))
    one.delete()
    assert ConsumeQueue(tmp_path / "7", 1, GRID).next_offset == 0
    assert ConsumeQueue(tmp_path / "7", 10, GRID).units(0, 100) == units(0, 20)
    ten.delete()
    assert not (tmp_path / "7").exists()


# -- the set: dispatch, the dispatched point, recovery -------------------------------------------------


def dispatch(queues: ConsumeQueues, first: int, end: int, topics: range = range(2)) -> None:
    """Units first..end of queues 0 and 1 of each topic; the log entry of offset N is index N."""
    queues.dispatch([(t, q, first, units(first, end)) for t in topics for q in range(2)],
                    DispatchedPoint(end - 1, pos_of(end - 1)))


def test_a_restart_finds_the_queues_and_where_dispatch_stopped(tmp_path: Path) -> None:
    queues = ConsumeQueues(tmp_path / "cq", GRID)
    dispatch(queues, 0, 20)
    queues.close()
    again = ConsumeQueues(tmp_path / "cq", GRID)
    assert again.dispatched == DispatchedPoint(19, pos_of(19))
    assert all(again.queue(t, q).units(0, 100) == units(0, 20) for t in range(2) for q in range(2))
    again.close()


def test_units_a_crash_lost_are_dispatched_again_from_the_point(tmp_path: Path) -> None:
    queues = ConsumeQueues(tmp_path / "cq", GRID)
    dispatch(queues, 0, 10)
    queues.flush()
    shutil.copytree(tmp_path / "cq", tmp_path / "disk")  # what a power loss leaves: the flushed state
    dispatch(queues, 10, 25)  # not flushed
    shutil.copytree(tmp_path / "cq", tmp_path / "killed")  # what a killed process leaves: the page cache's
    hole = tmp_path / "killed" / "0" / name(12, queue=1)
    hole.write_bytes(bytes(UNIT_SIZE) + hole.read_bytes()[UNIT_SIZE:])  # a page the disk did not get
    queues.close()

    for state, held in (("disk", 10), ("killed", 25)):
        restarted = ConsumeQueues(tmp_path / state, GRID)
        assert restarted.dispatched == DispatchedPoint(9, pos_of(9))
        restarted.recover(pos_of(25))
        assert restarted.queue(0, 0).next_offset == held
        dispatch(restarted, 10, 25)  # the start's re-dispatch, from the entry after the point
        assert all(restarted.queue(t, q).units(0, 100) == units(0, 25) for t in range(2) for q in range(2))
        restarted.close()


def test_recover_cuts_queues_that_ran_past_a_truncated_log(tmp_path: Path) -> None:
    queues = ConsumeQueues(tmp_path / "cq", GRID)
    dispatch(queues, 0, 30)
    queues.close()
    restarted = ConsumeQueues(tmp_path / "cq", GRID)
    restarted.recover(pos_of(17))  # the log lost the entries from offset 17's on
    assert restarted.dispatched is None  # its point was past the end: dispatch from the log's first entry
    assert all(restarted.queue(t, q).next_offset == 17 for t in range(2) for q in range(2))
    restarted.close()
    again = ConsumeQueues(tmp_path / "cq", GRID)
    assert (again.dispatched, again.queue(1, 1).units(0, 100)) == (None, units(0, 17))
    dispatch(again, 0, 20)  # from the log's start, over the units kept
    assert again.queue(1, 1).units(0, 100) == units(0, 20)
    again.close()


def test_a_log_truncated_while_running_takes_the_units_and_the_point_back(tmp_path: Path) -> None:
    queues = ConsumeQueues(tmp_path / "cq", GRID)
    dispatch(queues, 0, 10)
    queues.flush()
    dispatch(queues, 10, 30)
    queues.recover(pos_of(17))  # the log was cut at entry 17, before the next flush
    queues.flush()
    assert queues.dispatched == DispatchedPoint(9, pos_of(9))  # not 29: entries 17.. are gone
    assert queues.queue(0, 1).units(0, 100) == units(0, 17)
    queues.close()


def test_drop_topic_removes_its_queues(tmp_path: Path) -> None:
    queues = ConsumeQueues(tmp_path / "cq", GRID)
    dispatch(queues, 0, 5)
    (tmp_path / "cq" / "9.gone").mkdir()  # what a crash midway through a drop leaves
    queues.drop_topic(1)
    assert not (tmp_path / "cq" / "1").exists()
    assert queues.queue(1, 0).next_offset == 0
    queues.recover(pos_of(5))
    assert sorted(p.name for p in (tmp_path / "cq").iterdir()) == ["0", "dispatched.json"]
    queues.close()


def open_descriptors() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_many_queues_open_lazily_and_keep_few_files_open(tmp_path: Path) -> None:
    queues = ConsumeQueues(tmp_path / "cq", GRID, open_queues_max=8)
    before = open_descriptors()  # with the set's own, its root's
    dispatch(queues, 0, 5, topics=range(100))
    assert open_descriptors() <= before + 8 * 2  # at most 8 queues hold files (two each here)
    queues.close()  # 200 dirty queues: one syncfs
    assert open_descriptors() == before - 1
    restarted = ConsumeQueues(tmp_path / "cq", GRID, open_queues_max=8)
    assert open_descriptors() == before  # opening reads the point alone
    restarted.recover(pos_of(3))
    assert open_descriptors() <= before + 8 * 2
    held = open_descriptors()
    assert all(restarted.bounds(t, q) == (0, 3) for t in range(100) for q in range(2))  # a listing's bounds
    assert restarted.bounds(100, 0) == restarted.bounds(0, 2) == (0, 0)  # never used
    assert open_descriptors() == held  # known since the recover: no queue opened for them
    assert all(restarted.queue(t, 1).units(0, 10) == units(0, 3) for t in range(100))
    restarted.close()


def test_a_different_file_grid_is_refused(tmp_path: Path) -> None:
    ConsumeQueues(tmp_path / "cq", GRID).close()
    with pytest.raises(ConsumeQueueError, match="4 units up to 10"):
        ConsumeQueues(tmp_path / "cq", FileGrid())


# -- building units from the log ------------------------------------------------------------------------


@given(st.lists(st.tuples(st.integers(-2**63, 2**63 - 1), st.integers(-2**31, 2**31 - 1), st.binary(min_size=8,
                                                                                                   max_size=8))))
def test_units_of_agrees_with_a_unit_by_unit_build(entries: list[tuple[int, int, bytes]]) -> None:
    records = b"".join(INDEX_RECORD.pack(9, pos, size, i, 1) for i, (pos, size, _tags) in enumerate(entries))
    tags = b"".join(tags for _pos, _size, tags in entries)
    assert units_of(records, tags) == b"".join(UNIT.pack(pos, size, int.from_bytes(tags_code, "big"))
                                               for pos, size, tags_code in entries)


async def test_units_are_built_from_the_logs_records_and_messages(tmp_path: Path) -> None:
    store = Store.open(tmp_path / "log", StoreConfig(data_file_size=1016, index_file_size=320))
    metas = [Meta.of(tags=[f"tag-{i % 3}"]) for i in range(20)]
    bodies = [encode_message(5, 0, i, meta.encode(), meta.tags_code, b"x" * 90) for i, meta in enumerate(metas)]
    await store.append_as_leader(bodies, term=1, magic=Magic.MESSAGE)  # several data files
    try:
        records = b"".join(INDEX_RECORD.pack(*store.reader.record(i)) for i in range(20))
        built = units_of(records, tags_codes_of(records, store.data))
        assert [UNIT.unpack_from(built, i * UNIT_SIZE) for i in range(20)] == [
            (store.get(i).pos, store.get(i).size, metas[i].tags_code) for i in range(20)]
    finally:
        await store.close()
