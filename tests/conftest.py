"""Imported before any test module: `api` first, which turns gRPC's fork handlers off before
a test imports grpc (the tests start node processes from a process that holds channels)."""

from collections import Counter

import pytest

import raftlog.api  # noqa: F401


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Two tests of one id are one test to pytest-xdist, which runs only one of them (make test's
    workers): refuse the run rather than drop tests without a word."""
    shared = [nodeid for nodeid, count in Counter(item.nodeid for item in items).items() if count > 1]
    if shared:
        raise pytest.UsageError(f"{len(shared)} test ids name more than one test, e.g. {shared[0]}")
