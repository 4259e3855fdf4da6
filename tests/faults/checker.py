"""After the faults: what the history promised against what every member's log holds.

The logs are read from the stopped members' data files (`read_logs`), not
through the code under test. Each check is named after the promise it holds
the run to; the counts say how often each was broken.
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from raftlog.pipeline.offline import open_data_dir, read_file
from tests.faults.workload import Consumer, History, Op

COUNTS = ("lost", "misplaced", "duplicated", "failed_present", "torn_batches", "reordered", "unwritten",
          "wrong_type", "divergent", "stale_reads", "nonmonotonic_reads", "wrong_reads", "consumer_skipped",
          "consumer_repeated", "queue_misplaced", "queue_gaps", "queue_divergent", "consume_queues_wrong")
# control entries a reader of data is not handed
BOOKKEEPING = ("consumer", "producer_session", "cluster_version", "topic", "queue_commit")
WRITTEN = ("normal", "message")  # the entries that hold a client's body


@dataclass(frozen=True)
class Stored:
    index: int
    term: int
    chain_crc: int
    body: bytes
    kind: str = "normal"  # normal, message, noop, config_change, consumer, ...
    pos: int = 0
    topic_id: int | None = None  # a message's: its topic, queue and offset there, and its tags
    queue: int | None = None
    queue_offset: int | None = None
    tags: tuple[str, ...] = ()


@dataclass
class MemberLog:
    """One member's log as its files hold it, and its checkpoint's commit index."""

    entries: list[Stored]
    committed_index: int


@dataclass
class Verdict:
    acked: int = 0  # bodies acknowledged
    lost: int = 0  # acknowledged, but not in the committed log
    misplaced: int = 0  # acknowledged at an index that holds something else
    duplicated: int = 0  # in the log more than once
    failed_present: int = 0  # refused, yet in the log
    torn_batches: int = 0  # a batch in the log in part, or not at consecutive indices
    reordered: int = 0  # acknowledged before another append began, yet at a higher index
    unwritten: int = 0  # an entry no client sent
    wrong_type: int = 0  # a client's body in an entry that is not NORMAL, or a NOOP with a body
    divergent: int = 0  # indices where members' committed logs differ
    stale_reads: int = 0  # "not found" for an index acknowledged before the read began
    nonmonotonic_reads: int = 0  # "not found" for an index an earlier, completed read returned
    wrong_reads: int = 0  # a read that returned other bytes than the log holds
    commit_fell: int = 0
    consumer_skipped: int = 0  # a consumer's life that began past its committed position, or left out an entry
    consumer_repeated: int = 0  # one that began before its committed position (handed again what it had done)
    messages_acked: int = 0  # a topic's messages acknowledged (among `acked`)
    queue_misplaced: int = 0  # a message acknowledged at a topic, queue, offset or entry that holds something else
    queue_gaps: int = 0  # a queue whose offsets are not contiguous from 0 in log order on a member
    queue_divergent: int = 0  # a queue offset that members give to different messages
    consume_queues_wrong: int = 0  # a member's consume queue that is not the one its log gives
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


def read_logs(data_dirs: dict[str, Path]) -> dict[str, MemberLog]:
    """Each stopped member's log from its data files, every CRC and link checked by the offline reader."""
    logs = {}
    for member_id, path in data_dirs.items():
        plan = open_data_dir(str(path))
        entries = []
        for part in plan.files:
            for batch in read_file(part, plan.data_file_size, plan.committed_index, text=False, mark_corrupt=False,
                                   committed_only=False, batch_rows=4096):
                rows = batch.to_pydict()
                entries += [Stored(i, t, c & 0xFFFFFFFF, b, k, p, topic, q, offset, tuple(tags or ()))
                            for i, t, c, b, k, p, topic, q, offset, tags in
                            zip(rows["index"], rows["term"], rows["chain_crc"], rows["body"], rows["type"],
                                rows["pos"], rows["topic_id"], rows["queue"], rows["queue_offset"], rows["tags"],
                                strict=True)]
        logs[member_id] = MemberLog(entries, plan.committed_index)
    return logs


def check(history: History, logs: dict[str, MemberLog], violations: Iterable[str] = (),
          consumers: Iterable[Consumer] = (), topic_creates: int = 0) -> Verdict:
    """`topic_creates`: creates of a topic sent, each of which may have written a TOPIC entry."""
    verdict = Verdict()
    committed = _committed_logs(logs)
    _compare_members(committed, verdict)
    reference = max(committed.values(), key=len, default=[])
    appends = [op for op in history.ops if op.kind == "append"]
    where = _where(reference)
    _check_appends(appends, where, verdict)
    consumers = list(consumers)
    _check_unwritten(appends, reference, history.membership_changes, sum(c.commits_sent for c in consumers),
                     topic_creates, verdict)
    for consumer in consumers:
        _check_consumer(consumer, reference, verdict)
    _check_order(appends, verdict)
    by_index = {e.index: e for e in reference}
    reads = [op for op in history.ops if op.is_read and op.outcome == "ok"]
    _check_stale_reads(appends, reads, verdict)
    _check_monotonic_reads(reads, verdict)
    _check_read_values(reads, by_index, verdict)
    for violation in violations:
        verdict.commit_fell += "commit index fell" in violation
        verdict.note(violation)
    return verdict


def _committed_logs(logs: dict[str, MemberLog]) -> dict[str, list[Stored]]:
    """Each member's log up to its commit index: past it, replicas may differ and entries may go."""
    return {m: [e for e in log.entries if e.index <= log.committed_index] for m, log in logs.items()}


def _where(log: list[Stored]) -> dict[bytes, list[int]]:
    where: dict[bytes, list[int]] = defaultdict(list)
    for e in log:
        if e.kind in WRITTEN:
            where[e.body].append(e.index)
    return where


def _compare_members(logs: dict[str, list[Stored]], verdict: Verdict) -> None:
    """Every member holds the same committed entries over the range they all hold."""
    members = list(logs)
    first = max((log[0].index for log in logs.values() if log), default=0)
    last = min((log[-1].index for log in logs.values() if log), default=-1)
    views = {m: {e.index: e for e in logs[m]} for m in members}
    for index in range(first, last + 1):
        copies = {m: views[m].get(index) for m in members}
        if len({(c.term, c.chain_crc, c.body, c.kind) if c else None for c in copies.values()}) > 1:
            verdict.divergent += 1
            verdict.note(f"members differ at {index}: " + ", ".join(
                f"{m}: {(c.term, c.chain_crc) if c else 'missing'}" for m, c in copies.items()))


def _check_appends(appends: list[Op], where: dict[bytes, list[int]], verdict: Verdict) -> None:
    """Acknowledged bodies where they were acknowledged, once; refused ones absent; a batch whole or
    absent, at consecutive indices, whatever its outcome."""
    for op in appends:
        found = [where.get(body, []) for body in op.bodies]
        for k, body in enumerate(op.bodies):
            if len(found[k]) > 1:
                verdict.duplicated += 1
                verdict.note(f"{body!r} is in the log {len(found[k])} times, at {found[k]} ({describe(op)})", op)
            if op.outcome == "ok":
                verdict.acked += 1
                assert op.index is not None
                if not found[k]:
                    verdict.lost += 1
                    verdict.note(f"acknowledged {body!r} at {op.index + k} is not in the log ({describe(op)})", op)
                elif found[k][0] != op.index + k:
                    verdict.misplaced += 1
                    verdict.note(f"acknowledged {body!r} at {op.index + k} is at {found[k]} ({describe(op)})", op)
            elif op.outcome == "fail" and found[k]:
                verdict.failed_present += 1
                verdict.note(f"refused {body!r} ({op.code}) is in the log at {found[k]} ({describe(op)})", op)
        present = [f[0] for f in found if f]
        if len(op.bodies) > 1 and present and (len(present) < len(op.bodies) or present != list(
                range(present[0], present[0] + len(op.bodies)))):
            verdict.torn_batches += 1
            verdict.note(f"batch of {len(op.bodies)} is in the log as {[f or None for f in found]} "
                         f"({describe(op)})", op)


def _check_unwritten(appends: list[Op], log: list[Stored], changes: int, commits: int, creates: int,
                     verdict: Verdict) -> None:
    """Every entry is a NOOP (with no body), a CONFIG_CHANGE entry of a membership change asked for, a
    CONSUMER entry of a commit sent, a TOPIC entry of a topic's create sent, a PRODUCER_SESSION entry (a
    writer's open, which it sends again until answered) or CLUSTER_VERSION entry (the leader's own), or
    a NORMAL or MESSAGE entry with a body some client sent."""
    sent = {("normal" if op.key is None else "message", body) for op in appends for body in op.bodies}
    for e in log:
        if e.kind == "noop":
            if e.body:
                verdict.wrong_type += 1
                verdict.note(f"NOOP entry {e.index} has a body {e.body[:40]!r}")
        elif e.kind == "config_change" and changes > 0:
            changes -= 1
        elif e.kind == "consumer" and commits > 0:
            commits -= 1
        elif e.kind == "topic" and creates > 0:
            creates -= 1
        elif e.kind in ("producer_session", "cluster_version"):
            continue
        elif e.kind not in WRITTEN:
            verdict.wrong_type += 1
            verdict.note(f"entry {e.index} is a {e.kind} entry, and no client asked for one")
        elif (e.kind, e.body) not in sent:
            verdict.unwritten += 1
            verdict.note(f"{e.kind} entry {e.index} holds {e.body[:40]!r}, which no client sent as one")


def _check_consumer(consumer: Consumer, log: list[Stored], verdict: Verdict) -> None:
    """Each life of the consumer began right after a position committed before it began (the latest
    acknowledged, or one sent later whose outcome was unknown), and was handed every data entry from
    there on, in order, as the log holds them (its control entries left out)."""
    data = [e for e in log if e.kind not in BOOKKEEPING]  # what a reader of data is handed (NOOPs too)
    indices = [e.index for e in data]
    sent: list[int] = [-1]  # positions earlier lives committed or may have: -1, nothing yet
    acknowledged = -1
    for n, life in enumerate(consumer.lives):
        for problem in life.problems:
            verdict.note(problem)
        if life.delivered:
            first = bisect.bisect_left(indices, life.delivered[0][0])
            expected = data[first:first + len(life.delivered)]
            if [(e.index, e.body) for e in expected] != life.delivered:
                verdict.consumer_skipped += 1
                gap = next(k for k, (e, d) in enumerate(zip([*expected, None], life.delivered, strict=False))
                           if e is None or (e.index, e.body) != d)
                verdict.note(f"{consumer.name} life {n}: handed {life.delivered[gap][0]} where the log's next data "
                             f"entry is {expected[gap].index if gap < len(expected) else 'none'}")
            resumed_after = indices[first - 1] if first else -1  # the data entry before its first
            starts = {q for q in sent if q >= acknowledged}
            if not any(resumed_after <= q < life.delivered[0][0] for q in starts):
                early = life.delivered[0][0] <= acknowledged
                verdict.consumer_repeated += early
                verdict.consumer_skipped += not early
                verdict.note(f"{consumer.name} life {n} began at {life.delivered[0][0]}; the position committed "
                             f"before it: {acknowledged} (or one of {sorted(starts)})")
        sent += [*life.committed, *life.unknown]
        acknowledged = max([acknowledged, *life.committed])


def _check_order(appends: list[Op], verdict: Verdict) -> None:
    """Real-time order: an append acknowledged before another was invoked has the lower index."""
    done = sorted((op.complete, op.index + len(op.bodies) - 1, i) for i, op in enumerate(appends)
                  if op.outcome == "ok" and op.complete is not None and op.index is not None)
    times = [t for t, _, _ in done]
    highest: list[tuple[int, int]] = []  # (last index, position in appends) of the highest so far
    for _, last, i in done:
        highest.append(max(highest[-1], (last, i)) if highest else (last, i))
    for op in appends:
        if op.outcome != "ok" or op.index is None:
            continue
        before = bisect.bisect_left(times, op.invoke)
        if before and highest[before - 1][0] >= op.index:
            earlier = appends[highest[before - 1][1]]
            verdict.reordered += 1
            verdict.note(f"appended at {op.index}, after an append acknowledged at {highest[before - 1][0]} "
                         f"completed ({describe(earlier)}; then {describe(op)})", op)


def _check_stale_reads(appends: list[Op], reads: list[Op], verdict: Verdict) -> None:
    """A read must see every append acknowledged before it began."""
    acks = [(op.complete, op.index + len(op.bodies) - 1) for op in appends
            if op.outcome == "ok" and op.complete is not None and op.index is not None]
    for op, known in _ends_before_known(reads, acks):
        verdict.stale_reads += 1
        verdict.note(f"{op.member} said the log ends before {op.seen_end}, though {known} was "
                     f"acknowledged before the read began ({describe(op)})", op)


def _check_monotonic_reads(reads: list[Op], verdict: Verdict) -> None:
    """Once a read returned an index, no read that begins after it completed says the index is not there."""
    seen = [(op.complete, op.seen_end - 1) for op in reads
            if op.complete is not None and (op.value is not None or op.entries)]
    for op, known in _ends_before_known(reads, seen):
        verdict.nonmonotonic_reads += 1
        verdict.note(f"{op.member} said the log ends before {op.seen_end}, though an earlier read returned "
                     f"{known} ({describe(op)})", op)


def _ends_before_known(reads: list[Op], known: list[tuple[float, int]]) -> Iterator[tuple[Op, int]]:
    """The reads that said the committed log ends before an index known to be in it, (time, index),
    when they began: with that index."""
    known = sorted(known)
    times = [t for t, _ in known]
    highest = _running_max(index for _, index in known)
    for op in _claims_of_end(reads):
        before = bisect.bisect_left(times, op.invoke)
        if before and highest[before - 1] >= op.seen_end:
            yield op, highest[before - 1]


def _check_read_values(reads: list[Op], by_index: dict[int, Stored], verdict: Verdict) -> None:
    """What a read returned is what the committed log holds at that index."""
    for op in reads:
        assert op.index is not None
        returned: list[tuple[int, str | None, bytes]] = (
            [(op.index, None, op.value)] if op.value is not None else list(op.entries))  # a get: no type
        for index, kind, body in returned:
            stored = by_index.get(index)
            if stored is None or stored.body != body or kind not in (None, stored.kind):
                verdict.wrong_reads += 1
                verdict.note(f"{op.member} returned {body!r} for {index}; the log holds "
                             f"{stored.body if stored else 'nothing'!r} ({describe(op)})", op)
                break


def _claims_of_end(reads: list[Op]) -> Iterable[Op]:
    """The reads whose answer says where the committed log ends: a get that found nothing, a short
    page or stream (a full one says nothing of the end)."""
    for op in reads:
        assert op.index is not None
        if (op.value is None if op.kind == "get" else op.seen_end < op.index + op.limit):
            yield op


def _running_max(values: Iterable[int]) -> list[int]:
    out: list[int] = []
    for v in values:
        out.append(max(out[-1], v) if out else v)
    return out


def read_availability(history: History) -> dict[str, dict[str, int]]:
    """Reads answered and failed, by the fault going on when each began."""
    table: dict[str, dict[str, int]] = defaultdict(lambda: {"ok": 0, "failed": 0})
    for op in history.ops:
        if op.is_read:
            table[history.fault_at(op.invoke)]["ok" if op.outcome == "ok" else "failed"] += 1
    return dict(sorted(table.items()))


def describe(op: Op) -> str:
    took = f"{op.complete - op.invoke:.3f}s" if op.complete is not None else "?"
    return f"{op.kind} by {op.client} via {op.member} at t={op.invoke:.3f} took {took}: {op.outcome} {op.code or ''}"


def history_around(history: History, op: Op, seconds: float = 1.0, most: int = 40) -> list[str]:
    """The operations that ran within `seconds` of `op`, for the report of a violation."""
    end = op.complete if op.complete is not None else op.invoke
    near = [o for o in history.ops if o.invoke <= end + seconds
            and (o.complete if o.complete is not None else o.invoke) >= op.invoke - seconds]
    near.sort(key=lambda o: o.invoke)
    return [("=> " if o is op else "   ") + describe(o) + (f" index {o.index}" if o.index is not None else "")
            for o in near[:most]]
