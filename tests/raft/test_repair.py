"""The scrub walks the committed log only: an uncommitted tail may be truncated between two of its
batches, and the chain CRC carried from one batch to the next would then belong to an entry gone
(a false damage report, seen in the fault suite on a deposed leader)."""

from __future__ import annotations

import asyncio
import time
from typing import cast

from raftlog.raft.config import RaftConfig, parse_peers
from raftlog.raft.member_state import MemberState
from raftlog.raft.repair import SCRUB_BATCH, Repairer
from raftlog.raft.transport import Transport
from raftlog.storage.memory import MemoryCheckpoint, MemoryStore
from raftlog.storage.protocol import Verified


class Watched(MemoryStore):
    def __init__(self) -> None:
        super().__init__()
        self.asked: list[tuple[int, int]] = []  # (start, max_entries) of each verify

    def verify(self, start: int, max_entries: int, chain: int | None) -> Verified:
        self.asked.append((start, max_entries))
        return super().verify(start, max_entries, chain)


async def test_the_scrub_verifies_committed_entries_only() -> None:
    store = Watched()
    entries = SCRUB_BATCH + 500
    for _ in range(0, entries, 500):
        await store.append_as_leader([b"x"] * 500, term=1)
    committed = SCRUB_BATCH + 99  # a second batch ends at the commit index, not SCRUB_BATCH later
    config = RaftConfig(self_id="n1", peers=parse_peers("n1-127.0.0.1:1"))
    state = MemberState("n1", MemoryCheckpoint(), 1, None, committed)
    repairer = Repairer(config, state, store, cast(Transport, None), lambda: (), time.perf_counter)
    scrub = asyncio.create_task(repairer.run_scrub(3600))
    try:
        while repairer.scrubs == 0:
            await asyncio.sleep(0)
    finally:
        scrub.cancel()
        await asyncio.gather(scrub, return_exceptions=True)
    assert store.asked == [(0, SCRUB_BATCH), (SCRUB_BATCH, 100)]
    assert max(start + count - 1 for start, count in store.asked) == committed < store.end_index
    assert repairer.damaged == set()

