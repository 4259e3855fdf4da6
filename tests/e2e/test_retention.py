"""Retention on running nodes (docs/internals.md, Storage: "Disk space"): head data files are deleted once
expired, but never the last file nor one holding an entry the Raft layer still needs (not yet
applied); a follower left behind the leader's first kept entry comes back by a snapshot install.

Small (1 MiB) data files, deletion at every hour and a check every 100 ms; files are made
expired by setting their mtime back two hours, as age would.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from typing import Any

import httpx

from raftlog.app.launcher import LocalCluster
from tests.processes import ClusterFactory, eventually

EVERY_HOUR = ";".join(str(h) for h in range(24))
SETTINGS = {"delete_when": EVERY_HOUR, "clean_interval_ms": 100, "file_reserved_hours": 1,
            "checkpoint_interval_ms": 200}
BODY_BYTES = 60_000  # SMALL_FILES' max_entry_bytes is 64 KiB: about 17 entries a data file


def status(cluster: LocalCluster, member_id: str) -> dict[str, Any]:
    return httpx.get(f"{cluster.members[member_id].client_url}/v1/cluster", timeout=5).json()


def batch(tag: str, count: int) -> bytes:
    return b"".join(len(b).to_bytes(4, "big") + b for b in (f"{tag}-{i}-".encode().ljust(BODY_BYTES, b".")
                                                            for i in range(count)))


def post_batch(url: str, tag: str, count: int, timeout_s: float = 30) -> httpx.Response:
    return httpx.post(f"{url}/v1/entries/batch", content=batch(tag, count), timeout=timeout_s,
                      headers={"content-type": "application/vnd.raftlog.batch"})


def expire(cluster: LocalCluster, member_id: str) -> int:
    """Age every data file of a member by two hours; returns how many there were. A file the member
    deletes meanwhile (its own cleaning, or a snapshot install) needs no aging."""
    data = cluster.members[member_id].data_dir / "data"
    files = sorted(data.iterdir())
    old = time.time() - 2 * 3600
    for f in files:
        with contextlib.suppress(FileNotFoundError):
            os.utime(f, (old, old))
    return len(files)


def test_cleaning_keeps_what_is_not_applied_and_a_follower_left_behind_is_reinstalled(
        make_cluster: ClusterFactory) -> None:
    cluster = make_cluster(3, **SETTINGS)
    leader = cluster.wait_leader()
    lagging, stopped = (m for m in cluster.members if m != leader)
    cluster.stop_member(lagging)  # misses everything from here on
    url = cluster.members[leader].client_url
    assert post_batch(url, "applied", 60).status_code == 201  # ~3.5 files, committed by leader + one

    # the other follower paused: what the leader appends now is in its log but never committed
    before = status(cluster, leader)
    cluster.members[stopped].process.send_signal(signal.SIGSTOP)  # type: ignore[union-attr]
    try:
        with contextlib.suppress(httpx.TimeoutException):  # unknown: it waits for a quorum that cannot answer
            post_batch(url, "unapplied", 60, timeout_s=1)
        unapplied_end = eventually(lambda: (e := status(cluster, leader)["end_index"]) >= before["end_index"] + 60
                                   and e, "the leader to write the second batch")
        assert expire(cluster, leader) >= 7
        cleaned = eventually(lambda: (s := status(cluster, leader))["begin_index"] > 0 and s,
                             "the leader to clean its expired files")
        applied = cleaned["applied_index"]
        assert applied < unapplied_end
        # nothing above the applied index went; only the files wholly below it did
        assert 0 < cleaned["begin_index"] <= applied + 1 and cleaned["end_index"] == unapplied_end
        assert len(list((cluster.members[leader].data_dir / "data").iterdir())) >= 4
    finally:
        cluster.members[stopped].process.send_signal(signal.SIGCONT)  # type: ignore[union-attr]

    # the group goes on: the second batch commits (or is replaced), more is written, both clean
    leader = cluster.wait_leader(among=[leader, stopped])
    written = post_batch(cluster.members[leader].client_url, "after", 40)
    assert written.status_code == 201, written.text
    for member_id in (leader, stopped):
        expire(cluster, member_id)
    for member_id in (leader, stopped):
        eventually(lambda m=member_id: status(cluster, m)["begin_index"] > before["end_index"],
                   f"{member_id} to clean what the lagging member would need")

    cluster.start_member(lagging)  # its log ends below every other member's first kept entry
    cluster.wait_healthy(lagging)
    last = written.json()["last_index"]

    def caught_up() -> bool:
        said = status(cluster, lagging)
        return said["committed_index"] >= last and said["role"] == "follower"

    eventually(caught_up, f"{lagging} to be reinstalled and catch up")
    begin = max(status(cluster, m)["begin_index"] for m in cluster.members)
    logs = [httpx.get(f"{m.client_url}/v1/entries", params={"start": begin, "consistency": "local"}, timeout=30,
                      headers={"accept": "application/x-ndjson"}).text for m in cluster.members.values()]
    assert logs[0].count("\n") >= last - begin and len(set(logs)) == 1
    gone = httpx.get(f"{cluster.members[lagging].client_url}/v1/entries/0", timeout=5)
    assert gone.status_code == 410 and gone.json()["error"]["code"] == "INDEX_LESS_THAN_LOCAL_BEGIN"


def members(cluster: LocalCluster, member_id: str) -> dict[str, Any]:
    return httpx.get(f"{cluster.members[member_id].client_url}/v1/cluster/members", timeout=5).json()


def test_after_cleaning_a_restarted_member_and_a_new_one_still_know_the_configuration(
        make_cluster: ClusterFactory) -> None:
    """The entries that set the group's configuration are cleaned away: a restarted member takes it from
    its checkpoint, and a new member (added first, then started with the group in its `peers`), installed
    from the leader's first kept entry, gets it with the install and keeps it across a restart."""
    cluster = make_cluster(3, **SETTINGS)
    leader = cluster.wait_leader()
    url = cluster.members[leader].client_url
    new = cluster.add_member()
    new.join = None  # added by the operator, then started with the group's members in its `peers`
    cluster.peers += f";{new.id}-127.0.0.1:{new.peer_port}@learner"
    assert httpx.post(f"{url}/v1/cluster/members", json={"id": "n9", "peer_address": "127.0.0.1:1"},
                      timeout=15).status_code == 201
    assert httpx.delete(f"{url}/v1/cluster/members/n9", timeout=15).status_code == 200
    configured = httpx.post(f"{url}/v1/cluster/members", timeout=15, json={
        "id": new.id, "peer_address": f"127.0.0.1:{new.peer_port}", "client_url": new.client_url}).json()
    written = post_batch(url, "filler", 60)
    assert written.status_code == 201, written.text
    for member_id in ("n1", "n2", "n3"):
        expire(cluster, member_id)
    eventually(lambda: all(status(cluster, m)["begin_index"] > configured["index"] for m in ("n1", "n2", "n3")),
               "every member to clean the configuration's entries away")

    follower = next(m for m in ("n1", "n2", "n3") if m != leader)
    cluster.stop_member(follower)
    cluster.start_member(follower)
    cluster.wait_healthy(follower)
    assert members(cluster, follower)["index"] == configured["index"]  # from its checkpoint

    cluster.start_member(new.id)
    cluster.wait_healthy(new.id)
    last = written.json()["last_index"]
    eventually(lambda: status(cluster, new.id)["committed_index"] >= last, f"{new.id} to be installed and catch up")
    assert status(cluster, new.id)["begin_index"] > configured["index"]  # it never held those entries
    said = members(cluster, new.id)
    assert said["index"] == configured["index"] and said["members"] == configured["members"]  # from the install
    cluster.stop_member(new.id)
    cluster.start_member(new.id)
    cluster.wait_healthy(new.id)
    assert members(cluster, new.id)["index"] == configured["index"]  # the install's, checkpointed
    promoted = httpx.post(f"{cluster.members[cluster.wait_leader(among=['n1', 'n2', 'n3'])].client_url}"
                          f"/v1/cluster/members/{new.id}/promote", timeout=15)
    assert promoted.status_code == 200, promoted.text
