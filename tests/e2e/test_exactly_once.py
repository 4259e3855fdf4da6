"""Producer sessions between real processes: a retried append is answered with its original entries,
not written again, through any member, after the leader is killed, and after every member restarts
from its files; sequences out of order and fenced epochs are refused with their codes."""

from __future__ import annotations

import json
from typing import Any

import grpc
import httpx
import pyarrow as pa

from raftlog.api import log_pb2 as pb
from raftlog.api import log_pb2_grpc
from raftlog.app.launcher import LocalCluster
from raftlog.client.consumer import Consumer
from raftlog.pipeline.online import read_range
from raftlog.pipeline.options import Access
from tests.e2e.test_grpc import refusal
from tests.processes import ClusterFactory, eventually


def produce(url: str, producer: dict[str, int], sequence: int, bodies: list[str]) -> httpx.Response:
    headers = {"X-Raftlog-Producer-Id": str(producer["id"]), "X-Raftlog-Producer-Epoch": str(producer["epoch"]),
               "X-Raftlog-Sequence": str(sequence)}
    return httpx.post(f"{url}/v1/entries/batch", json={"entries": [{"body": b} for b in bodies]}, headers=headers,
                      timeout=10.0)


def answered(cluster: LocalCluster, via: str, producer: dict[str, int], sequence: int,
             bodies: list[str]) -> dict[str, Any]:
    """As a producer retries: again while the group has no answer (503 no leader yet, 502 its
    connection to a new leader not yet up, 504 the outcome unknown)."""
    def attempt() -> dict[str, Any] | None:
        response = produce(cluster.members[via].client_url, producer, sequence, bodies)
        assert response.status_code in (201, 502, 503, 504), response.text
        return response.json() if response.status_code == 201 else None

    return eventually(attempt, f"producer {producer['id']} sequence {sequence} answered through {via}")


def bodies_in_log(url: str, end: int) -> list[str]:
    page = httpx.get(f"{url}/v1/entries", params={"start": 0, "limit": end + 1}, timeout=10.0).json()
    return [e["body"] for e in page["entries"] if e["type"] == "normal"]


def test_a_retried_append_is_in_the_log_once_through_failover_and_restarts(make_cluster: ClusterFactory) -> None:
    cluster = make_cluster(3)
    leader = cluster.wait_leader()
    follower, other = (m for m in cluster.members if m != leader)
    urls = {m: cluster.members[m].client_url for m in cluster.members}
    producer = httpx.post(f"{urls[follower]}/v1/producers", timeout=10.0).json()
    assert producer["epoch"] == 0 and 0 <= producer["id"] < 2**63

    first = answered(cluster, follower, producer, 0, ["a", "b", "c"])  # forwarded to the leader
    assert first["duplicate"] is False and first["last_index"] == first["first_index"] + 2
    again = answered(cluster, other, producer, 0, ["a", "b", "c"])
    assert again == {**first, "duplicate": True}
    part = answered(cluster, leader, producer, 1, ["b"])  # a retry of a piece: its own entry
    assert (part["first_index"], part["positions"], part["duplicate"]) == \
        (first["first_index"] + 1, first["positions"][1:2], True)

    skipped = produce(urls[leader], producer, 7, ["z"])
    assert skipped.status_code == 409 and skipped.json()["error"]["code"] == "OUT_OF_ORDER_SEQUENCE"
    assert "expected 3" in skipped.json()["error"]["message"]

    entry = httpx.get(f"{urls[other]}/v1/entries/{first['first_index'] + 1}").json()
    assert (entry["body"], entry["type"]) == ("b", "normal")
    assert entry["producer"] == {"id": producer["id"], "epoch": 0, "sequence": 1}
    raw = httpx.get(f"{urls[other]}/v1/entries/{first['first_index']}", headers={"accept": "application/octet-stream"})
    assert raw.content == b"a" and raw.headers["x-raftlog-sequence"] == "0"
    assert raw.headers["x-raftlog-producer-id"] == str(producer["id"])

    cluster.kill_member(leader)  # the new leader knows the session from its own log
    retried = answered(cluster, follower, producer, 0, ["a", "b", "c"])
    assert retried == {**first, "duplicate": True, "leader": retried["leader"]} and retried["leader"] != leader
    second = answered(cluster, follower, producer, 3, ["d"])
    assert second["duplicate"] is False

    cluster.start_member(leader)
    cluster.stop()  # then every member from its files: checkpoint, then the log after it
    cluster.start()
    cluster.wait_leader()
    assert answered(cluster, leader, producer, 3, ["d"]) == {**second, "duplicate": True,
                                                             "leader": cluster.wait_leader()}
    end = answered(cluster, other, producer, 4, ["e"])["last_index"]
    for member, url in urls.items():
        eventually(lambda u=url: httpx.get(f"{u}/v1/cluster").json()["committed_index"] >= end,
                   f"{member} to commit {end}")
        assert bodies_in_log(url, end) == ["a", "b", "c", "d", "e"], member


def test_a_new_epoch_fences_the_producer_before_it(make_cluster: ClusterFactory) -> None:
    cluster = make_cluster(3)
    leader = cluster.wait_leader()
    url = cluster.members[leader].client_url
    old = httpx.post(f"{url}/v1/producers", timeout=10.0).json()
    assert answered(cluster, leader, old, 0, ["old-0"])["duplicate"] is False
    new = httpx.post(f"{url}/v1/producers", json={"id": old["id"]}, timeout=10.0).json()
    assert new == {"id": old["id"], "epoch": 1}
    ahead = produce(url, new, 5, ["new-5"])  # a new epoch starts at sequence 0
    assert ahead.status_code == 409 and ahead.json()["error"]["code"] == "OUT_OF_ORDER_SEQUENCE"
    assert answered(cluster, leader, new, 0, ["new-0"])["duplicate"] is False
    fenced = produce(url, old, 1, ["old-1"])
    assert fenced.status_code == 409 and fenced.json()["error"]["code"] == "PRODUCER_FENCED"
    bad = produce(url, {"id": -1, "epoch": 0}, 0, ["x"])
    assert bad.status_code == 400 and "x-raftlog-producer-id" in bad.json()["error"]["message"]
    half = httpx.post(f"{url}/v1/entries", content=b"x", headers={"X-Raftlog-Sequence": "0"})
    assert half.status_code == 400 and half.json()["error"]["code"] == "UNEXPECTED_ARGUMENT"


def test_grpc_appends_with_a_producer_are_answered_once(make_cluster: ClusterFactory) -> None:
    cluster = make_cluster(3)
    leader = cluster.wait_leader()
    follower = next(m for m in cluster.members if m != leader)
    with grpc.insecure_channel(cluster.members[follower].grpc_address) as channel:
        stub = log_pb2_grpc.LogStub(channel)
        session = stub.NewProducer(pb.NewProducerRequest(), timeout=10)
        producer = pb.Producer(id=session.id, epoch=session.epoch, sequence=0)
        first = stub.AppendBatch(pb.AppendBatchRequest(bodies=[b"x", b"y"], producer=producer), timeout=10)
        again = stub.AppendBatch(pb.AppendBatchRequest(bodies=[b"x", b"y"], producer=producer), timeout=10)
        assert not first.duplicate and again.duplicate
        assert (again.first_index, list(again.positions)) == (first.first_index, list(first.positions))
        one = stub.Append(pb.AppendRequest(body=b"y", producer=pb.Producer(id=session.id, sequence=1)), timeout=10)
        assert (one.index, one.duplicate) == (first.last_index, True)
        try:
            stub.Append(pb.AppendRequest(body=b"z", producer=pb.Producer(id=session.id, sequence=5)), timeout=10)
            raise AssertionError("an append out of order was taken")
        except grpc.RpcError as exc:
            code, reason, _ = refusal(exc)
            assert (code, reason) == (grpc.StatusCode.ABORTED, "OUT_OF_ORDER_SEQUENCE")
        entry = stub.Get(pb.GetRequest(index=first.first_index), timeout=10)
        assert entry.body == b"x" and entry.producer == producer and entry.type == pb.NORMAL


def test_every_reader_stamps_each_entry_of_a_batch_even_from_inside_it(make_cluster: ClusterFactory) -> None:
    """A producer's batch is stamped once in the log (its later entries name their head): a reader that
    begins inside it, on a follower, still gives each entry its producer and its own sequence: REST
    (JSON, a stream, an entry's headers), gRPC, the client's consumer, and the pipeline's online reader."""
    cluster = make_cluster(3)
    leader = cluster.wait_leader()
    url = cluster.members[next(m for m in cluster.members if m != leader)].client_url
    producer = httpx.post(f"{url}/v1/producers", timeout=10.0).json()
    batch = answered(cluster, leader, producer, 0, [f"b{i}" for i in range(6)])
    inside = batch["first_index"] + 3
    wanted = [{"id": producer["id"], "epoch": producer["epoch"], "sequence": s} for s in (3, 4, 5)]

    def page() -> list[dict[str, Any]] | None:
        found = httpx.get(f"{url}/v1/entries", params={"start": inside, "limit": 3}, timeout=10.0).json()["entries"]
        return found if len(found) == 3 else None

    assert [(e["body"], e["producer"]) for e in eventually(page, "the batch on a follower")] == list(
        zip(["b3", "b4", "b5"], wanted, strict=True))
    assert httpx.get(f"{url}/v1/entries/{inside + 1}", timeout=10.0).json()["producer"] == wanted[1]
    octets = httpx.get(f"{url}/v1/entries/{inside + 2}", headers={"accept": "application/octet-stream"}, timeout=10.0)
    assert (octets.content, octets.headers["x-raftlog-sequence"]) == (b"b5", "5")
    stream = httpx.get(f"{url}/v1/entries", params={"start": inside, "limit": 3},
                       headers={"accept": "application/x-ndjson"}, timeout=10.0)
    assert [json.loads(line)["producer"] for line in stream.text.splitlines()] == wanted

    member = cluster.members[next(m for m in cluster.members if m != leader)]
    with grpc.insecure_channel(member.grpc_address) as channel:
        stub = log_pb2_grpc.LogStub(channel)
        assert stub.Get(pb.GetRequest(index=inside), timeout=10).producer.sequence == 3
        read = stub.Read(pb.ReadRequest(start=inside + 1, limit=2), timeout=10)
        assert [(e.body, e.producer.sequence) for e in read] == [(b"b4", 4), (b"b5", 5)]

    with Consumer([url], "from-inside", start=inside, auto_commit_interval_s=None) as consumer:
        records = consumer.poll()
    assert [(r.body, r.producer) for r in records[:3]] == [
        (f"b{s}".encode(), (producer["id"], producer["epoch"], s)) for s in (3, 4, 5)]

    table = pa.Table.from_batches(read_range([url], inside + 1, inside + 2, text=True, batch_rows=100,
                                             timeout_s=10.0, access=Access()))
    assert table.column("body_text").to_pylist() == ["b4", "b5"]
    assert table.column("sequence").to_pylist() == [4, 5]
