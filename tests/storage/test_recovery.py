"""Recovery: a torn tail is cut to the longest valid prefix, damage below the commit index refuses.

Reference: DLEDGER.md "recovery" (scan from the third-to-last data file, stop at
the first bad entry, rebuild the index from the data, truncate both there).
"""

from __future__ import annotations

import asyncio
import itertools
import os
import random
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from raftlog.storage import CorruptEntryError, CorruptLogError, Store
from raftlog.storage.codec import HEADER_SIZE, MIN_BLANK_LEN, place
from tests.storage.conftest import SMALL, body

F = SMALL.data_file_size


@dataclass(frozen=True)
class Written:
    index: int
    term: int
    pos: int
    body: bytes

    @property
    def end(self) -> int:
        return self.pos + HEADER_SIZE + len(self.body)


async def _write_log(path: Path, sizes: list[int]) -> list[Written]:
    store = Store.open(path, SMALL)
    written, pos, term = [], 0, 1
    for start in range(0, len(sizes), 4):  # batches of four, a new term every other batch
        bodies = [body(start + i, size) for i, size in enumerate(sizes[start:start + 4])]
        term += start % 8 == 0
        result = await store.append_as_leader(bodies, term=term)
        for i, (b, p) in enumerate(zip(bodies, result.positions, strict=True)):
            pos = place(pos, HEADER_SIZE + len(b), F)
            assert p == pos
            written.append(Written(result.first_index + i, term, p, b))
            pos += HEADER_SIZE + len(b)
    await store.close()
    return written


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[Written]]:
    """A closed log of three data files: recovery scans all of it."""
    path = tmp_path_factory.mktemp("template") / "node"
    rng = random.Random(7)
    written = asyncio.run(_write_log(path, [rng.randrange(0, 180) for _ in range(17)]))
    assert len(list((path / "data").iterdir())) == 3
    return path, written


def _copy(template: Path, tmp: Path) -> Path:
    target = tmp / f"copy{random.getrandbits(32)}"
    shutil.copytree(template, target)
    return target


def _data_file(path: Path, pos: int) -> Path:
    return path / "data" / f"{pos - pos % F:020d}"


def _check_prefix(store: Store, written: list[Written], end: int) -> None:
    """The store holds exactly written[:end + 1], and its index agrees."""
    assert store.end_index == end
    for w in written[:end + 1]:
        entry = store.get(w.index)
        assert (entry.term, entry.pos, bytes(entry.body)) == (w.term, w.pos, w.body)
    if end >= 0:
        assert store.end_term == written[end].term
        raw = store.read_range(0, 1000, 1 << 20)
        assert raw.count == min(end + 1, sum(1 for w in written if w.pos < F))


async def _append_continues(store: Store, written: list[Written], end: int) -> None:
    """After recovery, the next entry goes where a fresh log would put it."""
    prev_end = written[end].end if end >= 0 else 0
    result = await store.append_as_leader([b"after"], term=99)
    assert result.first_index == end + 1
    assert result.positions[0] == place(prev_end, HEADER_SIZE + 5, F)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(cut=st.integers(min_value=0, max_value=3 * F - 1), shorten=st.booleans())
def test_cut_at_any_byte_keeps_the_longest_valid_prefix(template, tmp_path: Path, cut: int,
                                                        shorten: bool) -> None:
    source, written = template
    path = _copy(source, tmp_path)
    file = _data_file(path, cut)
    off = cut - cut % F
    with open(file, "r+b") as f:
        if shorten:  # a file whose end never reached the disk: shorter than its size
            f.truncate(cut - off)
        else:  # the bytes after the cut never reached the disk: zeros
            f.seek(cut - off)
            f.write(bytes(F - (cut - off)))
    for later in (path / "data").iterdir():
        if int(later.name) > off:
            later.unlink()
    expected = max((w.index for w in written if w.end <= cut), default=-1)

    async def run() -> None:
        store = Store.open(path, SMALL)
        try:
            _check_prefix(store, written, expected)
            await _append_continues(store, written, expected)
        finally:
            await store.close()
    asyncio.run(run())
    shutil.rmtree(path)


def _flip_outcome(written: list[Written], offset: int, bit: int) -> int:
    """Expected end index after flipping `bit` of the data byte at global `offset`."""
    for w in written:
        if w.pos <= offset < w.end:
            field = offset - w.pos
            if 32 <= field < 36:  # channel: no CRC or rule covers it in DLedger's format
                return written[-1].index
            return w.index - 1
    for w, nxt in itertools.pairwise(written):
        if nxt.pos % F == 0 and w.end <= offset < w.end + MIN_BLANK_LEN:
            return w.index  # the filler header: the log cannot go on to the next file
    return written[-1].index  # the rest of a filler: never read


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(offset=st.integers(min_value=0), bit=st.integers(min_value=0, max_value=7))
def test_a_flipped_bit_cuts_the_log_before_the_damaged_entry(template, tmp_path: Path, offset: int,
                                                             bit: int) -> None:
    source, written = template
    offset %= written[-1].end
    path = _copy(source, tmp_path)
    with open(_data_file(path, offset), "r+b") as f:
        f.seek(offset % F)
        byte = f.read(1)[0]
        f.seek(offset % F)
        f.write(bytes([byte ^ (1 << bit)]))
    expected = _flip_outcome(written, offset, bit)

    async def run() -> None:
        store = Store.open(path, SMALL)
        try:
            if expected == written[-1].index:
                assert store.end_index == expected
            else:
                _check_prefix(store, written, expected)
                assert store.recovery.truncated_at == (written[expected].end if expected >= 0 else 0)
                await _append_continues(store, written, expected)
        finally:
            await store.close()
    asyncio.run(run())
    shutil.rmtree(path)


async def test_damage_at_or_below_the_commit_index_refuses_to_open(template, tmp_path: Path) -> None:
    source, written = template
    path = _copy(source, tmp_path)
    victim = written[9]
    _write_at(path, victim.pos + HEADER_SIZE, b"\xff")
    with pytest.raises(CorruptLogError) as refused:
        Store.open(path, SMALL, committed_index=9)
    assert refused.value.index == 9
    assert refused.value.path == str(_data_file(path, victim.pos))
    assert refused.value.offset == victim.pos % F
    assert "body CRC" in str(refused.value)
    store = Store.open(path, SMALL, committed_index=8)  # above the commit index: a torn tail
    try:
        _check_prefix(store, written, 8)
        assert store.recovery.lost_from is None
    finally:
        await store.close()


@pytest.mark.parametrize("damage", ["bit flip", "zeroed"])
async def test_salvage_cuts_damaged_committed_entries_and_says_from_where(template, tmp_path: Path,
                                                                          damage: str) -> None:
    """What a node that gets lost entries back from its peers opens with (settings.repair_from_peers)."""
    source, written = template
    path = _copy(source, tmp_path)
    victim = written[9]
    _write_at(path, victim.pos + (HEADER_SIZE if damage == "bit flip" else 0),
              b"\xff" if damage == "bit flip" else bytes(8))
    store = Store.open(path, SMALL, committed_index=11, salvage=True)
    try:
        assert store.recovery.lost_from == 9 and store.end_index == 8
        _check_prefix(store, written, 8)
    finally:
        await store.close()


async def test_index_records_are_rebuilt_from_the_data(template, tmp_path: Path) -> None:
    source, written = template
    path = _copy(source, tmp_path)
    index_file = next((path / "index").iterdir())
    raw = bytearray(index_file.read_bytes())
    raw[3 * 32 + 8] ^= 0x10  # record 3's pos
    raw[5 * 32:7 * 32] = bytes(64)  # records 5 and 6 lost
    index_file.write_bytes(bytes(raw))
    for extra in sorted((path / "index").iterdir())[1:]:
        extra.unlink()  # records 10.. lost with their files
    store = Store.open(path, SMALL)
    try:
        assert store.recovery.index_records_rebuilt == 3 + (len(written) - 10)
        _check_prefix(store, written, written[-1].index)
    finally:
        await store.close()


async def test_a_magic_that_disagrees_with_its_index_record_is_damage(template, tmp_path: Path) -> None:
    source, written = template
    victim = written[12]
    store = Store.open(_copy_with_flip(source, tmp_path, victim), SMALL)
    try:
        _check_prefix(store, written, 11)
    finally:
        await store.close()
    with pytest.raises(CorruptLogError, match="magic differs"):
        Store.open(_copy_with_flip(source, tmp_path, victim), SMALL, committed_index=20)


def _copy_with_flip(source: Path, tmp: Path, victim: Written) -> Path:
    """A copy whose entry `victim` says CONFIG_CHANGE, not NORMAL: valid, and covered by no CRC."""
    path = _copy(source, tmp)
    _write_at(path, victim.pos + 3, b"\x03")
    return path


def _write_at(path: Path, pos: int, data: bytes) -> None:
    """Overwrite bytes of the log in `path` at global position `pos`."""
    with open(_data_file(path, pos), "r+b") as f:
        f.seek(pos % F)
        f.write(data)


async def test_recovery_scans_from_the_third_to_last_file(tmp_path: Path) -> None:
    written = await _write_log(tmp_path / "node", [100] * 40)  # seven data files
    files = sorted((tmp_path / "node" / "data").iterdir())
    assert len(files) == 7
    with open(files[0], "r+b") as f:  # damage in an old file is left to reads to find
        f.seek(HEADER_SIZE)
        f.write(b"\xff")
    store = Store.open(tmp_path / "node", SMALL)
    try:
        assert store.recovery.files_scanned == 3
        assert store.end_index == written[-1].index
        with pytest.raises(CorruptEntryError):
            store.get(0)
        assert bytes(store.get(1).body) == written[1].body
    finally:
        await store.close()


async def test_a_half_created_last_file_is_extended(tmp_path: Path) -> None:
    written = await _write_log(tmp_path / "node", [100] * 8)
    data = tmp_path / "node" / "data"
    stray = data / f"{2 * F:020d}"
    stray.write_bytes(bytes(100))  # a crash while creating the third file
    (data / "00000000000000009999.tmp").write_bytes(b"")  # and one before its rename
    store = Store.open(tmp_path / "node", SMALL)
    try:
        assert store.end_index == written[-1].index
        assert not stray.exists()  # beyond the log end: removed
        assert not (data / "00000000000000009999.tmp").exists()
        assert any("half-created" in note for note in store.recovery.notes)
    finally:
        await store.close()


async def test_lost_index_files_are_rebuilt_even_before_the_usual_scan(tmp_path: Path) -> None:
    written = await _write_log(tmp_path / "node", [100] * 40)  # seven data files, four index files
    index_files = sorted((tmp_path / "node" / "index").iterdir())
    for lost in index_files[1:]:
        lost.unlink()  # records 10..39 gone, though the usual scan starts at entry 24
    store = Store.open(tmp_path / "node", SMALL)
    try:
        assert store.recovery.files_scanned == 7
        assert store.recovery.index_records_rebuilt == 30
        _check_prefix(store, written, written[-1].index)
    finally:
        await store.close()


async def test_a_log_that_ends_before_the_commit_index_refuses_to_open(template, tmp_path: Path) -> None:
    source, written = template
    path = _copy(source, tmp_path)
    victim = written[8]
    _write_at(path, victim.pos, bytes(8))  # a zeroed header reads as a clean end
    with pytest.raises(CorruptLogError, match="ends at 7 but 11 is committed"):
        Store.open(path, SMALL, committed_index=11)


def test_appends_a_killed_process_left_unflushed_are_synced_on_open(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "node"
    script = (
        "import asyncio, os\n"
        "from storage import Store, StoreConfig\n"
        "async def main():\n"
        f"    s = Store.open({str(path)!r}, StoreConfig(data_file_size=1016, index_file_size=320))\n"
        "    await s.append_as_leader([b'x' * 100] * 8, term=1)\n"
        "    os._exit(0)  # no flush, no close: the bytes live in the page cache only\n"
        "asyncio.run(main())\n"
    )
    subprocess.run([sys.executable, "-c", script], check=True, timeout=60)
    synced: list[int] = []
    real = os.fdatasync
    monkeypatch.setattr(os, "fdatasync", lambda fd: (synced.append(fd), real(fd))[1])
    store = Store.open(path, SMALL)
    try:
        files = set(store.data.segments) | set(store.index.segments)
        assert {seg.fd for seg in files} <= set(synced)
        assert store.durable_end_index == store.end_index == 7
    finally:
        asyncio.run(store.close())
