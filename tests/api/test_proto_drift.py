"""The code generated from proto/ (make proto) is committed: it must match the .proto files."""

from __future__ import annotations

import re
from pathlib import Path

from grpc_tools import protoc

ROOT = Path(__file__).resolve().parents[2]
GENERATED = {"raftlog/peer/v1/peer": (ROOT / "api" / "peer_pb2", False),
             "raftlog/v1/log": (ROOT / "api" / "log_pb2", True),
             "raftlog/v1/topics": (ROOT / "api" / "topics_pb2", True)}


def as_committed(generated: str) -> str:
    """The public services' modules import each other from api/ (the Makefile's sed)."""
    return re.sub(r"^from raftlog\.v1 import ", "from raftlog.api import ", generated, flags=re.MULTILINE)


def test_the_generated_code_matches_the_proto(tmp_path: Path) -> None:
    for source, (committed, with_stubs) in GENERATED.items():
        stubs = [f"--grpc_python_out={tmp_path}"] if with_stubs else []
        assert protoc.main(["protoc", f"-I{ROOT / 'proto'}", f"--python_out={tmp_path}", f"--pyi_out={tmp_path}",
                            *stubs, str(ROOT / "proto" / f"{source}.proto")]) == 0
        for suffix in (".py", ".pyi"):
            fresh = as_committed((tmp_path / f"{source}_pb2{suffix}").read_text())
            assert committed.with_suffix(suffix).read_text() == fresh, f"run `make proto`: {committed}{suffix} is stale"
        if with_stubs:
            fresh = as_committed((tmp_path / f"{source}_pb2_grpc.py").read_text())
            stub = committed.with_name(committed.name + "_grpc.py")
            assert stub.read_text() == fresh, f"run `make proto`: {stub} is stale"
