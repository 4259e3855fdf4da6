"""Consumer groups' offsets per queue on a real 3-member group with tokens (issue 45, part 6): a
commit of 8 queues through a follower is one entry, a compare-and-set over them fails as a whole,
plain commits within consumer_commit_interval_ms make fewer entries than commits, a consumer token
moves only the groups its name covers, every member shows the same offsets and lag (and /metrics
their sums), gRPC and the command line do the same, and a group removed is gone everywhere."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import grpc
import httpx
import pytest

from raftlog.api import topics_pb2 as pb
from raftlog.api import topics_pb2_grpc
from raftlog.app.launcher import SMALL_FILES, LocalCluster
from tests.e2e.test_topics import reason
from tests.processes import eventually, metric, serving

TOKENS = {"reader": "reader-token-0123456789", "writer": "writer-token-0123456789",
          "admin": "admin-token-01234567890", "consumer": "consumer-token-012345678"}
NAMES = {"reader": "readers", "writer": "writers", "admin": "admins", "consumer": "billing"}
QUEUES = 8
PER_QUEUE = 10  # messages in each queue of the topic


@pytest.fixture(scope="module")
def group(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    tokens = ",".join(f"{role}:{NAMES[role]}:{token}" for role, token in TOKENS.items())
    yield from serving(tmp_path_factory.mktemp("groups"), 3, settings={**SMALL_FILES, "tokens": tokens})


@pytest.fixture(scope="module")
def http() -> Iterator[httpx.Client]:
    with httpx.Client(timeout=20.0) as client:
        yield client


@pytest.fixture(scope="module")
def orders(group: LocalCluster, http: httpx.Client) -> dict[str, Any]:
    """A topic of QUEUES queues, PER_QUEUE messages in each."""
    url = group.members[group.wait_leader()].client_url
    created = http.post(f"{url}/v1/topics", json={"name": "orders", "queues": QUEUES}, headers=as_("admin"))
    assert created.status_code == 201, created.text
    for queue in range(QUEUES):
        appended = http.post(f"{url}/v1/topics/orders/messages", headers=as_("writer"),
                             json={"messages": [{"body": f"m{i}"} for i in range(PER_QUEUE)], "queue": queue})
        assert appended.status_code == 201, appended.text
    return dict(created.json())


def as_(role: str) -> dict[str, str]:
    return {"authorization": f"Bearer {TOKENS[role]}"}


def urls(group: LocalCluster) -> tuple[str, str]:
    """The leader's client URL and a follower's."""
    leader = group.wait_leader()
    follower = next(m for m in group.members if m != leader)
    return group.members[leader].client_url, group.members[follower].client_url


def log_end(http: httpx.Client, url: str) -> int:
    return int(http.get(f"{url}/v1/cluster", headers=as_("reader")).json()["end_index"])


def commit(http: httpx.Client, url: str, name: str, queues: list[dict[str, int]], role: str = "consumer",
           topic: str = "orders") -> httpx.Response:
    return http.post(f"{url}/v1/groups/{name}/offsets", json={"topic": topic, "queues": queues}, headers=as_(role))


def code(answer: httpx.Response) -> tuple[int, str]:
    return answer.status_code, answer.json()["error"]["code"]


def offsets(http: httpx.Client, url: str, name: str) -> dict[int, tuple[int, int]]:
    """Each queue's (offset, lag), as the member at `url` holds them (linearizably)."""
    described = http.get(f"{url}/v1/groups/{name}", headers=as_("reader")).json()
    return {q["queue"]: (q["offset"], q["lag"]) for topic in described["topics"] for q in topic["queues"]}


def test_a_commit_of_eight_queues_is_one_entry_and_a_compare_and_set_fails_as_a_whole(
        group: LocalCluster, http: httpx.Client, orders: dict[str, Any]) -> None:
    leader_url, follower_url = urls(group)
    end = log_end(http, leader_url)
    first = commit(http, follower_url, "billing", [{"queue": q, "offset": 3, "expected": -1} for q in range(QUEUES)])
    assert first.status_code == 200, first.text
    assert (first.json()["index"], first.json()["topic_id"]) == (end + 1, orders["id"])
    assert log_end(http, leader_url) == end + 1  # 8 queues, one entry
    for member in group.members.values():
        assert offsets(http, member.client_url, "billing") == dict.fromkeys(range(QUEUES), (3, PER_QUEUE - 3))

    stale = [{"queue": q, "offset": 4, "expected": 3} for q in range(QUEUES)]
    stale[5]["expected"] = 2
    refused = commit(http, follower_url, "billing", stale)
    assert code(refused) == (409, "CONSUMER_CONFLICT")
    assert "queue 5" in refused.json()["error"]["message"] and "at 3" in refused.json()["error"]["message"]
    assert log_end(http, leader_url) == end + 1
    assert offsets(http, follower_url, "billing") == dict.fromkeys(range(QUEUES), (3, PER_QUEUE - 3))

    past_end = commit(http, follower_url, "billing", [{"queue": 0, "offset": PER_QUEUE + 1}])
    assert code(past_end) == (409, "CONSUMER_POSITION_PAST_END")
    assert code(commit(http, follower_url, "billing", [{"queue": 0, "offset": 0}], topic="nothing")) == \
        (404, "TOPIC_NOT_FOUND")


def test_plain_commits_within_the_interval_make_fewer_entries_than_commits(
        group: LocalCluster, http: httpx.Client, orders: dict[str, Any]) -> None:
    leader_url, follower_url = urls(group)
    end = log_end(http, leader_url)

    async def commit_all() -> list[httpx.Response]:
        async with httpx.AsyncClient(timeout=20.0) as client:
            return await asyncio.gather(*(client.post(
                f"{follower_url}/v1/groups/billing.batch/offsets", headers=as_("consumer"),
                json={"topic": "orders", "queues": [{"queue": n % QUEUES, "offset": 2}]}) for n in range(2 * QUEUES)))

    answers = asyncio.run(commit_all())
    assert all(answer.status_code == 200 for answer in answers), [a.text for a in answers]
    entries = {answer.json()["index"] for answer in answers}
    assert len(entries) < len(answers) and log_end(http, leader_url) == end + len(entries)
    assert offsets(http, leader_url, "billing.batch") == dict.fromkeys(range(QUEUES), (2, PER_QUEUE - 2))


def test_a_consumer_token_moves_only_the_groups_its_name_covers(group: LocalCluster, http: httpx.Client,
                                                                 orders: dict[str, Any]) -> None:
    leader_url, follower_url = urls(group)
    one = [{"queue": 0, "offset": 1}]
    for url in (leader_url, follower_url):
        assert code(commit(http, url, "audit", one)) == (403, "PERMISSION_DENIED")
        assert code(commit(http, url, "audit", one, role="reader")) == (403, "PERMISSION_DENIED")
    unnamed = http.post(f"{follower_url}/v1/groups/billing/offsets", json={"topic": "orders", "queues": one})
    assert unnamed.status_code == 401
    assert commit(http, follower_url, "billing.eu", one).status_code == 200  # its name, then a dot
    assert commit(http, follower_url, "audit", one, role="writer").status_code == 200  # a writer moves any
    refused = http.delete(f"{follower_url}/v1/groups/audit", headers=as_("consumer"))
    assert code(refused) == (403, "PERMISSION_DENIED")
    assert offsets(http, leader_url, "audit") == {0: (1, PER_QUEUE - 1)}


def test_every_member_shows_the_lag_and_metrics_sum_it(group: LocalCluster, http: httpx.Client,
                                                       orders: dict[str, Any]) -> None:
    _, follower_url = urls(group)
    committed = commit(http, follower_url, "billing.reports", [{"queue": 2, "offset": 4}, {"queue": 6, "offset": 9}])
    assert committed.status_code == 200, committed.text
    for member in group.members.values():
        described = http.get(f"{member.client_url}/v1/groups/billing.reports", headers=as_("reader")).json()
        assert (described["owner"], described["queue_count"], described["lag"]) == ("billing", 2, 7)
        assert described["topics"] == [{"topic": "orders", "topic_id": orders["id"], "lag": 7, "queues": [
            {"queue": 2, "offset": 4, "end": PER_QUEUE, "lag": 6}, {"queue": 6, "offset": 9, "end": PER_QUEUE,
                                                                     "lag": 1}]}]
        listed = http.get(f"{member.client_url}/v1/groups", headers=as_("reader")).json()["groups"]
        assert {"name": "billing.reports", "owner": "billing", "index": described["index"], "queue_count": 2,
                "lag": 7} in listed
        url = member.client_url
        eventually(lambda url=url: metric(url, "raftlog_group_lag", group="billing.reports") == 7,
                   f"{member.id}'s metrics")
        assert metric(url, "raftlog_topic_messages_total", topic="orders") == QUEUES * PER_QUEUE
        assert metric(url, "raftlog_group_queue_lag", group="billing.reports", topic="orders", queue="2") == 6


def test_grpc_through_a_follower(group: LocalCluster, orders: dict[str, Any]) -> None:
    leader = group.wait_leader()
    follower = next(m for m in group.members if m != leader)
    consumer, reader = list(as_("consumer").items()), list(as_("reader").items())
    with grpc.insecure_channel(group.members[follower].grpc_address) as channel:
        topics = topics_pb2_grpc.TopicsStub(channel)
        queues = [pb.QueueOffset(queue=q, offset=5, expected=-1) for q in range(QUEUES)]
        committed = topics.CommitGroupOffsets(pb.CommitGroupOffsetsRequest(group="billing.grpc", topic="orders",
                                                                           queues=queues), metadata=consumer)
        assert (committed.topic_id, [(q.queue, q.offset) for q in committed.queues]) == \
            (orders["id"], [(q, 5) for q in range(QUEUES)])
        with pytest.raises(grpc.RpcError) as conflict:
            topics.CommitGroupOffsets(pb.CommitGroupOffsetsRequest(group="billing.grpc", topic="orders", queues=[
                pb.QueueOffset(queue=0, offset=6, expected=5), pb.QueueOffset(queue=1, offset=6, expected=4)]),
                metadata=consumer)
        assert reason(conflict.value) == (grpc.StatusCode.ABORTED, "CONSUMER_CONFLICT")
        with pytest.raises(grpc.RpcError) as other:
            topics.CommitGroupOffsets(pb.CommitGroupOffsetsRequest(group="audit", topic="orders", queues=queues[:1]),
                                      metadata=consumer)
        assert reason(other.value) == (grpc.StatusCode.PERMISSION_DENIED, "PERMISSION_DENIED")

        got = topics.GetGroup(pb.GetGroupRequest(group="billing.grpc"), metadata=reader)
        assert (got.owner, got.queue_count, got.lag) == ("billing", QUEUES, QUEUES * (PER_QUEUE - 5))
        assert [(q.queue, q.offset, q.end, q.lag) for q in got.topics[0].queues] == \
            [(q, 5, PER_QUEUE, PER_QUEUE - 5) for q in range(QUEUES)]
        listed = topics.ListGroups(pb.ListGroupsRequest(), metadata=reader).groups
        assert [(g.name, g.lag, len(g.topics)) for g in listed if g.name == "billing.grpc"] == \
            [("billing.grpc", got.lag, 0)]
        topics.DeleteGroup(pb.DeleteGroupRequest(group="billing.grpc"), metadata=consumer)
        with pytest.raises(grpc.RpcError) as gone:
            topics.GetGroup(pb.GetGroupRequest(group="billing.grpc"), metadata=reader)
        assert reason(gone.value) == (grpc.StatusCode.NOT_FOUND, "CONSUMER_NOT_FOUND")


def test_the_command_line_and_a_group_removed(group: LocalCluster, http: httpx.Client,
                                              orders: dict[str, Any]) -> None:
    _, follower_url = urls(group)

    def raftlog(*args: str, role: str = "consumer") -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "raftlog.app.cli", "groups", *args, "--url", follower_url],
                              capture_output=True, text=True, timeout=60,
                              env={**os.environ, "RAFTLOG_TOKEN": TOKENS[role]})

    committed = raftlog("commit", "billing.cli", "--topic", "orders", "--queue", "1", "--offset", "2",
                        "--queue", "3", "--offset", "7")
    assert committed.returncode == 0, committed.stderr
    assert [line.split()[:4] for line in committed.stdout.splitlines()[1:]] == \
        [["billing.cli", "orders", "1", "2"], ["billing.cli", "orders", "3", "7"]]
    conflict = raftlog("commit", "billing.cli", "--topic", "orders", "--queue", "1", "--offset", "3",
                       "--expected", "1")
    assert conflict.returncode == 1 and "409 CONSUMER_CONFLICT" in conflict.stderr
    described = raftlog("describe", "billing.cli", role="reader")
    assert [line.split() for line in described.stdout.splitlines()[2:]] == \
        [["orders", "1", "2", str(PER_QUEUE), str(PER_QUEUE - 2)], ["orders", "3", "7", str(PER_QUEUE),
                                                                      str(PER_QUEUE - 7)]]
    listed = raftlog("list", role="reader")
    assert ["billing.cli", "2", str(2 * PER_QUEUE - 9)] in [line.split()[:3] for line in listed.stdout.splitlines()]

    assert raftlog("delete", "billing.cli").stdout == "deleted billing.cli\n"
    for member in group.members.values():
        gone = http.get(f"{member.client_url}/v1/groups/billing.cli", headers=as_("reader"))
        assert code(gone) == (404, "CONSUMER_NOT_FOUND")
        listed_now = http.get(f"{member.client_url}/v1/groups", headers=as_("reader")).json()["groups"]
        assert "billing.cli" not in {g["name"] for g in listed_now}
    again = http.delete(f"{follower_url}/v1/groups/billing.cli", headers=as_("consumer"))
    assert code(again) == (404, "CONSUMER_NOT_FOUND")
