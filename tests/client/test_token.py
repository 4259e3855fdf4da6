"""Where a Connection sends its token (issue 44, part G): to the URLs it was given and to members the
group lists on the same scheme, never to a member on another scheme (an https connection never moves to
http), and never along a redirect. Fast: the members are small fake servers on loopback, each of which
records the Authorization header of every request it gets."""

from __future__ import annotations

import asyncio
import json
import socket
import ssl
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from raftlog.client import Connection, RaftlogError
from tests.pki import Pki

TOKEN = "a-token-only-the-group-may-see"
Answer = tuple[int, dict[str, Any], dict[str, str]]  # status, JSON body, headers


class FakeMember(ThreadingHTTPServer):
    """A member (or an attacker's listener) on loopback: answers each path with `answer(path)` and
    records (method, path, Authorization header) of every request."""

    daemon_threads = True

    def __init__(self, context: ssl.SSLContext | None = None) -> None:
        super().__init__(("127.0.0.1", 0), Handler)
        if context is not None:
            self.socket = context.wrap_socket(self.socket, server_side=True)
        self.scheme = "https" if context is not None else "http"
        self.answer: Callable[[str], Answer] = lambda path: (200, {}, {})
        self.seen: list[tuple[str, str, str | None]] = []

    def url(self, host: str = "127.0.0.1") -> str:
        return f"{self.scheme}://{host}:{self.server_address[1]}"

    def tokens(self) -> list[str | None]:
        return [authorization for _, _, authorization in self.seen]


class Handler(BaseHTTPRequestHandler):
    server: FakeMember

    def _answer(self) -> None:
        self.server.seen.append((self.command, self.path, self.headers.get("authorization")))
        self.rfile.read(int(self.headers.get("content-length") or 0))
        status, body, headers = self.server.answer(self.path.split("?")[0])
        data = json.dumps(body).encode()
        self.send_response(status)
        for name, value in {"content-type": "application/json", "content-length": str(len(data)), **headers}.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = do_PUT = _answer

    def log_message(self, format: str, *args: Any) -> None:
        pass


@contextmanager
def serving(count: int, context: ssl.SSLContext | None = None) -> Iterator[list[FakeMember]]:
    """`count` fake members, stopped and their ports closed at the end."""
    servers: list[FakeMember] = []
    threads: list[threading.Thread] = []
    try:
        for _ in range(count):
            servers.append(FakeMember(context))
            threads.append(threading.Thread(target=servers[-1].serve_forever, daemon=True))
            threads[-1].start()
        yield servers
    finally:
        for server, thread in zip(servers, threads, strict=False):
            server.shutdown()
            server.server_close()
            thread.join()
        for server in servers[len(threads):]:
            server.server_close()


def stop(server: FakeMember) -> None:
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return Pki(tmp_path_factory.mktemp("pki"), "client-token")


def tls(pki: Pki) -> ssl.SSLContext:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(str(pki.cert), str(pki.key))
    return context


def not_leader(leader: str) -> Answer:
    return 503, {"error": {"code": "NOT_LEADER", "message": "no leader here", "leader": leader}}, {"retry-after": "0"}


def cluster(*members: tuple[str, str]) -> Answer:
    return 200, {"members": [{"id": id, "client_url": url} for id, url in members]}, {}


async def calls(connection: Connection, count: int) -> list[str]:
    """`count` calls through the connection, each one's error code (or "ok")."""
    outcomes = []
    for _ in range(count):
        try:
            await connection.call("GET", "/v1/status")
            outcomes.append("ok")
        except RaftlogError as exc:
            outcomes.append(exc.code)
    return outcomes


def test_an_https_connection_never_sends_its_token_to_an_http_member_the_group_lists(pki: Pki) -> None:
    """The audit's case: /v1/cluster names the leader at an attacker's http URL. The connection skips it
    (its calls go round the https members, a follower forwards) and sends the token to the https members
    only, one of them on another host name (same scheme is enough), verifying their certificates."""
    with serving(2, tls(pki)) as (member, other), serving(1) as (attacker,):
        listed = cluster(("n1", member.url()), ("n2", attacker.url()), ("n3", other.url("localhost")))
        for server in (member, other):
            server.answer = lambda path: listed if path == "/v1/cluster" else not_leader("n2")
        attacker.answer = lambda path: listed if path == "/v1/cluster" else (200, {"leader": "n2"}, {})

        async def run() -> tuple[list[str], str | None, list[str]]:
            async with Connection([member.url()], token=TOKEN, ca=str(pki.ca_file)) as connection:
                return await calls(connection, 6), connection.leader_url, connection.urls

        outcomes, leader_url, urls = asyncio.run(run())
        assert attacker.seen == []  # not even asked, let alone handed the token
        assert outcomes == ["NOT_LEADER"] * 6  # skipped, not an error of its own
        assert leader_url is None and urls == [member.url(), other.url("localhost")]
        assert member.tokens() and set(member.tokens()) == {f"Bearer {TOKEN}"}
        assert other.tokens() and set(other.tokens()) == {f"Bearer {TOKEN}"}  # https on another host


def test_when_only_members_on_another_scheme_are_left_the_error_says_why(pki: Pki) -> None:
    with serving(1, tls(pki)) as (member,), serving(1) as (attacker,):
        listed = cluster(("n1", member.url()), ("n2", attacker.url()))
        member.answer = lambda path: listed if path == "/v1/cluster" else not_leader("n2")

        async def run() -> RaftlogError:
            async with Connection([member.url()], token=TOKEN, ca=str(pki.ca_file)) as connection:
                assert await calls(connection, 1) == ["NOT_LEADER"]
                stop(member)  # the one https member is gone: only the http one is left
                with pytest.raises(RaftlogError) as failed:
                    await connection.retried("GET", "/v1/status", until_s=0.3)
                return failed.value

        error = asyncio.run(run())
        assert error.code == "NETWORK_ERROR"
        assert attacker.url() in error.message and "not https" in error.message
        assert attacker.seen == []


def test_a_connection_given_several_urls_uses_each_of_them(pki: Pki) -> None:
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    dead = f"https://127.0.0.1:{closed.getsockname()[1]}"
    closed.close()  # nothing listens there now
    with serving(2, tls(pki)) as (first, second):
        first.answer = lambda path: (503, {"error": {"code": "SERVER_BUSY", "message": "busy"}}, {})

        async def run() -> list[str]:
            async with Connection([dead, first.url(), second.url()], token=TOKEN, ca=str(pki.ca_file)) as connection:
                return await calls(connection, 3)

        assert asyncio.run(run()) == ["NETWORK_ERROR", "SERVER_BUSY", "ok"]
        assert first.tokens() == second.tokens() == [f"Bearer {TOKEN}"]


def test_a_redirect_is_not_followed_and_is_an_error(pki: Pki) -> None:
    with serving(1, tls(pki)) as (member,), serving(1) as (attacker,):
        member.answer = lambda path: (307, {}, {"location": f"{attacker.url()}{path}"})

        async def run() -> None:
            async with Connection([member.url()], token=TOKEN, ca=str(pki.ca_file)) as connection:
                with pytest.raises(RaftlogError) as refused:
                    await connection.call("POST", "/v1/entries", content=b"x")
                assert refused.value.status == 307

        asyncio.run(run())
        assert member.tokens() == [f"Bearer {TOKEN}"]
        assert attacker.seen == []


def test_a_connection_uses_one_scheme() -> None:
    with pytest.raises(ValueError, match="http and https"):
        Connection(["https://127.0.0.1:8001", "http://127.0.0.1:8002"])
    with pytest.raises(ValueError, match="http or https"):
        Connection(["ftp://127.0.0.1:8001"])


def test_an_http_connection_does_not_move_to_an_https_member_either(tmp_path: Path) -> None:
    """The rule is the same scheme, both ways: an http connection (no CA) skips an https member."""
    with serving(1) as (member,), serving(1, tls(Pki(tmp_path, "elsewhere"))) as (elsewhere,):
        listed = cluster(("n1", member.url()), ("n2", elsewhere.url()))
        member.answer = lambda path: listed if path == "/v1/cluster" else not_leader("n2")

        async def run() -> None:
            async with Connection([member.url()], token=TOKEN) as connection:
                assert await calls(connection, 3) == ["NOT_LEADER"] * 3
                assert connection.urls == [member.url()]

        asyncio.run(run())
        assert elsewhere.seen == []
