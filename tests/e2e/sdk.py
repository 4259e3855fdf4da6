"""Generate a Python SDK from the committed openapi.yaml with openapi-python-client, as SDK users do."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parents[2]


def generate_client(out_dir: Path) -> SimpleNamespace:
    target = out_dir / "raftlog_client"
    bin_dir = Path(sys.executable).parent
    subprocess.run(
        [str(bin_dir / "openapi-python-client"), "generate", "--path", str(ROOT / "openapi.yaml"),
         "--config", str(ROOT / "sdk" / "openapi-python-client.yaml"), "--meta", "none",
         "--output-path", str(target)],
        check=True, capture_output=True, env={**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"})
    for name in [m for m in sys.modules if m == "raftlog_client" or m.startswith("raftlog_client.")]:
        del sys.modules[name]
    sys.path.insert(0, str(out_dir))
    try:
        names = ["client", "models", "types", "api.entries.append_entry", "api.entries.append_batch",
                 "api.entries.get_entry", "api.entries.read_entries", "api.cluster.cluster"]
        for name in names:
            importlib.import_module(f"raftlog_client.{name}")
        return importlib.import_module("raftlog_client")  # type: ignore[return-value]
    finally:
        sys.path.remove(str(out_dir))
