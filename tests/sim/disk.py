"""A disk that can lose power under the real file store: only what fsync covered survives.

A killed process leaves its writes in the page cache; a power loss does not.
While installed, `PowerLossDisk` wraps `os.fsync` and `os.fdatasync`: a file's
bytes are kept as its last sync saw them, a directory's names as its last fsync
saw them. `power_loss(dir)` puts the tree under `dir` back to that state, as a
machine finds its disk after losing power: a file never synced into its
directory is gone, a synced one holds its synced bytes, a name unlinked or
replaced since its directory's last sync is back. (A real disk may keep some
unsynced writes as well; recovery treats those as it treats a torn tail.)

`SlowDiskExecutor` stands for the store's I/O thread on such a disk: each job
runs `io_s` of virtual time after the one before it, so a flush takes time and
a power loss can fall between a write and its flush.
"""

from __future__ import annotations

import asyncio
import os
import random
import stat
from collections.abc import Callable
from concurrent.futures import Executor, Future
from pathlib import Path
from typing import Any

PAGE_BYTES = 4096


class PowerLossDisk:
    def __init__(self, root: Path) -> None:
        self.root = root.resolve()
        self._bytes: dict[int, bytes] = {}  # inode -> bytes at its last sync
        self._names: dict[Path, dict[str, int]] = {}  # directory -> name -> inode at its last fsync
        self._real: tuple[Callable[[int], None], Callable[[int], None]] | None = None

    def install(self) -> None:
        real_fsync, real_fdatasync = os.fsync, os.fdatasync
        self._real = (real_fsync, real_fdatasync)
        os.fsync = lambda fd: self._synced(real_fsync, fd)  # type: ignore[assignment]
        os.fdatasync = lambda fd: self._synced(real_fdatasync, fd)  # type: ignore[assignment]

    def uninstall(self) -> None:
        if self._real is not None:
            os.fsync, os.fdatasync = self._real  # type: ignore[assignment]
            self._real = None

    def _synced(self, sync: Callable[[int], None], fd: int) -> None:
        path = Path(os.readlink(f"/proc/self/fd/{fd}"))
        if not path.is_relative_to(self.root):
            sync(fd)
            return
        # under the root, the real disk never loses power: what the sync covered is recorded, not waited for
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            self._names[path] = _files(path)
        else:  # through /proc: the descriptor may be open for writing only
            self._bytes[st.st_ino] = Path(f"/proc/self/fd/{fd}").read_bytes()

    def power_loss(self, directory: Path, writeback: random.Random | None = None) -> None:
        """The page cache under `directory` is gone; its files are as the syncs left them.

        With `writeback`, the kernel had written some pages out on its own before the power went:
        each page of a file that differs from its synced bytes is kept with probability 1/2, so
        the files hold any mix of synced and later bytes (an index ahead of the data, a torn tail)."""
        for path in [directory.resolve(), *(p.resolve() for p in directory.rglob("*") if p.is_dir())]:
            durable = self._names.get(path, {})
            now = _files(path)
            for name in now.keys() - durable.keys():
                (path / name).unlink()
            for name, inode in durable.items():
                kept = self._bytes.get(inode, b"")
                if writeback is not None and now.get(name) == inode:
                    kept = _written_back(kept, (path / name).read_bytes(), writeback)
                (path / name).write_bytes(kept)
            self._names[path] = _files(path)  # what is on disk now is durable
            for name, inode in self._names[path].items():
                self._bytes[inode] = (path / name).read_bytes()


def _written_back(synced: bytes, current: bytes, rng: random.Random) -> bytes:
    out = bytearray(synced)
    for off in range(0, min(len(synced), len(current)), PAGE_BYTES):
        page = current[off:off + PAGE_BYTES]
        if page != out[off:off + PAGE_BYTES] and rng.random() < 0.5:
            out[off:off + PAGE_BYTES] = page
    return bytes(out)


def _files(directory: Path) -> dict[str, int]:
    return {e.name: e.inode() for e in os.scandir(directory) if e.is_file(follow_symlinks=False)}


class SlowDiskExecutor(Executor):
    """One I/O thread on a slow disk, on the virtual clock: jobs run in order, `io_s` apart."""

    def __init__(self, io_s: float) -> None:
        self.io_s = io_s
        self._free_at = 0.0
        self._pending: dict[asyncio.TimerHandle, Future[Any]] = {}

    def submit(self, fn: Any, /, *args: Any, **kwargs: Any) -> Future[Any]:
        loop = asyncio.get_running_loop()
        future: Future[Any] = Future()
        self._free_at = max(self._free_at, loop.time()) + self.io_s

        def run() -> None:
            del self._pending[handle]
            try:
                future.set_result(fn(*args, **kwargs))
            except BaseException as exc:
                future.set_exception(exc)

        handle = loop.call_at(self._free_at, run)
        self._pending[handle] = future
        return future

    def drop(self) -> None:
        """The machine went down: jobs not yet done never happen, and their callers (the
        simulation's clients call members directly) are cancelled as a killed process's are."""
        for handle, future in self._pending.items():
            handle.cancel()
            future.cancel()
        self._pending.clear()
