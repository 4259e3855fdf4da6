"""Retention and disk space (DLedger's CleanSpaceService, DLEDGER.md "Configuration defaults")."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from datetime import date, datetime, timedelta
from datetime import time as day_time
from pathlib import Path

import pytest

from raftlog.storage import CleanService, DiskFullError, IndexCleanedError, Store
from raftlog.storage.batch import encode_leader_batch
from raftlog.storage.cleaner import files_to_delete
from raftlog.storage.retention import HeadFile
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


def _local(hour: int, days: int) -> float:
    """The instant `days` calendar days on at hour:30 local time. Not now + 24 h * days: across a
    daylight-saving change that lands an hour off, outside (or inside) `delete_when`."""
    day = date.today() + timedelta(days=days)
    while True:
        instant = datetime.combine(day, day_time(hour, 30)).timestamp()
        if datetime.fromtimestamp(instant).hour == hour:  # not an hour the clocks skipped that day
            return instant
        day += timedelta(days=1)


def _changing_in_two_days(starts: bool) -> str:
    """A POSIX TZ whose daylight saving starts (or ends) at 02:00 two days from today, so the four
    days these tests look ahead cross a change whatever the date they run on."""
    change = (date.today() + timedelta(days=2)).timetuple().tm_yday - 1  # zero-based, leap days counted
    other = (change + 180) % 365
    return f"XST3XDT,{change}/2,{other}/2" if starts else f"XST3XDT,{other}/2,{change}/2"


ZONES = ["UTC", "Europe/Berlin", "America/New_York", "Australia/Lord_Howe",  # Lord Howe: a 30-minute shift
         _changing_in_two_days(starts=True), _changing_in_two_days(starts=False)]


@pytest.fixture(params=ZONES, ids=["utc", "berlin", "new-york", "lord-howe", "dst-starts", "dst-ends"])
def local_zone(request: pytest.FixtureRequest) -> Iterator[str]:
    """The process's local time zone for one test (the cleaner reads the hour in local time)."""
    zone: str = request.param
    if "," not in zone and zone != "UTC" and not Path("/usr/share/zoneinfo", zone).exists():
        pytest.skip(f"no tz data for {zone}")
    saved = os.environ.get("TZ")
    os.environ["TZ"] = zone
    time.tzset()
    try:
        yield zone
    finally:
        if saved is None:
            os.environ.pop("TZ", None)
        else:
            os.environ["TZ"] = saved
        time.tzset()


def test_the_zones_change_where_they_should() -> None:
    """The made-up zones do change within the four days (else the tests below prove nothing)."""
    for zone in ZONES[-2:]:
        os.environ["TZ"] = zone
        time.tzset()
        try:
            assert time.localtime(_local(4, 0)).tm_isdst != time.localtime(_local(4, 4)).tm_isdst
        finally:
            os.environ.pop("TZ", None)
            time.tzset()


async def test_nothing_is_deleted_off_hours_with_room_on_disk(store: Store, local_zone: str) -> None:
    await _filled(store)
    off_hours = _local(10, 4)  # the files are over 72 h old, but it is not a delete_when hour
    cleaner = CleanService(store, lambda: 1000, clock=lambda: off_hours, disk_usage=lambda: 0.5)
    assert await cleaner.run_once() == 0


async def test_expired_files_go_at_delete_when(store: Store, local_zone: str) -> None:
    await _filled(store)
    old = _local(4, 4)  # local 04:30 four days on: the files are over 72 h old
    assert old - time.time() > 72 * HOUR
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


async def test_the_slowest_flagged_consumer_holds_retention_back_until_the_disk_forces(store: Store) -> None:
    """The floor is what the layer above supplies: the lowest position among the consumers an admin
    flagged (raft.consumers); no such consumer, no floor."""
    await _filled(store)
    cleaner = CleanService(store, lambda: 1000, floor=lambda: 14, clock=lambda: _local(4, 4),
                           disk_usage=lambda: usage)
    usage = 0.5
    assert await cleaner.run_once() == 2  # expired, but the slowest consumer has processed up to 14
    assert store.begin_index == 12
    usage = 0.87  # above force-clean: the disk comes first
    assert await cleaner.run_once() == 4
