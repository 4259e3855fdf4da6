"""raftlog: a Raft-replicated, append-only log (DLedger's protocol) behind HTTP and gRPC.

The one import package of the distribution. Its subpackages live in the repository's top-level
folders, mapped by pyproject.toml's package-dir: `raftlog.storage` (storage/), `raftlog.raft`
(raft/), `raftlog.api` (api/), `raftlog.app` (app/) and `raftlog.pipeline` (pipeline/); each
imports only from those before it.
"""
