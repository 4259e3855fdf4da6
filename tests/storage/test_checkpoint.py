"""The SQLite checkpoint: a vote survives a crash; progress is periodic; bad files fail clearly."""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from raftlog.storage import (
    Checkpoint,
    CheckpointCorruptError,
    CheckpointError,
    CheckpointLockedError,
    CheckpointMissingError,
    CheckpointState,
    read_checkpoint,
)
from raftlog.storage.checkpoint import SCHEMA_VERSION


def _crash_after(path: Path, *steps: str) -> None:
    """Run `steps` against the checkpoint in another process that then dies by SIGKILL."""
    lines = [
        "import asyncio, os, signal",
        "from storage import Checkpoint",
        "async def main():",
        f"    cp = Checkpoint.open({str(path)!r}, create=True)",
        *(f"    {step}" for step in steps),
        "    os.kill(os.getpid(), signal.SIGKILL)",
        "asyncio.run(main())",
    ]
    result = subprocess.run([sys.executable, "-c", "\n".join(lines)], capture_output=True, timeout=60)
    assert result.returncode == -9, result.stderr.decode()


async def test_a_fresh_checkpoint_starts_empty(tmp_path: Path) -> None:
    cp = Checkpoint.open(tmp_path / "checkpoint.db", create=True)
    try:
        assert cp.state == CheckpointState(current_term=0, voted_for=None, committed_index=-1,
                                           applied_index=-1)
    finally:
        await cp.close()


async def test_a_vote_survives_a_crash_right_after_it_returns(tmp_path: Path) -> None:
    path = tmp_path / "checkpoint.db"
    _crash_after(path, 'await cp.save_vote(7, "n2")', "cp.note_progress(40, 30)")
    cp = Checkpoint.open(path, create=False)
    try:
        assert (cp.state.current_term, cp.state.voted_for) == (7, "n2")
        assert cp.state.committed_index == -1  # progress was only noted, never written
    finally:
        await cp.close()


async def test_progress_is_written_on_close_and_clamped_to_the_log(tmp_path: Path) -> None:
    path = tmp_path / "checkpoint.db"
    cp = Checkpoint.open(path, create=True)
    await cp.save_vote(3, None)
    cp.note_progress(120, 100)
    await cp.close()
    cp = Checkpoint.open(path, create=False)
    try:
        assert (cp.state.committed_index, cp.state.applied_index) == (120, 100)
        loaded = cp.load(trusted_index=90)  # the log recovered shorter than the checkpoint says
        assert (loaded.committed_index, loaded.applied_index) == (90, 90)
        cp.note_progress(95, 91)  # the member commits again from its recovered end (found by the fault suite)
        assert (cp.state.committed_index, cp.state.applied_index) == (95, 91)
    finally:
        await cp.close()


async def test_progress_is_written_periodically(tmp_path: Path) -> None:
    cp = Checkpoint.open(tmp_path / "checkpoint.db", create=True, interval_ms=10)
    written = asyncio.Event()
    write = cp.write_progress

    async def observed() -> None:
        await write()
        if cp._state.committed_index == 5:
            written.set()

    cp.write_progress = observed  # type: ignore[method-assign]
    try:
        cp.start()
        cp.note_progress(5, 5)
        await asyncio.wait_for(written.wait(), timeout=10)
    finally:
        await cp.close()
    reopened = Checkpoint.open(tmp_path / "checkpoint.db", create=False)
    assert reopened.state.committed_index == 5
    await reopened.close()


async def test_votes_and_terms_only_move_forward(tmp_path: Path) -> None:
    cp = Checkpoint.open(tmp_path / "checkpoint.db", create=True)
    try:
        await cp.save_vote(2, "n1")
        await cp.save_vote(2, "n1")  # the same vote again is fine
        with pytest.raises(ValueError, match="already has a vote"):
            await cp.save_vote(2, "n3")
        with pytest.raises(ValueError, match="below the current term"):
            await cp.save_vote(1, None)
        cp.note_progress(4, 2)
        with pytest.raises(AssertionError):
            cp.note_progress(3, 2)
    finally:
        await cp.close()


def test_missing_checkpoint_for_an_existing_log(tmp_path: Path) -> None:
    with pytest.raises(CheckpointMissingError, match="term and vote are lost"):
        Checkpoint.open(tmp_path / "checkpoint.db", create=False)


async def test_a_locked_checkpoint_is_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "checkpoint.db"
    cp = Checkpoint.open(path, create=True)
    try:
        with pytest.raises(CheckpointLockedError, match="locked by another process"):
            Checkpoint.open(path, create=False)
    finally:
        await cp.close()
    other = sqlite3.connect(path)
    other.execute("BEGIN EXCLUSIVE")
    try:
        with pytest.raises(CheckpointLockedError):
            Checkpoint.open(path, create=False)
    finally:
        other.rollback()
        other.close()


def test_a_corrupt_checkpoint_is_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "checkpoint.db"
    path.write_bytes(b"this is not a database" * 200)
    with pytest.raises(CheckpointCorruptError, match="not a usable checkpoint"):
        Checkpoint.open(path, create=False)


def test_a_newer_schema_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "checkpoint.db"
    asyncio.run(Checkpoint.open(path, create=True).close())
    db = sqlite3.connect(path)
    db.execute("UPDATE schema_info SET version = 99")
    db.commit()
    db.close()
    with pytest.raises(CheckpointError, match="schema version 99"):
        Checkpoint.open(path, create=False)


def test_the_database_runs_with_full_durability(tmp_path: Path) -> None:
    path = tmp_path / "checkpoint.db"
    asyncio.run(Checkpoint.open(path, create=True).close())
    db = sqlite3.connect(path)
    try:
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    finally:
        db.close()


async def test_concurrent_votes_in_one_term_grant_only_one(tmp_path: Path) -> None:
    cp = Checkpoint.open(tmp_path / "checkpoint.db", create=True)
    try:
        results = await asyncio.gather(cp.save_vote(5, "n1"), cp.save_vote(5, "n2"),
                                       return_exceptions=True)
        assert sum(1 for r in results if r is None) == 1
        assert sum(1 for r in results if isinstance(r, ValueError)) == 1
    finally:
        await cp.close()


async def test_tools_read_a_closed_checkpoint_without_writing_and_are_refused_an_open_one(tmp_path: Path) -> None:
    path = tmp_path / "checkpoint.db"
    cp = Checkpoint.open(path, create=True)
    await cp.save_vote(7, "n2")
    cp.note_progress(41, 40)
    with pytest.raises(CheckpointLockedError):  # a node has it open: a tool must not read around its lock
        read_checkpoint(path)
    await cp.close()
    before = path.read_bytes()
    assert read_checkpoint(path) == CheckpointState(7, "n2", 41, 40)
    assert path.read_bytes() == before
    with pytest.raises(CheckpointMissingError):
        read_checkpoint(tmp_path / "nothing.db")
    (tmp_path / "bad.db").write_bytes(b"not sqlite" * 500)
    with pytest.raises(CheckpointCorruptError):
        read_checkpoint(tmp_path / "bad.db")


async def test_the_group_configuration_survives_a_crash_and_never_moves_back(tmp_path: Path) -> None:
    path = tmp_path / "checkpoint.db"
    _crash_after(path, 'await cp.save_config(12, b"members of entry 12")')
    cp = Checkpoint.open(path, create=False)
    try:
        assert (cp.state.config_index, cp.state.config) == (12, b"members of entry 12")
        with pytest.raises(ValueError, match="after that of entry 12"):
            await cp.save_config(11, b"older")
        await cp.save_vote(3, "n1")  # the other columns leave it as it is
    finally:
        await cp.close()
    assert read_checkpoint(path).config == b"members of entry 12"


V1_SCHEMA = """
CREATE TABLE schema_info (version INTEGER NOT NULL);
INSERT INTO schema_info VALUES (1);
CREATE TABLE raft_state (id INTEGER PRIMARY KEY, current_term BIGINT NOT NULL, voted_for VARCHAR,
                         committed_index BIGINT NOT NULL, applied_index BIGINT NOT NULL);
INSERT INTO raft_state VALUES (1, 5, 'n3', 99, 90);
"""


async def test_a_checkpoint_of_schema_1_is_read_as_it_is_and_upgraded_when_a_node_opens_it(tmp_path: Path) -> None:
    path = tmp_path / "checkpoint.db"
    db = sqlite3.connect(path)
    db.executescript(V1_SCHEMA)
    db.close()
    assert read_checkpoint(path) == CheckpointState(5, "n3", 99, 90)  # a tool reads it without writing
    cp = Checkpoint.open(path, create=False)
    try:
        assert cp.state == CheckpointState(5, "n3", 99, 90, config_index=-1, config=None)
        await cp.save_config(100, b"members")
    finally:
        await cp.close()
    db = sqlite3.connect(path)
    try:
        assert db.execute("SELECT version FROM schema_info").fetchone() == (SCHEMA_VERSION,)
    finally:
        db.close()
    assert read_checkpoint(path) == CheckpointState(5, "n3", 99, 90, 100, b"members", None)


class Table:
    """A producer table as the checkpoint sees it (raft.producers.ProducerSessions)."""

    def __init__(self) -> None:
        self.changes = 0
        self.data = b""

    def encode(self) -> bytes:
        return self.data

    def change(self, data: bytes) -> None:
        self.changes, self.data = self.changes + 1, data


async def test_the_producer_table_is_written_with_the_progress_when_it_changed(tmp_path: Path) -> None:
    path = tmp_path / "checkpoint.db"
    cp = Checkpoint.open(path, create=True)
    table = Table()
    cp.watch_tables(producers=table)
    cp.note_progress(5, 4)
    table.change(b"up to 7")
    await cp.close()
    assert read_checkpoint(path) == CheckpointState(0, None, 5, 4, producers=b"up to 7")
    cp = Checkpoint.open(path, create=False)
    table = Table()
    cp.watch_tables(producers=table)
    table.change(b"rebuilt")  # a start's table: written at the first write, though the indices stay
    await cp.write_progress()
    table.change(b"up to 9")  # the table alone changed: written, beside the same indices
    await cp.close()
    assert read_checkpoint(path) == CheckpointState(0, None, 5, 4, producers=b"up to 9")


async def test_later_tables_go_in_a_column_a_schema_4_build_reads_around(tmp_path: Path) -> None:
    """The cluster version's table is saved in the `tables` column; the file stays one a build of
    schema 4 opens and reads as its own (its tables, its columns by name), and a file of that build,
    without the column, gets it when opened for writing."""
    path = tmp_path / "checkpoint.db"
    cp = Checkpoint.open(path, create=True)
    version, producers = Table(), Table()
    cp.watch_tables(producers=producers, cluster_version=version)
    cp.note_progress(3, 3)
    version.change(b'{"entries":[[1,1]]}')
    await cp.close()
    assert read_checkpoint(path).tables == {"cluster_version": b'{"entries":[[1,1]]}'}
    with contextlib.closing(sqlite3.connect(path)) as db, db:  # as schema 4's build reads it
        assert {name for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")} == \
            {"schema_info", "raft_state"}
        assert db.execute("SELECT version FROM schema_info").fetchone() == (SCHEMA_VERSION,)
        assert db.execute("SELECT committed_index, producers FROM raft_state").fetchone() == (3, b"")
        db.execute("ALTER TABLE raft_state DROP COLUMN tables")  # a file schema 4's build made
    assert read_checkpoint(path).tables == {}
    cp = Checkpoint.open(path, create=False)
    version = Table()
    cp.watch_tables(cluster_version=version)
    version.change(b"again")
    await cp.close()
    assert read_checkpoint(path).tables == {"cluster_version": b"again"}
