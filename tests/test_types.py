"""mypy: strict on storage and raft (the log and the protocol, where a slip of type is a lost entry)
and on the client (a library users type-check against), its default checks on api, app and pipeline,
with pyproject.toml's settings.

mypy reads modules by their paths, and the repository's folders are the raftlog package's subpackages
only through pyproject.toml's package-dir: it reads them through a directory of links that lays them
out as the wheel does."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
STRICT = ("storage", "raft", "client")
DEFAULT = ("api", "app", "pipeline")


def wheel_layout(tmp_path: Path) -> Path:
    package = tmp_path / "raftlog"
    package.mkdir()
    for name in ("__init__.py", "py.typed"):
        (package / name).symlink_to(ROOT / "raftlog" / name)
    for folder in ("storage", "raft", "api", "app", "pipeline", "client"):
        (package / folder).symlink_to(ROOT / folder, target_is_directory=True)
    return tmp_path


def mypy(tmp_path: Path, folders: tuple[str, ...], *flags: str) -> subprocess.CompletedProcess[str]:
    packages = [arg for folder in folders for arg in ("-p", f"raftlog.{folder}")]
    return subprocess.run([sys.executable, "-m", "mypy", *flags, "--config-file", str(ROOT / "pyproject.toml"),
                           "--cache-dir", str(ROOT / ".mypy_cache"), *packages],
                          cwd=wheel_layout(tmp_path), capture_output=True, text=True)


def test_storage_raft_and_the_client_type_check_strictly(tmp_path: Path) -> None:
    out = mypy(tmp_path, STRICT, "--strict")
    assert out.returncode == 0, out.stdout + out.stderr


def test_api_app_and_pipeline_type_check(tmp_path: Path) -> None:
    out = mypy(tmp_path, DEFAULT)
    assert out.returncode == 0, out.stdout + out.stderr
