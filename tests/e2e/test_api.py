"""The public API on a real 3-node cluster: appends through any member, reads on every member,
each error case with its status and code, and nothing appended by a bad request.

No test assumes the leader stays the same across calls: an election on a busy machine moves it
(and its NOOP leaves a gap in the indices), so each check holds whoever leads."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from raftlog.api.bodies import BATCH_CONTENT_TYPE, encode_bodies
from raftlog.app.launcher import SMALL_FILES, LocalCluster
from raftlog.storage.codec import iter_entries
from tests.processes import eventually, metric, serving

LIMITS = {"max_entry_bytes": 1000, "max_request_bytes": 20_000, "max_batch_entries": 50}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    yield from serving(tmp_path_factory.mktemp("cluster"), 3, settings={**SMALL_FILES, **LIMITS})


def urls(cluster: LocalCluster) -> list[str]:
    return [m.client_url for m in cluster.members.values()]


def leader_and_follower(cluster: LocalCluster) -> tuple[str, str]:
    """A leader's and a follower's URLs, as they were: either may have changed role by the next call."""
    leader = cluster.wait_leader()
    follower = next(m for m in cluster.members if m != leader)
    return cluster.members[leader].client_url, cluster.members[follower].client_url


def end_and_committed(url: str) -> tuple[int, int]:
    """A member's log end and commit index, from one scrape of /metrics (which asks no other member)."""
    values = {sample.name: int(sample.value)
              for family in text_string_to_metric_families(httpx.get(f"{url}/metrics").text)
              for sample in family.samples if sample.name in ("raftlog_end_index", "raftlog_committed_index")}
    return values["raftlog_end_index"], values["raftlog_committed_index"]


def appends_nothing(url: str, request: Callable[[], httpx.Response]) -> httpx.Response:
    """`request`'s answer, checked to have added no entry to the member's log but NOOPs: a new leader's
    NOOP may arrive meanwhile, as an election on a busy machine can happen at any time."""
    before, _ = end_and_committed(url)
    response = request()

    def settled_end() -> int | None:
        end, committed = end_and_committed(url)
        return end if committed >= end else None

    end = eventually(lambda: (settled := settled_end()) is not None and (settled,), "the member to commit its log")[0]
    if end > before:
        added = httpx.get(f"{url}/v1/entries", params={"start": before + 1, "limit": end - before,
                                                        "consistency": "local"}).json()["entries"]
        assert [e["type"] for e in added] == ["noop"] * (end - before), f"{url} appended {added}"
    return response


def test_appends_through_leader_and_followers_are_read_back_on_every_member(cluster: LocalCluster) -> None:
    leader, follower = leader_and_follower(cluster)
    written: list[tuple[int, bytes]] = []  # in the order acknowledged
    for url in (leader, follower):
        raw = httpx.post(f"{url}/v1/entries", content=b"raw \x00\xff bytes",
                         headers={"content-type": "application/octet-stream"})
        assert raw.status_code == 201, raw.text
        written.append((raw.json()["index"], b"raw \x00\xff bytes"))
        text = httpx.post(f"{url}/v1/entries", json={"body": "caf\u00e9", "encoding": "utf-8"})
        assert text.status_code == 201
        written.append((text.json()["index"], "caf\u00e9".encode()))
        b64 = httpx.post(f"{url}/v1/entries", json={"body": base64.b64encode(b"\x01\x02").decode(),
                                                     "encoding": "base64"})
        written.append((b64.json()["index"], b"\x01\x02"))
        assert {raw.json()["leader"], text.json()["leader"], b64.json()["leader"]} <= set(cluster.members)

    batch = httpx.post(f"{follower}/v1/entries/batch", json={"entries": [{"body": "j1"}, {"body": "j2"}]})
    assert batch.status_code == 201
    answer = batch.json()
    assert answer["last_index"] == answer["first_index"] + 1 and len(answer["positions"]) == 2
    written += [(answer["first_index"], b"j1"), (answer["last_index"], b"j2")]
    binary = httpx.post(f"{follower}/v1/entries/batch", content=encode_bodies([b"b1", b"b2", b"b3"]),
                        headers={"content-type": BATCH_CONTENT_TYPE})
    assert binary.status_code == 201
    first = binary.json()["first_index"]
    written += [(first, b"b1"), (first + 1, b"b2"), (first + 2, b"b3")]

    indices = [index for index, _ in written]
    assert indices == sorted(set(indices))  # each acknowledged later than the last, at a higher index
    for url in urls(cluster):
        for index, body in written:
            raw = httpx.get(f"{url}/v1/entries/{index}", headers={"accept": "application/octet-stream"})
            assert raw.status_code == 200 and raw.content == body
            assert raw.headers["x-raftlog-index"] == str(index)
            entry = httpx.get(f"{url}/v1/entries/{index}").json()
            decoded = base64.b64decode(entry["body"]) if entry["encoding"] == "base64" else entry["body"].encode()
            assert decoded == body and entry["type"] == "normal"
    positions = {httpx.get(f"{url}/v1/entries/{first}").json()["pos"] for url in urls(cluster)}
    assert len(positions) == 1  # replicas are byte-identical


def test_range_reads_page_and_stream(cluster: LocalCluster) -> None:
    leader, follower = leader_and_follower(cluster)
    answer = httpx.post(f"{leader}/v1/entries/batch", json={"entries": [{"body": f"r{i}"} for i in range(30)]})
    first = answer.json()["first_index"]
    page = httpx.get(f"{follower}/v1/entries", params={"start": first, "limit": 10}).json()
    assert [e["body"] for e in page["entries"]] == [f"r{i}" for i in range(10)]
    assert page["next"] == first + 10 and page["committed_index"] >= first + 29
    with httpx.stream("GET", f"{follower}/v1/entries", params={"start": first, "limit": 30},
                      headers={"accept": "application/x-ndjson"}) as stream:
        assert stream.headers["content-type"].startswith("application/x-ndjson")
        lines = [json.loads(line) for line in stream.iter_lines() if line]
    assert [e["index"] for e in lines] == list(range(first, first + 30))
    stored = httpx.get(f"{follower}/v1/entries", params={"start": first, "limit": 30},
                       headers={"accept": "application/vnd.raftlog.entries"})
    assert stored.headers["content-type"] == "application/vnd.raftlog.entries"
    assert int(stored.headers["x-raftlog-committed-index"]) >= first + 29
    entries = iter_entries(stored.content)  # DLedger's format, byte for byte
    assert [(e.index, e.term, e.pos, bytes(e.body), e.body_crc) for e in entries] == [
        (e["index"], e["term"], e["pos"], e["body"].encode(), e["body_crc"]) for e in lines]
    past = httpx.get(f"{follower}/v1/entries", params={"start": first + 1000}).json()
    assert past["entries"] == [] and past["next"] == first + 1000


def test_a_local_read_answers_from_what_the_member_has(cluster: LocalCluster) -> None:
    _, follower = leader_and_follower(cluster)
    committed = httpx.get(f"{follower}/v1/cluster").json()["committed_index"]
    local = httpx.get(f"{follower}/v1/entries/{committed + 500}", params={"consistency": "local"})
    assert local.status_code == 404 and local.json()["error"]["code"] == "INDEX_OUT_OF_RANGE"


BAD_APPENDS = [
    ("malformed JSON", "/v1/entries", {"content": b"{not json", "headers": {"content-type": "application/json"}},
     400, "UNEXPECTED_ARGUMENT"),
    ("unknown encoding", "/v1/entries", {"json": {"body": "x", "encoding": "latin-1"}}, 400, "UNEXPECTED_ARGUMENT"),
    ("bad base64", "/v1/entries", {"json": {"body": "%%%", "encoding": "base64"}}, 400, "UNEXPECTED_ARGUMENT"),
    ("empty body", "/v1/entries", {"content": b""}, 400, "REQUEST_WITH_EMPTY_BODYS"),
    ("empty batch", "/v1/entries/batch", {"json": {"entries": []}}, 400, "REQUEST_WITH_EMPTY_BODYS"),
    ("empty entry in a batch", "/v1/entries/batch", {"json": {"entries": [{"body": "a"}, {"body": ""}]}},
     400, "REQUEST_WITH_EMPTY_BODYS"),
    ("cut binary batch", "/v1/entries/batch",
     {"content": encode_bodies([b"ok"])[:-1], "headers": {"content-type": BATCH_CONTENT_TYPE}},
     400, "UNEXPECTED_ARGUMENT"),
    ("batch as text", "/v1/entries/batch", {"content": b"a", "headers": {"content-type": "text/plain"}},
     415, "UNEXPECTED_ARGUMENT"),
    ("entry over max_entry_bytes", "/v1/entries", {"content": b"x" * 1001}, 413, "UNEXPECTED_ARGUMENT"),
    ("batch with an entry over max_entry_bytes", "/v1/entries/batch",
     {"json": {"entries": [{"body": "a"}, {"body": "x" * 1001}]}}, 413, "UNEXPECTED_ARGUMENT"),
    ("batch over max_batch_entries", "/v1/entries/batch", {"json": {"entries": [{"body": "a"}] * 51}},
     413, "UNEXPECTED_ARGUMENT"),
    ("request over max_request_bytes", "/v1/entries/batch",
     {"content": encode_bodies([b"y" * 900] * 30), "headers": {"content-type": BATCH_CONTENT_TYPE}},
     413, "UNEXPECTED_ARGUMENT"),
]


@pytest.mark.parametrize(("case", "path", "request_args", "status", "code"), BAD_APPENDS,
                         ids=[case[0] for case in BAD_APPENDS])
def test_a_bad_append_gets_its_error_and_appends_nothing(cluster: LocalCluster, case: str, path: str,
                                                         request_args: dict, status: int, code: str) -> None:
    for url in leader_and_follower(cluster):
        response = appends_nothing(url, lambda url=url: httpx.post(f"{url}{path}", **request_args))
        assert response.status_code == status, response.text
        error = response.json()["error"]
        assert error["code"] == code and error["message"]


BAD_READS = [
    ("/v1/entries/999999", 404, "INDEX_OUT_OF_RANGE"),
    ("/v1/entries/-1", 400, "UNEXPECTED_ARGUMENT"),
    ("/v1/entries/abc", 400, "UNEXPECTED_ARGUMENT"),
    ("/v1/entries?start=0&limit=0", 400, "UNEXPECTED_ARGUMENT"),
    ("/v1/entries/1?consistency=eventual", 400, "UNEXPECTED_ARGUMENT"),
    ("/v1/nowhere", 404, "UNSUPPORTED"),
]


@pytest.mark.parametrize(("path", "status", "code"), BAD_READS, ids=[case[0] for case in BAD_READS])
def test_a_bad_read_gets_its_error(cluster: LocalCluster, path: str, status: int, code: str) -> None:
    for url in urls(cluster):
        response = httpx.get(f"{url}{path}")
        assert response.status_code == status and response.json()["error"]["code"] == code


def test_cluster_status_health_and_metrics(cluster: LocalCluster) -> None:
    for member in cluster.members.values():  # counted by the member that answered, whoever leads
        assert httpx.post(f"{member.client_url}/v1/entries", content=b"counted").status_code == 201

    def agreed() -> tuple[str, dict[str, dict[str, Any]]] | None:
        """Every member's status, taken while one leader held (the leader as they all name it)."""
        leader = cluster.wait_leader()
        statuses = {m.id: httpx.get(f"{m.client_url}/v1/cluster").json() for m in cluster.members.values()}
        if {s["leader"] for s in statuses.values()} != {leader} or cluster.wait_leader() != leader:
            return None
        return leader, statuses

    leader, statuses = eventually(agreed, "every member's status under one leader")
    for member in cluster.members.values():
        status = statuses[member.id]
        assert status["self"] == member.id and status["leader"] == leader
        assert status["role"] == ("leader" if member.id == leader else "follower")
        roles = {m["id"]: m["role"] for m in status["members"]}
        assert roles == {m: ("leader" if m == leader else "follower") for m in cluster.members}
        assert all(m["reachable"] and m["voter"] and m["lag"] is not None for m in status["members"])
        assert {m["client_url"] for m in status["members"]} == set(urls(cluster))
        assert status["flush_mode"] == "sync" and 0 < status["disk"]["usage_ratio"] < 1
        assert httpx.get(f"{member.client_url}/healthz").status_code == 200
        assert httpx.get(f"{member.client_url}/readyz").status_code == 200
    for member in cluster.members.values():
        metrics = httpx.get(f"{member.client_url}/metrics").text
        assert 'raftlog_append_requests_total{code="SUCCESS"}' in metrics
        assert "raftlog_follower_lag" in metrics
    leading = eventually(lambda: next((m for m in cluster.members.values()
                                       if metric(m.client_url, "raftlog_role", role="leader") == 1), None),
                         "a member whose metrics say it leads")
    assert "raftlog_push_latency_seconds_bucket" in httpx.get(f"{leading.client_url}/metrics").text


def test_a_client_generated_from_openapi_yaml_appends_reads_and_gets_status(
        cluster: LocalCluster, tmp_path: Path) -> None:
    from tests.e2e.sdk import generate_client

    sdk = generate_client(tmp_path)
    client = sdk.client.Client(base_url=cluster.members["n2"].client_url)
    appended = sdk.api.entries.append_entry.sync(client=client, body=sdk.models.NewEntry(body="from the sdk"))
    assert isinstance(appended, sdk.models.Appended)
    base64_entry = sdk.models.NewEntry(body="czI=", encoding=sdk.models.NewEntryEncoding.BASE64)
    batch = sdk.api.entries.append_batch.sync(client=client, body=sdk.models.NewBatch(
        entries=[sdk.models.NewEntry(body="s1"), base64_entry]))
    assert isinstance(batch, sdk.models.BatchAppended) and batch.last_index == batch.first_index + 1
    binary = sdk.api.entries.append_batch.sync(client=client, body=sdk.types.File(
        payload=encode_bodies([b"f1", b"f2"])))
    assert isinstance(binary, sdk.models.BatchAppended)
    entry = sdk.api.entries.get_entry.sync(appended.index, client=client)
    assert entry.body == "from the sdk" and entry.index == appended.index
    page = sdk.api.entries.read_entries.sync(client=client, start=batch.first_index, limit=2)
    assert [e.body for e in page.entries] == ["s1", "s2"]
    missing = sdk.api.entries.get_entry.sync(10**9, client=client)
    assert isinstance(missing, sdk.models.ErrorBody) and missing.error.code == "INDEX_OUT_OF_RANGE"
    status = sdk.api.cluster.cluster.sync(client=client)
    assert status.self_ == "n2" and len(status.members) == 3 and status.leader in cluster.members
