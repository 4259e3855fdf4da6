"""A single-member node in this process, its public app reached through httpx's ASGI transport."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from raftlog.api.auth import AuthFailures, Tokens
from raftlog.api.grpc_api import GrpcApi
from raftlog.app.launcher import SMALL_FILES, free_ports
from raftlog.app.node import Node
from raftlog.app.settings import load_settings
from raftlog.raft.cluster_version import LEVEL
from raftlog.raft.messages import Role


@pytest.fixture
async def node(tmp_path: Path) -> AsyncIterator[Node]:
    (peer,) = free_ports(1)
    settings = load_settings({"id": "n1", "peers": f"n1-127.0.0.1:{peer}", "data_dir": tmp_path / "n1",
                              **SMALL_FILES, "max_entry_bytes": 4096,
                              "range_bytes_max": 64 << 10})
    node = await Node.open(settings)
    node.start()
    try:
        await node.raft.wait_for_leadership()
        assert await node.raft.wait_committed(0, 10.0)  # its NOOP
        await node.raft.version.wait_for(LEVEL, 10.0)  # and its cluster version's entry: the tests' come after
        assert node.raft.role is Role.LEADER and node.raft.caught_up
        yield node
    finally:
        await node.stop()


@pytest.fixture
async def client(node: Node) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=node.public_asgi), base_url="http://127.0.0.1") as c:
        yield c


WRITER = "writer-token-0123456789"  # the gRPC port's writer (grpc_port)


@pytest.fixture
async def grpc_port(node: Node) -> AsyncIterator[str]:
    (port,) = free_ports(1)
    api = GrpcApi(node.service, node.handlers, Tokens.parse(f"writer:{WRITER}", "test", lines=False),
                  AuthFailures(node.metrics.auth_failures, "grpc"), f"127.0.0.1:{port}", budget=node.request_bytes)
    await api.start()
    try:
        yield f"127.0.0.1:{port}"
    finally:
        await api.stop(None)  # type: ignore[arg-type]
