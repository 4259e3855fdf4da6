"""The API layer: the public /v1 routes, the peer port (gRPC) and the peer client.

gRPC's fork handlers are turned off before anything imports grpc: a process that holds
gRPC channels and starts children (`raftlog cluster`, the tests, the benches) forks, and
gRPC's poller restarted in the child can find its epoll descriptor closed by
subprocess's close_fds and crash the child before it runs the node (grpc/grpc#43055).
None of our processes uses gRPC across a fork.
"""

import os

os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")
