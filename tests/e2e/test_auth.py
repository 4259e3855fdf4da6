"""Client tokens with roles and the cluster secret, on a real 3-node cluster: each route with no,
a wrong, and each role's token; peer calls without or with a wrong secret change nothing; refusals
are counted and logged without the credentials."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest

from raftlog.api.peer_codec import decode_message, encode_message, encode_push
from raftlog.app.launcher import SMALL_FILES, LocalCluster
from raftlog.raft.messages import Code, PushRequest, PushResponse, PushType, VoteRequest
from tests.e2e.peer_port import peer_call, replicate
from tests.processes import eventually, metric, serving

SECRET = "cluster-secret-0123456789abcdef"
TOKENS = {"reader": "reader-token-0123456789", "writer": "writer-token-0123456789",
          "admin": "admin-token-0123456789ab"}
WRONG = "not-a-token-0123456789abc"
ROLES = ("reader", "writer", "admin")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    root = tmp_path_factory.mktemp("auth")
    tokens_file = root / "tokens"
    tokens_file.write_text("# role:token\n" + "\n".join(f"{role}:{token}" for role, token in TOKENS.items()) + "\n")
    yield from serving(root, 3, settings={**SMALL_FILES, "cluster_secret": SECRET, "tokens_file": str(tokens_file)})


def bearer(token: str) -> dict[str, str]:
    return {"authorization": f"Bearer {token}"}


def leader_url(cluster: LocalCluster) -> str:
    return cluster.members[cluster.wait_leader()].client_url


# (method, path, body, the least role that may call it)
ROUTES = [
    ("GET", "/v1/entries/1", None, "reader"),
    ("GET", "/v1/entries?start=1&limit=2", None, "reader"),
    ("GET", "/v1/cluster", None, "reader"),
    ("POST", "/v1/entries", b"by-role", "writer"),
    ("POST", "/v1/entries/batch", b'{"entries": [{"body": "b1"}]}', "writer"),
    ("POST", "/v1/cluster/leader", b'{"target": "n9"}', "admin"),  # an unknown member: refused after auth
]


@pytest.mark.parametrize(("method", "path", "body", "least"), ROUTES)
def test_each_route_needs_a_token_of_its_role(cluster: LocalCluster, method: str, path: str, body: bytes | None,
                                              least: str) -> None:
    url = leader_url(cluster)
    headers = {"content-type": "application/json"} if body and body.startswith(b"{") else {}

    def call(extra: dict[str, str]) -> httpx.Response:
        return httpx.request(method, url + path, content=body, headers={**headers, **extra}, timeout=10)

    end = httpx.get(f"{url}/v1/cluster", headers=bearer(TOKENS["reader"])).json()["end_index"]
    for credentials in ({}, bearer(WRONG), {"authorization": f"Basic {TOKENS['admin']}"}):
        refused = call(credentials)
        assert refused.status_code == 401, (credentials, refused.text)
        assert refused.json()["error"]["code"] == "UNAUTHENTICATED"
        assert refused.headers["www-authenticate"] == 'Bearer realm="raftlog"'
    for role in ROLES:
        answer = call(bearer(TOKENS[role]))
        if ROLES.index(role) < ROLES.index(least):
            assert answer.status_code == 403, (role, answer.text)
            assert answer.json()["error"]["code"] == "PERMISSION_DENIED"
            assert least in answer.json()["error"]["message"]
        else:
            assert answer.status_code not in (401, 403), (role, answer.text)
            assert answer.status_code < 500, (role, answer.text)
    if least == "writer":  # the writer's and the admin's appends are there, no refused one
        page = httpx.get(f"{url}/v1/entries", params={"start": end + 1, "limit": 1000},
                         headers=bearer(TOKENS["reader"])).json()["entries"]
        posted = "by-role" if path == "/v1/entries" else "b1"
        assert [e["body"] for e in page].count(posted) == 2


def test_health_metrics_docs_and_the_admin_page_are_open(cluster: LocalCluster) -> None:
    url = leader_url(cluster)
    for path in ("/healthz", "/readyz", "/metrics", "/openapi.json", "/docs", "/"):
        assert httpx.get(url + path).status_code == 200, path


def test_refusals_are_counted_and_logged_without_the_token(cluster: LocalCluster) -> None:
    member = next(iter(cluster.members.values()))
    before = {reason: metric(member.client_url, "raftlog_auth_failures_total", port="client", reason=reason)
              for reason in ("missing", "invalid", "forbidden")}
    logged = len(member.log_path.read_text())
    secret_guess = "guess-0123456789-" + "z" * 12

    def refusals() -> None:
        assert httpx.get(f"{member.client_url}/v1/cluster").status_code == 401
        assert httpx.get(f"{member.client_url}/v1/cluster", headers=bearer(secret_guess)).status_code == 401
        assert httpx.post(f"{member.client_url}/v1/entries", content=b"x",
                          headers=bearer(TOKENS["reader"])).status_code == 403

    def logged_all() -> str | None:
        """The three kinds of refusal in the log (at most a line a second per reason: refused again
        until each has had its line, as an earlier test's refusal may have just taken it)."""
        text = member.log_path.read_text()[logged:]
        if all(f": {reason}" in text for reason in ("missing", "invalid", "forbidden")):
            return text
        refusals()
        return None

    refusals()
    for reason in ("missing", "invalid", "forbidden"):
        assert metric(member.client_url, "raftlog_auth_failures_total", port="client",
                      reason=reason) == before[reason] + 1
    assert metric(member.client_url, "raftlog_http_requests_total", method="POST", route="/v1/entries",
                  status="403") >= 1  # counted under its route
    log = eventually(logged_all, "refusals logged")
    assert "refused GET '/v1/cluster' from 127.0.0.1" in log and "refused POST '/v1/entries'" in log
    assert secret_guess not in log and TOKENS["reader"] not in log and SECRET not in log


def test_peer_calls_without_the_secret_change_nothing(cluster: LocalCluster) -> None:
    leader = cluster.wait_leader()
    follower = next(m for m in cluster.members if m != leader)
    url = cluster.members[follower].client_url
    status = httpx.get(f"{url}/v1/cluster", headers=bearer(TOKENS["reader"])).json()
    vote = encode_message(VoteRequest(status["group"], leader, status["term"] + 100, 10**6, 10**9))
    port = cluster.members[follower].peer_port
    with pytest.raises(grpc.RpcError) as missing:
        peer_call(port, "Vote", vote)
    with pytest.raises(grpc.RpcError) as wrong:
        peer_call(port, "Vote", vote, "wrong-secret-0123456789abc")
    assert missing.value.code() is grpc.StatusCode.UNAUTHENTICATED  # type: ignore[attr-defined]
    assert wrong.value.code() is grpc.StatusCode.PERMISSION_DENIED  # type: ignore[attr-defined]
    assert replicate(port, [b"\x00"], "wrong-secret-0123456789abc") == ([], grpc.StatusCode.PERMISSION_DENIED)
    assert metric(url, "raftlog_auth_failures_total", port="peer", reason="missing") >= 1
    assert metric(url, "raftlog_auth_failures_total", port="peer", reason="invalid") >= 1
    after = httpx.get(f"{url}/v1/cluster", headers=bearer(TOKENS["reader"])).json()
    assert after["term"] < status["term"] + 100  # the vote was not heard (an election under load may add one)
    # the members themselves carry the secret: what the leader commits reaches every member
    index = httpx.post(f"{leader_url(cluster)}/v1/entries", content=b"replicated",
                       headers=bearer(TOKENS["writer"])).json()["index"]
    for member in cluster.members.values():
        got = eventually(lambda m=member: httpx.get(f"{m.client_url}/v1/entries/{index}?consistency=local",
                                                    headers=bearer(TOKENS["reader"])).status_code == 200,
                         f"entry {index} on {member.id}")
        assert got
    assert SECRET not in Path(cluster.members[follower].log_path).read_text()


class SplitSecret(LocalCluster):
    """n3 starts with another cluster secret than n1 and n2."""

    def environment(self, member):  # type: ignore[no-untyped-def]
        env = super().environment(member)
        if member.id == "n3":
            env["RAFTLOG_CLUSTER_SECRET"] = "another-secret-0123456789"
        return env


def test_a_member_with_another_secret_gets_nothing(tmp_path: Path) -> None:
    cluster = SplitSecret(tmp_path, 3, settings={**SMALL_FILES, "cluster_secret": SECRET,
                                                 "tokens": f"writer:{TOKENS['writer']}"})
    cluster.start()
    try:
        leader = cluster.wait_leader(among=["n1", "n2"])
        assert leader != "n3"
        url = cluster.members[leader].client_url
        index = httpx.post(f"{url}/v1/entries", content=b"not for n3", headers=bearer(TOKENS["writer"]),
                           timeout=10).json()["index"]
        n3 = cluster.members["n3"].client_url
        eventually(lambda: metric(n3, "raftlog_auth_failures_total", port="peer", reason="invalid") > 0,
                   "n3 to refuse the leader's calls")
        answer = httpx.get(f"{n3}/v1/entries/{index}?consistency=local", headers=bearer(TOKENS["writer"]))
        assert answer.status_code == 404  # n3 holds nothing the others wrote
        assert httpx.get(f"{n3}/readyz").json()["leader"] is None
    finally:
        cluster.stop()


def test_malformed_pushes_to_a_live_follower_are_refused_with_a_code(cluster: LocalCluster) -> None:
    """Past the secret, hostile pushes still change nothing (tests/storage/test_follower_fuzz.py
    has the same property over random damage)."""
    for _attempt in range(3):  # again if an election (a busy machine) changes the term meanwhile
        leader = cluster.wait_leader()
        follower = next(m for m in cluster.members if m != leader)
        url = cluster.members[follower].client_url
        status = httpx.get(f"{url}/v1/cluster", headers=bearer(TOKENS["reader"])).json()
        codes = malformed_pushes(cluster, follower, leader, status)
        after = httpx.get(f"{url}/v1/cluster", headers=bearer(TOKENS["reader"])).json()
        if (after["term"], after["leader"]) == (status["term"], leader):
            break
    assert codes == [grpc.StatusCode.INVALID_ARGUMENT, Code.EXPIRED_TERM, Code.UNEXPECTED_ARGUMENT,
                     Code.UNEXPECTED_ARGUMENT, Code.UNEXPECTED_ARGUMENT]
    # garbage; an old leader's; a count of nothing; a count beyond the bytes; a cut header (impossible
    # numbers are refused before anything walks the entries)
    assert after["end_index"] <= status["end_index"] + 1  # nothing of the garbage (the leader's pushes go on)
    index = httpx.post(f"{leader_url(cluster)}/v1/entries", content=b"after garbage",
                       headers=bearer(TOKENS["writer"])).json()["index"]
    eventually(lambda: httpx.get(f"{url}/v1/entries/{index}?consistency=local",
                                 headers=bearer(TOKENS["reader"])).json().get("body") == "after garbage",
               "replication after the garbage")


def malformed_pushes(cluster: LocalCluster, follower: str, leader: str, status: dict[str, Any]) -> list[Any]:
    """What the follower answers to five malformed pushes: a push's code, or how the stream ended."""
    group, term, end = status["group"], status["term"], status["end_index"]
    garbage = b"\x00\x01" * 100
    port = cluster.members[follower].peer_port

    def push(term: int, first: int, count: int, data: bytes) -> Code:
        body = encode_push(PushRequest(group, leader, term, PushType.APPEND, -1, first, count, data,
                                       first - 1, term))
        answers, code = replicate(port, [body], SECRET)
        assert code is grpc.StatusCode.OK and len(answers) == 1, code
        return decode_message(PushResponse, answers[0]).code

    truncated = replicate(port, [b"\x0a\x10cut"], SECRET)
    assert truncated == ([], grpc.StatusCode.INVALID_ARGUMENT)
    return [truncated[1], push(term - 1, end + 1, 1, garbage), push(term, end + 1, 0, garbage),
            push(term, end + 1, 2**31 - 1, garbage), push(term, end + 1, 1, garbage[:30])]
