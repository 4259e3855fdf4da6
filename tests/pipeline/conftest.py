"""One SparkSession (local[2], no UI) for the whole run, and a real 3-node cluster with a log in it."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass

import httpx
import pytest

from raftlog.app.launcher import SMALL_FILES, LocalCluster
from tests.processes import eventually

# a short-lived JVM: the C2 compiler and parallel GC threads cost more CPU than they win back (a quarter of the
# file's CPU on two cores)
JVM_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
ENTRIES = 6000  # ~3 MB of log: several 1 MiB data files on every node


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    from raftlog import pipeline

    session = (SparkSession.builder.master("local[2]").appName("raftlog-tests")
               .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.shuffle.partitions", "4").config("spark.sql.session.timeZone", "UTC")
               .config("spark.driver.extraJavaOptions", JVM_OPTIONS)
               .getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    pipeline.register(session)
    yield session
    session.stop()


def signed32(crc: int) -> int:
    """A CRC as the data source gives it: Java's (and Spark's) signed int of the same four bytes."""
    return crc - (1 << 32) if crc & 0x80000000 else crc


def body(i: int) -> bytes:
    """JSON bodies, and every 97th one binary (not UTF-8)."""
    if i % 97 == 5:
        return bytes([0xFF, 0xFE, i % 256]) * 50
    return json.dumps({"n": i, "ts": 1_790_000_000 + i * 10, "text": "x" * (300 + i % 100)}).encode()


def append(urls: list[str], first: int, count: int, batch: int = 500) -> None:
    """Appends bodies first..first+count-1 in batches through every member in turn."""
    with httpx.Client(timeout=30) as client:
        for n, start in enumerate(range(first, first + count, batch)):
            bodies = [body(i) for i in range(start, min(start + batch, first + count))]
            framed = b"".join(len(b).to_bytes(4, "big") + b for b in bodies)
            response = client.post(f"{urls[n % len(urls)]}/v1/entries/batch", content=framed,
                                   headers={"content-type": "application/vnd.raftlog.batch"})
            assert response.status_code == 201, response.text


def read_log(url: str) -> list[dict[str, object]]:
    """The whole committed log as the JSON API gives it (the reference the readers are held to)."""
    with httpx.Client(timeout=30) as client:
        response = client.get(f"{url}/v1/entries", headers={"accept": "application/x-ndjson"})
        assert response.status_code == 200
        return [json.loads(line) for line in response.text.splitlines()]


@dataclass
class Loaded:
    cluster: LocalCluster
    urls: list[str]

    def wait_replicated(self) -> int:
        """Every member has committed the leader's log end; returns that index."""
        def settled() -> int | None:
            status = httpx.get(f"{self.urls[0]}/v1/cluster", timeout=5).json()
            ends = {m["committed_index"] for m in status["members"]} | {m["end_index"] for m in status["members"]}
            return ends.pop() if len(ends) == 1 else None

        return eventually(settled, "every member to commit the whole log")

    def data(self, first: int, last: int) -> list[int]:
        """The indices from first to last of the entries a read of data is handed: all but the
        bookkeeping ones (the cluster version's entry, producer sessions, consumers' commits)."""
        return data_indices(self.urls[0], first, last)


def data_indices(url: str, first: int, last: int) -> list[int]:
    return [e["index"] for e in read_log(url) if first <= e["index"] <= last]


@pytest.fixture(scope="module")
def loaded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Loaded]:
    cluster = LocalCluster(tmp_path_factory.mktemp("pipeline") / "cluster", 3,
                           settings={**SMALL_FILES, "checkpoint_interval_ms": 100})
    try:
        cluster.start()
        cluster.wait_leader()
        urls = [m.client_url for m in cluster.members.values()]
        append(urls, 0, ENTRIES)
        yield Loaded(cluster, urls)
    finally:
        cluster.stop()

