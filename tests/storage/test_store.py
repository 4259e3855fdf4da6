"""The store's contract: appends (leader and follower), reads, truncate, reset, errors."""

from __future__ import annotations

import errno
import os
import zlib
from pathlib import Path

import pytest

from raftlog.storage import (
    AppendRejectedError,
    CorruptEntryError,
    DiskFullError,
    EntryTooLargeError,
    FileSizeMismatchError,
    IndexCleanedError,
    IndexOutOfRangeError,
    Magic,
    MemoryStore,
    StorageError,
    Store,
    StoreConfig,
    StoreLockedError,
    iter_entries,
)
from raftlog.storage.codec import BLANK, HEADER, Stamp, encode_entry, place
from raftlog.storage.record import Records
from tests.storage.conftest import SMALL, body, file_bytes


async def copy_log(src: Store | MemoryStore, dst: Store | MemoryStore, start: int = 0,
                   max_entries: int = 5) -> None:
    """Replicate src into dst the way pushes will: raw ranges into follower appends."""
    index = start
    while index <= src.end_index:
        raw = src.read_range(index, max_entries, 1 << 20)
        await dst.append_as_follower(raw.data)
        index += raw.count


async def test_leader_append_places_entries_as_dledger_does(store: Store) -> None:
    bodies = [body(i, size=50 + i * 7) for i in range(40)]
    result = await store.append_as_leader(bodies, term=3)
    assert result.first_index == 0
    pos = 0
    for i, b in enumerate(bodies):
        pos = place(pos, 48 + len(b), SMALL.data_file_size)
        assert result.positions[i] == pos
        entry = store.get(i)
        assert (entry.index, entry.term, entry.pos, entry.magic, bytes(entry.body)) == (i, 3, pos, 1, b)
        pos += 48 + len(b)
    assert (store.end_index, store.end_term, store.begin_index) == (39, 3, 0)
    names = sorted(p.name for p in (store.data_dir / "data").iterdir())
    assert names[:2] == ["00000000000000000000", "00000000000000001016"]
    assert all(p.stat().st_size == SMALL.data_file_size for p in (store.data_dir / "data").iterdir())


async def test_every_full_data_file_ends_with_a_filler(store: Store) -> None:
    await store.append_as_leader([body(i) for i in range(20)], term=1)
    data = file_bytes(store.data_dir / "data")
    # six 148-byte entries per 1016-byte file, then magic -1 and the 128 bytes left
    for file_no in range(3):
        filler = file_no * 1016 + 6 * 148
        assert BLANK.unpack_from(data, filler) == (-1, 1016 - 6 * 148)


async def test_batches_append_in_one_call_and_consecutive_calls_continue(store: Store) -> None:
    first = await store.append_as_leader([b"a", b"b"], term=1)
    second = await store.append_as_leader([b"c"], term=2, magic=Magic.NOOP)
    assert (first.first_index, second.first_index) == (0, 2)
    assert store.get(2).magic == Magic.NOOP
    assert store.term_at(1) == 1 and store.term_at(2) == 2


async def test_entry_too_large_for_a_file_is_refused_and_nothing_written(store: Store) -> None:
    with pytest.raises(EntryTooLargeError):
        await store.append_as_leader([b"ok", bytes(SMALL.data_file_size)], term=1)
    assert store.end_index == -1
    # the largest entry that fits: file size minus header minus the minimum filler
    await store.append_as_leader([bytes(SMALL.data_file_size - 48 - 8)], term=1)
    assert store.get(0).pos == 0


async def test_follower_copy_is_byte_identical(tmp_path: Path, store: Store) -> None:
    await store.append_as_leader([body(i, 30 + i) for i in range(50)], term=1)
    await store.append_as_leader([body(i) for i in range(50, 70)], term=2)
    follower = Store.open(tmp_path / "follower", SMALL)
    try:
        await copy_log(store, follower)
        assert (follower.end_index, follower.end_term) == (store.end_index, store.end_term)
        assert follower.write_pos == store.write_pos
        assert file_bytes(follower.data_dir / "data") == file_bytes(store.data_dir / "data")
        assert file_bytes(follower.data_dir / "index") == file_bytes(store.data_dir / "index")
    finally:
        await follower.close()


async def test_memory_store_produces_the_same_bytes(store: Store) -> None:
    memory = MemoryStore(SMALL)
    bodies = [body(i, 20 + 3 * i) for i in range(30)]
    await store.append_as_leader(bodies, term=4)
    await memory.append_as_leader(bodies, term=4)
    for i in range(30):
        assert bytes(store.read_range(i, 1, 1 << 20).data) == bytes(memory.read_range(i, 1, 1 << 20).data)


def _leader_bytes(count: int, term: int = 1, start: int = 0, chain: int = 0) -> list[bytes]:
    """Entries exactly as a leader at an empty log would store them."""
    entries, pos = [], 0
    for i in range(start, start + count):
        b = body(i)
        pos = place(pos, 48 + len(b), SMALL.data_file_size)
        raw = encode_entry(1, i, term, pos, b, chain)
        chain = HEADER.unpack_from(raw)[6]
        entries.append(raw)
        pos += len(raw)
    return entries


def _patch(raw: bytes, offset: int, value: bytes) -> bytes:
    return raw[:offset] + value + raw[offset + len(value):]


@pytest.mark.parametrize(
    ("damage", "reason"),
    [
        (lambda e: _patch(e, 0, (99).to_bytes(4, "big")), "bad magic 99"),
        (lambda e: _patch(e, 4, (60).to_bytes(4, "big")), "size 60 != 48 + bodySize 100"),
        (lambda e: e[:100], "truncated entry"),
        (lambda e: e[:20], "truncated entry"),
        (lambda e: _patch(e, 8, (7).to_bytes(8, "big")), "index 7, expected 3"),
        (lambda e: _patch(e, 16, (0).to_bytes(8, "big")), "term 0 below previous term 1"),
        (lambda e: _patch(e, 24, (5).to_bytes(8, "big")), "pos 5, expected 444"),
        (lambda e: _patch(e, 60, b"X"), "body CRC mismatch"),
        (lambda e: _patch(e, 36, b"\0\0\0\0"), "chain CRC mismatch"),
    ],
)
async def test_follower_append_rejects_bad_entries_whole(store: Store, damage, reason: str) -> None:
    entries = _leader_bytes(6)
    await store.append_as_follower(b"".join(entries[:2]))
    before = file_bytes(store.data_dir / "data"), file_bytes(store.data_dir / "index")
    # entry 2 is fine, entry 3 is damaged: neither may be written
    batch = entries[2] + damage(entries[3])
    with pytest.raises(AppendRejectedError) as failure:
        await store.append_as_follower(batch)
    assert failure.value.index == 3
    assert reason in failure.value.reason
    assert store.end_index == 1
    assert (file_bytes(store.data_dir / "data"), file_bytes(store.data_dir / "index")) == before
    assert (await store.append_as_follower(b"".join(entries[2:]))).end_index == 5


async def test_follower_append_names_the_configuration_and_produced_entries_it_took(store: Store) -> None:
    """A follower learns of a new group configuration from the append that brings its entry, and of
    a producer's sequences from the runs of its stamped entries."""
    leader = MemoryStore(SMALL)
    await leader.append_as_leader([b"a", b"b"], term=1)
    await leader.append_as_leader([b'{"members": []}'], term=1, magic=Magic.CONFIG_CHANGE)
    await leader.append_as_leader([b"c"], term=2, magic=Magic.NOOP)
    await leader.append_as_leader([b"{}"], term=2, magic=Magic.CONFIG_CHANGE)
    taken = await store.append_as_follower(leader.read_range(0, 10, 1 << 20).data)
    assert taken == (4, (2, 4), (), ())
    await leader.append_as_leader([b"d"], term=2)
    await leader.append_as_leader([b"e", b"f"], term=2, magic=Magic.PRODUCED, stamp=Stamp(7, 1, 0))
    await leader.append_as_leader([b"g"], term=2, magic=Magic.PRODUCED, stamp=Stamp(7, 1, 2))  # one run with e, f
    await leader.append_as_leader([b"h"], term=2, magic=Magic.PRODUCED, stamp=Stamp(8, 0, 5))
    await leader.append_as_leader([b"i"], term=2, magic=Magic.PRODUCED, stamp=Stamp(7, 1, 9))  # a gap: a run
    taken = await store.append_as_follower(leader.read_range(5, 10, 1 << 20).data)
    assert taken == (10, (), ((7, 1, 0, 6, 8), (8, 0, 5, 9, 9), (7, 1, 9, 10, 10)), ())
    record = Records(store.get)(store.get(7))  # a continuation: its head read by index
    assert (record.body, record.producer) == (b"f", Stamp(7, 1, 1))


async def test_the_index_names_the_entries_of_a_type_without_reading_them(store: Store) -> None:
    """What a start replays into its tables is found from the index records alone, across index files
    (ten records each here), from any start; the memory store answers alike."""
    memory = MemoryStore(SMALL)
    for s in (store, memory):
        for i in range(35):
            if i % 7 == 3:
                await s.append_as_leader([b"p"], term=1, magic=Magic.PRODUCED, stamp=Stamp(1, 0, i))
            elif i % 11 == 5:
                await s.append_as_leader([b"{}"], term=1, magic=Magic.CONFIG_CHANGE)
            elif i == 29:
                await s.append_as_leader([b"c"], term=1, magic=Magic.CONSUMER)
            else:
                await s.append_as_leader([body(i)], term=1)
    expected = [i for i in range(35) if i % 7 == 3 or i == 29]
    for s in (store, memory):
        wanted = {Magic.PRODUCED, Magic.CONSUMER}
        assert list(s.indices_of(wanted, 0)) == expected
        assert list(s.indices_of(wanted, 11)) == [i for i in expected if i >= 11]
        assert list(s.indices_of({Magic.CONFIG_CHANGE}, 0)) == [5, 16, 27]
        assert list(s.indices_of({Magic.NOOP}, 0)) == list(s.indices_of(set(), 0)) == []


async def test_follower_rejects_entries_that_do_not_continue_the_log(store: Store) -> None:
    entries = _leader_bytes(4)
    with pytest.raises(AppendRejectedError, match="index 1, expected 0"):
        await store.append_as_follower(entries[1])
    with pytest.raises(AppendRejectedError, match="no entries"):
        await store.append_as_follower(b"")


async def test_get_and_range_outside_the_log(store: Store) -> None:
    with pytest.raises(IndexOutOfRangeError):
        store.get(0)
    await store.append_as_leader([b"x"] * 3, term=1)
    with pytest.raises(IndexOutOfRangeError):
        store.get(3)
    with pytest.raises(IndexOutOfRangeError):
        store.read_range(3, 1, 100)
    assert store.term_at(-1) == -1


async def test_read_range_limits(store: Store) -> None:
    await store.append_as_leader([body(i) for i in range(20)], term=1)
    raw = store.read_range(0, 100, 1 << 20)
    assert (raw.first_index, raw.count) == (0, 6)  # stops at the end of the first data file
    assert [e.index for e in iter_entries(raw.data)] == list(range(6))
    assert store.read_range(2, 3, 1 << 20).count == 3
    assert store.read_range(0, 100, 300).count == 2  # 2 * 148 <= 300 < 3 * 148
    assert store.read_range(0, 100, 1).count == 1  # at least one entry
    raw = store.read_range(6, 100, 1 << 20)
    assert (raw.first_index, raw.count) == (6, 6)
    assert store.read_range(18, 100, 1 << 20).count == 2  # the log end


async def test_reads_are_zero_copy_views(store: Store) -> None:
    await store.append_as_leader([b"hello"], term=1)
    entry = store.get(0)
    assert isinstance(entry.body, memoryview)
    assert entry.body.obj is store.data.segments[0].mm


async def test_corrupt_bytes_are_never_returned(store: Store) -> None:
    await store.append_as_leader([body(i) for i in range(8)], term=1)
    await store.flush()  # recent entries are read unchecked (test_recent_reads): these are not
    seg = store.data.segments[0]
    seg.view[148 + 48 + 10] ^= 0x01  # a bit of entry 1's body
    with pytest.raises(CorruptEntryError, match="body CRC"):
        store.get(1)
    with pytest.raises(CorruptEntryError):
        store.read_range(0, 10, 1 << 20)
    assert bytes(store.get(0).body) == body(0)
    seg.view[0] ^= 0x02  # entry 0's magic NORMAL -> CONFIG_CHANGE: only the index record knows
    with pytest.raises(CorruptEntryError, match="disagrees with its index record"):
        store.get(0)


async def test_term_lookups(store: Store) -> None:
    for term, count in [(1, 3), (2, 4), (5, 2)]:
        await store.append_as_leader([b"x"] * count, term=term)
    assert [store.term_at(i) for i in range(9)] == [1, 1, 1, 2, 2, 2, 2, 5, 5]
    assert store.first_index_of_term(2, before_index=8) == 3
    assert store.first_index_of_term(2, before_index=3) == 3
    assert store.first_index_of_term(2, before_index=2) is None
    assert store.first_index_of_term(5, before_index=100) == 7
    assert store.first_index_of_term(3, before_index=8) is None
    assert store.first_index_of_term(1, before_index=8) == 0


async def test_truncate_drops_the_index_and_after(store: Store) -> None:
    await store.append_as_leader([body(i) for i in range(20)], term=1)
    assert await store.truncate(9) == 8
    assert (store.end_index, store.end_term) == (8, 1)
    with pytest.raises(IndexOutOfRangeError):
        store.get(9)
    # index 9 follows 8 where a fresh log puts it: positions agree with any replica
    result = await store.append_as_leader([b"new"], term=2)
    assert result.first_index == 9
    assert result.positions[0] == store.get(8).pos + 148
    assert len(list((store.data_dir / "data").iterdir())) == 2


async def test_truncate_at_a_file_start_removes_the_filler(store: Store) -> None:
    await store.append_as_leader([body(i) for i in range(8)], term=1)
    assert store.get(6).pos == 1016  # first entry of the second file, after a filler
    await store.truncate(6)
    assert store.write_pos == 6 * 148
    small = await store.append_as_leader([b"s"], term=2)  # fits where the filler was
    assert small.positions == [6 * 148]
    assert len(list((store.data_dir / "data").iterdir())) == 1


async def test_truncate_edges(store: Store) -> None:
    assert await store.truncate(0) == -1  # empty log: nothing to drop
    await store.append_as_leader([b"x"] * 5, term=1)
    assert await store.truncate(5) == 4  # beyond the end: nothing dropped
    assert await store.truncate(100) == 4
    assert await store.truncate(0) == -1  # at the head: empty again
    assert (store.end_index, store.end_term, store.write_pos) == (-1, -1, 0)
    again = await store.append_as_leader([b"y"], term=2)
    assert (again.first_index, again.positions) == (0, [0])


async def test_reset_begin_restarts_the_log_after_a_snapshot(tmp_path: Path, store: Store) -> None:
    leader = MemoryStore(SMALL)
    await leader.append_as_leader([body(i) for i in range(30)], term=2)
    await store.append_as_leader([b"old"] * 3, term=1)
    snapshot = leader.get(20)
    await store.reset_begin(20, 2)
    assert (store.before_begin_index, store.before_begin_term) == (20, 2)
    assert (store.begin_index, store.end_index, store.end_term) == (21, 20, 2)
    assert store.term_at(20) == 2
    with pytest.raises(IndexCleanedError):
        store.get(20)
    # the first follower append after a bare reset fixes position and chain
    await copy_log(leader, store, start=21)
    assert store.end_index == 29
    assert bytes(store.get(25).body) == bytes(leader.get(25).body)
    await store.close()
    reopened = Store.open(store.data_dir, SMALL)
    try:
        assert (reopened.begin_index, reopened.end_index) == (21, 29)
        assert reopened.get(21).pos == leader.get(21).pos
        # a reset that knows the leader's chain and position checks the first entry too
        await reopened.reset_begin(20, 2, chain_crc=snapshot.chain_crc,
                                   next_pos=snapshot.pos + snapshot.size)
        await copy_log(leader, reopened, start=21)
        assert reopened.end_index == 29
    finally:
        await reopened.close()


async def test_disk_full_flag_refuses_appends(store: Store) -> None:
    await store.append_as_leader([b"x"], term=1)
    store.disk_full = True
    with pytest.raises(DiskFullError):
        await store.append_as_leader([b"y"], term=1)
    with pytest.raises(DiskFullError):
        await store.append_as_follower(encode_entry(1, 1, 1, 49, b"y", store.get(0).chain_crc))
    assert store.end_index == 0
    store.disk_full = False
    await store.append_as_leader([b"y"], term=1)


async def test_no_space_for_a_new_file_is_disk_full_and_nothing_written(
        store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    await store.append_as_leader([body(i) for i in range(6)], term=1)

    def no_space(fd: int, offset: int, length: int) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "posix_fallocate", no_space)
    with pytest.raises(DiskFullError, match="no space"):
        await store.append_as_leader([body(6)], term=1)  # needs a second data file
    assert store.end_index == 5
    assert [p.name for p in (store.data_dir / "data").iterdir()] == ["00000000000000000000"]
    monkeypatch.undo()
    assert (await store.append_as_leader([body(6)], term=1)).first_index == 6


async def test_a_data_dir_is_opened_by_one_store_at_a_time(store: Store) -> None:
    with pytest.raises(StoreLockedError):
        Store.open(store.data_dir, SMALL)


async def test_refuses_a_log_written_with_other_file_sizes(store: Store) -> None:
    await store.append_as_leader([b"x"], term=1)
    await store.close()
    with pytest.raises(FileSizeMismatchError, match="1016"):
        Store.open(store.data_dir, StoreConfig(data_file_size=2048, index_file_size=320))
    Store.open(store.data_dir, SMALL)._release()


def test_config_validation() -> None:
    with pytest.raises(ValueError, match="multiple of 32"):
        StoreConfig(index_file_size=100)
    with pytest.raises(ValueError, match="flush_mode"):
        StoreConfig(flush_mode="sometimes")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="delete_when"):
        StoreConfig(delete_when="4am")
    assert StoreConfig().disk_full_ratio == pytest.approx(0.90)


async def test_views_handed_out_are_read_only(store: Store) -> None:
    await store.append_as_leader([b"hello"], term=1)
    with pytest.raises(TypeError):
        store.get(0).body[0] = 0
    with pytest.raises(TypeError):
        store.read_range(0, 1, 100).data[0] = 0


async def test_unknown_magic_is_refused(store: Store) -> None:
    with pytest.raises(ValueError, match="not an entry type"):
        await store.append_as_leader([b"x"], term=1, magic=0)
    assert store.end_index == -1


async def test_follower_bytes_are_copied_before_files_are_created(
        store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    entries = _leader_bytes(8)
    await store.append_as_follower(b"".join(entries[:6]))
    buffer = bytearray(b"".join(entries[6:]))  # entry 6 needs a new data file
    create = type(store.data).create

    def create_and_scribble(self, start: int):  # the caller reuses its buffer meanwhile
        buffer[100] ^= 0xFF
        return create(self, start)

    monkeypatch.setattr(type(store.data), "create", create_and_scribble)
    await store.append_as_follower(buffer)
    assert bytes(store.get(6).body) == body(6)


async def test_a_follower_append_that_needs_no_new_file_is_written_without_waiting(store: Store) -> None:
    """The replication stream writes an in-order push at once when the files hold it; a push that
    needs a new file is left untouched for the append that creates it."""
    entries = _leader_bytes(8)
    assert store.append_as_follower_now(b"".join(entries[:1])) is None  # no file yet: nothing written
    assert store.end_index == -1
    await store.append_as_follower(entries[0])
    appended = store.append_as_follower_now(b"".join(entries[1:6]))
    assert appended is not None and appended.end_index == store.end_index == 5
    assert store.durable_end_index == -1  # written, not yet flushed
    assert store.append_as_follower_now(b"".join(entries[6:])) is None  # entry 6 needs a new data file
    assert store.end_index == 5
    with pytest.raises(AppendRejectedError):  # checked as append_as_follower checks it, before a byte is written
        store.append_as_follower_now(entries[7])
    await store.flushed()
    assert store.durable_end_index == 5
    await store.append_as_follower(b"".join(entries[6:]))
    assert [bytes(store.get(i).body) for i in range(8)] == [body(i) for i in range(8)]


async def test_position_is_saved_before_the_first_file_after_a_reset(
        tmp_path: Path, store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    leader = MemoryStore(SMALL)
    await leader.append_as_leader([body(i) for i in range(12)], term=2)
    await store.reset_begin(8, 2)

    def crash(self, start: int):
        raise OSError("crash while creating the file")

    monkeypatch.setattr(type(store.data), "create", crash)
    with pytest.raises(OSError):
        await copy_log(leader, store, start=9)
    monkeypatch.undo()
    await store.close()
    reopened = Store.open(store.data_dir, SMALL)
    try:
        await copy_log(leader, reopened, start=9)
        assert reopened.end_index == 11
    finally:
        await reopened.close()


async def test_an_interrupted_reset_is_finished_on_open(store: Store) -> None:
    from dataclasses import replace

    from raftlog.storage.meta import save_meta
    await store.append_as_leader([body(i) for i in range(10)], term=1)
    await store.close()
    # what a crash right after reset_begin moved the base leaves: old files, a flagged base
    save_meta(store.data_dir, replace(store.meta, base_index=30, base_term=3, base_chain_crc=None,
                                      base_pos=None, resetting=True))
    reopened = Store.open(store.data_dir, SMALL)
    try:
        assert (reopened.begin_index, reopened.end_index, reopened.end_term) == (31, 30, 3)
        assert not list((store.data_dir / "data").iterdir())
        assert not reopened.meta.resetting
    finally:
        await reopened.close()


async def test_truncate_makes_the_end_durable_before_deleting_files(
        store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    await store.append_as_leader([body(i) for i in range(20)], term=1)
    await store.flush()
    events: list[str] = []
    real_sync, real_unlink = os.fdatasync, Path.unlink
    monkeypatch.setattr(os, "fdatasync", lambda fd: (events.append("sync"), real_sync(fd))[1])
    monkeypatch.setattr(Path, "unlink", lambda self, **kw: (events.append(self.name),
                                                            real_unlink(self, **kw))[1])
    await store.truncate(3)
    assert events[0] == "sync"
    gone = [e for e in events if e != "sync"]
    assert gone == sorted(gone, reverse=True)  # the last file first: a crash leaves no gap


async def test_a_failed_flush_stops_the_store(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    await store.append_as_leader([b"x"], term=1)

    def broken(fd: int) -> None:
        raise OSError(errno.EIO, "I/O error")

    monkeypatch.setattr(os, "fdatasync", broken)
    with pytest.raises(OSError):
        await store.flush()
    monkeypatch.undo()
    with pytest.raises(StorageError, match="flush failed"):
        await store.append_as_leader([b"y"], term=1)
    with pytest.raises(StorageError, match="flush failed"):
        await store.flush()


# field offsets in an entry's header: term 16, chain CRC 36, body size 44; the body starts at 48
@pytest.mark.parametrize("offset", [16 + 7, 36, 44 + 3, 48 + 10], ids=["term", "chain CRC", "body size", "body"])
async def test_a_damaged_entry_is_found_by_verify_and_repaired_from_a_replicas_copy(
        tmp_path: Path, store: Store, offset: int) -> None:
    await store.append_as_leader([body(i) for i in range(20)], term=1)
    replica = Store.open(tmp_path / "replica", SMALL)
    try:
        await copy_log(store, replica)
        reported: list[int] = []
        store.on_damage = reported.append
        victim = 8  # in the second data file
        pos = store.pos_at(victim)
        seg = store.data.find(pos)
        seg.view[pos - seg.start + offset] ^= 0x10
        assert store.verify(0, 100, None) == (20, [victim], store.get(19).chain_crc)
        assert reported == [victim]
        in_steps = [store.verify(0, victim + 1, None), store.verify(victim + 1, 100, None)]
        assert in_steps[0].damaged == [victim] and in_steps[0].chain is None and in_steps[1].damaged == []

        with pytest.raises(StorageError, match="not that entry"):
            await store.repair(victim, bytes(replica.read_range(victim + 1, 1, 0).data))
        wrong = bytearray(replica.read_range(victim, 1, 0).data)
        wrong[-1] ^= 0x01  # a copy whose body CRC field was made to fit, but whose chain then does not
        wrong[40:44] = zlib.crc32(wrong[48:]).to_bytes(4, "big")
        with pytest.raises(StorageError, match="does not follow"):
            await store.repair(victim, bytes(wrong))

        await store.repair(victim, bytes(replica.read_range(victim, 1, 0).data))
        assert store.verify(0, 100, None).damaged == []
        assert bytes(store.get(victim).body) == body(victim)
        await store.close()
        reopened = Store.open(tmp_path / "node", SMALL, committed_index=19)  # the repair is on disk
        assert file_bytes(tmp_path / "node" / "data") == file_bytes(tmp_path / "replica" / "data")
        await reopened.close()
    finally:
        await replica.close()
