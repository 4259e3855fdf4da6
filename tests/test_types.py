"""mypy, strict, on storage and raft: the log and the protocol, where a slip of type is a lost entry.

mypy reads modules by their paths, and the repository's folders are the raftlog package's subpackages
only through pyproject.toml's package-dir: it reads them through a directory of links that lays them
out as the wheel does."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
STRICT = ("storage", "raft")


def wheel_layout(tmp_path: Path) -> Path:
    package = tmp_path / "raftlog"
    package.mkdir()
    for name in ("__init__.py", "py.typed"):
        (package / name).symlink_to(ROOT / "raftlog" / name)
    for folder in ("storage", "raft", "api", "app", "pipeline"):
        (package / folder).symlink_to(ROOT / folder, target_is_directory=True)
    return tmp_path


def test_storage_and_raft_type_check_strictly(tmp_path: Path) -> None:
    packages = [arg for folder in STRICT for arg in ("-p", f"raftlog.{folder}")]
    out = subprocess.run([sys.executable, "-m", "mypy", "--strict", "--cache-dir", str(ROOT / ".mypy_cache"),
                          *packages], cwd=wheel_layout(tmp_path), capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
