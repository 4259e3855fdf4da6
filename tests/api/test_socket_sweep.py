"""grpcio's Unix socket behind the peer port: a member killed with SIGKILL leaves its directory,
and the next member to start removes it, and only it."""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path

from raftlog.api.peer_port import ABANDONED_AFTER_S, SOCKET_DIR_PREFIX, sweep_abandoned_sockets


def socket_dir(root: Path, name: str, *, listening: bool, age_s: float) -> tuple[Path, socket.socket]:
    """A member's socket directory; its socket still served (`listening`) or left by a dead process."""
    directory = root / f"{SOCKET_DIR_PREFIX}{name}"
    directory.mkdir(mode=0o700)
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(directory / "grpc"))
    if listening:
        server.listen()
    else:
        server.close()  # the file stays, nobody listens: a process that died
    then = time.time() - age_s
    os.utime(directory, (then, then))
    return directory, server


def test_the_socket_directories_of_dead_members_are_removed_and_no_other(tmp_path: Path) -> None:
    old = ABANDONED_AFTER_S + 10
    dead, _ = socket_dir(tmp_path, "dead", listening=False, age_s=old)
    alive, server = socket_dir(tmp_path, "alive", listening=True, age_s=old)
    starting, _ = socket_dir(tmp_path, "starting", listening=False, age_s=1)  # not bound to a listener yet
    other = tmp_path / "not-ours"
    other.mkdir()
    try:
        assert sweep_abandoned_sockets(str(tmp_path)) == 1
        assert not dead.exists()
        assert alive.exists() and starting.exists() and other.exists()
        assert sweep_abandoned_sockets(str(tmp_path)) == 0
    finally:
        server.close()


def test_a_directory_another_member_sweeps_first_is_passed_over(tmp_path: Path, monkeypatch) -> None:
    """Members of one group start together, and each sweeps: a directory listed by one and removed
    by another before the first looks at it does not stop the first from starting."""
    dead, _ = socket_dir(tmp_path, "dead", listening=False, age_s=ABANDONED_AFTER_S + 10)
    scandir = os.scandir

    class SweptMeanwhile:
        def __enter__(self) -> list[os.DirEntry[str]]:
            with scandir(tmp_path) as entries:
                listed = list(entries)
            (dead / "grpc").unlink()
            dead.rmdir()  # the other member's sweep, between this one's listing and its stat
            return listed

        def __exit__(self, *exc: object) -> None:
            pass

    monkeypatch.setattr(os, "scandir", lambda root: SweptMeanwhile())
    assert sweep_abandoned_sockets(str(tmp_path)) == 0
    assert not dead.exists()
