"""Storage: DLedger-format memory-mapped segments, recovery, flushing, cleaning, checkpoint."""

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
