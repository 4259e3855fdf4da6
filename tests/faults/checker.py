"""After the faults: what the history promised against what every member's log holds."""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

from tests.faults.workload import History, Op


@dataclass(frozen=True)
class Stored:
    index: int
    term: int
    chain_crc: int
    body: bytes


@dataclass
class Verdict:
    acked: int = 0  # bodies acknowledged
    lost: int = 0  # acknowledged, but not in the log
    misplaced: int = 0  # acknowledged at an index that holds something else
    duplicated: int = 0  # in the log more than once
    failed_present: int = 0  # refused, yet in the log
    divergent: int = 0  # indices where members' logs differ
    stale_reads: int = 0  # "not found" for an index acknowledged before the read began
    wrong_reads: int = 0  # a read that returned other bytes than the log holds
    commit_fell: int = 0
    problems: list[str] = field(default_factory=list)
    suspects: list[Op] = field(default_factory=list)  # the operations the problems are about

    @property
    def ok(self) -> bool:
        return not self.problems

    def note(self, problem: str, op: Op | None = None) -> None:
        if op is not None:
            self.suspects.append(op)
        if len(self.problems) < 20:
            self.problems.append(problem)
        elif len(self.problems) == 20:
            self.problems.append("... (more)")


def check(history: History, logs: dict[str, list[Stored]], commit_violations: list[str]) -> Verdict:
    verdict = Verdict()
    _compare_members(logs, verdict)
    reference = max(logs.values(), key=len)
    by_index = {e.index: e for e in reference}
    where: dict[bytes, list[int]] = {}
    for e in reference:
        where.setdefault(e.body, []).append(e.index)
    appends = [op for op in history.ops if op.kind == "append"]
    for op in appends:
        for k, body in enumerate(op.bodies):
            found = where.get(body, [])
            if len(found) > 1:
                verdict.duplicated += 1
                verdict.note(f"{body!r} is in the log {len(found)} times, at {found} ({_describe(op)})", op)
            if op.outcome == "ok":
                verdict.acked += 1
                assert op.index is not None
                if not found:
                    verdict.lost += 1
                    verdict.note(f"acknowledged {body!r} at {op.index + k} is not in the log ({_describe(op)})", op)
                elif found[0] != op.index + k:
                    verdict.misplaced += 1
                    verdict.note(f"acknowledged {body!r} at {op.index + k} is at {found} ({_describe(op)})", op)
            elif op.outcome == "fail" and found:
                verdict.failed_present += 1
                verdict.note(f"refused {body!r} ({op.code}) is in the log at {found} ({_describe(op)})", op)
    _check_reads(history, appends, by_index, verdict)
    verdict.commit_fell = len(commit_violations)
    for violation in commit_violations:
        verdict.note(violation)
    return verdict


def _compare_members(logs: dict[str, list[Stored]], verdict: Verdict) -> None:
    """Every member holds the same entries over the range they all hold."""
    members = list(logs)
    first = max((log[0].index for log in logs.values() if log), default=0)
    last = min((log[-1].index for log in logs.values() if log), default=-1)
    views = {m: {e.index: e for e in logs[m]} for m in members}
    for index in range(first, last + 1):
        copies = {m: views[m].get(index) for m in members}
        if len({(c.term, c.chain_crc, c.body) if c else None for c in copies.values()}) > 1:
            verdict.divergent += 1
            verdict.note(f"members differ at {index}: " + ", ".join(
                f"{m}: {(c.term, c.chain_crc) if c else 'missing'}" for m, c in copies.items()))


def _check_reads(history: History, appends: list[Op], by_index: dict[int, Stored], verdict: Verdict) -> None:
    acks = sorted((op.complete, op.index + len(op.bodies) - 1) for op in appends
                  if op.outcome == "ok" and op.complete is not None and op.index is not None)
    times = [t for t, _ in acks]
    highest: list[int] = []
    top = -1
    for _, last in acks:
        top = max(top, last)
        highest.append(top)
    for op in history.ops:
        if op.kind != "read" or op.outcome != "ok":
            continue
        assert op.index is not None
        if op.value is None or op.code == "INDEX_OUT_OF_RANGE":
            known = bisect.bisect_left(times, op.invoke)  # appends acknowledged before this read began
            if known and highest[known - 1] >= op.index:
                verdict.stale_reads += 1
                verdict.note(f"{op.member} said {op.index} is not there, acknowledged before the read began "
                             f"({_describe(op)})", op)
            continue
        stored = by_index.get(op.index)
        if stored is None or stored.body != op.value:
            verdict.wrong_reads += 1
            verdict.note(f"{op.member} returned {op.value!r} for {op.index}; the log holds "
                         f"{stored.body if stored else 'nothing'!r} ({_describe(op)})", op)


def _describe(op: Op) -> str:
    took = f"{op.complete - op.invoke:.3f}s" if op.complete is not None else "?"
    return f"{op.kind} by {op.client} via {op.member} at t={op.invoke:.3f} took {took}: {op.outcome} {op.code or ''}"


def history_around(history: History, op: Op, seconds: float = 1.0, most: int = 40) -> list[str]:
    """The operations that ran within `seconds` of `op`, for the report of a violation."""
    end = op.complete if op.complete is not None else op.invoke
    near = [o for o in history.ops if o.invoke <= end + seconds
            and (o.complete if o.complete is not None else o.invoke) >= op.invoke - seconds]
    near.sort(key=lambda o: o.invoke)
    return [("=> " if o is op else "   ") + _describe(o) + (f" index {o.index}" if o.index is not None else "")
            for o in near[:most]]
