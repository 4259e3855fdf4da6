"""What a hostile web page can make a browser do to a tokenless member on loopback: nothing.

A page on another site can send a POST without a CORS preflight (a form, or fetch with a text/plain
body) and can point a name of its own at 127.0.0.1 (DNS rebinding, etcd's CVE-2018-1098). Each test
sends what such a browser would send and checks that nothing was done."""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from raftlog.api import errors
from raftlog.api.errors import ApiError
from raftlog.api.log_throttle import LogThrottle
from raftlog.api.service import LogService
from raftlog.app.launcher import SMALL_FILES, free_ports
from raftlog.app.node import Node
from raftlog.app.settings import load_settings
from raftlog.raft.config import Peer

EVIL = "http://evil.example"
NEW_MEMBER = {"id": "n9", "peer_address": "127.0.0.1:9", "client_url": "http://127.0.0.1:9"}
AS_TEXT = {"content-type": "text/plain"}  # what a page may send cross-site without asking first


def cross_site(**headers: str) -> dict[str, str]:
    return {"origin": EVIL, **AS_TEXT, **headers}


async def test_a_page_of_another_origin_changes_nothing(node: Node, client: httpx.AsyncClient) -> None:
    before = (await client.get("/v1/cluster/members")).json()
    end = node.raft.store.end_index
    for method, path, body in [("POST", "/v1/cluster/members", json.dumps(NEW_MEMBER)),
                               ("POST", "/v1/entries", "written by a page"),
                               ("POST", "/v1/entries/batch", '{"entries": [{"body": "a"}]}'),
                               ("POST", "/v1/cluster/leader", '{"target": "n1"}'),
                               ("POST", "/v1/cluster/members/n1/promote", ""),
                               ("DELETE", "/v1/cluster/members/n1", "")]:
        answer = await client.request(method, path, content=body, headers=cross_site())
        assert answer.status_code == 403, (method, path, answer.text)
        assert answer.json()["error"]["code"] == "ORIGIN_NOT_ALLOWED"
    assert (await client.get("/v1/cluster/members")).json() == before
    assert node.raft.store.end_index == end
    metrics = (await client.get("/metrics")).text
    assert 'raftlog_auth_failures_total{port="client",reason="origin"} 6.0' in metrics


async def test_the_members_own_pages_and_tools_without_origin_still_write(client: httpx.AsyncClient) -> None:
    own = await client.post("/v1/entries", content=b"from the admin page", headers={"origin": "http://127.0.0.1"})
    assert own.status_code == 201
    assert (await client.post("/v1/entries", content=b"from curl")).status_code == 201
    read = await client.get("/v1/entries/1", headers={"origin": EVIL})  # reads: the browser keeps the answer
    assert read.status_code == 200                                       # from the page (no CORS headers)
    assert "access-control-allow-origin" not in read.headers


async def test_a_rebound_name_is_refused_on_every_route_but_the_probes(node: Node, client: httpx.AsyncClient) -> None:
    rebound = {"host": "evil.example"}
    end = node.raft.store.end_index
    for method, path in [("GET", "/v1/cluster"), ("GET", "/v1/entries/0"), ("GET", "/v1/entries"),
                         ("POST", "/v1/entries"), ("GET", "/"), ("GET", "/metrics")]:
        answer = await client.request(method, path, content=b"x" if method == "POST" else None, headers=rebound)
        assert answer.status_code == 421, (method, path)
        assert answer.json()["error"]["code"] == "HOST_NOT_ALLOWED"
    assert node.raft.store.end_index == end
    for probe in ("/healthz", "/readyz"):
        assert (await client.get(probe, headers=rebound)).status_code == 200
    for name in ("localhost:8001", "[::1]:8001", "127.0.0.1", "LOCALHOST"):
        assert (await client.get("/v1/cluster", headers={"host": name})).status_code == 200, name


@pytest.fixture
async def named_node(tmp_path: Path) -> AsyncIterator[Node]:
    """A member that answers to one more name, and takes writes from one more origin."""
    (peer,) = free_ports(1)
    settings = load_settings({"id": "n1", "peers": f"n1-127.0.0.1:{peer}", "data_dir": tmp_path / "n1",
                              **SMALL_FILES, "allowed_hosts": "logs.internal",
                              "allowed_origins": "https://ops.example"})
    node = await Node.open(settings)
    node.start()
    try:
        await node.raft.wait_for_leadership()
        yield node
    finally:
        await node.stop()


async def test_allowed_hosts_and_origins_add_names(named_node: Node) -> None:
    transport = httpx.ASGITransport(app=named_node.public_asgi)
    async with httpx.AsyncClient(transport=transport, base_url="http://logs.internal:8001") as client:
        assert (await client.get("/v1/cluster")).status_code == 200
        ops = await client.post("/v1/entries", content=b"x", headers={"origin": "https://ops.example"})
        assert ops.status_code == 201
        assert (await client.post("/v1/entries", content=b"x", headers={"origin": EVIL})).status_code == 403
        assert (await client.get("/v1/cluster", headers={"host": "other.internal"})).status_code == 421


async def test_json_routes_take_only_json_and_refuse_before_reading(client: httpx.AsyncClient) -> None:
    for path, body in [("/v1/cluster/members", json.dumps(NEW_MEMBER)), ("/v1/cluster/leader", "not even json")]:
        answer = await client.post(path, content=body, headers=AS_TEXT)
        assert answer.status_code == 415, answer.text
        assert answer.json()["error"] == {"code": "UNEXPECTED_ARGUMENT", "message": f"{path} takes application/json",
                                          "leader": None}
    assert [m["id"] for m in (await client.get("/v1/cluster/members")).json()["members"]] == ["n1"]


def hashes(policy: str, directive: str) -> set[str]:
    part = next(p for p in policy.split(";") if p.strip().startswith(directive + " "))
    return set(re.findall(r"'sha256-([^']+)'", part))


def digest(text: str) -> str:
    return base64.b64encode(hashlib.sha256(text.encode()).digest()).decode()


async def test_answers_cannot_be_framed_and_pages_run_only_their_own_scripts(client: httpx.AsyncClient) -> None:
    for path in ("/v1/cluster", "/v1/entries/0", "/nowhere"):
        answer = await client.get(path)
        assert answer.headers["x-frame-options"] == "DENY"
        assert answer.headers["x-content-type-options"] == "nosniff"
        assert answer.headers["content-security-policy"] == "default-src 'none'; frame-ancestors 'none'"
    for path in ("/", "/docs"):
        page = await client.get(path)
        policy = page.headers["content-security-policy"]
        assert "frame-ancestors 'none'" in policy and page.headers["x-frame-options"] == "DENY"
        scripts = re.findall(r"<script>(.*?)</script>", page.text, re.DOTALL)
        assert scripts and hashes(policy, "script-src") == {digest(s) for s in scripts}
        assert "'unsafe-inline'" not in policy and "connect-src 'self'" in policy


async def test_an_internal_error_answers_an_incident_id_and_logs_the_exception(
        node: Node, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    async def broken(*_args: Any) -> Any:
        raise RuntimeError("cannot open /var/lib/raftlog/secret-file")

    monkeypatch.setattr(node.service, "cluster_status", broken)
    monkeypatch.setattr(node.service, "get", broken)
    transport = httpx.ASGITransport(app=node.public_asgi, raise_app_exceptions=False)  # as uvicorn: it answers,
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as served:  # then logs
        for path in ("/v1/cluster", "/v1/entries/0"):  # a FastAPI route, and one of the fast path
            caplog.clear()
            monkeypatch.setattr(errors, "INCIDENTS", LogThrottle())  # the first of its kind this second: logged
            with caplog.at_level(logging.ERROR, "raftlog.api"):
                answer = await served.get(path)
            error = answer.json()["error"]
            assert (answer.status_code, error["code"]) == (500, "INTERNAL_ERROR")
            assert "secret-file" not in answer.text and "RuntimeError" not in answer.text
            incident = re.search(r"incident ([0-9a-f]{12})", error["message"])
            assert incident is not None
            logged = [r for r in caplog.records if incident.group(1) in r.getMessage()]
            assert len(logged) == 1 and "secret-file" in str(logged[0].exc_info[1])  # type: ignore[index]


async def test_a_member_beyond_loopback_needs_a_cluster_secret(node: Node) -> None:
    service: LogService = node.service
    assert not service.remote_members  # the fixture's group has no secret
    remote = Peer("n9", "10.0.0.9:9001", True, "http://10.0.0.9:8001", None)
    with pytest.raises(ApiError) as refused:
        await service.change_membership("add", "n9", remote)
    assert (refused.value.status, refused.value.code.name) == (409, "SECRET_REQUIRED")
    assert [m.id for m in node.raft.configuration.members] == ["n1"]
