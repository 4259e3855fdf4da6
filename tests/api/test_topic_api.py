"""The topic routes' edges on one member in this process (tests/e2e/test_topics.py has the group):
what is judged before anything goes to the leader, a split batch committed in part, a producer's
retry, and the forwarded form of a batch read back as it was sent."""

from __future__ import annotations

from typing import Any

import httpx

from raftlog.api.peer_codec import forwarded_messages, messages_request
from raftlog.api.topics import KEYS_MAX, NAME_BYTES_MAX
from raftlog.raft.producers import Sequenced
from raftlog.raft.topic_appends import MessageBatch
from raftlog.storage.message import Meta, key_queue

QUEUES = 4


def keys_in(queues: int) -> list[str]:
    """One key for each of the first `queues` queues of a topic of QUEUES queues."""
    found: dict[int, str] = {}
    for n in range(1000):
        found.setdefault(key_queue(f"k{n}", QUEUES), f"k{n}")
    return [found[q] for q in range(queues)]


async def topic(client: httpx.AsyncClient, name: str, **fields: Any) -> dict[str, Any]:
    created = await client.post("/v1/topics", json={"name": name, "queues": QUEUES, **fields})
    assert created.status_code == 201, created.text
    return dict(created.json())


def code(answer: httpx.Response) -> tuple[int, str]:
    return answer.status_code, answer.json()["error"]["code"]


async def test_a_split_batch_committed_in_part_answers_each_message(client: httpx.AsyncClient) -> None:
    await topic(client, "small", max_message_bytes=10)
    a, b = keys_in(2)
    batch = {"messages": [{"body": "fits", "keys": [a]}, {"body": "x" * 11, "keys": [b]}, {"body": "too", "keys": [a]}],
             "split": True}
    answer = await client.post("/v1/topics/small/messages", json=batch)
    assert answer.status_code == 207, answer.text
    first, refused, third = answer.json()["messages"]
    assert (first["queue"], first["queue_offset"], third["queue"], third["queue_offset"]) == (0, 0, 0, 1)
    assert refused["error"]["code"] == "MESSAGE_TOO_LARGE" and "topic" not in refused
    every_part_fails = await client.post("/v1/topics/small/messages", json={
        "messages": [{"body": "x" * 11, "keys": [a]}, {"body": "y" * 11, "keys": [b]}], "split": True})
    assert code(every_part_fails) == (413, "MESSAGE_TOO_LARGE")


async def test_what_a_message_carries_is_bounded_before_the_leader_sees_it(client: httpx.AsyncClient) -> None:
    await topic(client, "bounded")
    url = "/v1/topics/bounded/messages"
    many_keys = await client.post(url, json={"messages": [{"body": "x", "keys": ["k"] * (KEYS_MAX + 1)}]})
    assert code(many_keys) == (400, "UNEXPECTED_ARGUMENT")
    long_key = await client.post(url, json={"messages": [{"body": "x", "keys": ["k" * (NAME_BYTES_MAX + 1)]}]})
    assert code(long_key) == (400, "UNEXPECTED_ARGUMENT") and "1 to 1024 bytes" in long_key.text
    surrogate = await client.post(url, content=b'{"messages": [{"body": "x", "tags": ["\\ud800"]}]}',
                                  headers={"content-type": "application/json"})
    assert surrogate.status_code == 400
    empty = await client.post(url, json={"messages": []})
    assert code(empty) == (400, "REQUEST_WITH_EMPTY_BODYS")
    over_entry = await client.post(url, json={"messages": [{"body": "x" * 3000, "properties": {"p": "v" * 2000}}]})
    assert code(over_entry) == (413, "UNEXPECTED_ARGUMENT") and "max_entry_bytes" in over_entry.text
    hostile = b'{"messages": [' + b"[]," * 2_000_000 + b"[]]}"
    assert code(await client.post(url, content=hostile, headers={"content-type": "application/json"})) == \
        (413, "UNEXPECTED_ARGUMENT")
    no_queue = await client.post(url, json={"messages": [{"body": "x"}], "queue": QUEUES})
    assert code(no_queue) == (404, "TOPIC_NOT_FOUND")
    assert (await client.post(url, content=b"x")).status_code == 415


async def test_a_producers_retry_is_answered_with_its_messages(client: httpx.AsyncClient) -> None:
    await topic(client, "once")
    producer = (await client.post("/v1/producers")).json()
    numbered = {"x-raftlog-producer-id": str(producer["id"]), "x-raftlog-sequence": "0"}
    batch = {"messages": [{"body": "m0", "keys": ["k"]}, {"body": "m1", "keys": ["k"]}]}
    first = await client.post("/v1/topics/once/messages", json=batch, headers=numbered)
    again = await client.post("/v1/topics/once/messages", json=batch, headers=numbered)
    assert first.status_code == again.status_code == 201, again.text
    placed, retried = first.json()["messages"], again.json()["messages"]
    assert [m["duplicate"] for m in placed] == [False, False] and [m["duplicate"] for m in retried] == [True, True]
    assert [(m["index"], m["queue_offset"]) for m in retried] == [(m["index"], m["queue_offset"]) for m in placed]


def test_a_forwarded_batch_reads_back_as_sent() -> None:
    batch = MessageBatch("orders", [b"one", b"\x00two"], [Meta.of(["k"], ["t"], {"p": "v", "q": ""}), Meta()], 3)
    producer = Sequenced(7, 1, 40)
    request = messages_request(batch, "alice", producer)
    assert forwarded_messages(request.SerializeToString()) == (batch, "alice", producer)
    unnumbered = messages_request(MessageBatch("orders", [b"x"], [Meta()]), "bob", None)
    assert forwarded_messages(unnumbered.SerializeToString()) == (MessageBatch("orders", [b"x"], [Meta()]), "bob",
                                                                  None)


def scope_of(path: str, query: bytes = b"") -> dict[str, Any]:
    return {"type": "http", "method": "POST", "path": path, "query_string": query, "scheme": "http",
            "headers": [(b"host", b"127.0.0.1"), (b"content-type", b"application/json")],
            "client": ("127.0.0.1", 1), "server": ("127.0.0.1", 80)}


async def test_a_topics_appends_take_the_fast_path_below_asgi_with_fastapis_answers(node: Any,
                                                                                    client: httpx.AsyncClient) -> None:
    """As appends of entries do: the connection answers them before an ASGI call exists, with the same
    answer FastAPI's route gives (which openapi.yaml documents, and which anything unusual still reaches)."""
    await topic(client, "fast", queues=2)
    taken = node.below_asgi.take(scope_of("/v1/topics/fast/messages"))
    assert taken is not None
    assert node.below_asgi.take(scope_of("/v1/topics/fast/messages", b"x=1")) is None  # FastAPI's to answer
    assert node.below_asgi.take(scope_of("/v1/topics/a/b/messages")) is None
    sent: list[dict[str, Any]] = []
    body = b'{"messages": [{"body": "m", "keys": ["k"]}]}'

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await taken(scope_of("/v1/topics/fast/messages"), receive, send)
    slow = await client.post("/v1/topics/fast/messages", content=body, headers={"content-type": "application/json"})
    fast = httpx.Response(sent[0]["status"], content=sent[1]["body"])
    assert fast.status_code == slow.status_code == 201
    first, second = fast.json()["messages"][0], slow.json()["messages"][0]
    assert (first["queue"], first["queue_offset"] + 1) == (second["queue"], second["queue_offset"])
