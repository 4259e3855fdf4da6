"""Consumer groups' offsets per queue on one member in this process (issue 45, part 6;
tests/e2e/test_groups.py has the group of three): a commit of many queues is one QUEUE_COMMIT entry,
a compare-and-set over them all or nothing, plain commits within consumer_commit_interval_ms
combined with the latest offset of each queue winning, who may move a group, and each queue's lag."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from raftlog.api.auth import Caller, Role
from raftlog.api.errors import ApiError
from raftlog.api.groups import QueueCommit
from raftlog.api.peer_codec import forwarded_group_commit, group_commit_request
from raftlog.app.node import Node
from raftlog.raft.group_offsets import GroupAsk, QueueAsk

QUEUES = 8


async def topic_with_messages(client: httpx.AsyncClient, name: str, per_queue: int) -> dict[str, Any]:
    """A topic of QUEUES queues, `per_queue` messages in each."""
    created = await client.post("/v1/topics", json={"name": name, "queues": QUEUES})
    assert created.status_code == 201, created.text
    for queue in range(QUEUES):
        appended = await client.post(f"/v1/topics/{name}/messages",
                                     json={"messages": [{"body": f"m{i}"} for i in range(per_queue)], "queue": queue})
        assert appended.status_code == 201, appended.text
    return dict(created.json())


async def commit(client: httpx.AsyncClient, group: str, topic: str, *queues: dict[str, int]) -> httpx.Response:
    return await client.post(f"/v1/groups/{group}/offsets", json={"topic": topic, "queues": list(queues)})


def code(answer: httpx.Response) -> tuple[int, str]:
    return answer.status_code, answer.json()["error"]["code"]


async def offsets(client: httpx.AsyncClient, group: str) -> dict[int, int]:
    described = (await client.get(f"/v1/groups/{group}")).json()
    return {q["queue"]: q["offset"] for topic in described["topics"] for q in topic["queues"]}


async def test_a_commit_of_eight_queues_is_one_entry_and_a_compare_and_set_all_or_nothing(
        client: httpx.AsyncClient, node: Node) -> None:
    orders = await topic_with_messages(client, "orders", 5)
    end = node.raft.store.end_index
    first = await commit(client, "billing", "orders", *({"queue": q, "offset": 2, "expected": -1} for q in range(8)))
    assert first.status_code == 200, first.text
    assert first.json() == {"group": "billing", "index": end + 1, "topic": "orders", "topic_id": orders["id"],
                            "queues": [{"queue": q, "offset": 2} for q in range(8)]}
    assert node.raft.store.end_index == end + 1  # 8 queues, one entry

    stale = [{"queue": q, "offset": 3, "expected": 2} for q in range(7)] + [{"queue": 7, "offset": 3, "expected": 1}]
    refused = await commit(client, "billing", "orders", *stale)
    assert code(refused) == (409, "CONSUMER_CONFLICT")
    assert "queue 7" in refused.json()["error"]["message"] and "at 2" in refused.json()["error"]["message"]
    assert await offsets(client, "billing") == dict.fromkeys(range(8), 2)  # none of the 8 moved
    assert node.raft.store.end_index == end + 1

    past_end = await commit(client, "billing", "orders", {"queue": 0, "offset": 6})
    assert code(past_end) == (409, "CONSUMER_POSITION_PAST_END")
    removed = await commit(client, "billing", "orders", {"queue": 1, "offset": -1}, {"queue": 0, "offset": 5})
    assert removed.status_code == 200 and await offsets(client, "billing") == {0: 5, **dict.fromkeys(range(2, 8), 2)}


async def test_plain_commits_within_the_interval_are_combined_the_latest_of_each_queue_winning(
        client: httpx.AsyncClient, node: Node) -> None:
    await topic_with_messages(client, "events", 20)
    end = node.raft.store.end_index
    answers = await asyncio.gather(*(commit(client, "audit", "events", {"queue": q % 4, "offset": q})
                                     for q in range(12)))
    assert all(answer.status_code == 200 for answer in answers), [a.text for a in answers]
    entries = {answer.json()["index"] for answer in answers}
    assert len(entries) < len(answers) and node.raft.store.end_index == end + len(entries)
    assert answers[0].json()["queues"] == [{"queue": 0, "offset": 8}]  # queue 0's latest, in the entry they share
    assert await offsets(client, "audit") == {0: 8, 1: 9, 2: 10, 3: 11}

    cas = await commit(client, "audit", "events", {"queue": 0, "offset": 12, "expected": 8})
    assert cas.status_code == 200 and cas.json()["index"] == node.raft.store.end_index  # judged alone


async def test_lag_per_queue_listing_and_removal(client: httpx.AsyncClient) -> None:
    await topic_with_messages(client, "lagging", 4)
    assert (await commit(client, "reports", "lagging", {"queue": 3, "offset": 1}, {"queue": 0, "offset": 4})).is_success
    described = (await client.get("/v1/groups/reports")).json()
    assert (described["owner"], described["queue_count"], described["lag"]) == ("local", 2, 3)
    assert described["topics"][0]["queues"] == [{"queue": 0, "offset": 4, "end": 4, "lag": 0},
                                                {"queue": 3, "offset": 1, "end": 4, "lag": 3}]
    listed = (await client.get("/v1/groups?consistency=local")).json()["groups"]
    assert {"name": "reports", "owner": "local", "index": described["index"], "queue_count": 2, "lag": 3} in listed

    assert (await client.delete("/v1/groups/reports")).status_code == 204
    assert code(await client.get("/v1/groups/reports")) == (404, "CONSUMER_NOT_FOUND")
    assert code(await client.delete("/v1/groups/reports")) == (404, "CONSUMER_NOT_FOUND")


async def test_what_the_member_judges_before_the_leader(client: httpx.AsyncClient, node: Node) -> None:
    await topic_with_messages(client, "judged", 1)
    assert code(await commit(client, "g", "nothing", {"queue": 0, "offset": 0})) == (404, "TOPIC_NOT_FOUND")
    assert code(await commit(client, "g", "judged", {"queue": QUEUES, "offset": 0})) == (404, "TOPIC_NOT_FOUND")
    twice = await commit(client, "g", "judged", {"queue": 1, "offset": 0}, {"queue": 1, "offset": 1})
    assert code(twice) == (400, "UNEXPECTED_ARGUMENT") and "twice" in twice.text
    assert code(await commit(client, "bad name!", "judged", {"queue": 0, "offset": 0}))[0] == 400
    assert (await commit(client, "g", "judged")).status_code == 400  # no queue
    many = [{"queue": q, "offset": 0} for q in range(node.groups.queues_max + 1)]
    assert (await client.post("/v1/groups/g/offsets", json={"topic": "judged", "queues": many})).status_code == 413

    groups = node.groups  # a consumer token moves the groups its name covers, as it does named consumers
    with pytest.raises(ApiError) as other:
        await groups.commit("billing", "judged", [QueueCommit(0, 1)], caller=Caller(Role.CONSUMER, "audit"))
    assert other.value.code.name == "PERMISSION_DENIED"
    with pytest.raises(ApiError) as reader:
        await groups.delete("billing", caller=Caller(Role.READER, "billing"))
    assert reader.value.code.name == "PERMISSION_DENIED"
    own = await groups.commit("billing.eu", "judged", [QueueCommit(0, 1)], caller=Caller(Role.CONSUMER, "billing"))
    assert own.offsets[0][1:] == (0, 1)

    node.raft.groups.config = dataclasses.replace(node.raft.groups.config, consumers_max=1)
    assert code(await commit(client, "another", "judged", {"queue": 0, "offset": 0})) == (409, "CONSUMERS_FULL")


async def test_metrics_per_topic_and_group_and_only_the_most_lagging_queues_or_those_asked_for(
        client: httpx.AsyncClient) -> None:
    wide = 24  # past metrics_queue_lag_series_max's 20
    assert (await client.post("/v1/topics", json={"name": "wide", "queues": wide})).status_code == 201
    for queue in range(wide):  # queue q holds q + 1 messages
        await client.post("/v1/topics/wide/messages", json={"messages": [{"body": "m"}] * (queue + 1), "queue": queue})
    assert (await commit(client, "slow", "wide", *({"queue": q, "offset": 0} for q in range(wide)))).is_success

    def samples(text: str, name: str) -> dict[tuple[str, ...], float]:
        return {tuple(s.labels[k] for k in ("topic", "group", "queue") if k in s.labels): s.value
                for family in text_string_to_metric_families(text) for s in family.samples if s.name == name}

    text = (await client.get("/metrics")).text
    assert samples(text, "raftlog_topic_messages_total")[("wide",)] == wide * (wide + 1) / 2
    assert samples(text, "raftlog_group_lag")[("slow",)] == wide * (wide + 1) / 2
    assert samples(text, "raftlog_group_queues")[("slow",)] == wide
    lagging = samples(text, "raftlog_group_queue_lag")
    assert lagging == {("wide", "slow", str(q)): q + 1 for q in range(wide - 20, wide)}  # the 20 most lagging
    asked = samples((await client.get("/metrics?queue=wide:0&queue=wide:1")).text, "raftlog_group_queue_lag")
    assert asked == {**lagging, ("wide", "slow", "0"): 1, ("wide", "slow", "1"): 2}
    assert (await client.get("/metrics?queue=wide")).status_code == 400


def test_a_forwarded_commit_reads_back_as_sent() -> None:
    for ask in (GroupAsk("billing", [QueueAsk(57, 3, 12, 10), QueueAsk(57, 4, -1, None), QueueAsk(9, 0, 0, -1)],
                         "alice"),
                GroupAsk("billing", [], "bob", remove=True)):
        assert forwarded_group_commit(group_commit_request(ask).SerializeToString()) == ask
