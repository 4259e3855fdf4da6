"""Random sequences of store operations against a plain list model (tiny files).

The model knows DLedger's rules and nothing of files: entries are (index,
term, magic, body), positions follow `place`, chain CRCs follow `chain_crc`.
After every step the store must hold exactly the model's entries, byte for
byte.
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from raftlog.storage import MemoryStore, Store
from raftlog.storage.batch import encode_leader_batch
from raftlog.storage.cleaner import files_to_delete
from raftlog.storage.codec import HEADER_SIZE, chain_crc, encode_entry, place
from tests.storage.conftest import SMALL

F = SMALL.data_file_size


@dataclass
class Model:
    # (term, magic, body, pos, chain CRC) of entries begin...
    entries: list[tuple[int, int, bytes, int, int]] = field(default_factory=list)
    begin: int = 0
    base: tuple[int, int, int] = (-1, 0, 0)  # term, chain, pos of the entry before `begin`

    @property
    def end(self) -> int:
        return self.begin + len(self.entries) - 1

    def write_pos(self) -> int:
        if not self.entries:
            return self.base[2]
        _t, _m, b, pos, _c = self.entries[-1]
        return pos + HEADER_SIZE + len(b)

    def append(self, bodies: list[bytes], term: int, magic: int) -> None:
        pos = self.write_pos()
        chain = self.entries[-1][4] if self.entries else self.base[1]
        for b in bodies:
            pos = place(pos, HEADER_SIZE + len(b), F)
            chain = chain_crc(chain, self.end + 1, term, zlib.crc32(b))
            self.entries.append((term, magic, b, pos, chain))
            pos += HEADER_SIZE + len(b)

    def raw(self, index: int) -> bytes:
        term, magic, b, pos, _c = self.entries[index - self.begin]
        prev = self.entries[index - self.begin - 1][4] if index > self.begin else self.base[1]
        return encode_entry(magic, index, term, pos, b, prev)


bodies = st.lists(st.binary(max_size=200), min_size=1, max_size=12)
operations = st.lists(
    st.one_of(
        st.tuples(st.just("lead"), bodies, st.integers(0, 1), st.sampled_from([1, 2, 3])),
        st.tuples(st.just("follow"), bodies, st.integers(0, 1)),
        st.tuples(st.just("truncate"), st.floats(0, 1.2)),
        st.tuples(st.just("reopen")),
        st.tuples(st.just("clean"), st.floats(0, 1)),
    ),
    max_size=25,
)


def check(store: Store | MemoryStore, model: Model) -> None:
    assert (store.begin_index, store.end_index) == (model.begin, model.end)
    if model.entries:
        assert store.end_term == model.entries[-1][0]
    assert store.write_pos == model.write_pos()
    index = model.begin
    while index <= model.end:
        raw = store.read_range(index, 7, 1 << 20)
        assert bytes(raw.data) == b"".join(model.raw(i) for i in range(index, index + raw.count))
        index += raw.count
    for i in range(model.begin, model.end + 1):
        term, magic, b, pos, _c = model.entries[i - model.begin]
        entry = store.get(i)
        assert (entry.term, entry.magic, entry.pos, bytes(entry.body)) == (term, magic, pos, b)


async def run_ops(ops: list[tuple], path: Path | None) -> None:
    store: Store | MemoryStore = Store.open(path, SMALL) if path else MemoryStore(SMALL)
    model = Model()
    term = 1
    try:
        for op in ops:
            kind = op[0]
            if kind == "lead":
                term += op[2]
                await store.append_as_leader(op[1], term, magic=op[3])
                model.append(op[1], term, op[3])
            elif kind == "follow":
                term += op[2]
                batch = encode_leader_batch(op[1], store.end_index + 1, term, 1, 0, store.write_pos,
                                            store.end_chain_crc, F)
                assert (await store.append_as_follower(batch.data)).end_index == batch.last_index
                model.append(op[1], term, 1)
            elif kind == "truncate":
                at = model.begin + int(op[1] * (len(model.entries) + 1))
                new_end = await store.truncate(at)
                del model.entries[max(0, at - model.begin):]
                assert new_end == model.end
            elif kind == "reopen" and path:
                await store.close()
                store = Store.open(path, SMALL)
            elif kind == "clean" and path:
                assert isinstance(store, Store)
                safe = model.begin + int(op[1] * len(model.entries)) - 1
                count = files_to_delete(store.head_files(), now=0, reserved_s=0, safe_index=safe,
                                        force=True)
                if count:
                    first_kept = store.data.segments[count].start
                    await store.delete_head_files(count)
                    gone = sum(1 for e in model.entries if e[3] < first_kept)
                    assert model.begin + gone - 1 <= safe
                    last = model.entries[gone - 1]
                    model.base = (last[0], last[4], first_kept)
                    model.begin += gone
                    del model.entries[:gone]
            check(store, model)
    finally:
        await store.close()


@settings(max_examples=150, deadline=None)
@given(ops=operations)
def test_file_store_matches_the_model(ops: list[tuple]) -> None:
    path = Path(tempfile.mkdtemp(prefix="raftlog-prop-"))
    try:
        asyncio.run(run_ops(ops, path / "node"))
    finally:
        shutil.rmtree(path)


@settings(max_examples=100, deadline=None)
@given(ops=operations)
def test_memory_store_matches_the_model(ops: list[tuple]) -> None:
    asyncio.run(run_ops(ops, None))
