"""Storage settings, DLedger's names in snake_case, validated when built."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from raftlog.storage.codec import HEADER_SIZE, INDEX_RECORD_SIZE, MIN_BLANK_LEN

GIB = 1 << 30
MIB = 1 << 20


@dataclass(frozen=True, slots=True)
class StoreConfig:
    """How the store lays out, flushes and cleans its files.

    flush_mode "sync": an append is acknowledged only after `await store.flush()`
    made it durable (group commit shares one fdatasync among all waiters).
    flush_mode "async": a background flush every flush_interval_ms and no
    waiting; a power loss (not a process crash: the page cache survives that)
    can lose up to that much acknowledged data on this node.
    """

    data_file_size: int = GIB  # mappedFileSizeForEntryData
    index_file_size: int = INDEX_RECORD_SIZE * 5 * MIB  # 160 MiB, 5,242,880 records
    flush_mode: Literal["sync", "async"] = "sync"
    flush_interval_ms: int = 10  # flushFileInterval
    # Flushes sync only the data files; the index is synced in the background once this many
    # bytes of records (32 per entry) are behind, and recovery after a power loss rebuilds at
    # most about this much of it beyond the last three data files.
    index_sync_step_bytes: int = 4 * MIB
    file_reserved_hours: int = 72  # fileReservedHours
    delete_when: str = "04"  # deleteWhen: hours of the day, ';'-separated
    disk_space_ratio_to_check_expired: float = 0.70
    disk_space_ratio_to_force_clean: float = 0.85
    enable_disk_force_clean: bool = True
    clean_interval_ms: int = 1000  # how often disk usage and retention are checked

    def __post_init__(self) -> None:
        if self.data_file_size < HEADER_SIZE + MIN_BLANK_LEN + 1:
            raise ValueError(f"data_file_size {self.data_file_size} is too small")
        if self.index_file_size < INDEX_RECORD_SIZE or self.index_file_size % INDEX_RECORD_SIZE:
            raise ValueError(f"index_file_size must be a positive multiple of {INDEX_RECORD_SIZE}")
        if self.flush_mode not in ("sync", "async"):
            raise ValueError(f"flush_mode must be 'sync' or 'async', not {self.flush_mode!r}")
        if self.index_sync_step_bytes < INDEX_RECORD_SIZE:
            raise ValueError(f"index_sync_step_bytes must be at least {INDEX_RECORD_SIZE}")
        if self.flush_interval_ms <= 0 or self.clean_interval_ms <= 0:
            raise ValueError("flush_interval_ms and clean_interval_ms must be positive")
        if self.file_reserved_hours < 1:
            raise ValueError("file_reserved_hours must be at least 1")
        parse_delete_when(self.delete_when)
        if not 0 < self.disk_space_ratio_to_check_expired <= self.disk_space_ratio_to_force_clean < 1:
            raise ValueError("disk ratios must satisfy 0 < check_expired <= force_clean < 1")

    @property
    def disk_full_ratio(self) -> float:
        """Above this disk usage appends fail with DISK_FULL (DLedger: force-clean + 0.05, <= 0.95)."""
        return min(self.disk_space_ratio_to_force_clean + 0.05, 0.95)

    @property
    def max_entry_size(self) -> int:
        return self.data_file_size - MIN_BLANK_LEN


def parse_delete_when(delete_when: str) -> frozenset[int]:
    """DLedger's deleteWhen, "04" or "04;16": hours at which expired files are deleted."""
    try:
        hours = frozenset(int(h) for h in delete_when.split(";"))
    except ValueError:
        raise ValueError(f"delete_when {delete_when!r} must be hours like '04' or '04;16'") from None
    if not hours or not all(0 <= h < 24 for h in hours):
        raise ValueError(f"delete_when {delete_when!r} must list hours 0-23")
    return hours
