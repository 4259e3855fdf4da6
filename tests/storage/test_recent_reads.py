"""read_range returns entries not yet covered by a flush without checking them; older ones it checks.

The leader pushes entries while its own fdatasync runs (Raft thesis §10.2.1): those reads
skip the per-entry header and CRC checks, and so do its pushes of what it wrote itself after
the flush (`trust_own_writes`). A follower validates every push (`validate_follower_batch`),
so a damaged entry that skipped the checks is refused there, and the leader's checked reads
find the damage.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from raftlog.storage import Store
from raftlog.storage.batch import validate_follower_batch
from raftlog.storage.codec import ENTRY_MAGICS, HEADER_SIZE
from raftlog.storage.errors import AppendRejectedError, CorruptEntryError
from tests.storage.conftest import SMALL, body

CHANNEL = range(32, 36)  # the header's channel field: no CRC covers it, and no check looks at it


def ranges(store: Store, rng: random.Random) -> list[tuple[int, int, int, bytes]]:
    out = []
    for _ in range(200):
        start = rng.randrange(store.end_index + 1)
        raw = store.read_range(start, rng.randrange(1, 12), rng.randrange(1, 1200))
        out.append((start, raw.first_index, raw.count, bytes(raw.data)))
    return out


async def test_recent_reads_return_what_checked_reads_return(store: Store) -> None:
    sizes = random.Random(1)
    await store.append_as_leader([body(i, sizes.randrange(1, 500)) for i in range(60)], term=1)
    assert store.durable_end_index == -1  # every read below takes the unchecked path
    recent = ranges(store, random.Random(2))
    await store.flush()
    assert ranges(store, random.Random(2)) == recent


async def test_a_flipped_bit_in_a_flushed_entry_is_caught(store: Store) -> None:
    await store.append_as_leader([body(i) for i in range(5)], term=1)
    await store.flush()
    store.data.segments[0].view[store.pos_at(2) + HEADER_SIZE + 7] ^= 0x04
    with pytest.raises(CorruptEntryError, match="body CRC"):
        store.read_range(0, 10, 1 << 20)
    with pytest.raises(CorruptEntryError, match="body CRC"):
        store.read_range(2, 10, 1 << 20)


async def test_trusted_reads_skip_the_checks_only_for_entries_this_process_wrote(tmp_path: Path) -> None:
    store = Store.open(tmp_path / "node", SMALL)
    await store.append_as_leader([body(i) for i in range(4)], term=1)
    await store.close()
    store = Store.open(tmp_path / "node", SMALL)
    try:
        await store.append_as_leader([body(i) for i in range(4, 8)], term=1)
        await store.flush()
        view = store.data.find(store.pos_at(1)).view
        view[store.pos_at(1) + HEADER_SIZE] ^= 1  # found at open
        pos = store.pos_at(5)
        store.data.find(pos).view[pos + HEADER_SIZE] ^= 1  # written by this process
        with pytest.raises(CorruptEntryError):
            store.read_range(0, 10, 1 << 20, trust_own_writes=True)
        with pytest.raises(CorruptEntryError):
            store.read_range(4, 10, 1 << 20)
        raw = store.read_range(4, 10, 1 << 20, trust_own_writes=True)
        assert (raw.first_index, raw.count) == (4, 2)  # six entries to a data file
        await store.truncate(3)  # entry 3 was found at open; written here again from now on
        await store.append_as_leader([body(i) for i in range(3, 6)], term=2)
        await store.flush()
        pos = store.pos_at(4)
        store.data.find(pos).view[pos + HEADER_SIZE] ^= 1
        assert store.read_range(3, 10, 1 << 20, trust_own_writes=True).count == 3
        with pytest.raises(CorruptEntryError):
            store.read_range(3, 10, 1 << 20)
    finally:
        await store.close()


async def test_a_damaged_recent_entry_is_refused_by_a_follower(store: Store, tmp_path: Path) -> None:
    """Every single-bit flip in a recent entry that a checked read would catch, the follower refuses."""
    await store.append_as_leader([body(0), body(1)], term=1)
    await store.flush()
    await store.append_as_leader([body(2), body(3)], term=2)  # recent
    chain = store.get(1).chain_crc
    pos, size = store.pos_at(2), HEADER_SIZE + len(body(2))
    view = store.data.segments[0].view
    for byte in range(size):
        for bit in range(8):
            view[pos + byte] ^= 1 << bit
            try:
                damaged = bytes(store.read_range(2, 10, 1 << 20).data)
            except CorruptEntryError:
                continue  # the header no longer agrees with its index record: checked after all
            finally:
                view[pos + byte] ^= 1 << bit
            if byte in CHANNEL or (byte < 4 and damaged[3] in ENTRY_MAGICS
                                   and not any(damaged[:3])):
                continue  # covered by no CRC: a checked read would pass it too
            with pytest.raises(AppendRejectedError):
                validate_follower_batch(damaged, 2, 1, pos, chain, SMALL.data_file_size)
    await store.flush()
    view[pos + HEADER_SIZE] ^= 1
    with pytest.raises(CorruptEntryError):  # once flushed, the leader's own read finds it
        store.read_range(2, 10, 1 << 20)
