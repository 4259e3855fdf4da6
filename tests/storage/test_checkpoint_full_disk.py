"""The checkpoint on a real full disk: SQLite's "database or disk is full" is a full disk
(DISK_FULL), not a damaged checkpoint, and writes go through again once there is room."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest

from raftlog.storage import Checkpoint, read_checkpoint
from raftlog.storage.errors import CheckpointCorruptError, CheckpointFullError, DiskFullError
from tests.mounts import fill, tmpfs


async def test_a_full_disk_is_said_as_such_and_the_checkpoint_writes_again_once_there_is_room(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with tmpfs(tmp_path / "disk", "1m") as disk:
        cp = Checkpoint.open(disk / "checkpoint.db", create=True, interval_ms=10)
        filler = fill(disk)
        cp.note_progress(5_000, 4_000)
        with pytest.raises(CheckpointFullError) as raised:
            await cp.write_progress()
        assert isinstance(raised.value, DiskFullError) and not isinstance(raised.value, CheckpointCorruptError)
        assert raised.value.code == "DISK_FULL"
        with caplog.at_level(logging.WARNING, "raftlog.storage.checkpoint"):
            cp.start()  # the periodic writer meets the full disk: a warning, no traceback
            while not [r for r in caplog.records if "no room to write" in r.getMessage()]:
                await asyncio.sleep(0.01)
            filler.unlink()
            await cp.close()  # its last write goes through
        said = [r for r in caplog.records if r.name == "raftlog.storage.checkpoint"]
        assert len(said) == 1 and said[0].exc_info is None, [r.getMessage() for r in said]
        state = read_checkpoint(disk / "checkpoint.db")
        assert (state.committed_index, state.applied_index) == (5_000, 4_000)
