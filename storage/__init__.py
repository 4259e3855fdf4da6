"""Storage: DLedger-format memory-mapped segments, recovery, flushing, cleaning, checkpoint."""

from storage.checkpoint import Checkpoint, CheckpointState, read_checkpoint
from storage.cleaner import CleanService
from storage.codec import Entry, Magic, iter_entries
from storage.config import StoreConfig
from storage.errors import (
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
from storage.memory import MemoryStore
from storage.protocol import LogStore
from storage.recovery import RecoveryReport
from storage.store import AppendResult, FollowerAppend, HeadFile, RawEntries, Store

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
