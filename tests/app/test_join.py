"""`raftlog serve --join`: the member asked is checked against the group's own CA, its answer is read
within a bound, and a token about to cross a network in cleartext is said so. A stand-in member
(uvicorn on loopback, with TLS from a throwaway CA) answers the join."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import uvicorn

from raftlog.app import join
from raftlog.app.join import ANSWER_BYTES_MAX, join_group
from raftlog.app.launcher import free_ports
from raftlog.app.server import bind
from raftlog.app.settings import SettingsError, load_settings
from raftlog.raft.config import Peer
from raftlog.raft.membership import Configuration
from tests.pki import Pki

TOKEN = "admin-token-for-the-join"


class StandIn:
    """Answers POST /v1/cluster/members with `body` (the configuration holding n4, unless told)."""

    def __init__(self, body: bytes) -> None:
        self.body = body
        self.tokens: list[bytes | None] = []

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        self.tokens.append(dict(scope["headers"]).get(b"authorization"))
        await send({"type": "http.response.start", "status": 201, "headers": []})
        await send({"type": "http.response.body", "body": self.body})


def configuration() -> bytes:
    members = (Peer("n1", "127.0.0.1:9001"), Peer("n4", "127.0.0.1:9004", learner=True))
    return Configuration(members, index=7).encode_with_index()


@contextlib.asynccontextmanager
async def standing_in(app: StandIn, pki: Pki | None) -> AsyncIterator[str]:
    (port,) = free_ports(1)
    sock = bind("127.0.0.1", port, "client")
    tls = {} if pki is None else {"ssl_certfile": str(pki.cert), "ssl_keyfile": str(pki.key)}
    server = uvicorn.Server(uvicorn.Config(app, lifespan="off", log_level="warning", **tls))
    task = asyncio.create_task(server.serve(sockets=[sock]))
    while not server.started:
        await asyncio.sleep(0.01)
    try:
        yield f"{'https' if pki else 'http'}://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await task
        sock.close()


def joining(tmp_path: Path, url: str, **values: Any) -> Any:
    return load_settings({"id": "n4", "peers": "n4-127.0.0.1:9004", "data_dir": tmp_path / "n4", "join": url,
                          "join_token": TOKEN, **values})


@pytest.fixture(autouse=True)
def short_join(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(join, "JOIN_TIMEOUT_S", 1.0)  # a refused handshake is asked again until then
    monkeypatch.setattr(join, "RETRY_S", 0.2)


async def test_a_join_over_https_trusts_the_groups_own_ca_not_only_the_systems(tmp_path: Path) -> None:
    pki = Pki(tmp_path / "pki", "group")
    app = StandIn(configuration())
    async with standing_in(app, pki) as url:
        with pytest.raises(SettingsError, match="CERTIFICATE_VERIFY_FAILED"):  # the system's CAs do not know it
            await join_group(joining(tmp_path, url))
        peer_tls = {"peer_tls_ca": pki.ca_file, "peer_tls_cert": pki.cert, "peer_tls_key": pki.key}
        for ca in ({"join_ca": pki.ca_file}, peer_tls):
            joined = await join_group(joining(tmp_path, url, **ca))
            assert joined.index == 7 and joined.member("n4") is not None
    assert app.tokens[-1] == f"Bearer {TOKEN}".encode()


async def test_an_answer_beyond_the_bound_is_not_read_into_memory(tmp_path: Path) -> None:
    async with standing_in(StandIn(b"x" * (ANSWER_BYTES_MAX * 8)), None) as url:
        with pytest.raises(SettingsError, match=f"over {ANSWER_BYTES_MAX} bytes"):
            await join_group(joining(tmp_path, url))


async def test_a_token_about_to_go_beyond_loopback_in_cleartext_is_said_so(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, "raftlog.join"), pytest.raises(SettingsError):
        await join_group(joining(tmp_path, "http://192.0.2.1:8001"))  # TEST-NET-1: nobody answers
    assert any("join token goes to 192.0.2.1 in cleartext" in r.getMessage() for r in caplog.records)
    caplog.clear()
    async with standing_in(StandIn(configuration()), None) as url:  # loopback: nothing to say
        with caplog.at_level(logging.WARNING, "raftlog.join"):
            await join_group(joining(tmp_path, url))
    assert not any("cleartext" in r.getMessage() for r in caplog.records)
