"""One run of the fault suite: a cluster, clients, a seeded schedule of faults, then the checker.

    python -m tests.faults --seconds 60 --seed 7 [--nodes 5] [--json] [--verbose] [--mutant NAME]

The verdict covers safety (the checker, on the logs read from the stopped
members' files), liveness (a group that stops making progress ends the run
with a violation, not a crash of the harness), crashes (a member that exits
when no fault stopped it, a traceback or an ERROR in a node's log that no
fault explains), faults that did nothing, and a vacuous run (no write
acknowledged, no read answered, a kind of fault that never took effect).
With a mutant (tests.faults.mutants), every node process the run started
must say it was planted there.
"""

from __future__ import annotations

import random
import re
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from raftlog.app.launcher import SMALL_FILES
from raftlog.pipeline.entries import CorruptDataError
from raftlog.pipeline.options import PipelineError
from tests.faults.checker import COUNTS, MemberLog, Verdict, check, history_around, read_availability, read_logs
from tests.faults.harness import FaultCluster
from tests.faults.nemesis import KINDS, Damage, Nemesis
from tests.faults.queues import MemberMessages, check_topics, read_members
from tests.faults.topics import TopicWriter
from tests.faults.workload import Consumer, GrpcWriter, History, Observer, Reader, Writer

# 64 KiB data files: a run writes many, so damage lands both where recovery rescans and below; a scrub
# every second finds a flipped bit in the older files
SETTINGS = {**SMALL_FILES, "data_file_size": 64 << 10, "max_entry_bytes": 16 << 10, "checkpoint_interval_ms": 200,
            "scrub_interval_ms": 1000}
CONVERGE_S = 60.0
PROBLEM = re.compile(rb"\d (?:ERROR|CRITICAL) |\[(?:ERROR|CRITICAL)\]|^(?:ERROR|CRITICAL):")
LOG_LINE = re.compile(rb"^(?:\d{4}-\d\d-\d\d |\[\d{4}-|INFO: |WARNING: |ERROR: )", re.MULTILINE)  # a new record
LEADS = re.compile(rb" (\S+) is leader in term (\d+) ")  # raft.member_state's line on becoming leader


def run(seed: int, seconds: float, nodes: int = 3, *, root: Path | None = None, writers: int = 3, readers: int = 2,
        topic_writers: int = 2, kinds: list[str] | None = None, mutant: str | None = None,
        log: Callable[[str], None] = lambda _: None) -> dict[str, Any]:
    """Run faults for about `seconds` (each kind at least once) and check the outcome; returns the summary.
    The last of the writers appends through the gRPC API, the others through REST; the topic writers
    append a topic's messages by key, through REST."""
    rng = random.Random(seed)
    kinds = list(kinds or KINDS)
    with tempfile.TemporaryDirectory(prefix="raftlog-faults-") as tmp:
        cluster = FaultCluster(root or Path(tmp), nodes, SETTINGS, mutant)
        history = History()
        try:
            cluster.start()
            cluster.wait_leader(60)
            urls = {m: member.client_url for m, member in cluster.members.items()}
            addresses = {m: member.grpc_address for m, member in cluster.members.items()}
            last = writers - 1
            grpc_writer = [GrpcWriter(f"g{last}", addresses, history, seed * 100 + last)] if writers else []
            consumer = Consumer("c0", urls, history, seed * 100 + 90)
            by_key = [TopicWriter(f"t{i}", urls, history, seed * 100 + 70 + i) for i in range(topic_writers)]
            clients = ([Writer(f"w{i}", urls, history, seed * 100 + i) for i in range(last)] + grpc_writer + by_key
                       + [Reader(f"r{i}", urls, history, seed * 100 + 50 + i) for i in range(readers)] + [consumer])
            observer = Observer(cluster)
            for thread in [*clients, observer]:
                thread.start()
            nemesis = Nemesis(cluster, history, rng, log)
            liveness = _schedule(nemesis, list(kinds), rng, seconds, log)
            for client in clients:
                client.stop()
            for client in clients:
                client.join(10)
            if not liveness:
                liveness = _converge(cluster, log)
            appends = [op for op in history.ops if op.kind == "append"]
            queues: dict[str, MemberMessages] = {}
            unread: list[str] = []
            if not liveness:  # each member's log as its API reads it, converged
                queues, unread = read_members({m: cluster.members[m].client_url for m in cluster.group()}, appends)
            observer.stop()
            observer.join(5)
            with httpx.Client(timeout=0.5) as http:
                observer.look(http)  # a member that exited since the last look
            for member_id in cluster.members:
                cluster.stop_member(member_id)
            crashes = _scan_node_logs(cluster, observer, nemesis.damage)
            unplanted = [f"mutant {mutant} not planted in {', '.join(missing)}"
                         for missing in [cluster.unplanted()] if missing]
            logs, unreadable = _read_final_logs(cluster)
            sessions = [v for client in clients if isinstance(client, Writer) for v in client.violations]
            verdict = check(history, logs, [*unplanted, *observer.violations, *liveness, *crashes, *unreadable,
                                            *unread, *nemesis.problems, *sessions], [consumer],
                            sum(writer.creates_sent for writer in by_key))
            units = check_topics(appends, queues, logs, {m: cluster.members[m].data_dir for m in logs}, verdict)
            for problem in vacuous(verdict.acked, _reads_answered(history), kinds, nemesis.effective,
                                   verdict.messages_acked if topic_writers else None):
                verdict.note(problem)
            summary = _summary(seed, seconds, nodes, history, nemesis, verdict, liveness)
            summary["consumer_lives"] = len(consumer.lives)
            summary["consumer_commits"] = sum(len(life.committed) for life in consumer.lives)
            summary["consumer_entries"] = sum(len(life.delivered) for life in consumer.lives)
            summary["messages_acked"] = verdict.messages_acked
            summary["messages_read_back"] = {member: len(view.messages) for member, view in queues.items()}
            summary["consume_queue_units"] = units
            summary["mutant"] = mutant
            summary["planted"] = sum(map(len, cluster.pids.values())) if mutant and not unplanted else 0
            if kinds != KINDS:
                summary["replay"] += f" --only {','.join(kinds)}"
            if mutant:
                summary["replay"] += f" --mutant {mutant}"
            if summary["violations"]:
                summary["node_logs"] = {m: cluster.tail(m, 60) for m in cluster.members}
                if verdict.suspects:
                    summary["history"] = history_around(history, verdict.suspects[0])
            return summary
        except BaseException:  # the harness itself failed: say why, whatever the verbosity
            for member_id in cluster.members:
                print(f"--- {member_id} log tail ---\n{cluster.tail(member_id, 40)}", file=sys.stderr)
            raise
        finally:
            cluster.stop()


def _schedule(nemesis: Nemesis, kinds: list[str], rng: random.Random, seconds: float,
              log: Callable[[str], None]) -> list[str]:
    """Apply faults until `seconds` have passed and every kind has had a turn; the liveness violation
    if the group stopped making progress."""
    rng.shuffle(kinds)
    started = time.monotonic()
    turn = 0
    while time.monotonic() - started < seconds or turn < len(kinds):
        kind = kinds[turn % len(kinds)]
        turn += 1
        if not nemesis.can_apply(kind) and any(map(nemesis.can_apply, kinds)):
            continue  # its turn goes to the next kind (a kind never applied is a vacuous run)
        log(f"[{time.monotonic() - started:6.1f}s] {kind}")
        try:
            nemesis.apply(kind, rng.uniform(1.5, 3.5))
        except TimeoutError as exc:
            return [f"liveness: the group stopped making progress during {kind}: {exc}"]
        except RuntimeError as exc:  # a member exited while the group was awaited: its log's first and last words
            said = str(exc).strip().splitlines()
            return [f"liveness: {said[0].partition(';')[0]} during {kind}{': ' + said[-1] if len(said) > 1 else ''}"]
        time.sleep(rng.uniform(0.5, 1.5))
    return []


def vacuous(acked: int, reads_answered: int, kinds: list[str], effective: dict[str, int],
            messages_acked: int | None = None) -> list[str]:
    """Why the run proves nothing: no write acknowledged, no read answered, no message acknowledged
    (`messages_acked`: None for a run without topic writers), a kind of fault that never took effect."""
    problems = [f"vacuous: {what}" for what, none in (("no write was acknowledged", not acked),
                                                      ("no read was answered", not reads_answered),
                                                      ("no message was acknowledged", messages_acked == 0)) if none]
    return problems + [f"vacuous: {kind} never took effect" for kind in kinds if not effective.get(kind)]


def _reads_answered(history: History) -> int:
    return sum(op.is_read and op.outcome == "ok" and op.client != "nemesis" for op in history.ops)


def _converge(cluster: FaultCluster, log: Callable[[str], None]) -> list[str]:
    """Wait until every member has committed the same log end; a liveness violation if they do not."""
    for member_id in cluster.group():
        if not cluster.members[member_id].running:  # it exited on its own: the observer has said so
            cluster.stop_member(member_id)
            cluster.start_member(member_id)
    deadline = time.monotonic() + CONVERGE_S
    said: list[dict[str, Any] | None] = []
    while time.monotonic() < deadline:
        said = [cluster.status(m) for m in cluster.group()]
        ends = {(s["end_index"], s["committed_index"]) for s in said if s}
        if all(said) and len(ends) == 1 and len({e for pair in ends for e in pair}) == 1:
            log(f"converged at index {ends.pop()[0]}")
            return []
        time.sleep(0.2)
    seen = [(s["self"], s["role"], s["end_index"], s["committed_index"]) if s else None for s in said]
    return [f"liveness: the members did not converge within {CONVERGE_S:.0f} s of the last fault: {seen}"]


def _scan_node_logs(cluster: FaultCluster, observer: Observer, damage: list[Damage]) -> list[str]:
    problems = []
    for member_id, member in cluster.members.items():
        text = member.log_path.read_bytes() if member.log_path.exists() else b""
        problems += scan_log(member_id, text, observer, damage)
    return problems[:10]


def scan_log(member_id: str, text: bytes, observer: Observer, damage: list[Damage] | None = None) -> list[str]:
    """Tracebacks and ERROR lines no fault explains (a member's word on the damage a fault did to its
    files, after the fault), and every leader the log names (no polling gaps)."""
    for match in LEADS.finditer(text):
        observer.saw(int(match.group(2)), match.group(1).decode())
    problems = []
    for offset, record in _records(text):
        first, *rest = record.splitlines()
        if (PROBLEM.search(first) or b"Traceback" in record) and not any(
                fault.explains(member_id, offset, first) for fault in damage or ()):
            # the line, then where its exception was raised and the exception, if it has one
            frames = [line.strip() for line in rest if line.strip().startswith(b"File ")]
            said = b" ... ".join([first, *frames[-1:], *(line.strip() for line in rest[-1:])])
            problems.append(f"{member_id} logged: {said.decode(errors='replace')[:600]}")
    return problems


def _records(text: bytes) -> list[tuple[int, bytes]]:
    """A node's log cut into records, each at its offset: a line that starts one, and the lines (a
    traceback) that follow it."""
    starts = [m.start() for m in LOG_LINE.finditer(text)]
    return [(a, text[a:b].strip()) for a, b in zip([0, *starts], [*starts, len(text)], strict=True)
            if text[a:b].strip()]


def _read_final_logs(cluster: FaultCluster) -> tuple[dict[str, MemberLog], list[str]]:
    """The stopped members' logs, read from their files by the offline reader."""
    logs, problems = {}, []
    for member_id, member in cluster.members.items():
        try:
            logs.update(read_logs({member_id: member.data_dir}))
        except (CorruptDataError, PipelineError) as exc:
            problems.append(f"{member_id}'s files do not read back: {exc}")
    return logs, problems


def _summary(seed: int, seconds: float, nodes: int, history: History, nemesis: Nemesis,
             verdict: Verdict, liveness: list[str]) -> dict[str, Any]:
    appends = [op for op in history.ops if op.kind == "append"]
    failovers = nemesis.failovers_ms
    return {
        "seed": seed, "seconds": seconds, "nodes": nodes,
        "ops": len(history.ops), "appends": len(appends),
        "reads": len(history.ops) - len(appends),
        "acked": verdict.acked,
        "unknown": sum(len(op.bodies) for op in appends if op.outcome == "unknown"),
        "retried": sum(op.attempts > 1 for op in appends),
        "failed": sum(len(op.bodies) for op in appends if op.outcome == "fail"),
        **{name: getattr(verdict, name) for name in COUNTS},
        "commit_fell": verdict.commit_fell,
        "live": not liveness,
        "faults": dict(sorted(nemesis.faults.items())),
        "effective": dict(sorted(nemesis.effective.items())),
        "read_availability": read_availability(history),
        "failovers": len(failovers),
        "failover_ms_p50": round(statistics.median(failovers)) if failovers else None,
        "failover_ms_max": round(max(failovers)) if failovers else None,
        "violations": verdict.problems,
        "replay": f"python -m tests.faults --seed {seed} --seconds {seconds:g} --nodes {nodes} --verbose",
    }


def print_summary(summary: dict[str, Any], out: Any = sys.stdout) -> None:
    print(f"seed {summary['seed']}, {summary['nodes']} nodes, {summary['seconds']:g} s of faults", file=out)
    if summary.get("mutant"):
        print(f"mutant {summary['mutant']}: planted in {summary['planted']} node processes", file=out)
    print(f"operations {summary['ops']:,} (appends {summary['appends']:,}, reads {summary['reads']:,}); "
          f"entries acknowledged {summary['acked']:,}, unknown {summary['unknown']:,}, "
          f"refused {summary['failed']:,}; appends sent again in their session {summary['retried']:,}, "
          f"duplicated entries {summary['duplicated']:,}", file=out)
    read_back = ", ".join(f"{member} {count:,}" for member, count in summary["messages_read_back"].items())
    print(f"messages of a topic by key acknowledged {summary['messages_acked']:,} (among the entries); read back "
          f"after the run: {read_back or 'none'}; units in each member's consume queues, held to its log: "
          + (", ".join(f"{member} {count:,}" for member, count in summary["consume_queue_units"].items()) or "none"),
          file=out)
    print(f"consumer: {summary['consumer_lives']} lives (each killed, then resumed after the committed position), "
          f"{summary['consumer_commits']:,} commits, {summary['consumer_entries']:,} entries handed; skipped "
          f"{summary['consumer_skipped']}, handed again before the committed position {summary['consumer_repeated']}",
          file=out)
    print("faults (took effect/applied): " + ", ".join(
        f"{k} {summary['effective'].get(k, 0)}/{v}" for k, v in summary["faults"].items()), file=out)
    print(f"failovers {summary['failovers']}: median {summary['failover_ms_p50']} ms, worst "
          f"{summary['failover_ms_max']} ms", file=out)
    print("reads answered, by the fault going on: " + ", ".join(
        f"{k} {v['ok'] / max(v['ok'] + v['failed'], 1):.0%} of {v['ok'] + v['failed']}"
        for k, v in summary["read_availability"].items()), file=out)
    print(", ".join(f"{name.replace('_', ' ')} {summary[name]}" for name in (*COUNTS, "commit_fell"))
          + f", live {'yes' if summary['live'] else 'NO'}", file=out)
    if summary["violations"]:
        print("VIOLATIONS:", file=out)
        for v in summary["violations"]:
            print(f"  {v}", file=out)
        if summary.get("history"):
            print("history around the first:", file=out)
            for line in summary["history"]:
                print(f"  {line}", file=out)
        print(f"replay: {summary['replay']}", file=out)
    else:
        print("no violations", file=out)
