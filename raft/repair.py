"""Damaged committed entries are rewritten in place from a replica's copy.

Recovery checks the last data files on open; older files are checked by a
scrub that walks the committed log at a low duty cycle, and by every read
(a client's, a push's) that trips on a damaged entry: the store reports each
one here. Until repaired, reads of it fail with DISK_ERROR, never the
damaged bytes. A committed entry is the same on every replica (equal chain
CRCs), so any member's copy that fits the chain is the entry. Entries above
the commit index are not repaired: replication overwrites them.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from raftlog.raft.config import RaftConfig
from raftlog.raft.member_state import MemberState
from raftlog.raft.messages import FetchRequest
from raftlog.raft.transport import PeerUnavailable, Transport
from raftlog.raft.waiting import Clock, Wakeup
from raftlog.storage.errors import StorageError
from raftlog.storage.protocol import LogStore

log = logging.getLogger("raftlog.raft.repair")

SCRUB_BATCH = 2_000  # entries verified in one step of the event loop
SCRUB_DUTY = 0.1  # the share of the loop's time the scrub may take
RETRY_S = 1.0  # when no replica could give a copy, ask again after this long


class Repairer:
    def __init__(self, config: RaftConfig, state: MemberState, store: LogStore, transport: Transport,
                 peer_ids: Callable[[], tuple[str, ...]], work_clock: Clock) -> None:
        """`peer_ids`: the other members in play, whose copies may be asked for; `work_clock`: what
        a scrub batch's cost is timed with (not the loop's clock, which stands still while it runs)."""
        self.config = config
        self.state = state
        self.store = store
        self.transport = transport
        self.peer_ids = peer_ids
        self.work_clock = work_clock
        self.damaged: set[int] = set()
        self.repaired = 0
        self.scrubs = 0  # completed passes over the committed log
        self.wake = Wakeup()
        self.store.on_damage = self.report

    def report(self, index: int) -> None:
        """A read found the entry at `index` damaged."""
        if index not in self.damaged:
            log.error("entry %d is damaged on this member: reads of it fail until it is repaired", index)
            self.damaged.add(index)
        self.wake.set()

    async def run_repairs(self) -> None:
        while True:
            await self.wake.wait()
            self.wake.clear()
            for index in sorted(self.damaged):
                if index < self.store.begin_index or index > self.state.committed_index:
                    self.damaged.discard(index)  # cleaned, or replication's to overwrite
                    continue
                try:
                    if await self._repair(index):
                        self.damaged.discard(index)
                except Exception:  # the loop must outlive any one repair
                    log.exception("repair of entry %d failed", index)
            if self.damaged:
                await asyncio.sleep(RETRY_S)
                self.wake.set()

    async def _repair(self, index: int) -> bool:
        """Ask the leader first, then the others, for their copy; True once one fitted."""
        leader = self.state.leader_id
        peers = sorted(self.peer_ids(), key=lambda peer: peer != leader)
        for peer in peers:
            try:
                raw = await self.transport.fetch(peer, FetchRequest(self.config.group, index))
            except PeerUnavailable as exc:
                log.debug("no copy of %d from %s: %s", index, peer, exc)
                continue
            if not raw:
                continue  # not committed there yet, cleaned, or damaged there too
            try:
                await self.store.repair(index, raw)
            except StorageError as exc:
                log.warning("%s's copy of entry %d does not fit: %s", peer, index, exc)
                continue
            self.repaired += 1
            log.warning("entry %d repaired from %s's copy", index, peer)
            return True
        return False

    async def run_scrub(self, interval_s: float) -> None:
        """Verify the committed log from its first entry, every `interval_s`."""
        while True:
            index, chain = self.store.begin_index, self.store.before_begin_chain_crc
            while index <= self.state.committed_index:
                # committed entries only: an uncommitted tail may be truncated between two batches, and the
                # chain CRC carried from one batch to the next would then belong to an entry gone
                batch = min(SCRUB_BATCH, self.state.committed_index - index + 1)
                started = self.work_clock()
                index, _damaged, chain = self.store.verify(index, batch, chain)  # each one is reported
                await asyncio.sleep((self.work_clock() - started) * (1 / SCRUB_DUTY - 1))
            self.scrubs += 1
            await asyncio.sleep(interval_s)

    def copy_of(self, index: int) -> bytes:
        """This member's stored copy of a committed entry; empty when there is none to give."""
        if not self.store.begin_index <= index <= self.state.committed_index:
            return b""
        try:
            return bytes(self.store.read_range(index, 1, 0).data)
        except StorageError:
            return b""  # damaged here too (and now reported)
