"""A clean close lets the next open skip the recovery scan; anything else scans as after a crash."""

from __future__ import annotations

from pathlib import Path

import pytest

from raftlog.storage import CorruptLogError, Store
from raftlog.storage.clean_stop import NAME
from tests.storage.conftest import SMALL, body

ENTRIES = 20  # a little over three of SMALL's data files


async def write_and_close(path: Path) -> list[bytes]:
    store = Store.open(path, SMALL)
    bodies = [body(i) for i in range(ENTRIES)]
    for start in range(0, ENTRIES, 4):
        await store.append_as_leader(bodies[start:start + 4], term=1 + start // 8)
    await store.close()
    return bodies


def assert_holds(store: Store, bodies: list[bytes]) -> None:
    assert store.end_index == len(bodies) - 1
    assert [bytes(store.get(i).body) for i in range(len(bodies))] == bodies


async def test_a_cleanly_closed_log_opens_without_a_scan(tmp_path: Path) -> None:
    bodies = await write_and_close(tmp_path)
    store = Store.open(tmp_path, SMALL, committed_index=ENTRIES - 1)
    try:
        assert store.recovery.entries_scanned == 0
        assert any("closed cleanly" in note for note in store.recovery.notes)
        assert_holds(store, bodies)
        more = await store.append_as_leader([b"after"], term=3)  # the chain goes on from the noted end
        assert more.first_index == ENTRIES
    finally:
        await store.close()
    reopened = Store.open(tmp_path, SMALL, committed_index=ENTRIES)
    try:
        assert reopened.recovery.entries_scanned == 0
        assert_holds(reopened, [*bodies, b"after"])
    finally:
        await reopened.close()


async def test_the_note_is_gone_once_opened_so_a_crash_after_it_means_a_scan(tmp_path: Path) -> None:
    bodies = await write_and_close(tmp_path)
    store = Store.open(tmp_path, SMALL)
    assert not (tmp_path / NAME).exists()
    await store.append_as_leader([b"unflushed"], term=3)
    store._release()  # a killed process: no close, no note
    reopened = Store.open(tmp_path, SMALL)
    try:
        assert reopened.recovery.entries_scanned > 0
        assert_holds(reopened, [*bodies, b"unflushed"])
    finally:
        await reopened.close()


async def test_a_file_damaged_after_the_close_is_scanned_and_refused(tmp_path: Path) -> None:
    await write_and_close(tmp_path)
    last = sorted((tmp_path / "data").iterdir())[-1]
    data = bytearray(last.read_bytes())
    data[60] ^= 0x01  # a body byte of the file's first entry, at once after the close
    last.write_bytes(data)
    with pytest.raises(CorruptLogError):
        Store.open(tmp_path, SMALL, committed_index=ENTRIES - 1)


async def test_a_tail_cut_after_the_close_is_found(tmp_path: Path) -> None:
    bodies = await write_and_close(tmp_path)
    last = sorted((tmp_path / "data").iterdir())[-1]
    content = last.read_bytes()
    with last.open("r+b") as f:  # the last entry's body zeroed, the file's size kept
        f.seek(content.rstrip(b"\0").__len__() - 10)
        f.write(bytes(10))
    store = Store.open(tmp_path, SMALL)  # nothing committed: a torn tail
    try:
        assert store.recovery.entries_scanned > 0
        assert_holds(store, bodies[:-1])
    finally:
        await store.close()


@pytest.mark.parametrize("note", ["{not json", '{"end_index": 3}'])
async def test_a_note_that_cannot_be_read_means_a_scan(tmp_path: Path, note: str) -> None:
    bodies = await write_and_close(tmp_path)
    (tmp_path / NAME).write_text(note)
    store = Store.open(tmp_path, SMALL)
    try:
        assert store.recovery.entries_scanned > 0
        assert_holds(store, bodies)
    finally:
        await store.close()


async def test_a_note_behind_the_checkpoint_is_not_trusted(tmp_path: Path) -> None:
    """A commit index beyond the noted end cannot come from this log's clean close: scan and refuse."""
    await write_and_close(tmp_path)
    with pytest.raises(CorruptLogError):
        Store.open(tmp_path, SMALL, committed_index=ENTRIES + 5)
