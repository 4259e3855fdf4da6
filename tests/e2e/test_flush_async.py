"""`flush_mode = "async"` on real nodes (docs/internals.md, Storage: "Durability"): an append is
acknowledged without waiting for fdatasync, and the background flush makes it durable within
`flush_interval_ms`.

What is on disk is read from the kernel: cachestat(2) counts the dirty pages of a file in the page
cache until writeback (the node's fdatasync) cleans them, however they were written. So
"acknowledged, not yet durable" is an acknowledgement while the node's own data file still has
dirty pages and no flush round has run; "durable" is those pages clean. (The kernel's own
writeback would clean them too, but only after vm.dirty_expire_centisecs, 30 s by default.)
"""

from __future__ import annotations

import ctypes
import os
from pathlib import Path
from typing import ClassVar

import httpx

from raftlog.app.launcher import LocalCluster
from tests.processes import ClusterFactory, eventually, metric

LONG_MS = 3_600_000  # no periodic flush during the test


class _CacheStat(ctypes.Structure):
    _fields_: ClassVar = [(name, ctypes.c_uint64) for name in
                          ("nr_cache", "nr_dirty", "nr_writeback", "nr_evicted", "nr_recently_evicted")]


CACHESTAT = 451  # the syscall's number on x86-64 and arm64 (Linux 6.5)
_libc = ctypes.CDLL(None, use_errno=True)


def dirty_kib(cluster: LocalCluster, member_id: str) -> int:
    """Dirty KiB of the member's data files in the page cache, as the kernel counts them."""
    dirty = 0
    for path in Path(cluster.members[member_id].data_dir, "data").iterdir():
        fd = os.open(path, os.O_RDONLY)
        try:
            whole, stat = (ctypes.c_uint64 * 2)(0, 0), _CacheStat()  # offset 0, length 0: the whole file
            if _libc.syscall(CACHESTAT, fd, whole, ctypes.byref(stat), 0) != 0:
                raise OSError(ctypes.get_errno(), "cachestat")
            dirty += stat.nr_dirty * os.sysconf("SC_PAGE_SIZE") // 1024
        finally:
            os.close(fd)
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
