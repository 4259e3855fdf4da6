"""Consensus: DLedger roles, replication and commit, with no I/O of its own."""
