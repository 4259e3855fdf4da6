"""Print the public API's OpenAPI document as YAML: `make openapi` writes openapi.yaml.

The document comes from the app itself, built by a throwaway single-member
node with default settings, so the committed contract is what a node serves.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml

from raftlog.app.launcher import SMALL_FILES
from raftlog.app.node import Node
from raftlog.app.settings import load_settings


async def served_spec() -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        settings = load_settings({"data_dir": Path(tmp), **SMALL_FILES})
        node = await Node.open(settings)
        try:
            return node.public_app.openapi()
        finally:
            await node.stop()


class _Dumper(yaml.SafeDumper):
    """Multi-line text as YAML literal blocks, so the document reads as written."""


def _text(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _text)


def to_yaml(spec: dict[str, Any]) -> str:
    return yaml.dump(spec, Dumper=_Dumper, sort_keys=False, allow_unicode=True, width=100)


if __name__ == "__main__":
    sys.stdout.write(to_yaml(asyncio.run(served_spec())))
