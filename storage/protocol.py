"""The seam between consensus and storage: what `raft/` may ask of a log store.

`Store` (mapped files) and `MemoryStore` (tests) both fill it; the results they give are here.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Collection, Iterator, Sequence
from typing import NamedTuple, Protocol

from raftlog.storage.codec import Entry, ProducedRun, Stamp
from raftlog.storage.message import QueuedRun


class AppendResult(NamedTuple):
    first_index: int
    positions: list[int]


class FollowerAppend(NamedTuple):
    end_index: int  # the log's end after the append
    control_indices: tuple[int, ...]  # the control entries among those appended (codec.CONTROL_MAGICS)
    produced: tuple[ProducedRun, ...] = ()  # the producers' entries among them, run by run
    queued: tuple[QueuedRun, ...] = ()  # the messages among them, run by run


class Verified(NamedTuple):
    """What `Store.verify` found: where to go on, with the chain CRC to link from."""

    next_index: int
    damaged: list[int]
    chain: int | None


class RawEntries(NamedTuple):
    """Consecutive stored entries, byte for byte: what a push carries."""

    first_index: int
    count: int  # type: ignore[assignment]  # entries, over tuple.count
    data: memoryview



class LogBounds(Protocol):
    """Where a log begins and ends, and where it is durable."""

    on_damage: Callable[[int], None] | None  # called with each damaged entry's index a read finds

    @property
    def begin_index(self) -> int: ...
    @property
    def end_index(self) -> int: ...
    @property
    def before_begin_index(self) -> int: ...
    @property
    def before_begin_term(self) -> int: ...
    @property
    def before_begin_chain_crc(self) -> int | None: ...
    @property
    def durable_end_index(self) -> int: ...


class LogStore(LogBounds, Protocol):
    disk_full: bool  # appends are refused until the cleaning service frees room

    @property
    def end_term(self) -> int: ...
    @property
    def begin_pos(self) -> int | None: ...
    @property
    def write_pos(self) -> int | None: ...
    @property
    def ack_end_index(self) -> int: ...

    async def append_as_leader(self, bodies: Sequence[bytes], term: int, magic: int = ...,
                               channel: int = ..., stamp: Stamp | None = ...) -> AppendResult: ...
    async def append_as_follower(self, data: bytes | memoryview) -> FollowerAppend: ...
    def append_as_follower_now(self, data: bytes | memoryview) -> FollowerAppend | None: ...
    def get(self, index: int) -> Entry: ...
    def verify(self, start: int, max_entries: int, chain: int | None) -> Verified: ...
    async def repair(self, index: int, raw: bytes) -> None: ...
    def pos_at(self, index: int) -> int: ...
    def get_at(self, pos: int) -> Entry | None: ...  # the kept entry that starts at byte pos (None: none)
    def read_range(self, start: int, max_entries: int, max_bytes: int, *,
                   trust_own_writes: bool = ...) -> RawEntries: ...
    def term_at(self, index: int) -> int: ...
    def first_index_of_term(self, term: int, before_index: int) -> int | None: ...
    def indices_of(self, magics: Collection[int], start: int) -> Iterator[int]: ...
    def message_units(self, first: int, last: int) -> bytes: ...  # MESSAGE entries' consume queue units
    async def truncate(self, index: int) -> int: ...
    async def reset_begin(self, index: int, term: int, *, chain_crc: int | None = ...,
                          next_pos: int | None = ...) -> None: ...
    async def flush(self) -> None: ...
    async def wait_durable(self) -> None: ...
    def flushed(self) -> asyncio.Future[None]: ...
    async def close(self) -> None: ...
    def disk_usage_ratio(self) -> float: ...
