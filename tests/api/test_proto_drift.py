"""api/peer_pb2.py is generated from proto/ (make proto) and committed: it must match the .proto."""

from __future__ import annotations

from pathlib import Path

from grpc_tools import protoc

ROOT = Path(__file__).resolve().parents[2]
GENERATED = {"raftlog/peer/v1/peer": ROOT / "api" / "peer_pb2"}


def test_the_generated_code_matches_the_proto(tmp_path: Path) -> None:
    for source, committed in GENERATED.items():
        assert protoc.main(["protoc", f"-I{ROOT / 'proto'}", f"--python_out={tmp_path}", f"--pyi_out={tmp_path}",
                            str(ROOT / "proto" / f"{source}.proto")]) == 0
        for suffix in (".py", ".pyi"):
            fresh = (tmp_path / f"{source}_pb2{suffix}").read_text()
            assert committed.with_suffix(suffix).read_text() == fresh, f"run `make proto`: {committed}{suffix} is stale"
