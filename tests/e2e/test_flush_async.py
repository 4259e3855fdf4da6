"""`flush_mode = "async"` on real nodes (README, Storage: "Durability"): an append is
acknowledged without waiting for fdatasync, and the background flush makes it durable within
`flush_interval_ms`.

What is on disk is read from the kernel: a page written through the node's mapping of a data
file counts as dirty in /proc/<pid>/smaps until writeback (the node's fdatasync) cleans it. So
"acknowledged, not yet durable" is an acknowledgement while the node's own data file still has
dirty pages and no flush round has run; "durable" is those pages clean. (The kernel's own
writeback would clean them too, but only after vm.dirty_expire_centisecs, 30 s by default.)
"""

from __future__ import annotations

from pathlib import Path

import httpx

from app.launcher import LocalCluster
from tests.processes import ClusterFactory, eventually, metric

LONG_MS = 3_600_000  # no periodic flush during the test


def dirty_kib(cluster: LocalCluster, member_id: str) -> int:
    """Dirty KiB of the member's mappings of its data files, as the kernel counts them."""
    member = cluster.members[member_id]
    assert member.process is not None
    data = str(Path(member.data_dir, "data").resolve())
    dirty, inside = 0, False
    with open(f"/proc/{member.process.pid}/smaps") as smaps:
        for line in smaps:
            fields = line.split()
            if "-" in fields[0] and not fields[0].endswith(":"):  # a mapping's first line
                inside = len(fields) >= 6 and fields[5].startswith(data + "/")
            elif inside and fields[0] in ("Shared_Dirty:", "Private_Dirty:"):
                dirty += int(fields[1])
    return dirty


def flushes(cluster: LocalCluster, member_id: str) -> float:
    return metric(cluster.members[member_id].client_url, "raftlog_flush_seconds_count")


def append_batch(url: str, count: int, tag: str) -> dict[str, int]:
    response = httpx.post(f"{url}/v1/entries/batch", timeout=15,
                          json={"entries": [{"body": f"{tag}-{i}"} for i in range(count)]})
    assert response.status_code == 201, response.text
    return response.json()


def test_an_append_is_acknowledged_before_any_flush(make_cluster: ClusterFactory) -> None:
    cluster = make_cluster(1, flush_mode="async", flush_interval_ms=LONG_MS)
    cluster.wait_leader()
    url = cluster.members["n1"].client_url
    assert httpx.get(f"{url}/v1/cluster", timeout=5).json()["flush_mode"] == "async"
    before = flushes(cluster, "n1")
    written = append_batch(url, 50, "unflushed")
    assert flushes(cluster, "n1") == before  # no fdatasync was waited for ...
    assert dirty_kib(cluster, "n1") > 0  # ... and the entries are not on disk yet
    got = httpx.get(f"{url}/v1/entries/{written['last_index']}", timeout=5)
    assert got.status_code == 200 and got.json()["body"] == "unflushed-49"


def test_the_background_flush_makes_acknowledged_appends_durable_on_every_member(
        make_cluster: ClusterFactory) -> None:
    cluster = make_cluster(3, flush_mode="async", flush_interval_ms=100)
    leader = cluster.wait_leader()
    before = {m: flushes(cluster, m) for m in cluster.members}
    written = append_batch(cluster.members[leader].client_url, 200, "flushed")

    def durable_everywhere() -> bool:
        return all(flushes(cluster, m) > before[m] and dirty_kib(cluster, m) == 0 for m in cluster.members)

    eventually(durable_everywhere, "every member's background flush to clean its data file's pages")
    for member_id in cluster.members:  # a killed process loses nothing in either mode
        cluster.kill_member(member_id)
    for member_id in cluster.members:
        cluster.start_member(member_id)
    leader = cluster.wait_leader()
    for member in cluster.members.values():
        got = httpx.get(f"{member.client_url}/v1/entries/{written['last_index']}", timeout=5)
        assert got.status_code == 200 and got.json()["body"] == "flushed-199"
