"""Tiny files so that every test crosses file boundaries and writes fillers."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from raftlog.storage import Store, StoreConfig

# 100-byte bodies make 148-byte entries: six to a data file, then a filler of 128 bytes
SMALL = StoreConfig(data_file_size=1016, index_file_size=10 * 32)


def body(i: int, size: int = 100) -> bytes:
    return (f"entry-{i}-".encode() * size)[:size]


@pytest.fixture
def config() -> StoreConfig:
    return SMALL


@pytest.fixture
async def store(tmp_path: Path, config: StoreConfig) -> AsyncIterator[Store]:
    s = Store.open(tmp_path / "node", config)
    yield s
    await s.close()


def file_bytes(directory: Path) -> bytes:
    """All files of a segment directory, concatenated in name order."""
    return b"".join(p.read_bytes() for p in sorted(directory.iterdir()))
