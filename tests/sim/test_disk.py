"""The power-loss disk keeps what fsync covered and nothing else, as a machine's disk does."""

from __future__ import annotations

import mmap
import os
import random
from dataclasses import replace
from pathlib import Path

import pytest

from raftlog.storage.codec import INDEX_RECORD_SIZE
from tests.sim import cluster
from tests.sim.disk import PowerLossDisk
from tests.sim.scenarios import outage
from tests.sim.vloop import run_virtual


@pytest.fixture
def disk(tmp_path: Path):
    disk = PowerLossDisk(tmp_path)
    disk.install()
    yield disk
    disk.uninstall()


def write(path: Path, data: bytes, sync: bool) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    try:
        os.write(fd, data)
        if sync:
            os.fdatasync(fd)
    finally:
        os.close(fd)


def sync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def test_synced_bytes_survive_and_later_writes_do_not(disk: PowerLossDisk, tmp_path: Path) -> None:
    f = tmp_path / "data"
    write(f, b"durable", sync=True)
    sync_dir(tmp_path)
    with f.open("r+b") as fh:
        fh.write(b"DURABLE and more")  # in the page cache only
    disk.power_loss(tmp_path)
    assert f.read_bytes() == b"durable"


def test_a_file_never_synced_into_its_directory_is_gone(disk: PowerLossDisk, tmp_path: Path) -> None:
    sync_dir(tmp_path)
    write(tmp_path / "new", b"synced bytes, unsynced name", sync=True)
    disk.power_loss(tmp_path)
    assert not (tmp_path / "new").exists()


def test_a_name_removed_since_the_directory_sync_comes_back(disk: PowerLossDisk, tmp_path: Path) -> None:
    write(tmp_path / "old", b"kept", sync=True)
    sync_dir(tmp_path)
    (tmp_path / "old").unlink()
    disk.power_loss(tmp_path)
    assert (tmp_path / "old").read_bytes() == b"kept"



def test_writes_through_a_shared_mapping_are_kept_as_fdatasync_saw_them(disk: PowerLossDisk, tmp_path: Path) -> None:
    """The file store writes through MAP_SHARED mappings and syncs them with fdatasync."""
    f = tmp_path / "mapped"
    write(f, bytes(8), sync=True)
    sync_dir(tmp_path)
    fd = os.open(f, os.O_RDWR)
    try:
        with mmap.mmap(fd, 8) as mm:
            mm[:4] = b"sync"
            os.fdatasync(fd)
            mm[4:] = b"lost"
    finally:
        os.close(fd)
    disk.power_loss(tmp_path)
    assert f.read_bytes() == b"sync" + bytes(4)


@pytest.mark.parametrize("step_records", [1, 16])
def test_a_power_outage_with_the_index_synced_in_the_background_loses_nothing_acknowledged(
        monkeypatch: pytest.MonkeyPatch, step_records: int) -> None:
    """The outage of every member on the real file store (test_simulation's), with the index
    synced behind the data as often as the store can: each restart rebuilds the records past
    the index mark, and no acknowledged append is missing."""
    monkeypatch.setattr(cluster, "SIM_STORE", replace(cluster.SIM_STORE,
                                                      index_sync_step_bytes=INDEX_RECORD_SIZE * step_records))
    results = [run_virtual(outage(seed, "sync", disk="file")) for seed in range(1, 9)]
    assert sum(acked for acked, _, _ in results) > 100
    assert [lost for _, lost, _ in results] == [0] * len(results)
    assert all(converged for _, _, converged in results)


def test_writeback_keeps_some_unsynced_pages_and_only_those(disk: PowerLossDisk, tmp_path: Path) -> None:
    f = tmp_path / "data"
    write(f, bytes(4096 * 64), sync=True)
    sync_dir(tmp_path)
    with f.open("r+b") as fh:
        fh.write(b"\x01" * 4096 * 64)
    disk.power_loss(tmp_path, writeback=random.Random(1))
    pages = [f.read_bytes()[p:p + 4096] for p in range(0, 4096 * 64, 4096)]
    assert set(pages) == {bytes(4096), b"\x01" * 4096}  # whole pages, some old and some new
