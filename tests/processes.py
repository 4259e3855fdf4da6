"""Real node processes on loopback for tests: clusters that always stop, and polling helpers."""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from raftlog.app.launcher import PORTS_FROM, SMALL_FILES, LocalCluster

ClusterFactory = Callable[..., LocalCluster]


@pytest.fixture
def make_cluster(tmp_path: Path) -> Iterator[ClusterFactory]:
    """Start clusters that are stopped (every process) when the test ends, however it ends."""
    clusters: list[LocalCluster] = []

    def make(nodes: int = 3, *, members: dict[str, dict[str, Any]] | None = None, **settings: Any) -> LocalCluster:
        """`members`: a member's own settings, over the cluster's."""
        cluster = LocalCluster(tmp_path / f"cluster{len(clusters)}", nodes, settings={**SMALL_FILES, **settings})
        for member_id, own in (members or {}).items():
            cluster.members[member_id].settings = own
        clusters.append(cluster)
        cluster.start()
        return cluster

    yield make
    for cluster in clusters:
        cluster.stop()


def serving(root: Path, nodes: int = 3, **options: Any) -> Iterator[LocalCluster]:
    """For a fixture to `yield from`: a cluster with a leader, every process stopped afterwards."""
    with LocalCluster(root, nodes, **options) as cluster:
        cluster.wait_leader()
        yield cluster


def metric(url: str, name: str, **labels: str) -> float:
    """One sample of a member's /metrics, by name and labels; 0 when it has none yet."""
    for family in text_string_to_metric_families(httpx.get(f"{url}/metrics").text):
        for sample in family.samples:
            if sample.name == name and sample.labels == labels:
                return sample.value
    return 0.0


def eventually(condition: Callable[[], Any], what: str, timeout_s: float = 30.0) -> Any:
    """Poll another process's state until `condition` returns something truthy."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out waiting for {what}")
        time.sleep(0.05)


def free_port_run(count: int, start: int = 10000) -> int:
    """The first of `count` consecutive ports that are free now (for `raftlog cluster`'s port numbering),
    below the ports `free_ports` hands out."""
    for base in range(start + os.getpid() % 500 * 10, PORTS_FROM - count, count):
        socks = []
        try:
            for port in range(base, base + count):
                s = socket.socket()
                socks.append(s)
                s.bind(("127.0.0.1", port))
            return base
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    raise RuntimeError("no run of free ports")
