"""Storage: DLedger-format memory-mapped segments, recovery, flushing, cleaning, checkpoint.

The names below are imported on first use: a reader of the format alone (the Spark data source's
workers, each a fresh process) imports `raftlog.storage.codec` without SQLAlchemy and the store.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from raftlog.storage.checkpoint import Checkpoint, CheckpointState, read_checkpoint
    from raftlog.storage.cleaner import CleanService
    from raftlog.storage.codec import Entry, Magic, iter_entries
    from raftlog.storage.config import StoreConfig
    from raftlog.storage.errors import (
        AppendRejectedError,
        CheckpointCorruptError,
        CheckpointError,
        CheckpointLockedError,
        CheckpointMissingError,
        CorruptEntryError,
        CorruptLogError,
        DiskFullError,
        EntryTooLargeError,
        FileSizeMismatchError,
        IndexCleanedError,
        IndexOutOfRangeError,
        StorageError,
        StoreLockedError,
        StoreOpenError,
    )
    from raftlog.storage.memory import MemoryStore
    from raftlog.storage.protocol import AppendResult, FollowerAppend, LogStore, RawEntries
    from raftlog.storage.recovery import RecoveryReport
    from raftlog.storage.retention import HeadFile
    from raftlog.storage.store import Store

_HOMES = {name: module for module, names in {
    "checkpoint": ("Checkpoint", "CheckpointState", "read_checkpoint"),
    "cleaner": ("CleanService",),
    "codec": ("Entry", "Magic", "iter_entries"),
    "config": ("StoreConfig",),
    "errors": ("AppendRejectedError", "CheckpointCorruptError", "CheckpointError", "CheckpointLockedError",
               "CheckpointMissingError", "CorruptEntryError", "CorruptLogError", "DiskFullError",
               "EntryTooLargeError", "FileSizeMismatchError", "IndexCleanedError", "IndexOutOfRangeError",
               "StorageError", "StoreLockedError", "StoreOpenError"),
    "memory": ("MemoryStore",),
    "protocol": ("AppendResult", "FollowerAppend", "LogStore", "RawEntries"),
    "recovery": ("RecoveryReport",),
    "retention": ("HeadFile",),
    "store": ("Store",),
}.items() for name in names}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = globals()[name] = getattr(importlib.import_module(f"{__name__}.{home}"), name)
    return value


__all__ = [
    "AppendRejectedError",
    "AppendResult",
    "Checkpoint",
    "CheckpointCorruptError",
    "CheckpointError",
    "CheckpointLockedError",
    "CheckpointMissingError",
    "CheckpointState",
    "CleanService",
    "CorruptEntryError",
    "CorruptLogError",
    "DiskFullError",
    "Entry",
    "EntryTooLargeError",
    "FileSizeMismatchError",
    "FollowerAppend",
    "HeadFile",
    "IndexCleanedError",
    "IndexOutOfRangeError",
    "LogStore",
    "Magic",
    "MemoryStore",
    "RawEntries",
    "RecoveryReport",
    "StorageError",
    "Store",
    "StoreConfig",
    "StoreLockedError",
    "StoreOpenError",
    "iter_entries",
    "read_checkpoint",
]
