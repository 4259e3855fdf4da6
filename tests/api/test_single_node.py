"""Error cases that need a hand on the node's insides: cleaned entries, a full disk, the contract."""

from __future__ import annotations

from pathlib import Path

import httpx
import yaml

from raftlog.api.fast_path import EntryFastPath
from raftlog.app.node import Node

ROOT = Path(__file__).resolve().parents[2]


async def test_openapi_yaml_is_what_the_app_serves(client: httpx.AsyncClient) -> None:
    served = (await client.get("/openapi.json")).json()
    committed = yaml.safe_load((ROOT / "openapi.yaml").read_text())
    assert committed == served, "openapi.yaml is stale: run `make openapi` and commit it"


async def test_a_cleaned_entry_answers_410(node: Node, client: httpx.AsyncClient) -> None:
    batch = {"entries": [{"body": "x" * 4000}] * 25}
    for _ in range(30):  # ~1 MiB data files: 30 x 100 KiB fills more than two
        assert (await client.post("/v1/entries/batch", json=batch)).status_code == 201
    head = node.store.head_files()
    assert head, "the test needs a data file that cleaning may delete"
    await node.store.delete_head_files(1)
    begin = node.store.begin_index
    cleaned = await client.get("/v1/entries/0")
    assert cleaned.status_code == 410 and cleaned.json()["error"]["code"] == "INDEX_LESS_THAN_LOCAL_BEGIN"
    ranged = await client.get("/v1/entries", params={"start": 0})
    assert ranged.status_code == 410
    streamed = await client.get("/v1/entries", params={"start": 0}, headers={"accept": "application/x-ndjson"})
    assert streamed.status_code == 410 and streamed.json()["error"]["code"] == "INDEX_LESS_THAN_LOCAL_BEGIN"
    stored = await client.get("/v1/entries", params={"start": 0}, headers={"accept": "application/vnd.raftlog.entries"})
    assert stored.status_code == 410 and stored.json()["error"]["code"] == "INDEX_LESS_THAN_LOCAL_BEGIN"
    assert (await client.get(f"/v1/entries/{begin}")).status_code == 200
    by_pos = await client.get("/v1/entries", params={"pos": 0})  # the first entry's position, now cleaned
    assert by_pos.status_code == 410 and by_pos.json()["error"]["code"] == "INDEX_LESS_THAN_LOCAL_BEGIN"
    first_kept = await client.get("/v1/entries", params={"pos": node.store.pos_at(begin), "limit": 1})
    assert [e["index"] for e in first_kept.json()["entries"]] == [begin]


async def test_a_full_disk_answers_507_and_appends_nothing(node: Node, client: httpx.AsyncClient) -> None:
    end = node.store.end_index
    node.store.disk_full = True  # what the cleaning service sets above disk_full_ratio
    response = await client.post("/v1/entries", content=b"no room")
    assert response.status_code == 507 and response.json()["error"]["code"] == "DISK_FULL"
    assert node.store.end_index == end
    node.store.disk_full = False
    assert (await client.post("/v1/entries", content=b"room again")).status_code == 201


async def test_a_page_stops_at_range_bytes_max_and_next_goes_on(client: httpx.AsyncClient) -> None:
    answer = (await client.post("/v1/entries/batch", json={"entries": [{"body": "y" * 4000}] * 40})).json()
    first, last = answer["first_index"], answer["last_index"]
    seen: list[int] = []
    start = first
    while start <= last:
        page = (await client.get("/v1/entries", params={"start": start, "limit": 1000})).json()
        assert 0 < len(page["entries"]) <= 17  # 64 KiB of 4048-byte entries, at least one
        seen += [e["index"] for e in page["entries"]]
        start = page["next"]
    assert seen == list(range(first, last + 1))


async def test_every_node_serves_the_admin_page(client: httpx.AsyncClient) -> None:
    page = await client.get("/")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert 'id="members"' in page.text and "/v1/cluster" in page.text


async def test_metrics_cover_what_an_operator_alerts_on(client: httpx.AsyncClient) -> None:
    await client.post("/v1/entries", content=b"counted")
    await client.get("/v1/entries/0")
    text = (await client.get("/metrics")).text
    for name in ("raftlog_role_changes_total", "raftlog_elections_won_total", "raftlog_commit_latency_seconds_count",
                 "raftlog_appended_bytes_total", "raftlog_flush_seconds_count", "raftlog_disk_usage_ratio",
                 "raftlog_disk_full", "raftlog_pending_appends", "raftlog_event_loop_lag_seconds_count",
                 "raftlog_term", "raftlog_committed_index"):
        assert f"\n{name}" in text, name
    assert 'raftlog_http_requests_total{method="POST",route="/v1/entries",status="201"} 1.0' in text
    assert 'raftlog_http_requests_total{method="GET",route="/v1/entries/{index}",status="200"} 1.0' in text
    assert 'raftlog_role_changes_total{role="leader"} 1.0' in text


async def test_hot_requests_skip_fastapi_and_answer_as_it_does(node: Node, client: httpx.AsyncClient) -> None:
    """raftlog.api.fast_path answers single appends and JSON gets; FastAPI answers the rest, the same way."""
    fast_path = node.public_asgi
    while not isinstance(fast_path, EntryFastPath):  # under the request counter, limits and auth
        fast_path = fast_path.app
    fastapi_app = fast_path.app
    reached: list[str] = []

    async def watched(scope, receive, send):  # type: ignore[no-untyped-def]
        reached.append(f"{scope['method']} {scope['path']}?{scope['query_string'].decode()}")
        await fastapi_app(scope, receive, send)

    fast_path.app = watched
    appended = await client.post("/v1/entries", content=b"fast")
    assert appended.status_code == 201
    index = appended.json()["index"]
    for path in (f"/v1/entries/{index}", f"/v1/entries/{index + 1000}"):  # an entry, and a 404
        for accept in ("application/json", "application/octet-stream"):
            fast = await client.get(path, params={"consistency": "local"}, headers={"accept": accept})
            slow = await client.get(path, params={"consistency": "local", "by": "fastapi"},
                                    headers={"accept": accept})
            assert (fast.status_code, fast.content) == (slow.status_code, slow.content)
            assert {k: v for k, v in fast.headers.items() if k.startswith(("content-", "x-raftlog"))} == \
                   {k: v for k, v in slow.headers.items() if k.startswith(("content-", "x-raftlog"))}
    assert (await client.get(f"/v1/entries/{index}")).json()["body"] == "fast"
    assert (await client.get(f"/v1/entries/{index + 1000}")).status_code == 404  # a group of one confirms itself
    too_big = await client.post("/v1/entries", content=b"x" * (node.service.limits.max_request_bytes + 1))
    assert too_big.status_code == 413 and too_big.json()["error"]["code"] == "UNEXPECTED_ARGUMENT"
    assert (await client.get("/v1/entries/-1")).status_code == 400  # not digits: FastAPI's validation
    huge = await client.get("/v1/entries/" + "9" * 5000)  # beyond Python's int parsing: FastAPI's validation too
    assert huge.status_code == 400 and huge.json()["error"]["code"] == "UNEXPECTED_ARGUMENT"
    assert reached == [f"GET /v1/entries/{i}?consistency=local&by=fastapi" for i in (index, index + 1000)
                       for _ in range(2)] + ["GET /v1/entries/-1?", f"GET /v1/entries/{'9' * 5000}?"]
