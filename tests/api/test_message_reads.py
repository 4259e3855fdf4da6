"""A reader of the log loses nothing of a message (issue 45, part 5: the log-level reads stay): every
read of /v1/entries (one entry as JSON or raw, a page, NDJSON, server-sent events, and the stored
format the Python client decodes) and gRPC's Get and Read show a MESSAGE entry as a message, its
topic fields and stamp beside its own body, the body without the message's header."""

from __future__ import annotations

import json
import zlib
from typing import Any

import grpc
import httpx

from raftlog.api import log_pb2 as pb
from raftlog.api import log_pb2_grpc
from raftlog.app.node import Node
from raftlog.client import AsyncConsumer, Connection
from raftlog.storage.codec import Magic, Stamp
from raftlog.storage.message import Meta, encode_message
from raftlog.storage.record import TYPE_NAMES
from tests.api.conftest import WRITER
from tests.app.test_join import standing_in

META = Meta.of(["customer-42"], ["order", "eu"], {"region": "eu", "ü": "ß"})
STAMP = Stamp(7, 1, 3)
MESSAGE_FIELDS = {"topic_id": 12, "queue": 3, "queue_offset": 0, "keys": ["customer-42"], "tags": ["order", "eu"],
                  "properties": {"region": "eu", "ü": "ß"}}


async def write_messages(node: Node) -> int:
    """A stamped message with a text body and a bare one with bytes, through the leader's own append
    path; the index of the first."""
    bodies = [encode_message(12, 3, 0, META.encode(), META.tags_code, b"hello", STAMP),
              encode_message(12, 3, 1, b"\x00\x00" * 3, 0, b"\xff\xfe")]
    appended = await node.raft.appends.append_committed(bodies, node.raft.term, Magic.MESSAGE)
    return appended.first_index


def place(entry: dict[str, Any]) -> dict[str, Any]:
    return {name: entry[name] for name in ("index", "term", "pos")}


async def test_every_rest_read_shows_a_message_with_its_topic_fields(node: Node, client: httpx.AsyncClient) -> None:
    index = await write_messages(node)
    one = (await client.get(f"/v1/entries/{index}")).json()
    second = (await client.get(f"/v1/entries/{index + 1}")).json()
    assert one == {**place(one), "index": index, "type": "message", "body": "hello", "encoding": "utf-8",
                   "body_crc": zlib.crc32(b"hello"), "producer": {"id": 7, "epoch": 1, "sequence": 3},
                   **MESSAGE_FIELDS}
    assert second == {**place(second), "index": index + 1, "type": "message", "body": "//4=", "encoding": "base64",
                      "body_crc": zlib.crc32(b"\xff\xfe"), "topic_id": 12, "queue": 3, "queue_offset": 1, "keys": [],
                      "tags": [], "properties": {}}
    page = (await client.get("/v1/entries", params={"start": index})).json()["entries"]
    assert page == [one, second]
    ndjson = await client.get("/v1/entries", params={"start": index, "limit": 2},
                              headers={"accept": "application/x-ndjson"})
    assert [json.loads(line) for line in ndjson.text.splitlines()] == [one, second]
    events = await client.get("/v1/entries", params={"start": index, "limit": 2},
                              headers={"accept": "text/event-stream"})
    assert [json.loads(line[len("data: "):]) for line in events.text.splitlines() if line.startswith("data: ")] == [
        one, second]
    raw = await client.get(f"/v1/entries/{index}", headers={"accept": "application/octet-stream"})
    said = raw.headers
    assert raw.content == b"hello" and said["x-raftlog-type"] == "message"
    assert (said["x-raftlog-topic-id"], said["x-raftlog-queue"], said["x-raftlog-queue-offset"]) == ("12", "3", "0")
    assert [json.loads(said[f"x-raftlog-{name}"]) for name in ("keys", "tags", "properties")] == [
        MESSAGE_FIELDS["keys"], MESSAGE_FIELDS["tags"], MESSAGE_FIELDS["properties"]]
    assert (said["x-raftlog-producer-id"], said["x-raftlog-sequence"]) == ("7", "3")


async def test_grpc_get_and_read_show_a_message_with_its_topic_fields(node: Node, grpc_port: str) -> None:
    index = await write_messages(node)
    metadata = (("authorization", f"Bearer {WRITER}"),)
    async with grpc.aio.insecure_channel(grpc_port) as channel:
        stub = log_pb2_grpc.LogStub(channel)
        got = await stub.Get(pb.GetRequest(index=index), metadata=metadata)
        read = [entry async for entry in stub.Read(pb.ReadRequest(start=index, limit=2), metadata=metadata)]
    assert read[0] == got
    assert (got.type, got.body, got.body_crc, got.producer) == (pb.MESSAGE, b"hello", 907060870,
                                                               pb.Producer(id=7, epoch=1, sequence=3))
    assert (got.topic_id, got.queue, got.queue_offset, list(got.keys), list(got.tags), dict(got.properties)) == (
        12, 3, 0, MESSAGE_FIELDS["keys"], MESSAGE_FIELDS["tags"], MESSAGE_FIELDS["properties"])
    assert not got.HasField("topic")  # no topic of id 12 in the catalog: the id alone
    assert {name.upper() for name in TYPE_NAMES.values()} <= set(pb.EntryType.keys())  # gRPC names every type
    assert (read[1].body, read[1].queue_offset, read[1].HasField("producer"), read[1].HasField("topic_id")) == (
        b"\xff\xfe", 1, False, True)


async def test_the_client_reads_a_message_with_its_fields_from_inside_a_producers_batch(node: Node) -> None:
    """The stored format the client follows: a producer's entries (the reading begins inside their
    batch: the head's stamp read by index) and then messages, each with what JSON readers see."""
    async with standing_in(node.public_asgi, None) as url, Connection([url]) as connection:  # on loopback
        session = (await connection.http.post(f"{url}/v1/producers")).json()
        headers = {"X-Raftlog-Producer-Id": str(session["id"]), "X-Raftlog-Sequence": "0"}
        batch = (await connection.http.post(f"{url}/v1/entries/batch", headers=headers,
                                            json={"entries": [{"body": "a"}, {"body": "b"}, {"body": "c"}]})).json()
        index = await write_messages(node)
        async with AsyncConsumer(connection, "reader", start=batch["first_index"] + 1,
                                 auto_commit_interval_s=None) as consumer:
            records = []
            while len(records) < 4:
                records += await consumer.poll()
    producer = (session["id"], session["epoch"])
    assert [(r.type, r.body, r.producer) for r in records[:2]] == [
        ("normal", b"b", (*producer, 1)), ("normal", b"c", (*producer, 2))]
    message, bare = records[2:]
    assert (message.index, message.type, message.body, message.producer) == (index, "message", b"hello", STAMP)
    assert (message.topic_id, message.queue, message.queue_offset, list(message.keys), list(message.tags),
            message.properties) == (12, 3, 0, *(MESSAGE_FIELDS[k] for k in ("keys", "tags", "properties")))
    assert (bare.body, bare.producer, bare.queue_offset, bare.keys) == (b"\xff\xfe", None, 1, ())


async def test_a_log_read_names_a_messages_topic_from_the_catalog(node: Node, client: httpx.AsyncClient) -> None:
    topic = await node.raft.topic_appends.change_topic("create", "named", {"queues": 1})
    assert topic is not None
    answer = await client.post("/v1/topics/named/messages", json={"messages": [{"body": "m"}]})
    index = answer.json()["messages"][0]["index"]
    read = (await client.get(f"/v1/entries/{index}")).json()
    assert (read["topic"], read["topic_id"], read["queue_offset"]) == ("named", topic.id, 0)
