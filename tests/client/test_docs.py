"""docs/client.md's examples, run as they are written against a live 3-member cluster (its addresses
in place of `make run`'s): the documentation cannot drift from the client."""

from __future__ import annotations

import contextlib
import io
import json
import re
from pathlib import Path

import httpx

from tests.processes import ClusterFactory

DOC = Path(__file__).resolve().parents[2] / "docs" / "client.md"
BLOCK = re.compile(r"```python\n(.*?)```", re.DOTALL)


def test_every_example_of_the_client_guide_runs(make_cluster: ClusterFactory) -> None:
    cluster = make_cluster(3)
    cluster.wait_leader()
    blocks = BLOCK.findall(DOC.read_text())
    assert len(blocks) == 4, "docs/client.md's examples: connecting, producing (async, sync), consuming"
    printed = io.StringIO()
    namespace: dict[str, object] = {}
    for n, block in enumerate(blocks):
        for k, member in enumerate(cluster.members.values(), start=1):
            block = block.replace(f"http://127.0.0.1:800{k}", member.client_url)
        with contextlib.redirect_stdout(printed):
            exec(compile(block, f"docs/client.md example {n + 1}", "exec"), namespace)
    lines = printed.getvalue().splitlines()
    assert lines[0].split()[-1] == "False"  # the first entry's answer: index, term, pos, not a duplicate
    indices = json.loads(lines[1])  # the synchronous producer's entries follow the 10,000 (and the sessions' entries)
    assert indices == list(range(indices[0], indices[0] + 3)) and indices[0] > 10_000
    assert lines[2].startswith("0 b''") and lines[-1].startswith("100 b'order ")  # the consumer, from the start
    url = next(iter(cluster.members.values())).client_url
    assert httpx.get(f"{url}/v1/consumers/billing", timeout=10).json()["position"] == 99  # 100 was not processed
