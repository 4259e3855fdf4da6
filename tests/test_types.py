"""mypy in one run: `--strict`'s checks on storage and raft (the log and the protocol, where a slip of
type is a lost entry) and on the client (a library users type-check against), its default checks and a
few of the strict ones on api, app and pipeline, as pyproject.toml's settings say.

mypy reads modules by their paths, and the repository's folders are the raftlog package's subpackages
only through pyproject.toml's package-dir: it reads them through a directory of links that lays them
out as the wheel does."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FOLDERS = ("storage", "raft", "client", "api", "app", "pipeline")


def wheel_layout(tmp_path: Path) -> Path:
    package = tmp_path / "raftlog"
    package.mkdir()
    for name in ("__init__.py", "py.typed"):
        (package / name).symlink_to(ROOT / "raftlog" / name)
    for folder in FOLDERS:
        (package / folder).symlink_to(ROOT / folder, target_is_directory=True)
    return tmp_path


def mypy(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """mypy with pyproject.toml's settings, on the modules `args` name under `cwd`."""
    return subprocess.run([sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml"), *args],
                          cwd=cwd, capture_output=True, text=True)


def test_every_folder_type_checks_and_storage_raft_and_the_client_strictly(tmp_path: Path) -> None:
    out = mypy(wheel_layout(tmp_path), "--cache-dir", str(ROOT / ".mypy_cache"),
               *[arg for folder in FOLDERS for arg in ("-p", f"raftlog.{folder}")])
    assert out.returncode == 0, out.stdout + out.stderr


def test_the_strict_checks_reach_the_strict_folders_only(tmp_path: Path) -> None:
    """The overrides name modules by pattern, and a pattern that names nothing is no error to mypy: an
    untyped function must be one in raftlog.storage, raftlog.raft and raftlog.client, and not in raftlog.api."""
    for folder in ("", "storage", "raft", "client", "api"):
        (tmp_path / "raftlog" / folder).mkdir(exist_ok=True)
        (tmp_path / "raftlog" / folder / "__init__.py").write_text("def untyped(x):\n    return x\n")
    out = mypy(tmp_path, "--no-incremental", "-p", "raftlog")
    flagged = {line.split(":")[0] for line in out.stdout.splitlines() if "missing a type annotation" in line}
    assert flagged == {f"raftlog/{folder}/__init__.py" for folder in ("storage", "raft", "client")}, out.stdout
