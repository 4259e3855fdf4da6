"""The commit rule as a pure function (etcd's quorum/majority.go, DLedger's QuorumAckChecker)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence


def quorum_index(watermarks: Mapping[str, int], voters: Sequence[str]) -> int:
    """The highest index stored on a majority of voters: the median of their watermarks.

    Voters with no watermark count as -1; learners' watermarks are ignored.
    """
    marks = sorted((watermarks.get(v, -1) for v in voters), reverse=True)
    return marks[len(marks) // 2]
