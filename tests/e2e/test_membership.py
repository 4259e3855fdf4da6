"""Membership changes on real processes with tokens: a member that joins by itself, is promoted
and removed again with the CLI (a local cluster grows and shrinks); the refusals, on REST and
gRPC; a restarted member that keeps the group's configuration over its flags; the leader's own
removal, handed over first, its process left running without disturbing anyone.
Reference: etcd's runtime reconfiguration (learners, strict reconfiguration check), Ongaro's
thesis, chapter 4."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import grpc
import httpx
import pytest
from grpc_status import rpc_status

from raftlog.api import log_pb2 as pb
from raftlog.api import log_pb2_grpc
from raftlog.app.launcher import SMALL_FILES, LocalCluster
from tests.processes import eventually, metric, serving

TOKENS = {"reader": "reader-token-0123456789", "writer": "writer-token-0123456789",
          "admin": "admin-token-01234567890"}
ADMIN = {"authorization": f"Bearer {TOKENS['admin']}"}
READER = {"authorization": f"Bearer {TOKENS['reader']}"}
PROMOTE_LAG = 50


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    tokens = ",".join(f"{role}:{token}" for role, token in TOKENS.items())
    yield from serving(tmp_path_factory.mktemp("membership"), 3,
                       settings={**SMALL_FILES, "tokens": tokens, "max_promote_lag_entries": PROMOTE_LAG})


def url(cluster: LocalCluster, member_id: str) -> str:
    return cluster.members[member_id].client_url


def members(cluster: LocalCluster, member_id: str) -> dict[str, Any]:
    answer = httpx.get(f"{url(cluster, member_id)}/v1/cluster/members", headers=READER, timeout=5)
    assert answer.status_code == 200, answer.text
    return answer.json()


def kinds(configuration: dict[str, Any]) -> dict[str, str]:
    return {m["id"]: "voter" if m["voter"] else "learner" for m in configuration["members"]}


def append(cluster: LocalCluster, via: str, count: int) -> int:
    last = -1
    for i in range(count):
        answer = httpx.post(f"{url(cluster, via)}/v1/entries", content=f"entry {i}".encode(), timeout=10,
                            headers={"authorization": f"Bearer {TOKENS['writer']}"})
        assert answer.status_code == 201, answer.text
        last = answer.json()["index"]
    return last


def cli(cluster: LocalCluster, via: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "RAFTLOG_URL": url(cluster, via), "RAFTLOG_TOKEN": TOKENS["admin"]}
    return subprocess.run([sys.executable, "-m", "raftlog.app.cli", "members", *args], capture_output=True, text=True,
                          env=env, timeout=60)


def holds(cluster: LocalCluster, member_id: str, index: int) -> bool:
    answer = httpx.get(f"{url(cluster, member_id)}/v1/entries/{index}", params={"consistency": "local"},
                       headers=READER, timeout=5)
    return answer.status_code == 200


def test_a_member_joins_by_itself_is_promoted_and_removed_with_the_cli(cluster: LocalCluster) -> None:
    """A local cluster grows by a member on free ports and shrinks again."""
    leader = cluster.wait_leader()
    last = append(cluster, leader, 120)
    new = cluster.add_member()  # started with --join <n1's URL>, `peers` naming only itself
    cluster.start_member(new.id)
    cluster.wait_healthy(new.id)
    eventually(lambda: holds(cluster, new.id, last), f"{new.id} to catch up")
    for member_id in ("n1", "n2", "n3", new.id):
        assert kinds(members(cluster, member_id)) == {"n1": "voter", "n2": "voter", "n3": "voter",
                                                      new.id: "learner"}
    said = {m["id"]: m for m in members(cluster, new.id)["members"]}[new.id]
    assert (said["client_url"], said["grpc_address"]) == (new.client_url, new.grpc_address)

    promoted = cli(cluster, "n2", "promote", new.id)  # through a follower, maybe: forwarded to the leader
    assert promoted.returncode == 0, promoted.stderr
    assert f"{new.id} (voter)" in promoted.stdout
    listed = cli(cluster, "n3", "list")
    assert listed.returncode == 0 and any(line.split()[:2] == [new.id, "voter"]
                                          for line in listed.stdout.splitlines()), listed.stdout
    # four voters: a quorum is three; with two of the first three down, nothing commits without the newcomer
    assert httpx.get(f"{url(cluster, new.id)}/readyz", timeout=5).status_code == 200

    removed = cli(cluster, "n1", "remove", new.id)
    assert removed.returncode == 0, removed.stderr
    assert new.id not in removed.stdout
    eventually(lambda: all(new.id not in kinds(members(cluster, m)) for m in ("n1", "n2", "n3")),
               f"every member to drop {new.id}")
    cluster.stop_member(new.id)
    assert append(cluster, cluster.wait_leader(among=["n1", "n2", "n3"]), 1) > last


def test_changes_are_refused_with_a_code_and_nothing_applied(cluster: LocalCluster) -> None:
    leader = cluster.wait_leader(among=["n1", "n2", "n3"])
    follower = next(m for m in ("n1", "n2", "n3") if m != leader)
    before = members(cluster, leader)

    def refused(status: int, code: str, method: str, path: str, via: str = follower, **kwargs: Any) -> None:
        answer = httpx.request(method, f"{url(cluster, via)}{path}", timeout=15, **{"headers": ADMIN, **kwargs})
        assert (answer.status_code, answer.json()["error"]["code"]) == (status, code), answer.text
        assert members(cluster, leader)["index"] == before["index"]

    taken = cluster.members[leader].peer_port
    refused(409, "MEMBER_EXISTS", "POST", "/v1/cluster/members", json={"id": "n2", "peer_address": "127.0.0.1:1"})
    refused(409, "MEMBER_EXISTS", "POST", "/v1/cluster/members",
            json={"id": "n9", "peer_address": f"127.0.0.1:{taken}"})
    refused(400, "UNEXPECTED_ARGUMENT", "POST", "/v1/cluster/members", json={"id": "n9"})
    refused(400, "UNEXPECTED_ARGUMENT", "POST", "/v1/cluster/members", json={"id": "a-b", "peer_address": "h:1"})
    refused(404, "UNKNOWN_MEMBER", "POST", "/v1/cluster/members/n9/promote")
    refused(404, "UNKNOWN_MEMBER", "DELETE", "/v1/cluster/members/n9")
    refused(409, "ALREADY_VOTER", "POST", f"/v1/cluster/members/{follower}/promote")
    refused(403, "PERMISSION_DENIED", "DELETE", f"/v1/cluster/members/{follower}", headers=READER)

    # a learner never started lags: it is not promoted
    added = httpx.post(f"{url(cluster, follower)}/v1/cluster/members", headers=ADMIN, timeout=15,
                       json={"id": "n9", "peer_address": "127.0.0.1:1"})
    assert added.status_code == 201 and kinds(added.json())["n9"] == "learner", added.text
    before = members(cluster, leader)
    append(cluster, leader, PROMOTE_LAG + 5)
    refused(409, "LEARNER_BEHIND", "POST", "/v1/cluster/members/n9/promote")
    assert httpx.delete(f"{url(cluster, leader)}/v1/cluster/members/n9", headers=ADMIN, timeout=15).status_code == 200

    # with one follower down, removing the other would leave the voters that answer short of a quorum
    down, other = [m for m in ("n1", "n2", "n3") if m != leader]
    before = members(cluster, leader)
    cluster.kill_member(down)
    try:
        refused(409, "QUORUM_AT_RISK", "DELETE", f"/v1/cluster/members/{other}", via=leader)  # who answers now
    finally:
        cluster.start_member(down)
        cluster.wait_leader(among=["n1", "n2", "n3"])


def test_membership_through_the_grpc_api(cluster: LocalCluster) -> None:
    leader = cluster.wait_leader(among=["n1", "n2", "n3"])
    admin = [("authorization", f"Bearer {TOKENS['admin']}")]
    with grpc.insecure_channel(cluster.members[leader].grpc_address) as channel:
        stub = log_pb2_grpc.LogStub(channel)
        listed = stub.Members(pb.MembersRequest(), metadata=admin)
        assert {m.id for m in listed.members} == {"n1", "n2", "n3"} and listed.committed
        assert stub.Cluster(pb.ClusterRequest(), metadata=admin).configuration_index == listed.index
        added = stub.AddMember(pb.AddMemberRequest(id="n8", peer_address="127.0.0.1:2", client_url="http://x:8"),
                               metadata=admin)
        assert {m.id: m.voter for m in added.members}["n8"] is False and added.index > listed.index
        for call, request, code, reason in (
                (stub.AddMember, pb.AddMemberRequest(id="n8", peer_address="127.0.0.1:3"),
                 grpc.StatusCode.ALREADY_EXISTS, "MEMBER_EXISTS"),
                (stub.PromoteMember, pb.MemberRequest(id="n7"), grpc.StatusCode.NOT_FOUND, "UNKNOWN_MEMBER"),
                (stub.PromoteMember, pb.MemberRequest(id=leader), grpc.StatusCode.FAILED_PRECONDITION,
                 "ALREADY_VOTER"),
                (stub.AddMember, pb.AddMemberRequest(id="n7"), grpc.StatusCode.INVALID_ARGUMENT,
                 "UNEXPECTED_ARGUMENT")):
            with pytest.raises(grpc.RpcError) as failure:
                call(request, metadata=admin)
            assert failure.value.code() is code
            detail = rpc_status.from_call(failure.value)
            assert detail is not None and reason.encode() in detail.details[0].value
        with pytest.raises(grpc.RpcError) as denied:
            stub.RemoveMember(pb.MemberRequest(id="n8"), metadata=[("authorization", f"Bearer {TOKENS['writer']}")])
        assert denied.value.code() is grpc.StatusCode.PERMISSION_DENIED
        removed = stub.RemoveMember(pb.MemberRequest(id="n8"), metadata=admin)
        assert "n8" not in {m.id for m in removed.members}


def test_a_restarted_member_keeps_the_groups_configuration_over_its_flags(cluster: LocalCluster) -> None:
    leader = cluster.wait_leader(among=["n1", "n2", "n3"])
    added = httpx.post(f"{url(cluster, leader)}/v1/cluster/members", headers=ADMIN, timeout=15,
                       json={"id": "n7", "peer_address": "127.0.0.1:4"}).json()
    victim = next(m for m in ("n1", "n2", "n3") if m != leader)
    eventually(lambda: members(cluster, victim)["index"] == added["index"] and members(cluster, victim)["committed"],
               f"{victim} to hold the configuration")
    cluster.stop_member(victim)
    logged = cluster.members[victim].log_path.read_text(errors="replace")
    cluster.start_member(victim)  # its --peers still say n1-n3
    cluster.wait_healthy(victim)
    assert kinds(members(cluster, victim)) == kinds(added)
    said = cluster.members[victim].log_path.read_text(errors="replace")[len(logged):]
    assert said.count("is not the group's configuration") == 1, said[-2000:]
    leader = cluster.wait_leader(among=["n1", "n2", "n3"])  # a restarted member stands in a larger term first
    assert httpx.delete(f"{url(cluster, leader)}/v1/cluster/members/n7", headers=ADMIN, timeout=15).status_code == 200


def test_removing_the_leader_hands_over_first_and_its_process_left_running_disturbs_nobody(
        cluster: LocalCluster) -> None:
    old = cluster.wait_leader(among=["n1", "n2", "n3"])
    stay = [m for m in ("n1", "n2", "n3") if m != old]
    old_log = cluster.members[old].log_path
    logged = len(old_log.read_text(errors="replace"))
    removed = httpx.delete(f"{url(cluster, stay[0])}/v1/cluster/members/{old}", headers=ADMIN, timeout=30)
    assert removed.status_code == 200, removed.text
    stood = metric(url(cluster, old), "raftlog_role_changes_total", role="candidate")  # handing over, it stepped down
    assert old not in kinds(removed.json())
    new = cluster.wait_leader(among=stay)
    assert new != old
    status = httpx.get(f"{url(cluster, new)}/v1/cluster", headers=READER, timeout=5).json()
    term = status["term"]
    eventually(lambda: old not in kinds(members(cluster, old)), f"{old} to see its removal")
    # the new leader no longer beats it: it notices, and (a voter would stand now) only waits
    eventually(lambda: f"{old} lost leader {new}" in old_log.read_text(errors="replace")[logged:],
               f"{old} to stop hearing {new}")
    last = append(cluster, new, 20)
    status = httpx.get(f"{url(cluster, new)}/v1/cluster", headers=READER, timeout=5).json()
    assert (status["leader"], status["term"]) == (new, term)
    assert [m["id"] for m in status["members"]] == stay
    alone = httpx.get(f"{url(cluster, old)}/v1/cluster", headers=READER, timeout=5).json()
    assert (alone["role"], alone["leader"]) == ("follower", None)
    assert metric(url(cluster, old), "raftlog_role_changes_total", role="candidate") == stood
    assert all(holds(cluster, m, last) for m in stay)
    cluster.stop_member(old)
