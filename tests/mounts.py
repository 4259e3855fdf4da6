"""Small real file systems for tests of a full disk: a tmpfs mounted for the test, and a filler
that takes its free space as another program would. Mounting needs root; a test that cannot
mount fails (loudly), it is not skipped."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

FILLER = "filler"


@contextmanager
def tmpfs(where: Path, size: str) -> Iterator[Path]:
    """A tmpfs of `size` (mount's syntax: 8m) on `where`, unmounted afterwards however the test ends."""
    where.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        pytest.fail(f"cannot mount a tmpfs on {where} (the test needs root): {done.stderr.strip()}")
    try:
        yield where
    finally:
        # lazy: a process that still has a file open there (a node being stopped) cannot hold the mount
        subprocess.run(["umount", "--lazy", str(where)], check=True)


def fill(directory: Path) -> Path:
    """Take every free byte of the file system holding `directory`: write until ENOSPC."""
    filler = directory / FILLER
    with open(filler, "wb", buffering=0) as f:
        for size in (64 << 10, 512):  # big writes, then the last bytes
            while True:
                try:
                    if not f.write(b"\xa5" * size):
                        break
                except OSError:
                    break
    st = os.statvfs(directory)
    assert st.f_bavail * st.f_frsize < 512, "the filler left room"
    return filler
