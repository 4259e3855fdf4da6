"""Issue 44 E, the audit's M3 on a running group: who may move a named consumer, how far, how many
one caller may create, and who holds retention back. Each refusal here was a success on the tree
before it (a reader committed any consumer at any position; the retention floor was every
consumer's, by a member's setting), and the consumer role did not exist.

Tokens: a reader, a consumer token named `billing`, two writers and an admin.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import grpc
import httpx
import pytest

from raftlog.api import log_pb2 as pb
from raftlog.api import log_pb2_grpc
from raftlog.app.launcher import SMALL_FILES, LocalCluster
from raftlog.raft.cluster_version import LEVEL
from tests.e2e.test_grpc import refusal
from tests.processes import ClusterFactory, eventually, serving

READER = "reader-token-0123456789"
BILLING = "billing-consumer-token-0123"
WRITER = "writer-token-0123456789"
FLOOD = "flood-writer-token-0123456789"
ADMIN = "admin-token-0123456789abc"
PER_NAME = 3  # consumers_per_name_max, small, so a flood meets it


@pytest.fixture(scope="module")
def rights(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    yield from serving(tmp_path_factory.mktemp("consumer-rights"), 3, settings={
        **SMALL_FILES, "consumers_per_name_max": PER_NAME,
        "tokens": f"reader:reader:{READER},consumer:billing:{BILLING},writer:app:{WRITER},writer:flood:{FLOOD},"
                  f"admin:ops:{ADMIN}"})


def as_(token: str) -> dict[str, str]:
    return {"authorization": f"Bearer {token}"}


def members(cluster: LocalCluster) -> tuple[str, str]:
    """The leader's client URL and a follower's, once the group runs at cluster version 1 (a consumer
    created before has no owner) with a few entries to commit positions of."""
    leader = cluster.wait_leader()
    follower = next(m for m in cluster.members if m != leader)
    urls = cluster.members[leader].client_url, cluster.members[follower].client_url
    eventually(lambda: httpx.get(f"{urls[0]}/v1/cluster", headers=as_(READER)).json()["cluster_version"] >= 1,
               "cluster version 1")
    appended = httpx.post(f"{urls[0]}/v1/entries/batch", json={"entries": [{"body": str(i)} for i in range(10)]},
                          headers=as_(WRITER))
    assert appended.status_code == 201, appended.text
    return urls


def commit(url: str, name: str, token: str, position: int = 1, **fields: Any) -> httpx.Response:
    return httpx.put(f"{url}/v1/consumers/{name}", json={"position": position, **fields}, headers=as_(token),
                     timeout=10.0)


def refused(response: httpx.Response, status: int, code: str) -> str:
    assert (response.status_code, response.json()["error"]["code"]) == (status, code), response.text
    message: str = response.json()["error"]["message"]
    return message


def test_a_reader_moves_no_consumer_and_a_consumer_token_only_its_own(rights: LocalCluster) -> None:
    """Audit M3: PUT /v1/consumers/{name} needed only the reader role, for any name. Now a reader is
    refused; a consumer token moves the consumer of its name and those under it (`billing.*`), through
    any member; a writer moves any, and the owner stays the consumer's creator."""
    for url in members(rights):
        assert "needs the writer role, or a consumer token" in refused(commit(url, "billing", READER), 403,
                                                                        "PERMISSION_DENIED")
        refused(httpx.delete(f"{url}/v1/consumers/billing", headers=as_(READER)), 403, "PERMISSION_DENIED")
        own = commit(url, "billing", BILLING, 2)
        assert own.status_code == 200 and (own.json()["position"], own.json()["owner"]) == (2, "billing")
        assert commit(url, "billing.eu", BILLING).status_code == 200
        for other in ("audit", "billingx", "billin"):
            assert f"not {other!r}" in refused(commit(url, other, BILLING), 403, "PERMISSION_DENIED")
        refused(httpx.delete(f"{url}/v1/consumers/audit", headers=as_(BILLING)), 403, "PERMISSION_DENIED")
        assert httpx.delete(f"{url}/v1/consumers/billing.eu", headers=as_(BILLING)).status_code == 204
        moved = commit(url, "billing", WRITER, 3)
        assert moved.status_code == 200 and moved.json()["owner"] == "billing"  # a writer's commit: still billing's
        assert commit(url, "audit", WRITER).json()["owner"] == "app"


def test_grpc_holds_a_consumer_to_the_same_rights(rights: LocalCluster) -> None:
    leader, _ = members(rights)
    member = next(m for m in rights.members.values() if m.client_url == leader)
    with grpc.insecure_channel(member.grpc_address) as channel:
        log = log_pb2_grpc.LogStub(channel)

        def call(method: Any, request: Any, token: str) -> tuple[grpc.StatusCode, str] | Any:
            try:
                return method(request, metadata=(("authorization", f"Bearer {token}"),), timeout=10)
            except grpc.RpcError as exc:
                code, reason, _ = refusal(exc)
                return code, reason

        denied = (grpc.StatusCode.PERMISSION_DENIED, "PERMISSION_DENIED")
        assert call(log.CommitConsumer, pb.CommitConsumerRequest(name="billing", position=1), READER) == denied
        assert call(log.DeleteConsumer, pb.DeleteConsumerRequest(name="billing"), READER) == denied
        assert call(log.CommitConsumer, pb.CommitConsumerRequest(name="audit", position=1), BILLING) == denied
        own = call(log.CommitConsumer, pb.CommitConsumerRequest(name="billing.grpc", position=1), BILLING)
        assert (own.name, own.owner, own.retention_floor) == ("billing.grpc", "billing", False)
        flagged = pb.CommitConsumerRequest(name="billing.grpc", position=1, retention_floor=True)
        assert call(log.CommitConsumer, flagged, BILLING) == denied
        assert call(log.CommitConsumer, flagged, ADMIN).retention_floor is True
        far = call(log.CommitConsumer, pb.CommitConsumerRequest(name="billing.grpc", position=1 << 40), BILLING)
        assert far == (grpc.StatusCode.ABORTED, "CONSUMER_POSITION_PAST_END")
        assert call(log.DeleteConsumer, pb.DeleteConsumerRequest(name="billing.grpc"), BILLING).position == -1


def test_a_position_past_the_log_end_is_refused(rights: LocalCluster) -> None:
    """Audit M3: the position had no upper bound, so a commit could make a consumer skip what was
    never written. The leader checks it against its log's end; a follower forwards it there."""
    for url in members(rights):
        end = httpx.get(f"{url}/v1/cluster", headers=as_(READER)).json()["end_index"]
        for position in (end + 1000, 2**63 - 1):
            message = refused(commit(url, "billing", BILLING, position), 409, "CONSUMER_POSITION_PAST_END")
            assert "past the log's end" in message
        assert commit(url, "billing", BILLING, end).status_code == 200  # the last entry: all processed


def test_a_name_creates_at_most_its_quota_of_consumers(rights: LocalCluster) -> None:
    """Audit M3: 10,000 names filled consumers_max for about 10^9 entries. A caller's name creates at
    most consumers_per_name_max consumers, counted on the owner the log records; others still can."""
    leader, follower = members(rights)
    for i in range(PER_NAME):
        assert commit(leader if i % 2 else follower, f"flood.{i}", FLOOD).status_code == 200
    message = refused(commit(follower, f"flood.{PER_NAME}", FLOOD), 409, "CONSUMERS_FULL")
    assert f"flood has {PER_NAME} consumers; consumers_per_name_max is {PER_NAME}" in message
    assert commit(leader, "flood.0", FLOOD, 2).status_code == 200  # its own go on
    assert commit(leader, "other", WRITER).status_code == 200
    assert httpx.delete(f"{leader}/v1/consumers/flood.0", headers=as_(FLOOD)).status_code == 204
    assert commit(follower, f"flood.{PER_NAME}", FLOOD).status_code == 200  # room again
    listed = httpx.get(f"{follower}/v1/consumers", headers=as_(READER)).json()["consumers"]
    assert sorted(c["name"] for c in listed if c["owner"] == "flood") == [f"flood.{i}" for i in range(1, PER_NAME + 1)]


def test_only_an_admin_sets_the_retention_floor_and_a_commit_keeps_it(rights: LocalCluster) -> None:
    """The member-wide consumer_retention_floor let any consumer at position 0 pin retention. The floor
    is now a flag of each consumer, that only an admin sets or clears; other commits keep it."""
    leader, follower = members(rights)
    for token in (WRITER, BILLING):
        assert "only an admin" in refused(commit(follower, "billing", token, retention_floor=True), 403,
                                          "PERMISSION_DENIED")
    refused(commit(leader, "billing", WRITER, retention_floor=False), 403, "PERMISSION_DENIED")
    flagged = commit(follower, "billing", ADMIN, 4, retention_floor=True)
    assert flagged.status_code == 200 and flagged.json()["retention_floor"] is True
    kept = commit(leader, "billing", BILLING, 5)
    assert (kept.json()["position"], kept.json()["retention_floor"], kept.json()["owner"]) == (5, True, "billing")
    seen = httpx.get(f"{follower}/v1/consumers/billing", headers=as_(READER)).json()
    assert seen["retention_floor"] is True
    cleared = commit(leader, "billing", ADMIN, 5, retention_floor=False)
    assert cleared.json()["retention_floor"] is False


def test_below_cluster_version_1_a_plain_commit_works_and_a_flag_is_refused(make_cluster: ClusterFactory) -> None:
    """A rolling upgrade: with a member of level 0 the group writes the old CONSUMER form, which that
    member reads; a commit that sets the flag is refused naming it, through the leader or a follower;
    upgraded, the flag is written, and a consumer created before has no owner."""
    cluster = make_cluster(3, members={"n3": {"reported_level": 0}})
    leader = cluster.wait_leader()
    urls = {m: cluster.members[m].client_url for m in cluster.members}
    with httpx.Client(timeout=20.0) as http:
        assert http.get(f"{urls[leader]}/v1/cluster").json()["cluster_version"] == 0
        http.post(f"{urls[leader]}/v1/entries", content=b"an entry to process")
        plain = http.put(f"{urls['n3']}/v1/consumers/plain", json={"position": 0})
        assert plain.status_code == 200 and plain.json()["owner"] is None
        raw = http.get(f"{urls[leader]}/v1/entries/{plain.json()['index']}",
                       headers={"accept": "application/octet-stream"})
        assert raw.headers["x-raftlog-type"] == "consumer" and not raw.content[8] & 0x80  # the old form
        for via in dict.fromkeys((leader, "n3")):
            flag = http.put(f"{urls[via]}/v1/consumers/plain", json={"position": 0, "retention_floor": True})
            message = refused(flag, 409, "CLUSTER_VERSION_TOO_LOW")
            assert "n3 (level 0)" in message if via == leader else "this member's log is at 0" in message
        cluster.stop_member("n3")
        cluster.members["n3"].settings = {}
        cluster.start_member("n3")
        leader = cluster.wait_leader()
        eventually(lambda: http.get(f"{urls[leader]}/v1/cluster").json()["cluster_version"] == LEVEL, "version raised")
        flagged = http.put(f"{urls[leader]}/v1/consumers/plain", json={"position": 0, "retention_floor": True})
        assert flagged.status_code == 200, flagged.text
        assert flagged.json()["retention_floor"] is True and flagged.json()["owner"] is None  # created at level 0
        raw = http.get(f"{urls[leader]}/v1/entries/{flagged.json()['index']}",
                       headers={"accept": "application/octet-stream"})
        assert raw.content[8] & 0x80  # the extended form
