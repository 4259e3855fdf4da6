"""Retention and disk space (DLedger's CleanSpaceService, DLEDGER.md "Configuration defaults")."""

from __future__ import annotations

import time
from datetime import datetime
from pathlib import Path

import pytest

from storage import CleanService, DiskFullError, IndexCleanedError, Store
from storage.batch import encode_leader_batch
from storage.cleaner import files_to_delete
from storage.store import HeadFile
from tests.storage.conftest import SMALL, body

HOUR = 3600.0


def _files(*specs: tuple[int, float]) -> list[HeadFile]:
    return [HeadFile(Path(f"f{i}"), last, mtime) for i, (last, mtime) in enumerate(specs)]


def test_files_to_delete_stops_at_the_first_file_kept() -> None:
    files = _files((5, 0.0), (11, 0.0), (17, 50 * HOUR), (23, 0.0))
    assert files_to_delete(files, now=100 * HOUR, reserved_s=72 * HOUR, safe_index=100, force=False) == 2
    assert files_to_delete(files, now=100 * HOUR, reserved_s=72 * HOUR, safe_index=100, force=True) == 4
    assert files_to_delete(files, now=100 * HOUR, reserved_s=72 * HOUR, safe_index=10, force=True) == 1
    assert files_to_delete(files, now=100 * HOUR, reserved_s=72 * HOUR, safe_index=4, force=True) == 0


async def _filled(store: Store) -> None:
    await store.append_as_leader([body(i) for i in range(40)], term=1)  # seven data files
    assert len(store.data.segments) == 7


def _at_hour(hour: int, plus: float = 0.0) -> float:
    return datetime.now().replace(hour=hour, minute=30).timestamp() + plus


async def test_nothing_is_deleted_off_hours_with_room_on_disk(store: Store) -> None:
    await _filled(store)
    cleaner = CleanService(store, lambda: 1000, clock=lambda: _at_hour(10, 100 * HOUR),
                           disk_usage=lambda: 0.5)
    assert await cleaner.run_once() == 0


async def test_expired_files_go_at_delete_when(store: Store) -> None:
    await _filled(store)
    old = _at_hour(4, 96 * HOUR)  # local 04:30 four days on: the files are over 72 h old
    cleaner = CleanService(store, lambda: 1000, clock=lambda: old, disk_usage=lambda: 0.5)
    assert await cleaner.run_once() == 6  # never the last file
    assert len(store.data.segments) == 1
    assert store.begin_index == 36
    with pytest.raises(IndexCleanedError):
        store.get(35)
    assert bytes(store.get(36).body) == body(36)


async def test_young_files_stay_unless_the_disk_forces(store: Store) -> None:
    await _filled(store)
    now = time.time()
    usage = 0.75  # above check-expired: looks, but files are young
    cleaner = CleanService(store, lambda: 1000, clock=lambda: now,
                           disk_usage=lambda: usage)
    assert await cleaner.run_once() == 0
    usage = 0.87  # above force-clean: age no longer protects
    assert await cleaner.run_once() == 6


async def test_files_above_the_safe_index_are_kept(tmp_path: Path, store: Store) -> None:
    await _filled(store)
    cleaner = CleanService(store, lambda: 14, clock=time.time, disk_usage=lambda: 0.87)
    assert await cleaner.run_once() == 2  # entries 0-11 are in the first two files
    assert store.begin_index == 12
    await store.close()
    reopened = Store.open(store.data_dir, SMALL)
    try:
        assert (reopened.begin_index, reopened.end_index) == (12, 39)
        assert reopened.before_begin_index == 11
        assert reopened.term_at(11) == 1
    finally:
        await reopened.close()


async def test_disk_full_flag_follows_usage(store: Store) -> None:
    usage = 0.91
    cleaner = CleanService(store, lambda: -1, clock=time.time, disk_usage=lambda: usage)
    await cleaner.run_once()
    assert store.disk_full
    with pytest.raises(DiskFullError):
        await store.append_as_leader([b"x"], term=1)
    assert store.end_index == -1
    usage = 0.5
    await cleaner.run_once()
    assert not store.disk_full
    await store.append_as_leader([b"x"], term=1)


async def test_disk_usage_is_read_from_the_file_system(store: Store) -> None:
    assert 0.0 < store.disk_usage_ratio() < 1.0


async def test_head_files_holding_no_entry_of_the_log_can_go(store: Store) -> None:
    # after a snapshot install whose first entry lands at the end of a file, that file
    # holds only a filler before the log's first entry
    await store.reset_begin(50, 3, chain_crc=0, next_pos=SMALL.data_file_size - 100)
    batch = encode_leader_batch([body(i) for i in range(8)], 51, 3, 1, 0, SMALL.data_file_size - 100, 0,
                                SMALL.data_file_size)
    await store.append_as_follower(batch.data)
    assert store.get(51).pos == SMALL.data_file_size  # the first entry did not fit: next file
    cleaner = CleanService(store, lambda: 51, clock=time.time, disk_usage=lambda: 0.87)
    assert await cleaner.run_once() == 1
    assert (store.begin_index, store.before_begin_index, store.before_begin_term) == (51, 50, 3)
