"""Reads by topic and queue on a real 3-member group (issue 45, part 5): messages appended by key through a
follower and read back by queue offset on every member, the same messages at the same offsets; a page,
a long-poll answered when a message commits, a follow stream seeing new messages, a consumer group
resuming from the offset it committed, the tag filter, a topic whose perm refuses reads, gRPC's Read
of a queue, and an offset retention took (on a group of its own, whose head files expire)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import grpc
import httpx
import pytest

from raftlog.api import topics_pb2 as pb
from raftlog.api import topics_pb2_grpc
from raftlog.app.launcher import SMALL_FILES, LocalCluster
from raftlog.storage.message import key_queue
from tests.e2e.test_retention import SETTINGS as RETENTION
from tests.e2e.test_retention import expire
from tests.processes import ClusterFactory, eventually, serving

QUEUES = 4
KEY = "customer-42"
QUEUE = key_queue(KEY, QUEUES)
NDJSON = {"accept": "application/x-ndjson"}


@pytest.fixture(scope="module")
def group(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    yield from serving(tmp_path_factory.mktemp("topic-reads"), 3, settings=SMALL_FILES)


@pytest.fixture(scope="module")
def http() -> Iterator[httpx.Client]:
    with httpx.Client(timeout=20.0) as client:
        yield client


def urls(group: LocalCluster) -> tuple[str, list[str]]:
    """A follower's client URL, and every member's."""
    leader = group.wait_leader()
    follower = next(m for m in group.members if m != leader)
    return group.members[follower].client_url, [member.client_url for member in group.members.values()]


def create(http: httpx.Client, url: str, name: str, **fields: Any) -> dict[str, Any]:
    answer = http.post(f"{url}/v1/topics", json={"name": name, "queues": QUEUES, **fields})
    assert answer.status_code == 201, answer.text
    return dict(answer.json())


def append(http: httpx.Client, url: str, name: str, *bodies: str, tags: tuple[str, ...] = ()) -> list[int]:
    """Messages keyed to QUEUE; their queue offsets."""
    answer = http.post(f"{url}/v1/topics/{name}/messages", json={"messages": [
        {"body": body, "keys": [KEY], "tags": list(tags)} for body in bodies]})
    assert answer.status_code == 201, answer.text
    return [m["queue_offset"] for m in answer.json()["messages"]]


def messages(url: str, name: str, queue: int = QUEUE) -> str:
    return f"{url}/v1/topics/{name}/queues/{queue}/messages"


def test_every_member_reads_the_same_messages_at_the_same_offsets(group: LocalCluster, http: httpx.Client) -> None:
    follower, every = urls(group)
    created = create(http, follower, "orders")
    assert append(http, follower, "orders", *[f"order-{n}" for n in range(5)]) == [0, 1, 2, 3, 4]
    pages = [http.get(messages(url, "orders")).json() for url in every]  # linearizable: caught up first
    assert all(page == {**pages[0], "committed_index": page["committed_index"]} for page in pages)
    assert [(m["body"], m["queue_offset"], m["topic_id"], m["topic"]) for m in pages[0]["messages"]] == [
        (f"order-{n}", n, created["id"], "orders") for n in range(5)]
    for url in every:
        one = http.get(f"{messages(url, 'orders')}/3").json()
        assert one == pages[0]["messages"][3]
        assert http.get(f"{url}/v1/entries/{one['index']}").json()["body"] == "order-3"
    page = http.get(messages(follower, "orders"), params={"offset": 1, "limit": 2}).json()
    assert [m["queue_offset"] for m in page["messages"]] == [1, 2] and page["next_offset"] == 3
    listed = http.get(f"{follower}/v1/topics/orders/queues").json()["queues"]
    assert [(q["min_offset"], q["next_offset"]) for q in listed] == [(0, 5 if q == QUEUE else 0)
                                                                     for q in range(QUEUES)]


def test_a_long_poll_is_answered_when_a_message_commits(group: LocalCluster, http: httpx.Client) -> None:
    follower, every = urls(group)
    create(http, follower, "polled")
    answers: list[httpx.Response] = []
    waiting = threading.Thread(target=lambda: answers.append(http.get(messages(every[-1], "polled"), params={
        "offset": 0, "wait_ms": 15_000})))
    waiting.start()
    try:
        time.sleep(0.5)
        assert waiting.is_alive()  # nothing to answer yet: it waits
        append(http, follower, "polled", "late")
    finally:
        waiting.join(20)
    assert [m["body"] for m in answers[0].json()["messages"]] == ["late"]


def test_a_follow_stream_sees_new_messages_and_sse_resumes_after_its_last_event(group: LocalCluster,
                                                                                 http: httpx.Client) -> None:
    follower, every = urls(group)
    create(http, follower, "tailed")
    append(http, follower, "tailed", "first")
    with http.stream("GET", messages(every[0], "tailed"), params={"follow": True}, headers=NDJSON) as stream:
        lines = stream.iter_lines()
        assert json.loads(next(lines))["body"] == "first"
        append(http, follower, "tailed", "second", "third")
        assert [json.loads(next(lines))["queue_offset"] for _ in range(2)] == [1, 2]
    events = http.get(messages(every[1], "tailed"), params={"limit": 2},
                      headers={"accept": "text/event-stream", "last-event-id": "0"})
    assert [line for line in events.text.splitlines() if line.startswith("id: ")] == ["id: 1", "id: 2"]


def test_a_group_resumes_from_the_offset_it_committed(group: LocalCluster, http: httpx.Client) -> None:
    follower, every = urls(group)
    create(http, follower, "resumed")
    append(http, follower, "resumed", "m0", "m1", "m2", "m3")
    committed = http.post(f"{follower}/v1/groups/billing/offsets",
                          json={"topic": "resumed", "queues": [{"queue": QUEUE, "offset": 2}]})
    assert committed.status_code == 200, committed.text
    for url in every:
        resumed = http.get(messages(url, "resumed"), params={"group": "billing", "offset": 0}).json()
        assert [m["body"] for m in resumed["messages"]] == ["m2", "m3"]
        lag = http.get(f"{url}/v1/topics/resumed/queues", params={"group": "billing"}).json()["queues"][QUEUE]
        assert (lag["group_offset"], lag["lag"]) == (2, 2)


def test_the_tag_filter_and_a_topic_that_refuses_reads(group: LocalCluster, http: httpx.Client) -> None:
    follower, every = urls(group)
    create(http, follower, "tagged")
    append(http, follower, "tagged", "plain")
    append(http, follower, "tagged", "red", tags=("red",))
    append(http, follower, "tagged", "blue", tags=("blue",))
    for url in every:
        red = http.get(messages(url, "tagged"), params={"tag": "red"}).json()
        assert [m["body"] for m in red["messages"]] == ["red"] and red["next_offset"] == 3
    create(http, follower, "sealed", readable=False)
    for url in every:
        refused = http.get(f"{messages(url, 'sealed')}/0")
        assert (refused.status_code, refused.json()["error"]["code"]) == (403, "TOPIC_NOT_READABLE")


def test_grpc_reads_a_queue_on_a_follower(group: LocalCluster, http: httpx.Client) -> None:
    follower, _every = urls(group)
    create(http, follower, "remote")
    append(http, follower, "remote", "a", "b", tags=("x",))
    member = next(m for m in group.members.values() if m.client_url == follower)
    with grpc.insecure_channel(member.grpc_address) as channel:
        topics = topics_pb2_grpc.TopicsStub(channel)
        read = list(topics.Read(pb.ReadQueueRequest(topic="remote", queue=QUEUE)))
        got = topics.Get(pb.GetMessageRequest(topic="remote", queue=QUEUE, offset=1))
    assert [(m.body, m.queue_offset, m.topic) for m in read] == [(b"a", 0, "remote"), (b"b", 1, "remote")]
    assert got == read[1]


BODY_BYTES = 60_000  # SMALL_FILES' max_entry_bytes is 64 KiB: about 17 messages a data file


def test_an_offset_retention_took_is_refused_naming_the_first_kept(make_cluster: ClusterFactory) -> None:
    cluster = make_cluster(3, **RETENTION)
    leader = cluster.wait_leader()
    url = cluster.members[leader].client_url
    with httpx.Client(timeout=30.0) as http:
        create(http, url, "kept")
        for batch in range(6):  # ~5 data files of 1 MiB
            append(http, url, "kept", *[f"{batch}-{n}-".ljust(BODY_BYTES, ".") for n in range(10)])
        for member_id, member in cluster.members.items():
            expire(cluster, member_id)
            first = eventually(lambda url=member.client_url: http.get(f"{url}/v1/topics/kept/queues", params={
                "consistency": "local"}).json()["queues"][QUEUE]["min_offset"], f"{member_id} to clean its head")
            taken = http.get(f"{messages(member.client_url, 'kept')}/0")
            assert (taken.status_code, taken.json()["error"]["code"]) == (410, "INDEX_LESS_THAN_LOCAL_BEGIN")
            assert f"the queue now starts at offset {first}" in taken.json()["error"]["message"]
            kept = http.get(messages(member.client_url, "kept"), params={"limit": 1}).json()["messages"]
            assert kept[0]["queue_offset"] == first and kept[0]["body"].startswith(f"{first // 10}-{first % 10}-")
