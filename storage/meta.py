"""The log's own description, `<data_dir>/store.json`, replaced atomically.

It holds what the segment files alone cannot say: the file sizes the log was
written with (replicas agree on positions only when these agree) and the
base, the entry just before the first kept one, which cleaning and snapshot
installs move forward. And the LOCK file a process holds while the store is open.
"""

from __future__ import annotations

import fcntl
import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path

from raftlog.storage.errors import FileSizeMismatchError, StoreLockedError, StoreOpenError
from raftlog.storage.segments import fsync_dir

META_NAME = "store.json"
META_VERSION = 1


@dataclass(frozen=True, slots=True)
class StoreMeta:
    data_file_size: int
    index_file_size: int
    base_index: int = -1  # last index before the log's first entry
    base_term: int = -1
    base_chain_crc: int | None = 0  # None: adopt it from the next follower append
    base_pos: int | None = 0  # None: adopt it from the next follower append
    resetting: bool = False  # a reset_begin is under way: on open, delete every file
    version: int = META_VERSION


def load_meta(data_dir: Path, data_file_size: int, index_file_size: int) -> StoreMeta | None:
    path = data_dir / META_NAME
    try:
        raw = json.loads(path.read_text())
        meta = StoreMeta(**raw)
    except FileNotFoundError:
        return None
    except (ValueError, TypeError) as exc:
        raise StoreOpenError(f"{path} is not a valid store description: {exc}") from exc
    if meta.version != META_VERSION:
        raise StoreOpenError(f"{path}: format version {meta.version}, this build reads "
                             f"{META_VERSION}")
    if (meta.data_file_size, meta.index_file_size) != (data_file_size, index_file_size):
        raise FileSizeMismatchError(
            f"{data_dir} was written with data files of {meta.data_file_size} bytes and index "
            f"files of {meta.index_file_size} bytes, but the settings say {data_file_size} and "
            f"{index_file_size}; positions would disagree with the other replicas")
    return meta


def save_meta(data_dir: Path, meta: StoreMeta) -> None:
    save_json(data_dir / META_NAME, asdict(meta))


def save_json(path: Path, value: object) -> None:
    """Replace `path` with `value` as JSON, durably and atomically (a crash leaves old or new)."""
    tmp = path.with_suffix(".tmp")
    with open(tmp, "w") as f:
        json.dump(value, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fsync_dir(path.parent)


INDEX_MARK_NAME = "index-synced.json"


def load_index_mark(data_dir: Path) -> int | None:
    """The index mark: every index record below this log index is on disk and matches the data.

    Flushes sync only the data files; the index follows lazily (`Store`), and
    this mark says how far it has. None: no mark (a log written before there
    was one, when every flush synced the index too), or one that cannot be read.
    """
    try:
        raw = json.loads((data_dir / INDEX_MARK_NAME).read_text())
        return int(raw["synced_end"])
    except FileNotFoundError:
        return None
    except (ValueError, TypeError, KeyError):
        return -1  # cut short: nothing is known synced, recovery checks every record


def save_index_mark(data_dir: Path, synced_end: int) -> None:
    save_json(data_dir / INDEX_MARK_NAME, {"synced_end": synced_end})


def lock_data_dir(data_dir: Path) -> int:
    """Hold <data_dir>/LOCK while the store is open: a second process opening it is refused."""
    fd = os.open(data_dir / "LOCK", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise StoreLockedError(f"{data_dir} is in use by another process") from None
    return fd
