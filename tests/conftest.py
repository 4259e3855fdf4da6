"""Imported before any test module: `api` first, which turns gRPC's fork handlers off before
a test imports grpc (the tests start node processes from a process that holds channels)."""

from collections import Counter

import pytest

import raftlog.api  # noqa: F401
from raftlog.app import launcher

LONG = ("spark", "faults")  # the markers of the files that take minutes: a Spark session, fault runs


def pytest_configure(config: pytest.Config) -> None:
    """Each of pytest-xdist's workers picks its clusters' ports from a part of the range of its own."""
    worker = getattr(config, "workerinput", None)
    if worker is not None:
        launcher.PORTS_PART = (int(worker["workerid"].removeprefix("gw")), int(worker["workercount"]))


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The files that take minutes go first, so that make test's two workers each start on one and
    share out the short files after them, rather than one worker running a long file alone at the end.
    Two tests of one id are one test to pytest-xdist, which runs only one of them: refuse the run
    rather than drop tests without a word."""
    shared = [nodeid for nodeid, count in Counter(item.nodeid for item in items).items() if count > 1]
    if shared:
        raise pytest.UsageError(f"{len(shared)} test ids name more than one test, e.g. {shared[0]}")
    items.sort(key=lambda item: not any(item.get_closest_marker(name) for name in LONG))  # stable: in file order
