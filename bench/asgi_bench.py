"""CPU per request of the client port's ASGI stack, in one process, without sockets.

    python bench/asgi_bench.py [--requests 20000] [--rounds 7] [--json]

A single-member node in this process; GET /v1/entries/1?consistency=local goes
straight into the app the client port serves (request counter, limits, token
check, fast path, the read), so the figure is what the stack costs apart from
HTTP parsing and the network, which make throughput figures too noisy on this
machine to show a few microseconds. Every route passes the same layers.
Figures: microseconds of process CPU per request, median of --rounds, rounds
without and with API tokens taking turns:
- get_us: no tokens
- get_us_tokens: the member has tokens, the request carries a reader's
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import uvloop

from raftlog.app.launcher import free_ports
from raftlog.app.node import Node
from raftlog.app.settings import load_settings

TOKEN = "reader-token-for-the-bench"


def scope(tokens: bool) -> dict[str, Any]:
    headers = [(b"host", b"n1"), (b"accept", b"*/*")]
    if tokens:
        headers.append((b"authorization", f"Bearer {TOKEN}".encode()))
    return {"type": "http", "method": "GET", "path": "/v1/entries/1", "raw_path": b"/v1/entries/1",
            "query_string": b"consistency=local", "headers": headers, "client": ("127.0.0.1", 1),
            "server": ("127.0.0.1", 2), "scheme": "http", "root_path": "", "http_version": "1.1"}


async def measure(tokens: bool, requests: int) -> float:
    root = Path(tempfile.mkdtemp(prefix="raftlog-asgi-bench-"))
    (peer,) = free_ports(1)
    node = await Node.open(load_settings({"id": "n1", "peers": f"n1-127.0.0.1:{peer}", "data_dir": root / "n1",
                                          **({"tokens": f"reader:{TOKEN}"} if tokens else {})}))
    node.start()
    try:
        await node.raft.wait_for_leadership()
        await node.raft.append([b"x" * 100])
        request = scope(tokens)
        statuses: set[int] = set()

        async def receive() -> dict[str, Any]:
            return {"type": "http.request", "body": b"", "more_body": False}

        async def send(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                statuses.add(message["status"])

        started = time.process_time()
        for _ in range(requests):
            await node.public_asgi(dict(request), receive, send)
        spent = time.process_time() - started
        if statuses != {200}:
            raise RuntimeError(f"unexpected statuses {statuses}")
        return spent / requests * 1e6
    finally:
        await node.stop()
        shutil.rmtree(root)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--requests", type=int, default=20_000, help="GETs per round")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()
    runs: dict[bool, list[float]] = {False: [], True: []}
    for _ in range(args.rounds):
        for tokens in (False, True):
            runs[tokens].append(uvloop.run(measure(tokens, args.requests)))
    result = {"get_us": round(statistics.median(runs[False]), 2),
              "get_us_tokens": round(statistics.median(runs[True]), 2), "rounds": args.rounds,
              "requests": args.requests}
    if args.json:
        print(json.dumps(result))
        return
    print(f"client port ASGI stack, GET /v1/entries/1?consistency=local, CPU microseconds per request, "
          f"median of {args.rounds} rounds")
    for tokens, label in ((False, "no tokens"), (True, "tokens")):
        spread = ", ".join(f"{v:.1f}" for v in runs[tokens])
        print(f"{label:<12}{statistics.median(runs[tokens]):>8.2f}   ({spread})")


if __name__ == "__main__":
    main()
