"""Hot requests answered below ASGI (api.fast_path.BelowAsgi, from app.client_protocol) give the
bytes the ASGI stack gives: two members in the same state, one serving with the path below ASGI and
one without, get the same requests, good and bad, over real sockets through uvicorn, and answer
each with the same status line, headers (but Date) and body, and count it the same way."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import uvicorn

from raftlog.api.bodies import BATCH_CONTENT_TYPE, encode_bodies
from raftlog.api.errors import ApiError
from raftlog.api.request_checks import Refusal, RequestHead
from raftlog.app.client_protocol import guarded_protocol
from raftlog.app.launcher import SMALL_FILES, free_ports
from raftlog.app.node import Node
from raftlog.app.server import bind
from raftlog.app.settings import load_settings
from raftlog.raft.cluster_version import LEVEL
from raftlog.raft.messages import Code

WRITER = "writer-token-0123456789"
READER = "reader-token-0123456789"
LIMITS = {"max_entry_bytes": 1000, "max_request_bytes": 20_000, "max_batch_entries": 50}


class Member:
    """A one-member group served by uvicorn on loopback with the client port's protocol; `below`
    says whether hot requests may be answered below ASGI, `taken` counts those that were."""

    def __init__(self, node: Node, port: int, below: bool) -> None:
        self.node, self.port, self.below, self.taken = node, port, below, 0

    def take(self, scope: dict[str, Any]) -> Any:
        if not self.below:
            return None
        answering = self.node.below_asgi.take(scope)
        self.taken += answering is not None
        return answering

    async def ask(self, request: bytes) -> bytes:
        """The raw answer (an interim 100 Continue included) to one request on a new connection."""
        reader, writer = await asyncio.open_connection("127.0.0.1", self.port)
        try:
            writer.write(request.replace(b"{host}", f"127.0.0.1:{self.port}".encode()))
            answer = b""
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                answer += head
                if not head.startswith(b"HTTP/1.1 100 "):
                    break
            length = next(int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                          if line.lower().startswith(b"content-length:"))
            return answer + await reader.readexactly(length)
        finally:
            writer.close()

    def requests_counted(self) -> dict[tuple[str, ...], float]:
        return {tuple(s.labels.values()): s.value for family in self.node.metrics.registry.collect()
                if family.name == "raftlog_http_requests" for s in family.samples if s.name.endswith("_total")}


@contextlib.asynccontextmanager
async def member(root: Path, below: bool) -> AsyncIterator[Member]:
    peer, client = free_ports(2)
    node = await Node.open(load_settings({"id": "n1", "peers": f"n1-127.0.0.1:{peer}", "data_dir": root,
                                          "client_port": client, **SMALL_FILES, **LIMITS,
                                          "tokens": f"writer:{WRITER},reader:{READER}"}))
    served = Member(node, client, below)
    limits = node.service.limits
    sock = bind("127.0.0.1", client, "client")
    server = uvicorn.Server(uvicorn.Config(
        node.public_asgi, lifespan="off", log_level="warning", server_header=False,
        http=guarded_protocol(limits.request_read_timeout_ms / 1000, limits.max_header_bytes,
                              limits.max_connections, limits.follow_stall_ms / 1000, served.take)))
    node.start()
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        await node.raft.wait_for_leadership()
        assert await node.raft.wait_committed(0, 10.0)
        await node.raft.version.wait_for(LEVEL, 10.0)  # its entry comes before the requests' (their indices)
        while not server.started:
            await asyncio.sleep(0.01)
        yield served
    finally:
        server.should_exit = True
        await task
        sock.close()
        await node.stop()


def request(method: str, path: str, body: bytes = b"", token: str | None = WRITER, **headers: str) -> bytes:
    lines = [f"{method} {path} HTTP/1.1", "host: {host}"]
    if token is not None:
        lines.append(f"authorization: Bearer {token}")
    if "transfer_encoding" not in headers:
        headers.setdefault("content-length", str(len(body)))
    lines += [f"{name.replace('_', '-')}: {value}" for name, value in headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


def chunked(body: bytes, size: int = 7) -> bytes:
    parts = [body[at:at + size] for at in range(0, len(body), size)]
    return b"".join(b"%x\r\n%s\r\n" % (len(part), part) for part in parts) + b"0\r\n\r\n"


JSON = "application/json"
REQUESTS: list[tuple[str, bytes, bool]] = [  # what, the request, whether it is answered below ASGI
    ("a raw append", request("POST", "/v1/entries", b"hello"), True),
    ("a JSON append", request("POST", "/v1/entries", b'{"body": "\\u00fc"}', content_type=JSON), True),
    ("a base64 append", request("POST", "/v1/entries", b'{"body": "AP8=", "encoding": "base64"}',
                                content_type=JSON), True),
    ("malformed JSON", request("POST", "/v1/entries", b'{"body": ', content_type=JSON), True),
    ("an empty body", request("POST", "/v1/entries"), True),
    ("a binary batch", request("POST", "/v1/entries/batch", encode_bodies([b"a", b"", b"c" * 900]),
                               content_type=BATCH_CONTENT_TYPE), True),
    ("a JSON batch", request("POST", "/v1/entries/batch", json.dumps({"entries": [{"body": "x"}] * 3}).encode(),
                             content_type=JSON), True),
    ("a batch of another type", request("POST", "/v1/entries/batch", b"x", content_type="text/plain"), True),
    ("a batch of too many", request("POST", "/v1/entries/batch", encode_bodies([b"x"] * 51),
                                    content_type=BATCH_CONTENT_TYPE), True),
    ("a cut binary batch", request("POST", "/v1/entries/batch", encode_bodies([b"abc"])[:-1],
                                   content_type=BATCH_CONTENT_TYPE), True),
    ("an entry over max_entry_bytes", request("POST", "/v1/entries", b"x" * 1001), True),
    ("a get", request("GET", "/v1/entries/1"), True),
    ("a local get of raw bytes", request("GET", "/v1/entries/3?consistency=local", accept="application/octet-stream"),
     True),
    ("a get by a reader", request("GET", "/v1/entries/2", token=READER), True),
    ("a get past the end", request("GET", "/v1/entries/999"), True),
    ("a get of index 0", request("GET", "/v1/entries/0"), True),
    ("a chunked append", request("POST", "/v1/entries", chunked(b"in pieces" * 5), transfer_encoding="chunked"), True),
    ("an append that expects 100 Continue", request("POST", "/v1/entries", b"go on", expect="100-continue"), True),
    ("a page of this member's own origin", request("POST", "/v1/entries", b"own", origin="http://{host}"), True),
    ("a chunked body over max_request_bytes",
     request("POST", "/v1/entries", chunked(b"y" * 20_001, 4096), transfer_encoding="chunked"), True),
    # refused by the layers above, or not hot: the ASGI stack answers both members
    ("no token", request("POST", "/v1/entries", b"x", token=None), False),
    ("an unknown token", request("POST", "/v1/entries", b"x", token="not-a-token-0123456789"), False),
    ("a reader's append", request("POST", "/v1/entries", b"x", token=READER), False),
    ("a Host not allowed", request("POST", "/v1/entries", b"x").replace(b"host: {host}", b"host: evil.example"),
     False),
    ("a cross-site page", request("POST", "/v1/entries", b"x", origin="http://evil.example"), False),
    ("a Content-Length over max_request_bytes", request("POST", "/v1/entries", b"x", content_length="20001"), False),
    ("a Content-Length not a number", request("POST", "/v1/entries", b"", content_length="12a"), False),
    ("behind a proxy", request("POST", "/v1/entries", b"proxied", x_forwarded_proto="https"), False),
    ("another parameter", request("GET", "/v1/entries/1?consistency=local&x=1"), False),
    ("a negative index", request("GET", "/v1/entries/-1"), False),
    ("a health check", request("GET", "/healthz", token=None), False),
]


@pytest.fixture
async def members(tmp_path: Path) -> AsyncIterator[tuple[Member, Member]]:
    async with member(tmp_path / "below", below=True) as below, member(tmp_path / "asgi", below=False) as asgi:
        yield below, asgi


def without_date(answer: bytes) -> bytes:
    """The answer with its date lines dropped, in every head (a 100 Continue comes before the answer's own)."""
    return re.sub(rb"(?im)^date: [^\r\n]*\r\n", b"", answer)


async def test_answers_below_asgi_are_the_asgi_stacks_byte_for_byte(members: tuple[Member, Member]) -> None:
    below, asgi = members
    for what, raw, hot in REQUESTS:
        taken = below.taken
        ours, theirs = await below.ask(raw), await asgi.ask(raw)
        assert without_date(ours) == without_date(theirs), what
        assert below.taken == taken + hot, f"{what}: {'not ' if hot else ''}answered below ASGI"
    assert asgi.taken == 0
    assert below.requests_counted() == asgi.requests_counted()
    assert below.requests_counted()[("/v1/entries", "POST", "201")] >= 5
    assert below.node.below_asgi.limits.inflight_requests == 0 and below.node.request_bytes.held == 0  # given back


async def test_a_check_added_to_the_list_refuses_on_both_ways_in(members: tuple[Member, Member]) -> None:
    """The ASGI stack and the path below it iterate one list of request checks (api.request_checks):
    a check appended to it refuses a hot request on both, which answer alike."""
    def no_tea(scope: dict[str, Any], head: RequestHead) -> Refusal | None:
        if any(name == b"x-tea" for name, _ in scope["headers"]):
            return Refusal(ApiError(Code.UNEXPECTED_ARGUMENT, "no tea here", status=418))
        return None

    for served in members:
        served.node.below_asgi.checks.checks.append(no_tea)
    below, asgi = members
    raw = request("POST", "/v1/entries", b"x", x_tea="earl grey")
    ours, theirs = await below.ask(raw), await asgi.ask(raw)
    assert ours.startswith(b"HTTP/1.1 418 ") and b"no tea here" in ours
    assert without_date(ours) == without_date(theirs)
    assert below.taken == 0  # the path below ASGI did not answer it
    assert (await below.ask(request("POST", "/v1/entries", b"x"))).startswith(b"HTTP/1.1 201 ")
    assert below.taken == 1  # ... and still answers the others
