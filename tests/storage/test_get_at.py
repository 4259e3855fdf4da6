"""Store.get_at: the entry that starts at a byte position, found by the index its header names and read
as `get` reads it (what a consume queue's unit and a read by position need); the file store and the
in-memory one answer alike, None wherever no kept entry starts."""

from __future__ import annotations

import random

from raftlog.storage import Store
from raftlog.storage.codec import HEADER_SIZE
from raftlog.storage.memory import MemoryStore
from tests.storage.conftest import SMALL, body


async def test_every_entry_is_found_by_its_position_and_nothing_else_is(store: Store) -> None:
    memory = MemoryStore(SMALL)
    sizes = random.Random(3)
    bodies = [body(i, sizes.randrange(1, 300)) for i in range(40)]
    for batch in (bodies[:17], bodies[17:]):
        await store.append_as_leader(batch, term=1)
        await memory.append_as_leader(batch, term=1)
    positions = [store.pos_at(i) for i in range(40)]
    assert positions == [memory.pos_at(i) for i in range(40)]
    assert [store.get_at(pos) for pos in positions] == [store.get(i) for i in range(40)]
    assert [memory.get_at(pos) for pos in positions] == [memory.get(i) for i in range(40)]
    inside = [pos + offset for pos in positions for offset in (1, 8, HEADER_SIZE)]  # a body's bytes may name an index
    assert {store.get_at(pos) for pos in inside} == {memory.get_at(pos) for pos in inside} == {None}
    past = store.write_pos
    assert past is not None
    assert store.get_at(past) is None and memory.get_at(past) is None
    assert store.get_at(-1) is None and store.get_at(past + 10 * SMALL.data_file_size) is None


async def test_a_header_naming_another_index_is_no_entry_there(store: Store) -> None:
    """The entry its index names must start there: a header whose index field points elsewhere is not believed."""
    await store.append_as_leader([body(i) for i in range(4)], term=1)
    pos = store.pos_at(2)
    view = store.data.find(pos).view
    view[pos - store.data.find(pos).start + 15] ^= 1  # its index field names entry 3
    assert store.get_at(pos) is None
    assert store.get_at(store.pos_at(3)) == store.get(3)
