"""openapi.yaml as strict tools read it: a valid OpenAPI document (openapi-spec-validator), every
`$ref` resolving (issue 28: a dangling `NewMember` made openapi-typescript refuse the whole file),
and a TypeScript client that openapi-typescript generates from it and `tsc --strict` accepts,
together with a file that uses its types (tests/api/openapi_client.ts).

The TypeScript tools come from the npm registry once, into a directory of the virtualenv; later
runs use them from there."""

from __future__ import annotations

import fcntl
import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml
from openapi_spec_validator import validate

ROOT = Path(__file__).resolve().parents[2]
SPEC = ROOT / "openapi.yaml"
USAGE = Path(__file__).with_name("openapi_client.ts")
NODE_TOOLS = Path(sys.prefix) / "node-tools"  # removed with the virtualenv (make clean)
NPM_PACKAGES = {"openapi-typescript": "^7.13.0", "typescript": "^5.9.0"}
NPM_TIMEOUT_S = 240  # the first run's install, from the registry


def document() -> dict[str, Any]:
    return yaml.safe_load(SPEC.read_text())


def refs(node: Any, at: str = "#") -> Iterator[tuple[str, str]]:
    """Every `$ref` in `node`, with the JSON pointer of the object that holds it."""
    if isinstance(node, dict):
        if "$ref" in node:
            yield at, node["$ref"]
        items: Any = node.items()
    elif isinstance(node, list):
        items = enumerate(node)
    else:
        return
    for key, value in items:
        yield from refs(value, f"{at}/{str(key).replace('~', '~0').replace('/', '~1')}")


def resolves(root: dict[str, Any], ref: str) -> bool:
    """Whether `ref`, a pointer into this document, names a value in it."""
    if not ref.startswith("#/"):
        return False
    node: Any = root
    for token in ref[2:].split("/"):
        key = token.replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict) and key in node:
            node = node[key]
        elif isinstance(node, list) and key.isdigit() and int(key) < len(node):
            node = node[int(key)]
        else:
            return False
    return True


def test_openapi_yaml_is_a_valid_openapi_document() -> None:
    validate(document())


def test_every_ref_in_openapi_yaml_resolves_within_it() -> None:
    spec = document()
    found = list(refs(spec))
    assert any(at.startswith("#/paths/~1v1~1cluster~1members/post/requestBody") for at, _ in found)
    dangling = [(at, ref) for at, ref in found if not resolves(spec, ref)]
    assert not dangling, f"$refs to nothing: {dangling}"


def node_tools() -> Path:
    """The npm packages' bin directory, installed on first use (under a lock: two runs may start at once)."""
    npm = shutil.which("npm")
    assert npm is not None, "the TypeScript check needs node and npm (node 20 or later)"
    NODE_TOOLS.mkdir(exist_ok=True)
    wanted = json.dumps({"private": True, "dependencies": NPM_PACKAGES}, indent=2)
    with open(NODE_TOOLS / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        manifest, installed = NODE_TOOLS / "package.json", NODE_TOOLS / "node_modules" / ".installed"
        if not installed.exists() or installed.read_text() != wanted:
            manifest.write_text(wanted)
            run([npm, "install", "--no-audit", "--no-fund", "--loglevel=error"], NODE_TOOLS, NPM_TIMEOUT_S)
            installed.write_text(wanted)
    return NODE_TOOLS / "node_modules" / ".bin"


def run(command: list[str | Path], cwd: Path, timeout_s: float = 120) -> None:
    done = subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=timeout_s)
    assert done.returncode == 0, f"{Path(command[0]).name} failed:\n{done.stdout}\n{done.stderr}"


def test_a_typescript_client_generated_from_openapi_yaml_type_checks_strictly(tmp_path: Path) -> None:
    tools = node_tools()
    run([tools / "openapi-typescript", SPEC, "--output", tmp_path / "raftlog.ts"], tmp_path)
    shutil.copy(USAGE, tmp_path / USAGE.name)
    run([tools / "tsc", "--strict", "--noEmit", "--target", "es2022", "--module", "es2022",
         "--moduleResolution", "bundler", "--lib", "es2022", USAGE.name], tmp_path)
