"""Named consumers between real processes: a position committed through any member is in the log,
read back by every member, after the leader is killed and after every member restarts from its
files; readers resume after it; a compare-and-set is refused with its code; commits that reach a
member together become one entry; data readers skip the control entries unless asked."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import grpc
import httpx

from raftlog.api import log_pb2 as pb
from raftlog.api import log_pb2_grpc
from raftlog.app.launcher import LocalCluster
from tests.e2e.test_grpc import refusal
from tests.processes import ClusterFactory, eventually


def retried(cluster: LocalCluster, via: str, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
    """As a client retries while the group has no answer (no leader yet, or no connection to it)."""
    def attempt() -> dict[str, Any] | None:
        response = httpx.request(method, f"{cluster.members[via].client_url}{path}", timeout=10.0, **kwargs)
        assert response.status_code in (200, 502, 503, 504), response.text
        return response.json() if response.status_code == 200 else None

    return eventually(attempt, f"{method} {path} answered through {via}")


def append(url: str, *bodies: str) -> dict[str, Any]:
    response = httpx.post(f"{url}/v1/entries/batch", json={"entries": [{"body": b} for b in bodies]}, timeout=10.0)
    assert response.status_code == 201, response.text
    return response.json()


def test_a_member_stopped_before_it_read_a_committed_position_keeps_it(make_cluster: ClusterFactory) -> None:
    """A follower takes committed consumer entries into its table when something reads the table, or
    when its checkpoint is written; one stopped before either wrote them on its way out, reading its
    log after closing it (the fault suite saw the traceback)."""
    cluster = make_cluster(3, checkpoint_interval_ms=600_000)  # no periodic write: the stop's is the one
    leader = cluster.wait_leader()
    follower = next(m for m in cluster.members if m != leader)
    committed = retried(cluster, leader, "PUT", "/v1/consumers/late", json={"position": 0, "metadata": "m"})
    cluster_status = f"{cluster.members[follower].client_url}/v1/cluster"
    eventually(lambda: httpx.get(cluster_status, timeout=10.0).json()["committed_index"] >= committed["index"] or None,
               "the follower holds the commit")
    assert cluster.stop_member(follower) == 0
    log = cluster.members[follower].log_path.read_text()
    assert "Traceback" not in log, log
    cluster.start_member(follower)
    cluster.wait_healthy(follower)
    local = retried(cluster, follower, "GET", "/v1/consumers/late", params={"consistency": "local"})
    assert (local["position"], local["metadata"], local["index"]) == (0, "m", committed["index"])


def test_a_committed_position_survives_failover_and_restarts_and_readers_resume_after_it(
        make_cluster: ClusterFactory) -> None:
    cluster = make_cluster(3)
    leader = cluster.wait_leader()
    follower, other = (m for m in cluster.members if m != leader)
    urls = {m: cluster.members[m].client_url for m in cluster.members}
    first = append(urls[leader], "a", "b", "c", "d")["first_index"]

    committed = retried(cluster, follower, "PUT", "/v1/consumers/billing",  # forwarded to the leader
                        json={"position": first + 1, "metadata": "run 1"})
    assert (committed["name"], committed["position"], committed["metadata"]) == ("billing", first + 1, "run 1")
    assert committed["index"] > first + 3 and committed["lag"] >= 2 and committed["lag_bytes"] > 0
    seen = httpx.get(f"{urls[other]}/v1/consumers/billing").json()  # linearizable: the commit is seen anywhere
    assert (seen["position"], seen["index"]) == (first + 1, committed["index"])
    metrics = httpx.get(f"{urls[other]}/metrics").text
    assert f'raftlog_consumer_lag{{consumer="billing"}} {float(seen["lag"])}' in metrics
    assert f'raftlog_consumer_lag_bytes{{consumer="billing"}} {float(seen["lag_bytes"])}' in metrics

    page = httpx.get(f"{urls[other]}/v1/entries", params={"consumer": "billing", "limit": 10}).json()
    assert [e["body"] for e in page["entries"]] == ["c", "d"]  # on after the position; the control entry skipped
    assert page["next"] == committed["index"] + 1
    with_control = httpx.get(f"{urls[other]}/v1/entries", params={"start": committed["index"], "control": "true"})
    assert with_control.json()["entries"][0]["type"] == "consumer"
    lines = httpx.get(f"{urls[follower]}/v1/entries", params={"consumer": "billing"},
                      headers={"accept": "application/x-ndjson"}).text.splitlines()
    assert [json.loads(line)["body"] for line in lines] == ["c", "d"]
    fresh = httpx.get(f"{urls[other]}/v1/entries", params={"consumer": "nobody", "start": first + 3}).json()
    assert [e["body"] for e in fresh["entries"]] == ["d"]  # no such consumer: from `start`

    conflict = httpx.put(f"{urls[follower]}/v1/consumers/billing", json={"position": first + 3, "expected": first})
    assert conflict.status_code == 409 and conflict.json()["error"]["code"] == "CONSUMER_CONFLICT"
    assert f"at {first + 1}" in conflict.json()["error"]["message"]
    taken = retried(cluster, leader, "PUT", "/v1/consumers/billing",
                    json={"position": first + 2, "expected": first + 1})
    assert taken["position"] == first + 2
    created = retried(cluster, other, "PUT", "/v1/consumers/audit", json={"position": first, "expected": -1})
    assert created["position"] == first
    exists = httpx.put(f"{urls[other]}/v1/consumers/audit", json={"position": first, "expected": -1})
    assert exists.status_code == 409
    bad = httpx.put(f"{urls[other]}/v1/consumers/no%20spaces", json={"position": 1})
    assert bad.status_code == 400 and bad.json()["error"]["code"] == "UNEXPECTED_ARGUMENT"

    cluster.kill_member(leader)  # the new leader's table comes from its own log
    after = retried(cluster, follower, "GET", "/v1/consumers/billing")
    assert (after["position"], after["metadata"]) == (first + 2, "")  # the compare-and-set set no metadata
    deleted = httpx.delete(f"{urls[follower]}/v1/consumers/audit")
    assert deleted.status_code in (204, 503), deleted.text
    eventually(lambda: httpx.delete(f"{urls[follower]}/v1/consumers/audit").status_code == 404, "audit removed")

    cluster.start_member(leader)
    cluster.stop()  # then every member from its files: checkpoint, then the log after it
    cluster.start()
    cluster.wait_leader()
    for member in cluster.members:
        listed = retried(cluster, member, "GET", "/v1/consumers")["consumers"]
        assert [(c["name"], c["position"]) for c in listed] == [("billing", first + 2)], member
        missing = httpx.get(f"{urls[member]}/v1/consumers/audit")
        assert missing.status_code == 404 and missing.json()["error"]["code"] == "CONSUMER_NOT_FOUND"


def test_commits_that_reach_a_member_together_make_one_entry(make_cluster: ClusterFactory) -> None:
    cluster = make_cluster(3)
    leader = cluster.wait_leader()
    follower = next(m for m in cluster.members if m != leader)
    url = cluster.members[follower].client_url
    last = append(url, *(f"m{i}" for i in range(40)))["last_index"]

    async def commit_all() -> list[dict[str, Any]]:
        async with httpx.AsyncClient(timeout=10.0) as client:
            answers = await asyncio.gather(*(client.put(f"{url}/v1/consumers/fast", json={"position": last - 39 + i})
                                             for i in range(40)))
        assert all(a.status_code == 200 for a in answers), [a.text for a in answers if a.status_code != 200]
        return [a.json() for a in answers]

    answers = asyncio.run(commit_all())
    entries = {a["index"]: a["position"] for a in answers}
    assert len(entries) < 20, entries  # 40 commits in a few intervals (20 ms each)
    for a in answers:  # each answered with the entry that carried its commit, or a later one of the same
        assert entries[a["index"]] == a["position"]
    control = httpx.get(f"{url}/v1/entries", params={"start": last + 1, "control": "true"}).json()["entries"]
    assert sorted(e["index"] for e in control if e["type"] == "consumer") == sorted(entries)
    final = httpx.get(f"{url}/v1/consumers/fast").json()
    assert final["index"] == max(entries) and final["position"] == entries[max(entries)]


def test_grpc_commits_and_resumes_a_consumer(make_cluster: ClusterFactory) -> None:
    cluster = make_cluster(3)
    leader = cluster.wait_leader()
    follower = next(m for m in cluster.members if m != leader)
    with grpc.insecure_channel(cluster.members[follower].grpc_address) as channel:
        stub = log_pb2_grpc.LogStub(channel)
        appended = stub.AppendBatch(pb.AppendBatchRequest(bodies=[b"x", b"y", b"z"]), timeout=10)
        consumer = stub.CommitConsumer(pb.CommitConsumerRequest(name="g", position=appended.first_index), timeout=10)
        assert (consumer.name, consumer.position) == ("g", appended.first_index)
        assert consumer.index == appended.last_index + 1
        assert consumer.lag == 3  # y, z and the commit's own entry: the committed log after the position
        assert stub.GetConsumer(pb.ConsumerRequest(name="g"), timeout=10) == consumer
        read = stub.Read(pb.ReadRequest(consumer="g"), timeout=10)
        assert [e.body for e in read] == [b"y", b"z"]
        control = stub.Read(pb.ReadRequest(start=consumer.index, include_control=True), timeout=10)
        assert [e.type for e in control] == [pb.CONSUMER]
        try:
            stub.CommitConsumer(pb.CommitConsumerRequest(name="g", position=9, expected=0), timeout=10)
            raise AssertionError("a compare-and-set on the wrong position was taken")
        except grpc.RpcError as exc:
            code, reason, _ = refusal(exc)
            assert (code, reason) == (grpc.StatusCode.ABORTED, "CONSUMER_CONFLICT")
        assert [c.name for c in stub.ListConsumers(pb.ListConsumersRequest(), timeout=10).consumers] == ["g"]
        stub.DeleteConsumer(pb.DeleteConsumerRequest(name="g"), timeout=10)
        assert not stub.ListConsumers(pb.ListConsumersRequest(), timeout=10).consumers
