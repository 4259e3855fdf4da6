"""The commit rule against a naive version (as etcd's quorum/quick_test.go does)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from raftlog.raft.config import parse_peers
from raftlog.raft.quorum import quorum_index


def naive(watermarks: dict[str, int], voters: list[str]) -> int:
    """The largest index that more than half of the voters hold."""
    marks = [watermarks.get(v, -1) for v in voters]
    best = -1
    for candidate in set(marks) | {-1}:
        if sum(1 for m in marks if m >= candidate) > len(voters) // 2:
            best = max(best, candidate)
    return best


@given(st.integers(1, 7).flatmap(lambda n: st.tuples(
    st.just([f"v{i}" for i in range(n)]),
    st.dictionaries(st.sampled_from([f"v{i}" for i in range(n)] + ["learner"]),
                    st.integers(-1, 50)))))
def test_quorum_index_is_what_a_majority_holds(case: tuple[list[str], dict[str, int]]) -> None:
    voters, watermarks = case
    assert quorum_index(watermarks, voters) == naive(watermarks, voters)


def test_learners_never_count() -> None:
    peers = parse_peers("n0-h:1;n1-h:2;n2-h:3;n3-h:4@learner;n4-h:5@learner")
    voters = [p.id for p in peers if not p.learner]
    assert voters == ["n0", "n1", "n2"]
    assert quorum_index({"n0": 10, "n3": 10, "n4": 10}, voters) == -1
    assert quorum_index({"n0": 10, "n1": 7, "n3": 10}, voters) == 7
