"""Learners as real processes (docs/internals.md, Replication: "Learners get the log but never vote or count").

Two voters and one learner (`n3-...@learner` in `peers`): if the learner's vote or copy counted,
it and one voter would be a majority of the three members, so each check below fails the
moment a learner helps elect or commit. Reference: DLedger's learner role, JoyQueue's learners.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from raftlog.app.launcher import SMALL_FILES, LocalCluster
from tests.processes import eventually, metric, serving

LEARNER = "n3"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    # debug: each vote round is logged, the event the quorum-loss check waits for
    yield from serving(tmp_path_factory.mktemp("learners"), 3, learners=1,
                       settings={**SMALL_FILES, "log_level": "debug"})


def status(cluster: LocalCluster, member_id: str) -> dict[str, Any]:
    return httpx.get(f"{cluster.members[member_id].client_url}/v1/cluster", timeout=5).json()


def never_stood(cluster: LocalCluster, member_id: str) -> bool:
    url = cluster.members[member_id].client_url
    return (metric(url, "raftlog_role_changes_total", role="candidate") == 0
            and metric(url, "raftlog_role_changes_total", role="leader") == 0
            and metric(url, "raftlog_elections_won_total") == 0)


def test_a_learner_is_listed_as_a_non_voter_holds_the_log_and_is_no_transfer_target(
        cluster: LocalCluster) -> None:
    assert f"{LEARNER}-127.0.0.1:{cluster.members[LEARNER].peer_port}@learner" in cluster.peers
    leader = cluster.wait_leader()
    assert leader != LEARNER
    members = {m["id"]: m for m in status(cluster, LEARNER)["members"]}
    assert {i: m["voter"] for i, m in members.items()} == {"n1": True, "n2": True, LEARNER: False}
    assert members[LEARNER]["role"] == "follower" and members[leader]["role"] == "leader"

    learner_url = cluster.members[LEARNER].client_url
    written = httpx.post(f"{learner_url}/v1/entries", content=b"through the learner", timeout=10)
    assert written.status_code == 201, written.text  # forwarded to the leader like any member's
    index = written.json()["index"]

    def held() -> bool:
        local = httpx.get(f"{learner_url}/v1/entries/{index}", params={"consistency": "local"}, timeout=5)
        return local.status_code == 200 and local.json()["body"] == "through the learner"

    eventually(held, "the learner to hold the entry in its own log")
    transfer = httpx.post(f"{cluster.members[leader].client_url}/v1/cluster/leader", json={"target": LEARNER},
                          timeout=10)
    assert transfer.status_code == 400 and transfer.json()["error"]["code"] == "UNKNOWN_MEMBER"
    assert status(cluster, LEARNER)["leader"] == leader
    assert never_stood(cluster, LEARNER)


def test_with_the_voters_quorum_gone_the_learner_neither_stands_nor_helps_elect(cluster: LocalCluster) -> None:
    leader = cluster.wait_leader()
    voter = next(m for m in ("n1", "n2") if m != leader)
    voter_log = cluster.members[voter].log_path
    logged = len(voter_log.read_text(errors="replace"))
    cluster.kill_member(leader)
    try:
        def rounds() -> int:
            return voter_log.read_text(errors="replace")[logged:].count(f"{voter} vote round in term")

        eventually(lambda: rounds() >= 5, f"{voter} to stand five times with only the learner beside it")
        said = status(cluster, voter)
        assert said["role"] == "candidate" and said["leader"] is None, said
        assert status(cluster, LEARNER)["role"] == "follower"
        assert "PASSED" not in voter_log.read_text(errors="replace")[logged:]
        assert never_stood(cluster, LEARNER)
    finally:
        cluster.start_member(leader)
    assert cluster.wait_leader() in ("n1", "n2")
    assert never_stood(cluster, LEARNER)


def test_no_member_logged_a_traceback(cluster: LocalCluster) -> None:
    """A learner left without a leader must wait quietly, not crash."""
    for member in cluster.members.values():
        assert "Traceback" not in member.log_path.read_text(errors="replace"), cluster.tail(member.id)
