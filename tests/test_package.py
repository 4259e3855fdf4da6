"""The distribution installs one import package, raftlog: no generic top-level names (`app`, `api`)
that would collide with a user's own, and nothing in the tree imports by the old ones."""

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FOLDERS = ("storage", "raft", "api", "app", "pipeline", "client")  # raftlog.storage, raftlog.raft, ...


def test_the_wheel_installs_raftlog_alone(tmp_path: Path) -> None:
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
                    "--wheel-dir", str(tmp_path / "wheels"), str(ROOT)], check=True, capture_output=True)
    [wheel] = (tmp_path / "wheels").glob("raftlog-*.whl")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    site = next(venv.glob("lib/python*/site-packages"))
    before = {p.name for p in site.iterdir()}
    subprocess.run([sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install", "--quiet",
                    "--no-deps", "--no-index", str(wheel)], check=True, capture_output=True)
    added = {p.name for p in site.iterdir()} - before
    assert {name for name in added if not name.endswith(".dist-info")} == {"raftlog"}
    installed = site / "raftlog"
    assert {p.name for p in installed.iterdir() if p.is_dir() and p.name != "__pycache__"} == {*FOLDERS}
    assert (installed / "app" / "admin" / "index.html").is_file()  # the admin page ships as package data
    assert (venv / "bin" / "raftlog").is_file()  # the console script
    # importable from the install alone, outside the checkout (the dependencies are this test's own)
    probe = (f"import sys; sys.path.insert(0, {str(site)!r}); import raftlog.app.cli, raftlog.pipeline; "
             "print(raftlog.app.cli.__file__)")
    out = subprocess.run([sys.executable, "-I", "-c", probe], cwd=tmp_path, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().startswith(str(installed))


def test_nothing_imports_the_folders_by_their_own_names() -> None:
    """`import storage` from the checkout would load a second copy of a module beside raftlog.storage's."""
    offenders = []
    for path in sorted(ROOT.glob("**/*.py")):
        if any(part in {".venv", "build", "sdk"} or part.startswith(".") for part in path.relative_to(ROOT).parts):
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = ([alias.name for alias in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else [])
            offenders += [f"{path.relative_to(ROOT)}:{node.lineno} {name}" for name in names
                          if name.split(".")[0] in FOLDERS]
    assert offenders == []


def test_every_name_of_the_storage_package_resolves_from_the_module_the_type_checker_reads() -> None:
    """raftlog.storage imports its names on first use; a name whose home is wrong fails here, not in a node."""
    import raftlog.storage

    for name in raftlog.storage.__all__:
        value = getattr(raftlog.storage, name)
        assert value.__module__.startswith("raftlog.storage."), name


def test_the_spark_source_imports_neither_sqlalchemy_nor_pandas() -> None:
    """Spark starts a fresh Python process for each reading worker and plan: those two would cost a second
    of CPU in each."""
    probe = ("import sys, raftlog.pipeline.source\n"
             "print(sorted(m for m in ('sqlalchemy', 'pandas', 'raftlog.storage.store') if m in sys.modules))")
    loaded = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert loaded.strip() == "[]"
