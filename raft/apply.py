"""The apply loop and the progress the checkpoint keeps (DLedger's StateMachineCaller).

Committed entries go to the state machine in index order, a batch at a time.
The checkpoint's committed and applied indices never pass what this member
holds durably, nor a committed configuration the checkpoint does not hold yet.
The tables kept in step with the log (raft.tables) are saved with the progress,
and on start rebuilt from it and the log after it.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Protocol

from raftlog.raft.config import RaftConfig
from raftlog.raft.member_state import MemberState, TermStore
from raftlog.raft.membership import ConfigLog, Configuration
from raftlog.raft.waiting import Wakeup
from raftlog.storage.checkpoint import TableSource
from raftlog.storage.codec import Entry
from raftlog.storage.protocol import LogStore

log = logging.getLogger("raftlog.raft.apply")


class StateMachine(Protocol):
    """What committed entries are handed to, in index order."""

    def apply(self, entries: list[Entry]) -> None: ...

    def snapshot_installed(self, index: int, term: int) -> None: ...


class ProgressStore(TermStore, Protocol):
    """Term and vote, committed and applied indices, and the committed configuration (storage.Checkpoint)."""

    def note_progress(self, committed_index: int, applied_index: int) -> None: ...

    async def save_config(self, index: int, config: bytes) -> None: ...

    def watch_tables(self, **sources: TableSource) -> None: ...


class Applier:
    def __init__(self, config: RaftConfig, state: MemberState, store: LogStore, progress: ProgressStore,
                 members: ConfigLog, state_machine: StateMachine | None, *, applied_index: int,
                 saved_config_index: int) -> None:
        self.config = config
        self.state = state
        self.store = store
        self.progress = progress
        self.members = members
        self.state_machine = state_machine  # None: the log itself is the product, nothing to apply
        committed = state.committed_index
        self.applied_index = max(min(applied_index, committed), store.before_begin_index)
        self._noted = (committed, min(applied_index, committed))
        self._saved_config_index = saved_config_index
        self._config_save: asyncio.Task[None] | None = None
        self.wake = Wakeup()  # more is committed, or durable, or the configuration is saved

    async def run(self) -> None:
        while True:
            await self.wake.wait()
            self.wake.clear()
            if self.state_machine is None:  # nothing to hand entries to
                self.applied_index = max(self.applied_index, self.state.committed_index)
            while self.applied_index < self.state.committed_index:
                assert self.state_machine is not None
                last = min(self.state.committed_index, self.applied_index + self.config.apply_batch_max)
                entries = [self.store.get(i) for i in range(self.applied_index + 1, last + 1)]
                self.state_machine.apply(entries)
                self.applied_index = last
                self._note_progress()
                await asyncio.sleep(0)  # a batch at a time: heartbeats must not wait for a long backlog
            self._note_progress()

    def snapshot_installed(self, index: int, term: int, configuration: Configuration | None) -> None:
        """The log restarts after `index`; the leader's committed `configuration` was saved, if any."""
        if configuration is not None:
            self.save_config()
        if self.state_machine is not None:
            self.state_machine.snapshot_installed(index, term)
        self.applied_index = max(self.applied_index, index)

    def _note_progress(self) -> None:
        """Checkpoint at most what this member holds durably, never moving back; and never a commit
        index past a committed configuration before the checkpoint holds it (a restart looks for
        configuration entries only after the commit index the checkpoint saved)."""
        committed = max(self._noted[0], min(self.state.committed_index, self.store.durable_end_index))
        base = self.members.base
        if base.index > self._saved_config_index and base.index <= committed:
            committed = max(self._noted[0], base.index - 1)
            self.save_config()
        applied = max(self._noted[1], min(self.applied_index, committed))
        if (committed, applied) != self._noted:
            self._noted = (committed, applied)
            self.progress.note_progress(committed, applied)

    def save_config(self) -> None:
        """Write the committed configuration to the checkpoint, once at a time; progress waits for it."""
        if self._config_save is None and self.members.base.index > self._saved_config_index:
            self._config_save = asyncio.create_task(self._write_config(self.members.base))

    async def _write_config(self, config: Configuration) -> None:
        try:
            await self.progress.save_config(config.index, config.encode())
        except Exception:
            log.exception("%s: the configuration of entry %d could not be checkpointed; trying again with the "
                          "next commit", self.config.self_id, config.index)
            return
        finally:
            self._config_save = None
        self._saved_config_index = config.index
        self.wake.set()  # the progress held back for it is noted now

    @property
    def saving(self) -> asyncio.Task[None] | None:
        """The configuration's write to the checkpoint, while one runs (the node's stop cancels it)."""
        return self._config_save
