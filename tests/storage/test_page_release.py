"""The log lives in the page cache, not in the node's memory: flushed pages leave the RSS."""

from __future__ import annotations

from pathlib import Path

from raftlog.storage import Store, StoreConfig

MIB = 1 << 20


def mapped_rss(path: Path) -> int:
    """Bytes of `path`'s mapping resident in this process (from /proc/self/smaps)."""
    lines = Path("/proc/self/smaps").read_text().splitlines()
    for i, line in enumerate(lines):
        if line.endswith(str(path)):
            rss = next(entry for entry in lines[i + 1:] if entry.startswith("Rss:"))
            return int(rss.split()[1]) * 1024
    raise AssertionError(f"{path} is not mapped")


CONFIG = StoreConfig(data_file_size=256 * MIB, index_file_size=32 * MIB)
BODIES = [bytes([i % 256]) * 1000 for i in range(1000)]  # about 1 MiB a batch


async def append_flushed(store: Store, batches: int) -> None:
    """Batches appended, each read back through the mapping (as pushes and reads take entries,
    which maps their pages), and flushed."""
    for _ in range(batches):
        appended = await store.append_as_leader(BODIES, term=1)
        assert len(bytes(store.read_range(appended.first_index, len(BODIES), 1 << 30).data)) > 0
        await store.flush()


async def test_flushed_pages_leave_the_rss_and_stay_readable(tmp_path: Path) -> None:
    store = Store.open(tmp_path, CONFIG)
    bodies = BODIES
    try:
        await append_flushed(store, 100)
        data_file = store.data.segments[0].path
        assert store.write_pos is not None and store.write_pos > 90 * MIB
        assert mapped_rss(data_file) <= 40 * MIB  # the newest 16 MiB, and up to a 16 MiB step not yet released
        assert bytes(store.get(0).body) == bodies[0]  # released pages come back from the page cache
        assert bytes(store.get(1999).body) == bodies[999]
    finally:
        await store.close()


async def test_a_scrub_leaves_what_it_read_unmapped(tmp_path: Path) -> None:
    store = Store.open(tmp_path, CONFIG)
    await append_flushed(store, 100)
    await store.close()
    store = Store.open(tmp_path, CONFIG)  # a fresh mapping: nothing resident yet
    try:
        index, chain = store.begin_index, store.before_begin_chain_crc
        while index <= store.end_index:
            index, damaged, chain = store.verify(index, 2000, chain)
            assert not damaged
        assert mapped_rss(store.data.segments[0].path) <= 24 * MIB  # the newest 16 MiB and a page or so
    finally:
        await store.close()
