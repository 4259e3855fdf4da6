"""Imported before any test module: `api` first, which turns gRPC's fork handlers off before
a test imports grpc (the tests start node processes from a process that holds channels)."""

import raftlog.api  # noqa: F401
