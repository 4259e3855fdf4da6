"""Durability: group commit in "sync" mode, the background flush in "async" mode."""

from __future__ import annotations

import asyncio
import os
import threading
from pathlib import Path

import pytest

from storage import Store, StoreConfig
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


async def test_a_sync_that_began_before_an_append_does_not_cover_it(
        store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    release = threading.Event()
    started = asyncio.Event()
    loop = asyncio.get_running_loop()
    real = os.fdatasync

    def held(fd: int) -> None:
        loop.call_soon_threadsafe(started.set)
        release.wait(10)
        real(fd)

    await store.append_as_leader([b"first"], term=1)
    monkeypatch.setattr(os, "fdatasync", held)
    first = asyncio.create_task(store.flush())
    await started.wait()  # round 1 is inside fdatasync
    await store.append_as_leader([b"second"], term=1)
    second = asyncio.create_task(store.flush())
    release.set()
    await first
    assert store.durable_end_index == 0  # round 1 covered only the first entry
    await second
    assert store.flush_rounds == 2
    assert store.durable_end_index == 1


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


async def test_flush_runs_off_the_event_loop(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    threads: list[str] = []
    real = os.fdatasync

    def where(fd: int) -> None:
        threads.append(threading.current_thread().name)
        real(fd)

    monkeypatch.setattr(os, "fdatasync", where)
    await store.append_as_leader([b"x"], term=1)
    await store.flush()
    assert threads and all(name.startswith("raftlog-io") for name in threads)
