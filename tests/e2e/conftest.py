"""Real node processes on loopback, with the real HTTP/2 peer transport."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from app.launcher import LocalCluster

# small files, so a test's cluster does not reserve gigabytes
SMALL_FILES = {"data_file_size": 1 << 20, "index_file_size": 32 << 12}

ClusterFactory = Callable[..., LocalCluster]


@pytest.fixture
def make_cluster(tmp_path: Path) -> Iterator[ClusterFactory]:
    """Start clusters that are stopped (every process) when the test ends, however it ends."""
    clusters: list[LocalCluster] = []

    def make(nodes: int = 3, **settings: Any) -> LocalCluster:
        cluster = LocalCluster(tmp_path / f"cluster{len(clusters)}", nodes, settings={**SMALL_FILES, **settings})
        clusters.append(cluster)
        cluster.start()
        return cluster

    yield make
    for cluster in clusters:
        cluster.stop()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """One 3-node cluster shared by a module's tests that only append and read."""
    cluster = LocalCluster(tmp_path_factory.mktemp("cluster"), 3, settings=SMALL_FILES)
    cluster.start()
    try:
        cluster.wait_leader()
        yield cluster
    finally:
        cluster.stop()
