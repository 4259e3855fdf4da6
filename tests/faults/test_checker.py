"""The checker on made-up histories: each kind of violation is seen, a clean history passes."""

from __future__ import annotations

import math
import os
import random
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from raftlog.storage import Store, StoreConfig
from raftlog.storage.codec import Magic
from tests.faults.checker import MemberLog, Stored, check, history_around, read_availability, read_logs
from tests.faults.harness import STOPPED, process_state
from tests.faults.nemesis import REPAIR_SAID, Damage, election_of_its_own, said_of
from tests.faults.run import _schedule, scan_log, vacuous
from tests.faults.workload import Consumer, FaultWindow, History, Life, Observer, Op


def log_of(*bodies: bytes, kinds: dict[int, str] | None = None) -> MemberLog:
    kinds = kinds or {}
    entries = [Stored(i, 1, 1000 + i, b, kinds.get(i, "noop" if not b else "normal")) for i, b in enumerate(bodies)]
    return MemberLog(entries, len(entries) - 1)


def append(body: bytes | list[bytes], outcome: str, index: int | None, t: float, took: float = 0.1) -> Op:
    bodies = body if isinstance(body, list) else [body]
    return Op("append", "w0", "n1", t, bodies, index=index, complete=t + took, outcome=outcome)


def read(index: int, value: bytes | None, t: float, took: float = 0.1) -> Op:
    op = Op("get", "r0", "n2", t, index=index, complete=t + took, outcome="ok", value=value)
    if value is None:
        op.code = "INDEX_OUT_OF_RANGE"
    return op


def page(start: int, limit: int, entries: list[tuple[int, str, bytes]], t: float, kind: str = "page") -> Op:
    return Op(kind, "r1", "n3", t, index=start, complete=t + 0.1, outcome="ok", limit=limit, entries=entries)


def history(*ops: Op) -> History:
    h = History()
    for op in ops:
        h.add(op)
    return h


def same(log: MemberLog) -> dict[str, MemberLog]:
    return {"n1": log, "n2": log}


def test_a_clean_history_passes() -> None:
    h = history(append(b"a", "ok", 1, 0.0), append(b"b", "unknown", None, 0.2), append(b"c", "fail", None, 0.3),
                append([b"d", b"e"], "unknown", None, 0.35), read(1, b"a", 0.5), read(5, None, 0.6),
                page(0, 10, [(0, "noop", b""), (1, "normal", b"a")], 0.25),
                page(1, 2, [(1, "normal", b"a"), (2, "normal", b"b")], 0.7, "stream"))
    verdict = check(h, same(log_of(b"", b"a", b"b", b"d", b"e")))
    assert verdict.ok and verdict.acked == 1, verdict.problems


def test_each_violation_of_the_log_is_counted() -> None:
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


def test_an_append_acknowledged_before_another_began_must_have_the_lower_index() -> None:
    """Real-time order (linearizability of appends): A acknowledged at 2 before B was invoked, B at 1."""
    a, b = append(b"a", "ok", 2, 0.0), append(b"b", "ok", 1, 0.5)
    assert check(history(a, b), same(log_of(b"", b"b", b"a"))).reordered == 1
    concurrent = append(b"b", "ok", 1, 0.05)  # invoked before A completed: either order is linearizable
    assert check(history(a, concurrent), same(log_of(b"", b"b", b"a"))).ok


def test_entries_nobody_wrote_and_entries_of_the_wrong_type_are_violations() -> None:
    h = history(append(b"a", "ok", 1, 0.0), append(b"b", "unknown", None, 0.1))
    verdict = check(h, same(log_of(b"", b"a", b"ghost", b"b", kinds={3: "noop"})))
    assert (verdict.unwritten, verdict.wrong_type) == (1, 1), verdict.problems
    config = check(h, same(log_of(b"", b"a", b"b", kinds={2: "config_change"})))
    assert config.wrong_type == 1


@pytest.mark.parametrize(("log", "torn"), [
    ((b"", b"x", b"y", b"z"), 0),  # all of it, in order
    ((b"",), 0),  # none of it
    ((b"", b"x", b"y"), 1),  # a part
    ((b"", b"x", b"other", b"y", b"z"), 1),  # all, but not at consecutive indices
])
def test_a_batch_of_unknown_outcome_is_all_or_nothing_and_contiguous(log: tuple[bytes, ...], torn: int) -> None:
    h = history(append([b"x", b"y", b"z"], "unknown", None, 0.0), append(b"other", "unknown", None, 0.0))
    assert check(h, same(log_of(*log))).torn_batches == torn


def test_a_read_must_not_lose_what_an_earlier_read_returned() -> None:
    """Monotonic reads, for a write whose outcome was unknown: nothing acknowledged it, a read saw it."""
    h = history(append(b"a", "unknown", None, 0.0), read(1, b"a", 1.0), read(1, None, 2.0))
    assert check(h, same(log_of(b"", b"a"))).nonmonotonic_reads == 1
    overlapping = history(append(b"a", "unknown", None, 0.0), read(1, b"a", 1.0), read(1, None, 1.05))
    assert check(overlapping, same(log_of(b"", b"a"))).ok  # began before the first one completed


def test_pages_and_streams_are_held_to_the_same_checks() -> None:
    log = log_of(b"", b"a", b"b")
    acked = [append(b"a", "ok", 1, 0.0), append(b"b", "ok", 2, 0.2)]
    short = page(1, 5, [(1, "normal", b"a")], 1.0, "stream")  # the log ends before 2, it says
    assert check(history(*acked, short), same(log)).stale_reads == 1
    full = page(1, 1, [(1, "normal", b"a")], 1.0)  # a full page says nothing of the end
    assert check(history(*acked, full), same(log)).ok
    wrong = page(0, 5, [(0, "noop", b""), (1, "normal", b"b")], 1.0)
    assert check(history(*acked, wrong), same(log)).wrong_reads == 1
    typed = page(0, 1, [(0, "normal", b"")], 1.0)  # the NOOP, as if it were a client's empty entry
    assert check(history(*acked, typed), same(log)).wrong_reads == 1
    seen = page(0, 5, [(0, "noop", b""), (1, "normal", b"a"), (2, "normal", b"b")], 1.0)
    assert check(history(*acked, seen, read(2, None, 2.0)), same(log)).nonmonotonic_reads == 1


def test_members_may_differ_only_past_their_commit_index() -> None:
    h = history(append(b"a", "ok", 1, 0.0))
    ahead = MemberLog([*log_of(b"", b"a").entries, Stored(2, 2, 7, b"uncommitted")], 1)
    behind = MemberLog([*log_of(b"", b"a").entries, Stored(2, 3, 9, b"other")], 1)
    assert check(h, {"n1": ahead, "n2": behind}).ok


def test_read_availability_is_counted_by_the_fault_going_on() -> None:
    h = history(read(1, b"a", 0.5), read(1, b"a", 1.5), Op("get", "r0", "n1", 1.6, index=1, outcome="fail"))
    h.faults.append(FaultWindow("halves", 1.0, 2.0))
    assert read_availability(h) == {"halves": {"ok": 1, "failed": 1}, "none": {"ok": 1, "failed": 0}}


class _Cluster:
    """What the observer looks at: members with processes, and who is being stopped on purpose."""

    def __init__(self, processes: dict[str, subprocess.Popen[bytes]]) -> None:
        self.members = {m: type("M", (), {"process": p, "client_url": "http://127.0.0.1:9"})()
                        for m, p in processes.items()}
        self.paused: set[str] = set()
        self.stopping: set[str] = set()


def test_a_member_that_exits_when_no_fault_stopped_it_is_a_violation() -> None:
    crashing = subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"])
    stopped = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        crashing.wait(10)
        cluster = _Cluster({"n1": crashing, "n2": stopped})
        cluster.stopping.add("n2")
        os.kill(stopped.pid, signal.SIGKILL)
        stopped.wait(10)
        observer = Observer(cluster)  # type: ignore[arg-type]
        with httpx.Client(timeout=0.2) as http:
            observer.look(http)
            observer.look(http)
        assert observer.violations == [f"n1 (pid {crashing.pid}) exited with code 3, though no fault stopped it"]
    finally:
        stopped.kill()


def test_two_leaders_in_one_term_are_a_violation() -> None:
    observer = Observer(_Cluster({}))  # type: ignore[arg-type]
    observer.saw(3, "n1")
    observer.saw(3, "n1")
    observer.saw(4, "n2")
    assert not observer.violations
    observer.saw(3, "n2")
    assert observer.violations == ["two leaders in term 3: ['n1', 'n2']"]


def test_a_follower_that_holds_less_than_it_acknowledged_to_its_leader_is_a_violation() -> None:
    """Only a process that lived through the leader's match index rising is held to it, and only by a
    status read after that rise: a restarted one may hold less, and learns it from the leader's compare."""
    follower = type("P", (), {"pid": 20})()
    observer = Observer(_Cluster({"n1": type("P", (), {"pid": 10})(), "n2": follower}))  # type: ignore[arg-type]
    observer.born.update({10: 0.0, 20: 0.5})

    def leader_says(match: int, at: float) -> None:
        status = {"role": "leader", "term": 3, "committed_index": 0, "end_index": 20,
                  "members": [{"id": "n1", "match_index": 20}, {"id": "n2", "match_index": match}]}
        observer.judge("n1", 10, status, at, at + 0.1)

    def follower_says(end: int, at: float) -> None:
        observer.judge("n2", follower.pid, {"role": "follower", "term": 3, "committed_index": 0, "end_index": end},
                       at, at + 0.1)

    leader_says(5, at=1.0)
    leader_says(9, at=2.0)  # n2 (pid 20, seen at 0.5) acknowledged 9 after 1.0
    follower_says(7, at=2.05)  # asked before the leader's answer: it may have been read before the ack
    assert not observer.violations
    follower.pid = 21  # restarted with its tail cut
    observer.born[21] = 2.5
    leader_says(12, at=3.0)  # the leader has not compared yet: no process of n2 is held to 12
    follower_says(4, at=3.5)
    assert not observer.violations
    follower.pid = 20
    follower_says(9, at=3.6)
    assert not observer.violations
    follower_says(7, at=3.7)
    follower_says(6, at=3.8)
    assert observer.violations == ["n2 (pid 20) acknowledged entries up to 9 in term 3, and its log ends at 7"]


async def test_the_final_logs_are_read_from_the_data_files(tmp_path: Path) -> None:
    """The offline reader, not the node's API, with each entry's type."""
    store = Store.open(tmp_path / "n1", StoreConfig(data_file_size=4096, index_file_size=32 * 64))
    store.start()
    try:
        await store.append_as_leader([b""], term=1, magic=Magic.NOOP)
        await store.append_as_leader([b"a", b"bb"], term=1)
        await store.flush()
    finally:
        await store.close()
    logs = read_logs({"n1": tmp_path / "n1"})
    assert [(e.index, e.body, e.kind) for e in logs["n1"].entries] == [(0, b"", "noop"), (1, b"a", "normal"),
                                                                         (2, b"bb", "normal")]


def test_a_node_log_is_scanned_for_errors_no_fault_explains_and_for_every_leader() -> None:
    text = b"""2026-11-25 06:00:00,001 INFO raftlog.raft: n1 is leader in term 3 (leader n1)
2026-11-25 06:00:00,002 ERROR raftlog.raft.repair: entry 7 is damaged on this member: reads of it fail
2026-11-25 06:00:00,003 ERROR raftlog.raft.node: n1: task <coroutine> died
Traceback (most recent call last):
  File "raft/node.py", line 357, in _apply_loop
AssertionError: the commit index never falls
2026-11-25 06:00:00,004 INFO raftlog.raft: n1 is follower in term 4 (leader n2)
Traceback (most recent call last):
  File "app/cli.py", line 1, in main
RuntimeError: died at exit
INFO:     Shutting down
"""
    observer = Observer(_Cluster({}))  # type: ignore[arg-type]
    observer.saw(3, "n2")
    problems = scan_log("n1", text, observer, [Damage("n1", 0, 7, 7)])  # a bit flipped in entry 7
    assert problems == [
        "n1 logged: 2026-11-25 06:00:00,003 ERROR raftlog.raft.node: n1: task <coroutine> died ... "
        'File "raft/node.py", line 357, in _apply_loop ... AssertionError: the commit index never falls',
        "n1 logged: 2026-11-25 06:00:00,004 INFO raftlog.raft: n1 is follower in term 4 (leader n2) ... "
        'File "app/cli.py", line 1, in main ... RuntimeError: died at exit']
    assert observer.violations == ["two leaders in term 3: ['n1', 'n2']"]


DAMAGE_SAID = (
    b"2026-11-25 06:00:00,001 INFO raftlog.node: n1 opened data: log 0..20\n"
    b"2026-11-25 06:00:00,002 ERROR raftlog.raft.repair: entry 7 is damaged on this member: reads of it fail\n"
    b"2026-11-25 06:00:00,003 ERROR raftlog.node: corrupt entry 12 in data/00000000000000000000 at file offset 4096: "
    b"body CRC mismatch; it is at or below the committed index, so it must be repaired from a peer; cutting the log "
    b"there and getting the rest from the peers\n")


@pytest.mark.parametrize(("damage", "unexplained"), [
    ([], [7, 12]),
    ([Damage("n1", 0, 7, 7), Damage("n1", 0, 12, math.inf)], []),  # a flipped bit in 7, a tail cut from 12 on
    ([Damage("n2", 0, 7, 7), Damage("n2", 0, 12, math.inf)], [7, 12]),  # another member's damage
    ([Damage("n1", len(DAMAGE_SAID), 7, 7), Damage("n1", len(DAMAGE_SAID), 12, math.inf)], [7, 12]),  # said before
    ([Damage("n1", 0, 8, 8), Damage("n1", 0, 13, math.inf)], [7, 12]),  # other entries
])
def test_damage_is_excused_only_on_the_member_a_fault_damaged_after_it(damage: list[Damage],
                                                                         unexplained: list[int]) -> None:
    problems = scan_log("n1", DAMAGE_SAID, Observer(_Cluster({})), damage)  # type: ignore[arg-type]
    assert [next(i for i in (7, 12) if f"entry {i} " in p) for p in problems] == unexplained


def test_a_flipped_bit_is_repaired_only_by_a_line_that_names_its_entry() -> None:
    assert said_of(REPAIR_SAID, 7, b"x WARNING raftlog.raft.repair: entry 7 repaired from n2's copy\n")
    assert not said_of(REPAIR_SAID, 7, b"x WARNING raftlog.raft.repair: entry 17 repaired from n2's copy\n")
    assert said_of(REPAIR_SAID, 12, DAMAGE_SAID)  # recovery cut the log at it, to fetch it again
    assert not said_of(REPAIR_SAID, 7, DAMAGE_SAID)  # found, not repaired


def test_a_run_that_proves_nothing_fails() -> None:
    kinds = ["kill_leader", "halves"]
    assert vacuous(10, 10, kinds, {"kill_leader": 1, "halves": 2}) == []
    assert vacuous(0, 0, kinds, {"kill_leader": 1}) == [
        "vacuous: no write was acknowledged", "vacuous: no read was answered", "vacuous: halves never took effect"]


def test_a_stopped_process_shows_state_t() -> None:
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        assert process_state(sleeper.pid) != STOPPED
        os.kill(sleeper.pid, signal.SIGSTOP)
        os.waitpid(sleeper.pid, os.WUNTRACED)  # returns once it has stopped
        assert process_state(sleeper.pid) == STOPPED
    finally:
        sleeper.kill()
        sleeper.wait()
    assert process_state(sleeper.pid) is None


def _elector(at: str, member: str, step: str) -> bytes:
    return f"2026-11-26 12:00:{at} INFO raftlog.raft.elector: {member} {step}\n".encode()


def test_an_election_is_the_groups_own_when_it_starts_with_a_lost_leader_or_a_lost_quorum() -> None:
    """A removed member left running may disturb no window; a stall of the machine may make the group
    elect a leader of its own meanwhile, which the first step toward the new term tells apart."""
    lost = _elector("01,000", "n2", "lost leader n1 (no heartbeat for 1000 ms)") + _elector(
        "01,000", "n2", "is candidate in term 5 (leader None)")
    no_quorum = _elector("01,000", "n1", "steps down in term 4 (no quorum)")
    moved = _elector("00,900", "n3", "is candidate in term 9 (leader None)")  # to a removed member's term
    deposed = _elector("00,950", "n1", "steps down in term 4 (a larger term)")
    assert election_of_its_own([lost]) and election_of_its_own([no_quorum, b"other lines\n"])
    assert not election_of_its_own([lost, moved])
    assert not election_of_its_own([deposed, lost])
    assert not election_of_its_own([b"", b"2026-11-26 12:00:01,000 INFO raftlog.raft: n1 is leader in term 4\n"])


def test_a_kind_that_cannot_apply_any_more_gives_its_turn_to_the_next() -> None:
    """A 30-minute run uses every spare machine long before its end: a replacement then would only
    be a fault that did nothing, which fails the run."""

    class Spent:
        def __init__(self) -> None:
            self.applied: list[str] = []

        def can_apply(self, kind: str) -> bool:
            return kind != "replace_member"

        def apply(self, kind: str, hold_s: float) -> None:
            self.applied.append(kind)

    nemesis = Spent()
    assert _schedule(nemesis, ["replace_member", "kill_leader"], random.Random(1), 0, lambda _: None) == []  # type: ignore[arg-type]
    assert nemesis.applied == ["kill_leader"]


def test_a_consumer_life_that_skips_or_repeats_past_its_committed_position_is_seen() -> None:
    log = log_of(b"", b"a", b"b", b"commit 2", b"c", b"d", b"e", kinds={3: "consumer"})
    appends = [append(b, "ok", i, 0.0) for i, b in ((1, b"a"), (2, b"b"), (4, b"c"), (5, b"d"), (6, b"e"))]

    def consumer(*lives: Life) -> Consumer:
        c = Consumer("c0", {}, History(), 1)
        c.lives = list(lives)
        return c

    first = Life(0.0, [(0, b""), (1, b"a"), (2, b"b"), (4, b"c")], committed=[2])  # killed after handing 4
    resumed = Life(1.0, [(4, b"c"), (5, b"d"), (6, b"e")], committed=[6])  # after 2: 4 again, as promised
    assert check(history(*appends), same(log), consumers=[consumer(first, resumed)]).ok
    early = Life(1.0, [(2, b"b"), (4, b"c")])  # before its committed position
    assert check(history(*appends), same(log), consumers=[consumer(first, early)]).consumer_repeated == 1
    late = Life(1.0, [(5, b"d"), (6, b"e")])  # past it: entry 4 never handed to anyone after its commit
    assert check(history(*appends), same(log), consumers=[consumer(first, late)]).consumer_skipped == 1
    gap = Life(1.0, [(4, b"c"), (6, b"e")])
    assert check(history(*appends), same(log), consumers=[consumer(first, gap)]).consumer_skipped == 1
    unknown = Life(0.0, [(0, b""), (1, b"a"), (2, b"b"), (4, b"c")], committed=[1], unknown=[4])
    landed = Life(1.0, [(5, b"d"), (6, b"e")])  # the commit of 4 with no answer went in after all: fine
    assert check(history(*appends), same(log), consumers=[consumer(unknown, landed)]).ok
