"""raftlog: a Raft-replicated, append-only log service."""
