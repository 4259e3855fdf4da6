"""A real full disk (docs/internals.md, Storage: "Disk space"): each member's data directory is a small tmpfs
the test mounts, and a filler file takes every free byte of one of them, as another program
filling the disk would.

On the leader, appends are answered 507 DISK_FULL and nothing is written; on a follower, the
group goes on with the other two and the full member keeps a sound prefix. Once the filler is
deleted, each catches up and every member holds the same log. Mounting needs root: a test that
cannot mount fails, it is not skipped.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack
from typing import Any

import httpx
import pytest

from raftlog.app.launcher import SMALL_FILES, LocalCluster
from tests.mounts import fill, tmpfs
from tests.processes import eventually

MOUNT_SIZE = "8m"  # 1 MiB data files: a few of them and the checkpoint fit, a filler takes the rest
SETTINGS = {**SMALL_FILES, "clean_interval_ms": 100, "enable_disk_force_clean": False,
            "checkpoint_interval_ms": 200}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    cluster = LocalCluster(tmp_path_factory.mktemp("full-disk"), 3, settings=SETTINGS)
    with ExitStack() as mounts:
        for member in cluster.members.values():
            mounts.enter_context(tmpfs(member.data_dir, MOUNT_SIZE))
        with cluster:  # stopped before the mounts go
            cluster.wait_leader()
            yield cluster


def status(member_url: str) -> dict[str, Any]:
    return httpx.get(f"{member_url}/v1/cluster", timeout=5).json()


def says_full(member_url: str, full: bool) -> bool:
    try:
        return status(member_url)["disk"]["full"] is full
    except httpx.HTTPError:
        return False


def append(url: str, body: bytes) -> httpx.Response:
    return httpx.post(f"{url}/v1/entries", content=body, timeout=15)


def fill_a_file(url: str, tag: str) -> None:
    """About 1.2 MiB of entries: a new data file on every member."""
    framed = b"".join(len(b).to_bytes(4, "big") + b for b in (f"{tag}-{i}-".encode() + b"f" * 40_000
                                                               for i in range(30)))
    response = httpx.post(f"{url}/v1/entries/batch", content=framed, timeout=30,
                          headers={"content-type": "application/vnd.raftlog.batch"})
    assert response.status_code == 201, response.text


def logs_agree(cluster: LocalCluster) -> int:
    """Every member holds the same entries, read from its own log; returns the common end index."""
    logs = []
    for member in cluster.members.values():
        said = status(member.client_url)
        response = httpx.get(f"{member.client_url}/v1/entries", timeout=30, headers={"accept": "application/x-ndjson"},
                             params={"start": said["begin_index"], "consistency": "local"})
        assert response.status_code == 200, response.text
        logs.append(response.text)
    assert logs[0] and len(set(logs)) == 1, [len(text) for text in logs]
    return status(next(iter(cluster.members.values())).client_url)["end_index"]


def settled(cluster: LocalCluster) -> int | None:
    """The end index once every member has committed the same one."""
    ends = set()
    for member in cluster.members.values():
        said = status(member.client_url)
        ends |= {said["end_index"], said["committed_index"]}
    return ends.pop() if len(ends) == 1 else None


def test_a_full_disk_on_the_leader_refuses_appends_with_507_and_writes_nothing(cluster: LocalCluster) -> None:
    leader = cluster.members[cluster.wait_leader()]
    follower = next(m for m in cluster.members.values() if m.id != leader.id)
    fill_a_file(leader.client_url, "before")
    end = eventually(lambda: settled(cluster), "every member to commit the first entries")
    filler = fill(leader.data_dir)
    try:
        eventually(lambda: says_full(leader.client_url, True), f"{leader.id} to say its disk is full")
        for url in (leader.client_url, follower.client_url):  # directly, and forwarded by a follower
            refused = append(url, b"x" * 2000)
            assert refused.status_code == 507, refused.text
            assert refused.json()["error"]["code"] == "DISK_FULL"
        batch = httpx.post(f"{leader.client_url}/v1/entries/batch", json={"entries": [{"body": "a"}, {"body": "b"}]},
                           timeout=15)
        assert batch.status_code == 507, batch.text
        assert all(status(m.client_url)["end_index"] == end for m in cluster.members.values())
        assert httpx.get(f"{leader.client_url}/v1/entries/{end + 1}", timeout=5).status_code == 404
        assert leader.running
    finally:
        filler.unlink()
    eventually(lambda: says_full(leader.client_url, False), f"{leader.id} to clear its disk-full flag")
    written = append(cluster.members[cluster.wait_leader()].client_url, b"after the disk was freed")
    assert written.status_code == 201, written.text
    fill_a_file(cluster.members[cluster.wait_leader()].client_url, "after")  # a new data file: space reserved
    eventually(lambda: settled(cluster), "every member to commit the entries after")
    assert logs_agree(cluster) > written.json()["index"]


def test_a_full_disk_on_a_follower_leaves_it_a_sound_prefix_and_it_catches_up(cluster: LocalCluster) -> None:
    leader = cluster.members[cluster.wait_leader()]
    full = next(m for m in cluster.members.values() if m.id != leader.id)
    eventually(lambda: settled(cluster), "every member to commit what the last test wrote")
    filler = fill(full.data_dir)
    try:
        eventually(lambda: says_full(full.client_url, True), f"{full.id} to say its disk is full")
        stuck = status(full.client_url)["end_index"]
        for n in range(3):  # more than a data file: the full member would need a new one
            fill_a_file(full.client_url, f"while-full-{n}")  # forwarded; committed by the other two
        assert status(full.client_url)["end_index"] == stuck
        assert full.running
    finally:
        filler.unlink()
    eventually(lambda: says_full(full.client_url, False), f"{full.id} to clear its disk-full flag")
    eventually(lambda: settled(cluster), f"{full.id} to catch up")
    logs_agree(cluster)
    for member in cluster.members.values():
        assert "Traceback" not in member.log_path.read_text(errors="replace"), cluster.tail(member.id)


def test_a_member_whose_disk_is_full_during_an_election_takes_part_again_once_space_is_freed(
        cluster: LocalCluster) -> None:
    old_leader = cluster.wait_leader()
    full, other = (m for m in cluster.members if m != old_leader)
    filler = fill(cluster.members[full].data_dir)
    try:
        eventually(lambda: says_full(cluster.members[full].client_url, True), f"{full} to say its disk is full")
        logged = len(cluster.members[full].log_path.read_text())
        term = status(cluster.members[other].client_url)["term"]  # before: `other` may stand at once
        cluster.kill_member(old_leader)  # the term and vote of the next election cannot be written on `full`

        def asked() -> bool:
            """`other` stood: in a new term, or again in its term (DLedger revotes first), asking `full`
            for a vote it could not store."""
            return (status(cluster.members[other].client_url)["term"] > term
                    or "cannot store a vote" in cluster.members[full].log_path.read_text()[logged:])

        eventually(lambda: asked() and status(cluster.members[full].client_url)["role"] != "follower",
                   f"{other} to stand (asking {full} for a vote it cannot store) and {full} to lose its leader")
    finally:
        filler.unlink()
    leader = cluster.wait_leader(among=[full, other], timeout_s=10)  # about a second when it works
    cluster.start_member(old_leader)
    cluster.wait_leader()
    # the member that was full must stand again when it loses a leader: its elector is alive
    if leader != full:
        cluster.kill_member(leader)
        try:
            eventually(lambda: cluster.wait_leader(among=[full, old_leader]) in (full, old_leader),
                       f"a leader among {full} and {old_leader}")
        finally:
            cluster.start_member(leader)
    cluster.wait_leader()

