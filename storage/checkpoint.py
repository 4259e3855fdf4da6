"""The node's checkpoint, `<data_dir>/checkpoint.db`: SQLite through SQLAlchemy Core.

Term and vote are written with full durability before `save_vote` returns: a
vote granted, then forgotten in a crash, could be granted again to another
candidate in the same term and elect two leaders. The committed and applied
indices only speed up a restart, so they are noted in memory and written
every `interval_ms` (DLedger's checkPointInterval) and on close; callers note
at most what is durable in their own log, and readers never trust them beyond
the recovered log end (`load` clamps).

The group's configuration in force at the log's base (raft.membership: the
latest committed CONFIG_CHANGE entry, opaque bytes here) is written with the
same durability by `save_config`: retention may clean its entry away, and a
restarted member must still know its group.

The producer table (raft.producers) and the consumer table (raft.consumers),
opaque bytes here, are written with the indices, in the same transaction,
when they changed (each says itself up to where the log it was built from was
committed: a restart replays the log after it).

Schema 2 added the configuration, schema 3 the producer table, schema 4 the
consumer table; an older file is upgraded when it is opened for writing. Tables
added since (the cluster version, raft.cluster_version) share one more column,
`tables` (a JSON object of table name to its text), added without a schema
change when a file is opened for writing: a build of schema 4 that knows
nothing of it reads and writes the columns it names, and leaves it alone.

The connection runs in EXCLUSIVE locking mode: once open, no other process
can read or write the file, and a second opener gets CheckpointLockedError.
All database work runs in one thread of its own, never on the event loop.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sqlite3
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Protocol, TypeVar

from sqlalchemy import (
    BigInteger,
    Column,
    Connection,
    Engine,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Table,
    create_engine,
    event,
    inspect,
    select,
    update,
)
from sqlalchemy.exc import DBAPIError

from raftlog.storage.errors import (
    CheckpointCorruptError,
    CheckpointError,
    CheckpointFullError,
    CheckpointLockedError,
    CheckpointMissingError,
)

log = logging.getLogger("raftlog.storage.checkpoint")

T = TypeVar("T")

SCHEMA_VERSION = 4
UPGRADES = {1: ("ALTER TABLE raft_state ADD COLUMN config_index BIGINT NOT NULL DEFAULT -1",
                "ALTER TABLE raft_state ADD COLUMN config BLOB"),
            2: ("ALTER TABLE raft_state ADD COLUMN producers BLOB",),
            3: ("ALTER TABLE raft_state ADD COLUMN consumers BLOB",)}  # from a version to the next
LOCK_TIMEOUT_S = 1.0

_metadata = MetaData()
schema_info = Table("schema_info", _metadata, Column("version", Integer, nullable=False))
raft_state = Table(
    "raft_state",
    _metadata,
    Column("id", Integer, primary_key=True),  # a single row, id 1
    Column("current_term", BigInteger, nullable=False),
    Column("voted_for", String, nullable=True),
    Column("committed_index", BigInteger, nullable=False),
    Column("applied_index", BigInteger, nullable=False),
    Column("config_index", BigInteger, nullable=False, server_default="-1"),  # -1: the seed, from settings
    Column("config", LargeBinary, nullable=True),
    Column("producers", LargeBinary, nullable=True),
    Column("consumers", LargeBinary, nullable=True),
    Column("tables", LargeBinary, nullable=True),  # not in schema 4's files until opened for writing here
)
TABLES = ("producers", "consumers")  # the columns of tables a layer above keeps in step with its log
ADD_TABLES = "ALTER TABLE raft_state ADD COLUMN tables BLOB"


class TableSource(Protocol):
    """What the checkpoint saves with the indices (raft.producers, raft.consumers)."""

    @property
    def changes(self) -> int: ...  # counts every change

    def encode(self) -> bytes: ...


@dataclass(frozen=True, slots=True)
class CheckpointState:
    current_term: int = 0
    voted_for: str | None = None
    committed_index: int = -1
    applied_index: int = -1
    config_index: int = -1  # the entry of the configuration below, -1: none saved (the `peers` setting)
    config: bytes | None = None
    producers: bytes | None = None  # the producer table, as of committed_index at least
    consumers: bytes | None = None  # the consumer table
    tables: dict[str, bytes] = field(default_factory=dict)  # the later tables (`tables` column), by name

    @property
    def saved_tables(self) -> dict[str, bytes | None]:
        """Every table of the log it holds, by name, wherever its column."""
        return {"producers": self.producers, "consumers": self.consumers, **self.tables}


class Checkpoint:
    def __init__(self, path: Path, engine: Engine, state: CheckpointState, interval_ms: int) -> None:
        self.path = path
        self._engine = engine
        self._state = state  # what the database holds
        self._progress = (state.committed_index, state.applied_index)  # noted, maybe unwritten
        self._interval = interval_ms / 1000
        self._db = ThreadPoolExecutor(max_workers=1, thread_name_prefix="raftlog-checkpoint")
        self._timer: asyncio.Task[None] | None = None
        self._vote_lock = asyncio.Lock()
        self._tables: dict[str, tuple[TableSource, int]] = {}  # column: its source, its changes when last written

    @classmethod
    def open(cls, path: str | Path, *, create: bool, interval_ms: int = 3000) -> Checkpoint:
        """Open the checkpoint; with `create`, make it when it does not exist. Blocking.

        A node whose log already holds entries must not pass create=True: a lost
        checkpoint means a lost vote, which needs an operator, not a fresh start.
        """
        path = Path(path)
        if not path.exists() and not create:
            raise CheckpointMissingError(
                f"{path} is missing while the log exists: term and vote are lost; "
                "restore it or rebuild this node from its peers")
        engine = create_engine(f"sqlite:///{path}", connect_args={"timeout": LOCK_TIMEOUT_S})
        event.listen(engine, "connect", _configure_connection)
        try:
            with engine.begin() as conn:
                state = _load_or_create(conn, path, create)
        except DBAPIError as exc:
            engine.dispose()
            raise _translate(path, exc) from None
        except CheckpointError:
            engine.dispose()
            raise
        return cls(path, engine, state, interval_ms)

    @property
    def state(self) -> CheckpointState:
        """The durable term and vote, with the latest noted progress."""
        committed, applied = self._progress
        return replace(self._state, committed_index=committed, applied_index=applied)

    def load(self, trusted_index: int) -> CheckpointState:
        """The state with committed and applied clamped to `trusted_index` (the recovered log end, or
        less where the caller trusts less), and adopted: progress is noted again from there."""
        state = self.state
        committed = min(state.committed_index, trusted_index)
        applied = min(state.applied_index, committed)
        if (committed, applied) != (state.committed_index, state.applied_index):
            log.info("checkpoint: committed %d / applied %d are beyond %d, the last index trusted; "
                     "using %d / %d", state.committed_index, state.applied_index,
                     trusted_index, committed, applied)
            self._progress = (committed, applied)
        return replace(state, committed_index=committed, applied_index=applied)

    async def save_vote(self, term: int, voted_for: str | None) -> None:
        """Persist term and vote durably; returns only once they are on disk."""
        async with self._vote_lock:  # check, write and remember as one step
            check_vote(self._state.current_term, self._state.voted_for, term, voted_for)
            await self._run(self._write, {"current_term": term, "voted_for": voted_for})
            self._state = replace(self._state, current_term=term, voted_for=voted_for)

    async def save_config(self, index: int, config: bytes) -> None:
        """Persist the committed configuration of entry `index`; returns once it is on disk."""
        async with self._vote_lock:
            if index < self._state.config_index:
                raise ValueError(f"configuration of entry {index} after that of entry {self._state.config_index}")
            await self._run(self._write, {"config_index": index, "config": config})
            self._state = replace(self._state, config_index=index, config=config)

    def note_progress(self, committed_index: int, applied_index: int) -> None:
        """Remember the indices; the timer or close writes them."""
        assert committed_index >= self._progress[0], "the commit index never falls"
        assert applied_index >= self._progress[1], "the applied index never falls"
        assert applied_index <= committed_index, "only committed entries are applied"
        self._progress = (committed_index, applied_index)

    def watch_tables(self, **sources: TableSource) -> None:
        """Save each source's table (by its column: TABLES, else by its name in the `tables` column)
        with the indices whenever it changed (and at the next write: the table a start rebuilt is not
        the one saved)."""
        self._tables = {name: (source, source.changes - 1) for name, source in sources.items()}

    async def write_progress(self) -> None:
        committed, applied = self._progress
        values: dict[str, object] = {"committed_index": committed, "applied_index": applied}
        changed = {column: (source, source.changes) for column, (source, written) in self._tables.items()
                   if source.changes != written}
        if not changed and (committed, applied) == (self._state.committed_index, self._state.applied_index):
            return
        tables = {name: source.encode() for name, (source, _changes) in changed.items()}
        later = {**self._state.tables, **{name: data for name, data in tables.items() if name not in TABLES}}
        columns = {name: data for name, data in tables.items() if name in TABLES}
        if later != self._state.tables:
            columns["tables"] = json.dumps({name: data.decode() for name, data in later.items()}).encode()
        await self._run(self._write, values | columns)
        self._tables |= changed
        self._state = replace(self._state, committed_index=committed, applied_index=applied,
                              producers=tables.get("producers", self._state.producers),
                              consumers=tables.get("consumers", self._state.consumers), tables=later)

    def start(self) -> None:
        if self._timer is None:
            self._timer = asyncio.create_task(self._write_periodically(), name="raftlog-checkpoint")

    async def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            await asyncio.gather(self._timer, return_exceptions=True)
            self._timer = None
        await self.write_progress()
        await self._run(self._engine.dispose)
        self._db.shutdown(wait=True)

    async def _write_periodically(self) -> None:
        full = False  # a full disk is said once, when it starts, not at every attempt
        while True:
            await asyncio.sleep(self._interval)
            try:
                await self.write_progress()
            except CheckpointFullError as exc:
                if not full:
                    log.warning("checkpoint: %s; the indices are written again once there is room", exc)
                full = True
            except CheckpointError:
                log.exception("checkpoint: periodic write failed")
            else:
                full = False

    async def _run(self, fn: Callable[..., T], *args: object) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._db, fn, *args)

    def _write(self, values: dict[str, object]) -> None:
        try:
            with self._engine.begin() as conn:
                conn.execute(update(raft_state).where(raft_state.c.id == 1).values(**values))
        except DBAPIError as exc:
            raise _translate(self.path, exc) from None


def check_vote(current_term: int, voted_for: str | None, term: int, vote: str | None) -> None:
    """Terms only grow, and a term has one vote: a broken rule here could elect two leaders."""
    if term < current_term:
        raise ValueError(f"term {term} is below the current term {current_term}")
    if term == current_term and voted_for not in (None, vote):
        raise ValueError(f"term {term} already has a vote for {voted_for}, not {vote}")


def _configure_connection(dbapi_conn: sqlite3.Connection, _record: object) -> None:
    cursor = dbapi_conn.cursor()
    cursor.execute("PRAGMA locking_mode=EXCLUSIVE")
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=FULL")
    cursor.close()


def _load_or_create(conn: Connection, path: Path, create: bool) -> CheckpointState:
    tables = set(inspect(conn).get_table_names())
    if not tables:
        if not create:
            raise CheckpointMissingError(f"{path} holds no checkpoint while the log exists")
        _metadata.create_all(conn)
        conn.execute(schema_info.insert().values(version=SCHEMA_VERSION))
        state = CheckpointState()
        conn.execute(raft_state.insert().values(
            id=1, current_term=state.current_term, voted_for=state.voted_for,
            committed_index=state.committed_index, applied_index=state.applied_index))
        return state
    version = conn.execute(select(schema_info.c.version)).scalar_one_or_none() if "schema_info" in tables else None
    while version in UPGRADES:
        for statement in UPGRADES[version]:
            conn.exec_driver_sql(statement)
        version += 1
        conn.execute(update(schema_info).values(version=version))
        log.info("checkpoint: %s upgraded to schema version %d", path, version)
    if "tables" not in {column["name"] for column in inspect(conn).get_columns("raft_state")}:
        conn.exec_driver_sql(ADD_TABLES)
    state = _read_state(conn, path, tables)
    # take the write lock now: in EXCLUSIVE mode it is then held until close
    conn.execute(update(raft_state).where(raft_state.c.id == 1).values(id=1))
    return state


def _read_state(conn: Connection, path: Path, tables: set[str]) -> CheckpointState:
    """The state, from this schema or one it upgrades from (a tool may read an older file as it is)."""
    if tables != {"schema_info", "raft_state"}:
        raise CheckpointCorruptError(f"{path}: unexpected tables {sorted(tables)}")
    version = conn.execute(select(schema_info.c.version)).scalar_one_or_none()
    if version != SCHEMA_VERSION and version not in UPGRADES:
        raise CheckpointError(f"{path}: schema version {version}, this build reads {SCHEMA_VERSION}")
    c = raft_state.c
    columns = [c.current_term, c.voted_for, c.committed_index, c.applied_index]
    if version is not None and version >= 2:
        columns += [c.config_index, c.config]
    if version is not None and version >= 3:
        columns.append(c.producers)
    if version is not None and version >= 4:
        columns.append(c.consumers)
    later = "tables" in {column["name"] for column in inspect(conn).get_columns("raft_state")}
    if later:
        columns.append(c.tables)
    row = conn.execute(select(*columns).where(c.id == 1)).one_or_none()
    if row is None:
        raise CheckpointCorruptError(f"{path}: the state row is missing")
    if not later:
        return CheckpointState(*row)
    try:
        saved = {str(name): str(text).encode() for name, text in json.loads(row[-1] or b"{}").items()}
    except (ValueError, AttributeError) as exc:
        raise CheckpointCorruptError(f"{path}: the tables column is not a JSON object ({exc})") from None
    return replace(CheckpointState(*row[:-1]), tables=saved)


def read_checkpoint(path: str | Path) -> CheckpointState:
    """The state of a checkpoint no node has open (tools reading a stopped or copied node), read-only."""
    path = Path(path)
    if not path.exists():
        raise CheckpointMissingError(f"{path} does not exist")
    engine = create_engine(f"sqlite:///file:{path.resolve()}?mode=ro&uri=true",
                           connect_args={"timeout": LOCK_TIMEOUT_S})
    try:
        with engine.connect() as conn:
            return _read_state(conn, path, set(inspect(conn).get_table_names()))
    except DBAPIError as exc:
        raise _translate(path, exc) from None
    finally:
        engine.dispose()


def _translate(path: Path, exc: DBAPIError) -> CheckpointError:
    message = str(exc.orig)
    if getattr(exc.orig, "sqlite_errorcode", None) == sqlite3.SQLITE_FULL:
        return CheckpointFullError(f"{path}: no room to write ({message})")
    if "locked" in message or "busy" in message:
        return CheckpointLockedError(f"{path} is locked by another process ({message})")
    if isinstance(exc.orig, sqlite3.DatabaseError):
        return CheckpointCorruptError(f"{path} is not a usable checkpoint database ({message})")
    return CheckpointError(f"{path}: {message}")
