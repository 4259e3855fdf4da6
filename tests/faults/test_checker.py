"""The checker on made-up histories: each kind of violation is seen, a clean history passes."""

from __future__ import annotations

from tests.faults.checker import Stored, check, history_around
from tests.faults.workload import History, Op


def log_of(*bodies: bytes) -> list[Stored]:
    return [Stored(i, 1, 1000 + i, b) for i, b in enumerate(bodies)]


def append(body: bytes, outcome: str, index: int | None, t: float) -> Op:
    return Op("append", "w0", "n1", t, [body], index=index, complete=t + 0.1, outcome=outcome)


def read(index: int, value: bytes | None, t: float) -> Op:
    op = Op("read", "r0", "n2", t, index=index, complete=t + 0.1, outcome="ok", value=value)
    if value is None:
        op.code = "INDEX_OUT_OF_RANGE"
    return op


def history(*ops: Op) -> History:
    h = History()
    for op in ops:
        h.add(op)
    return h


def test_a_clean_history_passes() -> None:
    h = history(append(b"a", "ok", 1, 0.0), append(b"b", "unknown", None, 0.2), append(b"c", "fail", None, 0.3),
                read(1, b"a", 0.5), read(3, None, 0.6))
    verdict = check(h, {"n1": log_of(b"", b"a", b"b"), "n2": log_of(b"", b"a", b"b")}, [])
    assert verdict.ok and verdict.acked == 1, verdict.problems


def test_each_violation_is_counted() -> None:
    h = history(append(b"lost", "ok", 1, 0.0), append(b"dup", "unknown", None, 0.1),
                append(b"refused", "fail", None, 0.2), append(b"moved", "ok", 2, 0.3),
                read(2, None, 1.0), read(3, b"other", 1.1))
    logs = {"n1": log_of(b"", b"moved", b"dup", b"dup", b"refused"),
            "n2": log_of(b"", b"moved", b"dup", b"XX", b"refused")}
    verdict = check(h, logs, ["n3 (pid 1): commit index fell from 9 to 3"])
    assert (verdict.lost, verdict.misplaced, verdict.duplicated, verdict.failed_present) == (1, 1, 1, 1)
    assert (verdict.stale_reads, verdict.wrong_reads, verdict.divergent, verdict.commit_fell) == (1, 1, 1, 1)
    around = history_around(h, verdict.suspects[0])
    assert any(line.startswith("=> ") for line in around)
