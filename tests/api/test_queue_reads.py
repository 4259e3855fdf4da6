"""Reads by topic and queue on one member in this process (issue 45, part 5; tests/e2e/test_topic_reads.py
has the group): one message by queue offset, a page, a long-poll answered when a message commits, the
streams (NDJSON, server-sent events resumed by Last-Event-ID, the stored format), a consumer group's
committed offset to resume from, the tag filter (the hash, then exactly), a queue's offsets and a
group's lag, the refusals, and gRPC's Get, Read and ListQueues on raftlog.v1.Topics."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import grpc
import httpx
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from raftlog.api import log_pb2, topics_pb2, topics_pb2_grpc
from raftlog.api.auth import AuthFailures
from raftlog.api.grpc_api import GrpcApi
from raftlog.api.grpc_topics import port_service
from raftlog.app.launcher import free_ports
from raftlog.app.node import Node
from raftlog.raft.group_offsets import GroupAsk, QueueAsk
from raftlog.storage.codec import iter_entries
from raftlog.storage.message import key_queue, tag_code, tags_code

QUEUES = 4
KEY = "customer-42"
QUEUE = key_queue(KEY, QUEUES)
NDJSON = {"accept": "application/x-ndjson"}


async def topic(client: httpx.AsyncClient, name: str, **fields: Any) -> dict[str, Any]:
    created = await client.post("/v1/topics", json={"name": name, "queues": QUEUES, **fields})
    assert created.status_code == 201, created.text
    return dict(created.json())


async def append(client: httpx.AsyncClient, name: str, *bodies: str, tags: tuple[str, ...] = ()) -> list[int]:
    """The messages, keyed to QUEUE; their queue offsets."""
    answer = await client.post(f"/v1/topics/{name}/messages", json={"messages": [
        {"body": body, "keys": [KEY], "tags": list(tags)} for body in bodies]})
    assert answer.status_code == 201, answer.text
    return [m["queue_offset"] for m in answer.json()["messages"]]


def messages_url(name: str, queue: int = QUEUE) -> str:
    return f"/v1/topics/{name}/queues/{queue}/messages"


def code(answer: httpx.Response) -> tuple[int, str]:
    return answer.status_code, answer.json()["error"]["code"]


async def test_a_queue_reads_by_offset_as_the_log_reads_by_index(client: httpx.AsyncClient) -> None:
    created = await topic(client, "orders")
    assert await append(client, "orders", "one", "two", "three") == [0, 1, 2]
    one = (await client.get(f"{messages_url('orders')}/1")).json()
    by_index = (await client.get(f"/v1/entries/{one['index']}")).json()
    assert one == {**by_index, "topic": "orders"}  # the log's reader names no topic yet
    assert (one["body"], one["topic_id"], one["queue"], one["queue_offset"], one["keys"]) == (
        "two", created["id"], QUEUE, 1, [KEY])
    raw = await client.get(f"{messages_url('orders')}/1", headers={"accept": "application/octet-stream"})
    assert raw.content == b"two" and raw.headers["x-raftlog-queue-offset"] == "1"

    page = (await client.get(messages_url("orders"), params={"offset": 1})).json()
    assert [m["body"] for m in page["messages"]] == ["two", "three"] and page["next_offset"] == 3
    assert page["messages"][0] == one
    assert (await client.get(messages_url("orders"))).json()["messages"][0]["body"] == "one"  # from the first
    limited = (await client.get(messages_url("orders"), params={"limit": 2, "consistency": "local"})).json()
    assert [m["queue_offset"] for m in limited["messages"]] == [0, 1] and limited["next_offset"] == 2
    for offset in (3, 10, 2**63 - 1):  # at the queue's end, and past it
        past = (await client.get(messages_url("orders"), params={"offset": offset})).json()
        assert (past["messages"], past["next_offset"]) == ([], offset)
        assert (await client.get(messages_url("orders"), params={"offset": offset}, headers=NDJSON)).text == ""

    ndjson = await client.get(messages_url("orders"), params={"offset": 1}, headers=NDJSON)
    assert [json.loads(line) for line in ndjson.text.splitlines()] == page["messages"]
    assert ndjson.headers["x-raftlog-next-offset"] == "3"
    events = await client.get(messages_url("orders"), headers={"accept": "text/event-stream", "last-event-id": "0"})
    assert [line for line in events.text.splitlines() if line.startswith("id: ")] == ["id: 1", "id: 2"]
    stored = await client.get(messages_url("orders"), params={"offset": 2},
                              headers={"accept": "application/vnd.raftlog.entries"})
    assert [e.index for e in iter_entries(stored.content)] == [page["messages"][1]["index"]]
    other_queue = (await client.get(messages_url("orders", (QUEUE + 1) % QUEUES))).json()
    assert (other_queue["messages"], other_queue["next_offset"]) == ([], 0)


async def test_a_long_poll_is_answered_when_a_message_commits(client: httpx.AsyncClient) -> None:
    await topic(client, "waits")
    waiting = asyncio.ensure_future(client.get(messages_url("waits"), params={"offset": 0, "wait_ms": 10_000}))
    await asyncio.sleep(0.2)
    assert not waiting.done()
    await append(client, "waits", "late")
    answer = (await asyncio.wait_for(waiting, 5)).json()
    assert [m["body"] for m in answer["messages"]] == ["late"]
    quiet = await client.get(messages_url("waits"), params={"offset": 1, "wait_ms": 100})
    assert quiet.json()["messages"] == []


async def test_a_stream_follows_the_queue_as_messages_commit(client: httpx.AsyncClient) -> None:
    await topic(client, "tails")
    await append(client, "tails", "before")
    following = asyncio.ensure_future(client.get(messages_url("tails"), params={"follow": True, "limit": 3},
                                                 headers=NDJSON))
    await asyncio.sleep(0.2)
    await append(client, "tails", "after-1")
    await append(client, "tails", "after-2")
    lines = (await asyncio.wait_for(following, 5)).text.splitlines()
    assert [json.loads(line)["body"] for line in lines] == ["before", "after-1", "after-2"]


async def test_a_group_resumes_from_its_committed_offset(node: Node, client: httpx.AsyncClient) -> None:
    created = await topic(client, "resumed")
    await append(client, "resumed", "m0", "m1", "m2", "m3")
    fresh = (await client.get(messages_url("resumed"), params={"group": "billing", "offset": 1})).json()
    assert fresh["messages"][0]["queue_offset"] == 1  # no committed offset: from the start given
    await node.raft.topic_appends.commit_group(GroupAsk("billing", [QueueAsk(created["id"], QUEUE, 3)], "test"))
    resumed = (await client.get(messages_url("resumed"), params={"group": "billing", "offset": 0})).json()
    assert [m["body"] for m in resumed["messages"]] == ["m3"]
    aliased = (await client.get(messages_url("resumed"), params={"consumer": "billing"}, headers=NDJSON)).text
    assert [json.loads(line)["queue_offset"] for line in aliased.splitlines()] == [3]
    listed = (await client.get("/v1/topics/resumed/queues", params={"group": "billing"})).json()
    assert listed["topic_id"] == created["id"] and len(listed["queues"]) == QUEUES
    assert listed["queues"][QUEUE] == {"queue": QUEUE, "min_offset": 0, "next_offset": 4, "group_offset": 3, "lag": 1}
    assert listed["queues"][(QUEUE + 1) % QUEUES] == {"queue": (QUEUE + 1) % QUEUES, "min_offset": 0,
                                                      "next_offset": 0, "group_offset": None, "lag": 0}
    plain = (await client.get("/v1/topics/resumed/queues")).json()["queues"][QUEUE]
    assert (plain["group_offset"], plain["lag"]) == (None, None)
    assert code(await client.get(messages_url("resumed"), params={"group": "no spaces"})) == (400,
                                                                                              "UNEXPECTED_ARGUMENT")


def covered_tag(tags: list[str]) -> str:
    """A tag none of `tags` is, whose code their code holds: the hash passes it, the exact check must not."""
    code = tags_code(tags)
    return next(t for t in (f"t{n}" for n in range(100_000)) if t not in tags and tag_code(t) & code == tag_code(t))


async def test_the_tag_filter_passes_a_hash_then_the_tags_themselves(client: httpx.AsyncClient) -> None:
    await topic(client, "tagged")
    many = [f"tag-{n}" for n in range(12)]
    await append(client, "tagged", "plain")
    await append(client, "tagged", "red", tags=("red",))
    await append(client, "tagged", "many", tags=tuple(many))
    await append(client, "tagged", "blue", tags=("blue", "red"))
    await append(client, "tagged", "plain again")
    red = (await client.get(messages_url("tagged"), params={"tag": "red"})).json()
    assert [m["body"] for m in red["messages"]] == ["red", "blue"] and red["next_offset"] == 5
    either = (await client.get(messages_url("tagged"), params={"tag": ["blue", "tag-3"]})).json()
    assert [m["body"] for m in either["messages"]] == ["many", "blue"]
    lookalike = covered_tag(many)
    assert [m["body"] for m in (await client.get(messages_url("tagged"), params={"tag": lookalike})).json()[
        "messages"]] == []
    skipped = (await client.get(messages_url("tagged"), params={"tag": "red", "limit": 1})).json()
    assert (skipped["messages"], skipped["next_offset"]) == ([], 1)  # offset 0 looked at, skipped: on past it
    streamed = await client.get(messages_url("tagged"), params={"tag": "blue"}, headers=NDJSON)
    assert [json.loads(line)["queue_offset"] for line in streamed.text.splitlines()] == [3]
    waits = asyncio.ensure_future(client.get(messages_url("tagged"), params={"tag": "green", "offset": 5,
                                                                               "wait_ms": 10_000}))
    await append(client, "tagged", "not green")
    await asyncio.sleep(0.2)
    assert not waits.done()  # a message that the filter skips does not answer the long-poll
    await append(client, "tagged", "green", tags=("green",))
    answered = (await asyncio.wait_for(waits, 5)).json()
    assert [m["queue_offset"] for m in answered["messages"]] == [6] and answered["next_offset"] == 7


async def test_reads_are_refused_as_the_log_refuses_them(node: Node, client: httpx.AsyncClient) -> None:
    created = await topic(client, "kept")
    await append(client, "kept", *[f"m{n}" for n in range(6)])
    units = node.raft.consume_queues.queues.queue(created["id"], QUEUE)  # type: ignore[union-attr]
    units.correct_min_offset(units.unit(4)[0])  # as retention moves it once the log's head files go
    taken = await client.get(f"{messages_url('kept')}/1")
    assert code(taken) == (410, "INDEX_LESS_THAN_LOCAL_BEGIN") and "starts at offset 4" in taken.text
    for headers in ({}, NDJSON):
        paged = await client.get(messages_url("kept"), params={"offset": 0}, headers=headers)
        assert code(paged) == (410, "INDEX_LESS_THAN_LOCAL_BEGIN")
    assert [m["body"] for m in (await client.get(messages_url("kept"))).json()["messages"]] == ["m4", "m5"]
    assert code(await client.get(f"{messages_url('kept')}/6")) == (404, "INDEX_OUT_OF_RANGE")
    assert code(await client.get(f"{messages_url('kept', QUEUES)}/0")) == (404, "TOPIC_NOT_FOUND")
    assert code(await client.get(f"{messages_url('nothing')}/0")) == (404, "TOPIC_NOT_FOUND")
    assert code(await client.get(messages_url("kept"), params={"follow": True})) == (400, "UNEXPECTED_ARGUMENT")

    await topic(client, "closed", readable=False)
    for path in (messages_url("closed"), f"{messages_url('closed')}/0"):
        assert code(await client.get(path)) == (403, "TOPIC_NOT_READABLE")
    assert (await client.get("/v1/topics/closed/queues")).status_code == 200  # its offsets stay visible


def reason(failed: grpc.aio.AioRpcError) -> tuple[grpc.StatusCode, str]:
    status = rpc_status.from_call(failed)  # type: ignore[arg-type]
    assert status is not None
    info = error_details_pb2.ErrorInfo()
    assert status.details[0].Unpack(info)
    return failed.code(), info.reason


async def test_grpc_reads_a_queue_as_rest_does(node: Node, client: httpx.AsyncClient) -> None:
    created = await topic(client, "remote")
    await append(client, "remote", "a", "b", tags=("x",))
    await append(client, "remote", "c")
    await topic(client, "sealed", readable=False)
    (port,) = free_ports(1)
    api = GrpcApi(node.service, node.handlers, None, AuthFailures(node.metrics.auth_failures, "grpc"),
                  f"127.0.0.1:{port}", budget=node.request_bytes,
                  services=[port_service(node.topics, node.groups, node.queue_reads, None)])
    await api.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = topics_pb2_grpc.TopicsStub(channel)
            got = await stub.Get(topics_pb2.GetMessageRequest(topic="remote", queue=QUEUE, offset=1))
            read = [m async for m in stub.Read(topics_pb2.ReadQueueRequest(topic="remote", queue=QUEUE))]
            tagged = [m async for m in stub.Read(topics_pb2.ReadQueueRequest(topic="remote", queue=QUEUE, offset=1,
                                                                             tags=["x"], limit=2))]
            listed = await stub.ListQueues(topics_pb2.ListQueuesRequest(topic="remote"))
            refusals = []
            for call in (stub.Get(topics_pb2.GetMessageRequest(topic="remote", queue=QUEUE, offset=3)),
                         stub.Get(topics_pb2.GetMessageRequest(topic="sealed", queue=0, offset=0))):
                try:
                    await call
                except grpc.aio.AioRpcError as failed:
                    refusals.append(reason(failed))
    finally:
        await api.stop(None)  # type: ignore[arg-type]
    rest = (await client.get(f"{messages_url('remote')}/1")).json()
    assert (got.index, got.type, got.body, got.topic, got.topic_id, got.queue, got.queue_offset, list(got.tags)) == (
        rest["index"], log_pb2.MESSAGE, b"b", "remote", created["id"], QUEUE, 1, ["x"])
    assert [m.body for m in read] == [b"a", b"b", b"c"] and read[1] == got
    assert [m.queue_offset for m in tagged] == [1]
    assert listed.topic_id == created["id"] and listed.queues[QUEUE].next_offset == 3
    assert not listed.queues[QUEUE].HasField("lag")
    assert refusals == [(grpc.StatusCode.NOT_FOUND, "INDEX_OUT_OF_RANGE"),
                        (grpc.StatusCode.PERMISSION_DENIED, "TOPIC_NOT_READABLE")]
