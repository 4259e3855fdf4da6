"""The power-loss disk keeps what fsync covered and nothing else, as a machine's disk does."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.sim.disk import PowerLossDisk


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

