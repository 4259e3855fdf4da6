"""Durability: group commit in "sync" mode, the background flush in "async" mode."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from raftlog.storage import Store, StoreConfig
from raftlog.storage.errors import StorageError
from tests.storage.conftest import SMALL, body


@pytest.fixture
def synced(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Record every fdatasync the store issues (they still run)."""
    calls: list[int] = []
    real = os.fdatasync

    def counting(fd: int) -> None:
        calls.append(fd)
        real(fd)

    monkeypatch.setattr(os, "fdatasync", counting)
    return calls


async def test_a_hundred_waiters_share_one_sync(store: Store, synced: list[int]) -> None:
    await store.append_as_leader([body(i) for i in range(4)], term=1)
    await asyncio.gather(*(store.flush() for _ in range(100)))
    assert store.flush_rounds == 1
    assert synced == [store.data.segments[0].fd]  # one fdatasync, of the data file: not the index
    assert store.durable_end_index == store.end_index == 3


async def test_concurrent_appends_with_acks_group_their_syncs(store: Store) -> None:
    async def client(i: int) -> None:
        await store.append_as_leader([body(i)], term=1)
        await store.wait_durable()

    await asyncio.gather(*(client(i) for i in range(100)))
    assert store.durable_end_index == 99
    assert store.flush_rounds < 100


async def test_flush_with_nothing_new_does_not_sync(store: Store, synced: list[int]) -> None:
    await store.flush()
    await store.append_as_leader([b"x"], term=1)
    await store.flush()
    await store.flush()
    assert store.flush_rounds == 1


async def test_a_round_covers_what_was_written_when_it_ran(store: Store) -> None:
    """Appends made after a round was asked for, in the same turn, ride on it; an append after the
    round ran needs a round of its own."""
    await store.append_as_leader([b"first"], term=1)
    first = store.flushed()  # the round is asked for now, and runs at the end of this turn
    await store.append_as_leader([b"second"], term=1)  # a store call that does not wait: the same turn
    assert not first.done()
    await first
    assert (store.flush_rounds, store.durable_end_index) == (1, 1)
    await store.append_as_leader([b"third"], term=1)
    assert store.durable_end_index == 1  # written, not yet durable
    await store.flush()
    assert (store.flush_rounds, store.durable_end_index) == (2, 2)


async def test_a_failed_sync_fails_its_waiters_and_every_append_after_it(
        store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    await store.append_as_leader([b"x"], term=1)

    def failing(fd: int) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(os, "fdatasync", failing)
    waiters = await asyncio.gather(*(store.flush() for _ in range(3)), return_exceptions=True)
    assert [type(w) for w in waiters] == [OSError] * 3
    assert store.durable_end_index == -1
    with pytest.raises(StorageError, match="a flush failed earlier"):
        await store.append_as_leader([b"y"], term=1)


async def test_async_mode_acks_at_once_and_flushes_in_the_background(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = StoreConfig(data_file_size=SMALL.data_file_size, index_file_size=SMALL.index_file_size,
                         flush_mode="async", flush_interval_ms=10)
    store = Store.open(tmp_path / "node", config)
    flushed = asyncio.Event()
    loop = asyncio.get_running_loop()
    real = os.fdatasync

    def signalling(fd: int) -> None:
        real(fd)
        loop.call_soon_threadsafe(flushed.set)

    monkeypatch.setattr(os, "fdatasync", signalling)
    try:
        store.start()
        await store.append_as_leader([b"x"], term=1)
        await store.wait_durable()
        assert store.flush_rounds == 0  # the acknowledgement did not wait for a sync
        await asyncio.wait_for(flushed.wait(), timeout=10)
    finally:
        await store.close()
    assert store.durable_end_index == 0
