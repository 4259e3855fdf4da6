"""Power loss on the real file store: a flush syncs the data files only, the index follows.

Each test runs the store on `tests.sim.disk.PowerLossDisk`, which keeps of
each file only what fsync/fdatasync covered. After a power loss everything
a flush covered must be found again, with index records that match the data
whatever state the index files were left in: behind, ahead, stale (records
of entries a truncate dropped), zeroed or torn.
"""

from __future__ import annotations

import os
import random
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from raftlog.storage import Store, StoreConfig
from raftlog.storage.codec import INDEX_RECORD_SIZE
from raftlog.storage.meta import load_index_mark
from tests.sim.disk import PowerLossDisk
from tests.storage.conftest import SMALL, body

EVERY_FLUSH = replace(SMALL, index_sync_step_bytes=INDEX_RECORD_SIZE)  # the index follows each flush
NEVER = replace(SMALL, index_sync_step_bytes=1 << 40)  # the index is synced only on open and close


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[PowerLossDisk]:
    disk = PowerLossDisk(tmp_path)
    disk.install()
    yield disk
    disk.uninstall()


def power_cycle(store: Store, disk: PowerLossDisk, config: StoreConfig,
                writeback: random.Random | None = None) -> Store:
    """The machine loses power (the page cache is gone, but for the pages `writeback` kept)
    and the node starts again."""
    store._release()
    store._io.shutdown(wait=True)  # the power goes between two jobs of the I/O thread
    disk.power_loss(store.data_dir, writeback)
    return Store.open(store.data_dir, config)


def assert_log(store: Store, log: list[tuple[int, bytes]]) -> None:
    """`store` holds exactly `log` (term, body per index), by index records and by range reads."""
    assert store.end_index == len(log) - 1
    for i, (term, data) in enumerate(log):
        entry = store.get(i)  # checks the record against the header, and the body CRC
        assert (entry.term, bytes(entry.body)) == (term, data)
    index = 0
    while index < len(log):
        index += store.read_range(index, 100, 1 << 20).count
    assert store.verify(0, len(log), None).damaged == []


async def test_a_flush_acknowledges_with_one_fdatasync_and_a_power_loss_keeps_it(
        tmp_path: Path, disk: PowerLossDisk) -> None:
    store = Store.open(tmp_path / "node", NEVER)
    log = []
    for i in range(40):  # seven data files, four index files: the index is never synced
        await store.append_as_leader([body(i)], term=1)
        await store.flush()
        log.append((1, body(i)))
    store = power_cycle(store, disk, NEVER)
    try:
        assert store.recovery.files_scanned == 7  # the mark is where the open left it: at 0
        assert store.recovery.index_records_rebuilt == 40
        assert_log(store, log)
        assert load_index_mark(store.data_dir) == 40  # rebuilt and synced on open
    finally:
        await store.close()


async def test_with_the_index_synced_behind_the_data_a_restart_scans_only_the_tail(
        tmp_path: Path, disk: PowerLossDisk) -> None:
    store = Store.open(tmp_path / "node", EVERY_FLUSH)
    log = []
    for i in range(40):
        await store.append_as_leader([body(i)], term=1)
        await store.flush()
        log.append((1, body(i)))
    await store.durability._stop_index_sync()  # the last background sync has finished
    mark = load_index_mark(store.data_dir)
    assert mark is not None and mark >= 39  # a flush that ends while a sync runs starts none
    store = power_cycle(store, disk, EVERY_FLUSH)
    try:
        assert store.recovery.files_scanned == 3  # DLedger's scan, no more
        assert store.recovery.index_records_rebuilt <= 40 - mark
        assert_log(store, log)
    finally:
        await store.close()


async def test_index_records_ahead_of_the_data_are_dropped(tmp_path: Path, disk: PowerLossDisk) -> None:
    store = Store.open(tmp_path / "node", NEVER)
    await store.append_as_leader([body(i) for i in range(10)], term=1)
    await store.flush()
    await store.append_as_leader([body(i) for i in range(10, 20)], term=1)  # never flushed ...
    for seg in store.index.segments:
        os.fdatasync(seg.fd)  # ... but the kernel wrote their index records out
    store = power_cycle(store, disk, NEVER)
    try:
        assert_log(store, [(1, body(i)) for i in range(10)])
        await store.append_as_leader([b"new" * 30 for _ in range(10)], term=2)
        assert_log(store, [(1, body(i)) for i in range(10)] + [(2, b"new" * 30)] * 10)
    finally:
        await store.close()


async def test_stale_records_of_truncated_entries_are_never_trusted(tmp_path: Path, disk: PowerLossDisk) -> None:
    store = Store.open(tmp_path / "node", NEVER)
    await store.append_as_leader([body(i) for i in range(40)], term=1)
    await store.close()  # the index is synced, the mark at 40
    store = Store.open(tmp_path / "node", NEVER)
    await store.truncate(3)  # records 3.. on disk now describe entries that are gone
    assert load_index_mark(store.data_dir) == 3
    log = [(1, body(i)) for i in range(3)] + [(2, body(1000 + i, 60)) for i in range(40)]
    await store.append_as_leader([data for _term, data in log[3:]], term=2)
    await store.flush()  # the new entries' data; their records stay in the page cache
    store = power_cycle(store, disk, NEVER)
    try:
        assert_log(store, log)
    finally:
        await store.close()


async def test_a_reset_lowers_the_mark_before_the_log_starts_again(tmp_path: Path, disk: PowerLossDisk) -> None:
    store = Store.open(tmp_path / "node", NEVER)
    await store.append_as_leader([body(i) for i in range(30)], term=1)
    await store.close()
    store = Store.open(tmp_path / "node", NEVER)
    await store.reset_begin(9, 1, chain_crc=store.get(9).chain_crc, next_pos=store.pos_at(10))
    assert load_index_mark(store.data_dir) == 10
    await store.append_as_leader([body(i, 70) for i in range(10, 40)], term=2)
    await store.flush()
    store = power_cycle(store, disk, NEVER)
    try:
        assert store.begin_index == 10 and store.end_index == 39
        for i in range(10, 40):
            assert bytes(store.get(i).body) == body(i, 70)
    finally:
        await store.close()


@pytest.mark.parametrize("damage", ["zeroed", "torn", "garbage"])
async def test_index_records_past_the_mark_are_rebuilt_whatever_they_hold(
        tmp_path: Path, disk: PowerLossDisk, damage: str) -> None:
    store = Store.open(tmp_path / "node", NEVER)
    log = [(1, body(i)) for i in range(40)]
    await store.append_as_leader([data for _term, data in log], term=1)
    await store.flush()
    store._release()
    disk.power_loss(tmp_path / "node")
    rng = random.Random(damage)
    for path in sorted((tmp_path / "node" / "index").iterdir()):
        raw = bytearray(path.read_bytes())
        if damage == "zeroed":
            raw[:] = bytes(len(raw))
        elif damage == "torn":  # the first half of each file reached the disk, as the records say
            for r in range(0, len(raw) // 2, INDEX_RECORD_SIZE):
                raw[r:r + INDEX_RECORD_SIZE] = rng.randbytes(INDEX_RECORD_SIZE)
        else:
            raw[:] = rng.randbytes(len(raw))
        path.write_bytes(bytes(raw))
    store = Store.open(tmp_path / "node", NEVER)
    try:
        assert_log(store, log)
    finally:
        await store.close()


async def test_a_clean_close_syncs_the_index_and_moves_the_mark_to_the_end(
        tmp_path: Path, disk: PowerLossDisk) -> None:
    store = Store.open(tmp_path / "node", NEVER)
    await store.append_as_leader([body(i) for i in range(40)], term=1)
    await store.close()
    assert load_index_mark(tmp_path / "node") == 40
    disk.power_loss(tmp_path / "node")
    store = Store.open(tmp_path / "node", NEVER)
    try:
        assert store.recovery.index_records_rebuilt == 0
        assert_log(store, [(1, body(i)) for i in range(40)])
    finally:
        await store.close()


def survivors(store: Store, log: list[tuple[int, bytes]], acked: int,
              written: set[tuple[int, int, bytes]]) -> list[tuple[int, bytes]]:
    """After a power loss: the flushed prefix of `log`, then only entries once written at their
    index (a truncate's end mark that no flush covered is lost, and the entries it cut come back,
    as if the truncate had never happened: nothing after it was acknowledged)."""
    assert store.end_index + 1 >= acked, "lost acknowledged entries"
    found = [(e.term, bytes(e.body)) for e in map(store.get, range(store.end_index + 1))]
    assert found[:acked] == log[:acked]
    assert all((i, *entry) in written for i, entry in enumerate(found))
    return found


@pytest.mark.parametrize("seed", range(12))
async def test_random_appends_truncates_and_power_losses_lose_nothing_flushed(
        tmp_path: Path, disk: PowerLossDisk, seed: int) -> None:
    """sync mode's promise: an append acknowledged after its flush survives any power loss (odd
    seeds: with some unsynced pages of data and index written back before it)."""
    rng = random.Random(seed)
    config = replace(SMALL, index_sync_step_bytes=INDEX_RECORD_SIZE * rng.choice([1, 3, 8, 1 << 20]))
    store = Store.open(tmp_path / "node", config)
    log: list[tuple[int, bytes]] = []
    written: set[tuple[int, int, bytes]] = set()
    acked = 0  # entries below this were covered by a flush
    term = 1
    try:
        for step in range(120):
            roll = rng.random()
            if roll < 0.45:
                bodies = [body(step * 10 + k, rng.randrange(1, 300)) for k in range(rng.randrange(1, 8))]
                term = max(term, store.end_term)
                await store.append_as_leader(bodies, term=term)
                written |= {(len(log) + k, term, b) for k, b in enumerate(bodies)}
                log += [(term, b) for b in bodies]
            elif roll < 0.7:
                await store.flush()
                acked = len(log)
            elif roll < 0.8 and log:
                cut = max(0, len(log) - rng.randrange(1, 40))
                await store.truncate(cut)  # uncommitted entries, acknowledged or not, go
                del log[cut:]
                acked = min(acked, cut)
                term += 1
            elif roll < 0.9:
                store = power_cycle(store, disk, config, rng if seed % 2 else None)
                log = survivors(store, log, acked, written)
                acked = len(log)
                assert_log(store, log)
            else:
                term = max(term, store.end_term) + 1
        store = power_cycle(store, disk, config, rng if seed % 2 else None)
        assert_log(store, survivors(store, log, acked, written))
    finally:
        await store.close()
