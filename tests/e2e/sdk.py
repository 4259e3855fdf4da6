"""Generate a Python SDK from the committed openapi.yaml with openapi-python-client, as SDK users do.

A warning fails the generation: openapi-python-client leaves out, with only a warning, an
operation it cannot read (issue 28: `POST /v1/cluster/members`, whose body named no schema)."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parents[2]
SPEC = ROOT / "openapi.yaml"
MODULES = ["client", "models", "types", "api.entries.append_entry", "api.entries.append_batch",
           "api.entries.get_entry", "api.entries.read_entries", "api.cluster.cluster", "api.cluster.members",
           "api.cluster.add_member", "api.cluster.remove_member", "api.topics.create_topic",
           "api.topics.append_messages", "api.topics.read_messages", "api.groups.commit_offsets"]


def generate_client(out_dir: Path) -> SimpleNamespace:
    target = out_dir / "raftlog_client"
    bin_dir = Path(sys.executable).parent
    done = subprocess.run(
        [str(bin_dir / "openapi-python-client"), "generate", "--path", str(SPEC),
         "--config", str(ROOT / "sdk" / "openapi-python-client.yaml"), "--meta", "none", "--fail-on-warning",
         "--output-path", str(target)],
        capture_output=True, text=True, env={**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"})
    assert done.returncode == 0, f"openapi-python-client refused openapi.yaml:\n{done.stdout}\n{done.stderr}"
    for name in [m for m in sys.modules if m == "raftlog_client" or m.startswith("raftlog_client.")]:
        del sys.modules[name]
    sys.path.insert(0, str(out_dir))
    try:
        for name in MODULES:
            importlib.import_module(f"raftlog_client.{name}")
        return importlib.import_module("raftlog_client")  # type: ignore[return-value]
    finally:
        sys.path.remove(str(out_dir))
