"""Storage errors: operating errors a caller can act on, one class per cause.

    StorageError
    ├── StoreOpenError            the data directory cannot be used as it is
    │   ├── StoreLockedError      another process has it open
    │   ├── FileSizeMismatchError the log was written with other file sizes
    │   └── CorruptLogError       a committed entry is damaged: repair from a peer
    ├── CorruptEntryError         a read found bytes whose CRC or header is wrong
    ├── AppendRejectedError       a follower append failed validation (nothing written)
    ├── EntryTooLargeError        an entry cannot fit in one data file
    ├── DiskFullError             the disk-full flag is set or the disk has no room
    ├── IndexOutOfRangeError      no entry at that index (above the end)
    │   └── IndexCleanedError     the entry was below the first kept index
    └── CheckpointError           the SQLite checkpoint cannot be used
        ├── CheckpointMissingError
        ├── CheckpointLockedError
        ├── CheckpointCorruptError
        └── CheckpointFullError   no room for a write (also a DiskFullError)

Each carries `code`, the DLedger response code name the upper layers map to
protocol answers and HTTP statuses.
"""

from __future__ import annotations


class StorageError(Exception):
    code = "DISK_ERROR"


class StoreOpenError(StorageError):
    pass


class StoreLockedError(StoreOpenError):
    pass


class FileSizeMismatchError(StoreOpenError):
    pass


class CorruptLogError(StoreOpenError):
    """A damaged entry at or below the committed index, found on open."""

    def __init__(self, path: str, offset: int, index: int, reason: str) -> None:
        self.path = path
        self.offset = offset
        self.index = index
        self.reason = reason
        super().__init__(
            f"corrupt entry {index} in {path} at file offset {offset}: {reason}; "
            "it is at or below the committed index, so it must be repaired from a peer"
        )


class CorruptEntryError(StorageError):
    def __init__(self, index: int, pos: int, reason: str) -> None:
        self.index = index
        self.pos = pos
        self.reason = reason
        super().__init__(f"corrupt entry {index} at pos {pos}: {reason}")


class AppendRejectedError(StorageError):
    """A follower append broke a rule; `index` is the first entry that did."""

    code = "INCONSISTENT_STATE"

    def __init__(self, index: int, reason: str) -> None:
        self.index = index
        self.reason = reason
        super().__init__(f"append rejected at index {index}: {reason}")


class EntryTooLargeError(StorageError):
    code = "UNEXPECTED_ARGUMENT"


class DiskFullError(StorageError):
    code = "DISK_FULL"


class IndexOutOfRangeError(StorageError):
    code = "INDEX_OUT_OF_RANGE"

    def __init__(self, index: int, begin_index: int, end_index: int) -> None:
        self.index = index
        self.begin_index = begin_index
        self.end_index = end_index
        super().__init__(f"index {index} is outside the log [{begin_index}, {end_index}]")


class IndexCleanedError(IndexOutOfRangeError):
    code = "INDEX_LESS_THAN_LOCAL_BEGIN"


def check_in_log(index: int, begin_index: int, end_index: int) -> None:
    """Raise the range error for an index outside [begin_index, end_index]."""
    if index > end_index:
        raise IndexOutOfRangeError(index, begin_index, end_index)
    if index < begin_index:
        raise IndexCleanedError(index, begin_index, end_index)


class CheckpointError(StorageError):
    code = "METADATA_ERROR"


class CheckpointMissingError(CheckpointError):
    pass


class CheckpointLockedError(CheckpointError):
    pass


class CheckpointCorruptError(CheckpointError):
    pass


class CheckpointFullError(CheckpointError, DiskFullError):
    """SQLite found no room for a write: the file is sound, the disk is full."""

    code = "DISK_FULL"


# Consume queues (storage.consume_queue): ConsumeQueueError under StorageError, QueueOffsetError under it.


class ConsumeQueueError(StorageError):
    """A consume queue's files, or units dispatched to it, disagree with what it holds."""

    code = "INCONSISTENT_STATE"


class QueueOffsetError(ConsumeQueueError):
    """No unit at that queue offset: retention took it (below min_offset), or none yet (past the end)."""

    code = "INDEX_OUT_OF_RANGE"

    def __init__(self, offset: int, min_offset: int, next_offset: int) -> None:
        self.offset = offset
        self.min_offset = min_offset
        self.next_offset = next_offset
        super().__init__(f"queue offset {offset} is outside the queue's units [{min_offset}, {next_offset})")
