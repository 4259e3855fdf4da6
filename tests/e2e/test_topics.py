"""Topics and their messages on a real 3-member group with tokens (issue 45, parts 2 and 3): the
catalog changed by admins through any member and read the same on every member, messages appended
by key through a follower over REST and gRPC, answered with their queue and queue offset, a batch
across queues refused unless split, a drained topic refusing appends, and a topic deleted and
created again under another id."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import grpc
import httpx
import pytest
from google.protobuf import descriptor_pool
from google.rpc import error_details_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import ProtoReflectionDescriptorDatabase
from grpc_status import rpc_status

from raftlog.api import topics_pb2 as pb
from raftlog.api import topics_pb2_grpc
from raftlog.app.launcher import SMALL_FILES, LocalCluster
from raftlog.storage.message import key_queue
from tests.processes import eventually, serving

TOKENS = {"reader": "reader-token-0123456789", "writer": "writer-token-0123456789",
          "admin": "admin-token-01234567890"}
QUEUES = 4


@pytest.fixture(scope="module")
def group(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    tokens = ",".join(f"{role}:{role}s:{token}" for role, token in TOKENS.items())
    yield from serving(tmp_path_factory.mktemp("topics"), 3, settings={**SMALL_FILES, "tokens": tokens})


@pytest.fixture(scope="module")
def http() -> Iterator[httpx.Client]:
    with httpx.Client(timeout=20.0) as client:
        yield client


def as_(role: str) -> dict[str, str]:
    return {"authorization": f"Bearer {TOKENS[role]}"}


def metadata(role: str) -> list[tuple[str, str]]:
    return list(as_(role).items())


def urls(group: LocalCluster) -> tuple[str, str]:
    """The leader's client URL and a follower's."""
    leader = group.wait_leader()
    follower = next(m for m in group.members if m != leader)
    return group.members[leader].client_url, group.members[follower].client_url


def create(http: httpx.Client, url: str, name: str, **fields: Any) -> dict[str, Any]:
    answer = http.post(f"{url}/v1/topics", json={"name": name, "queues": QUEUES, **fields}, headers=as_("admin"))
    assert answer.status_code == 201, answer.text
    return dict(answer.json())


def append(http: httpx.Client, url: str, topic: str, messages: list[dict[str, Any]], **options: Any) -> httpx.Response:
    return http.post(f"{url}/v1/topics/{topic}/messages", json={"messages": messages, **options},
                     headers=as_("writer"))


def keys_in(queues: int) -> list[str]:
    """One key for each of the first `queues` queues of a topic of QUEUES queues."""
    found: dict[int, str] = {}
    for n in range(1000):
        found.setdefault(key_queue(f"customer-{n}", QUEUES), f"customer-{n}")
    return [found[q] for q in range(queues)]


def reason(failed: grpc.RpcError) -> tuple[grpc.StatusCode, str]:
    status = rpc_status.from_call(failed)  # type: ignore[arg-type]
    assert status is not None
    info = error_details_pb2.ErrorInfo()
    assert status.details[0].Unpack(info)
    return failed.code(), info.reason  # type: ignore[attr-defined]


def test_messages_by_key_through_a_follower_get_their_queue_and_offsets(group: LocalCluster,
                                                                       http: httpx.Client) -> None:
    leader_url, follower_url = urls(group)
    topic = create(http, leader_url, "orders", description="by customer")
    assert (topic["queues"], topic["perm"], topic["description"]) == (QUEUES, "rw", "by customer")
    key = "customer-42"
    first = append(http, follower_url, "orders", [{"body": "one", "keys": [key], "tags": ["new"]},
                                                  {"body": "dHdv", "encoding": "base64", "keys": [key],
                                                   "properties": {"region": "eu"}}])
    assert first.status_code == 201, first.text
    placed = first.json()["messages"]
    assert [(m["topic"], m["topic_id"], m["queue"], m["queue_offset"]) for m in placed] == \
        [("orders", topic["id"], key_queue(key, QUEUES), 0), ("orders", topic["id"], key_queue(key, QUEUES), 1)]
    assert placed[1]["index"] == placed[0]["index"] + 1 and placed[1]["pos"] > placed[0]["pos"]
    again = append(http, follower_url, "orders", [{"body": "three", "keys": [key]}])
    assert again.json()["messages"][0]["queue_offset"] == 2  # the same key, the same queue: on from there

    # one message of a batch may have no key: it goes where the keyed ones go
    mixed = append(http, follower_url, "orders", [{"body": "four", "keys": [key]}, {"body": "five"}])
    assert [m["queue_offset"] for m in mixed.json()["messages"]] == [3, 4]


def test_a_batch_across_queues_is_refused_unless_split(group: LocalCluster, http: httpx.Client) -> None:
    leader_url, follower_url = urls(group)
    create(http, leader_url, "payments")
    a, b = keys_in(2)
    batch = [{"body": "a1", "keys": [a]}, {"body": "b1", "keys": [b]}, {"body": "a2", "keys": [a]},
             {"body": "none"}]
    refused = append(http, follower_url, "payments", batch)
    assert (refused.status_code, refused.json()["error"]["code"]) == (400, "KEYS_IN_SEVERAL_QUEUES")

    split = append(http, follower_url, "payments", batch, split=True)
    assert split.status_code == 201, split.text
    placed = split.json()["messages"]  # in the order sent
    assert [(m["queue"], m["queue_offset"]) for m in placed[:3]] == [(0, 0), (1, 0), (0, 1)]
    assert placed[3]["queue"] in range(QUEUES)  # without a key: its own part, placed by the leader's turn
    assert len({m["index"] for m in placed}) == 4

    producer = http.post(f"{follower_url}/v1/producers", headers=as_("writer")).json()
    numbered = {"x-raftlog-producer-id": str(producer["id"]), "x-raftlog-sequence": "0", **as_("writer")}
    unsplittable = http.post(f"{follower_url}/v1/topics/payments/messages", json={"messages": batch, "split": True},
                             headers=numbered)
    assert unsplittable.status_code == 400 and "a producer's batch goes to one queue" in unsplittable.text


def test_the_catalog_is_the_same_on_every_member_and_changed_by_admins_only(group: LocalCluster,
                                                                             http: httpx.Client) -> None:
    leader_url, follower_url = urls(group)
    create(http, leader_url, "audit.events", max_message_bytes=1000)
    listed = {m: http.get(f"{member.client_url}/v1/topics", headers=as_("reader")).json()["topics"]
              for m, member in group.members.items()}  # linearizable: each member caught up first
    assert len({repr(topics) for topics in listed.values()}) == 1 and "audit.events" in {
        t["name"] for t in listed["n1"]}
    for member in group.members.values():
        eventually(lambda member=member: http.get(f"{member.client_url}/v1/topics?consistency=local",
                                                  headers=as_("reader")).json()["topics"] == listed["n1"],
                   f"{member.id}'s local catalog")

    for role in ("reader", "writer"):
        for url in (leader_url, follower_url):
            refused = http.post(f"{url}/v1/topics", json={"name": "mine", "queues": 1}, headers=as_(role))
            assert (refused.status_code, refused.json()["error"]["code"]) == (403, "PERMISSION_DENIED")
    unnamed = http.post(f"{follower_url}/v1/topics", json={"name": "mine", "queues": 1})
    assert unnamed.status_code == 401
    readers_append = http.post(f"{follower_url}/v1/topics/audit.events/messages", json={"messages": [{"body": "x"}]},
                               headers=as_("reader"))
    assert (readers_append.status_code, readers_append.json()["error"]["code"]) == (403, "PERMISSION_DENIED")

    too_large = append(http, follower_url, "audit.events", [{"body": "x" * 1001}])
    assert (too_large.status_code, too_large.json()["error"]["code"]) == (413, "MESSAGE_TOO_LARGE")
    exists = http.post(f"{follower_url}/v1/topics", json={"name": "audit.events", "queues": 1}, headers=as_("admin"))
    assert (exists.status_code, exists.json()["error"]["code"]) == (409, "TOPIC_EXISTS")
    shrunk = http.patch(f"{follower_url}/v1/topics/audit.events", json={"queues": 1}, headers=as_("admin"))
    assert (shrunk.status_code, shrunk.json()["error"]["code"]) == (400, "INVALID_TOPIC")
    grown = http.patch(f"{follower_url}/v1/topics/audit.events", json={"queues": 8}, headers=as_("admin"))
    assert grown.status_code == 200 and grown.json()["queues"] == 8
    assert http.get(f"{leader_url}/v1/topics/audit.events", headers=as_("reader")).json() == grown.json()


def test_a_drained_topic_refuses_appends_and_a_topic_created_again_has_another_id(group: LocalCluster,
                                                                                   http: httpx.Client) -> None:
    leader_url, follower_url = urls(group)
    first = create(http, follower_url, "drained")  # created through a follower: forwarded to the leader
    assert append(http, follower_url, "drained", [{"body": "before"}]).status_code == 201
    drained = http.patch(f"{follower_url}/v1/topics/drained", json={"writable": False}, headers=as_("admin"))
    assert drained.status_code == 200 and drained.json()["perm"] == "r-"
    for url in (leader_url, follower_url):
        refused = append(http, url, "drained", [{"body": "after"}])
        assert (refused.status_code, refused.json()["error"]["code"]) == (403, "TOPIC_NOT_WRITABLE")

    deleted = http.delete(f"{follower_url}/v1/topics/drained", headers=as_("admin"))
    assert deleted.status_code == 204
    gone = http.get(f"{follower_url}/v1/topics/drained", headers=as_("reader"))
    assert (gone.status_code, gone.json()["error"]["code"]) == (404, "TOPIC_NOT_FOUND")
    second = create(http, leader_url, "drained")
    assert second["id"] > first["id"] and second["perm"] == "rw"
    placed = append(http, follower_url, "drained", [{"body": "new"}], queue=2).json()["messages"][0]
    assert (placed["topic_id"], placed["queue"], placed["queue_offset"]) == (second["id"], 2, 0)  # its own queues


def test_grpc_through_a_follower(group: LocalCluster) -> None:
    leader = group.wait_leader()
    follower = next(m for m in group.members if m != leader)
    with grpc.insecure_channel(group.members[follower].grpc_address) as channel:
        topics = topics_pb2_grpc.TopicsStub(channel)
        with pytest.raises(grpc.RpcError) as writer_creates:
            topics.CreateTopic(pb.CreateTopicRequest(name="grpc.orders", queues=QUEUES), metadata=metadata("writer"))
        assert reason(writer_creates.value) == (grpc.StatusCode.PERMISSION_DENIED, "PERMISSION_DENIED")
        created = topics.CreateTopic(pb.CreateTopicRequest(name="grpc.orders", queues=QUEUES, description="g"),
                                     metadata=metadata("admin"))
        assert (created.name, created.queues, created.perm, created.description) == ("grpc.orders", QUEUES, "rw", "g")
        assert topics.GetTopic(pb.GetTopicRequest(name="grpc.orders"), metadata=metadata("reader")) == created
        assert created in topics.ListTopics(pb.ListTopicsRequest(), metadata=metadata("reader")).topics

        a, b = keys_in(2)
        batch = [pb.TopicMessage(body=b"a1", keys=[a], tags=["t"], properties={"p": "v"}),
                 pb.TopicMessage(body=b"b1", keys=[b])]
        with pytest.raises(grpc.RpcError) as unsplit:
            topics.Append(pb.AppendMessagesRequest(topic="grpc.orders", messages=batch), metadata=metadata("writer"))
        assert reason(unsplit.value) == (grpc.StatusCode.INVALID_ARGUMENT, "KEYS_IN_SEVERAL_QUEUES")
        split = topics.Append(pb.AppendMessagesRequest(topic="grpc.orders", messages=batch, split=True),
                              metadata=metadata("writer"))
        assert [(r.placed.topic_id, r.placed.queue, r.placed.queue_offset) for r in split.messages] == \
            [(created.id, 0, 0), (created.id, 1, 0)]
        keyed = topics.Append(pb.AppendMessagesRequest(topic="grpc.orders", messages=[
            pb.TopicMessage(body=b"a2", keys=[a]), pb.TopicMessage(body=b"a3", keys=[a])]), metadata=metadata("writer"))
        assert [(r.placed.queue, r.placed.queue_offset) for r in keyed.messages] == [(0, 1), (0, 2)]

        changed = topics.ChangeTopic(pb.ChangeTopicRequest(name="grpc.orders", writable=False),
                                     metadata=metadata("admin"))
        assert (changed.perm, changed.queues) == ("r-", QUEUES)
        with pytest.raises(grpc.RpcError) as drained:
            topics.Append(pb.AppendMessagesRequest(topic="grpc.orders", messages=[pb.TopicMessage(body=b"x")]),
                          metadata=metadata("writer"))
        assert reason(drained.value) == (grpc.StatusCode.PERMISSION_DENIED, "TOPIC_NOT_WRITABLE")
        topics.DeleteTopic(pb.DeleteTopicRequest(name="grpc.orders"), metadata=metadata("admin"))
        with pytest.raises(grpc.RpcError) as gone:
            topics.GetTopic(pb.GetTopicRequest(name="grpc.orders"), metadata=metadata("reader"))
        assert reason(gone.value) == (grpc.StatusCode.NOT_FOUND, "TOPIC_NOT_FOUND")

        huge = "a" * (1 << 20)  # a name past any topic's: refused at once, the refusal short
        for call, request, expected in (
                (topics.CreateTopic, pb.CreateTopicRequest(name=huge, queues=1), "INVALID_TOPIC"),
                (topics.GetTopic, pb.GetTopicRequest(name=huge), "TOPIC_NOT_FOUND"),
                (topics.Append, pb.AppendMessagesRequest(topic=huge, messages=[pb.TopicMessage(body=b"x")]),
                 "TOPIC_NOT_FOUND")):
            with pytest.raises(grpc.RpcError) as refused:
                call(request, metadata=metadata("admin"))
            assert reason(refused.value)[1] == expected and len(refused.value.details()) < 1024  # type: ignore[attr-defined]

        health = health_pb2_grpc.HealthStub(channel)
        assert health.Check(health_pb2.HealthCheckRequest(service="raftlog.v1.Topics")).status == \
            health_pb2.HealthCheckResponse.SERVING
        pool = descriptor_pool.DescriptorPool(ProtoReflectionDescriptorDatabase(channel))
        assert {m.name for m in pool.FindServiceByName("raftlog.v1.Topics").methods} == {
            "CreateTopic", "ListTopics", "GetTopic", "ChangeTopic", "DeleteTopic", "Append", "CommitGroupOffsets",
            "ListGroups", "GetGroup", "DeleteGroup", "Get", "Read", "ListQueues"}
