"""The registry of the log's tables: each control entry goes to the tables made of it, read once, in log
order with the producers' runs; truncations, installs and starts reach every table."""

from __future__ import annotations

from raftlog.raft.tables import LogTable, Tables
from raftlog.storage import StoreConfig
from raftlog.storage.codec import Entry, Magic, ProducedRun
from raftlog.storage.memory import MemoryCheckpoint, MemoryStore
from raftlog.storage.protocol import FollowerAppend


class Journal(LogTable):
    """Writes down what it is told, in order."""

    name = "journal"
    magics = frozenset((Magic.CONSUMER, Magic.TOPIC))

    def __init__(self) -> None:
        self.seen: list[tuple[object, ...]] = []

    def appended(self, index: int, magic: int, body: bytes | memoryview) -> None:
        self.seen.append(("appended", index, magic, bytes(body)))

    def produced(self, run: ProducedRun) -> None:
        self.seen.append(("produced", *run))

    def truncated(self, from_index: int) -> None:
        self.seen.append(("truncated", from_index))

    def installed(self, index: int, data: bytes | None) -> None:
        self.seen.append(("installed", index, data))

    def encode(self) -> bytes:
        return b"journal"

    def restore(self, saved: bytes | None) -> int:
        self.seen.append(("restored", saved))
        return 2


class CountingStore(MemoryStore):
    def __init__(self) -> None:
        super().__init__(StoreConfig())
        self.reads: list[int] = []

    def get(self, index: int) -> Entry:
        self.reads.append(index)
        return super().get(index)


async def log_of(store: MemoryStore) -> None:
    for magic, body in [(Magic.NORMAL, b"a"), (Magic.CONSUMER, b"c1"), (Magic.NORMAL, b"b"), (Magic.TOPIC, b"t1"),
                        (Magic.CONFIG_CHANGE, b"{}")]:
        await store.append_as_leader([body], 1, magic)


async def test_a_push_hands_each_control_entry_once_in_log_order_with_the_runs() -> None:
    store = CountingStore()
    await log_of(store)
    journal = Journal()
    tables = Tables("n1", store, [journal])
    tables.took(FollowerAppend(4, (1, 3, 4), ((9, 0, 0, 0, 0), (9, 0, 1, 2, 2))))
    assert journal.seen == [("produced", 9, 0, 0, 0, 0), ("appended", 1, Magic.CONSUMER, b"c1"),
                            ("produced", 9, 0, 1, 2, 2), ("appended", 3, Magic.TOPIC, b"t1")]
    assert store.reads == [1, 3, 4]  # each control entry once; the configuration is no table's here


async def test_a_start_restores_each_table_then_replays_its_entries_after_what_it_saved() -> None:
    store = CountingStore()
    await log_of(store)
    journal = Journal()
    checkpoint = MemoryCheckpoint()
    Tables("n1", store, [journal]).restore({"journal": b"saved"}, checkpoint)
    assert journal.seen == [("restored", b"saved"), ("appended", 3, Magic.TOPIC, b"t1")]  # from index 2 on
    checkpoint.note_progress(4, 4)
    assert checkpoint.saved_tables == {"journal": b"journal"}


async def test_truncations_and_installs_reach_every_table() -> None:
    journal = Journal()
    tables = Tables("n1", MemoryStore(StoreConfig()), [journal])
    tables.truncated(7)
    tables.installed(9, {"journal": b"leader's", "other": b"x"})
    assert journal.seen == [("truncated", 7), ("installed", 9, b"leader's")]
    assert tables.encode() == {"journal": b"journal"}
