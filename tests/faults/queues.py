"""What the checker asks of a topic's queues (issue 45, part 7), on the real processes.

After the run converges, every member's log is read through its API at consistency=local (`read_messages`):
each acknowledged message must be at the topic, queue, queue offset, entry and position its answer
named, with its body; each queue's offsets contiguous from 0 in log order; and every member must give
each offset to the same message. After the members stop (a clean stop), each one's consume queues are
read from a copy of its files (`read_consume_queues`) and held to the units its log's messages give
(`check_consume_queues`): pos and size as the entry is stored, the code of the message's tags.
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import tempfile
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import httpx

from raftlog.pipeline.offline import open_data_dir
from raftlog.storage.codec import HEADER
from raftlog.storage.consume_queue import UNIT, UNIT_SIZE, ConsumeQueue, FileGrid
from raftlog.storage.errors import ConsumeQueueError
from raftlog.storage.message import key_queue, tags_code
from tests.faults.checker import MemberLog, Verdict, describe
from tests.faults.topics import QUEUES
from tests.faults.workload import Op, entry_body

CONSUME_QUEUE_DIR = "consumequeue"  # app.node's: <data_dir>/consumequeue
POINT_NAME = "dispatched.json"  # the consume queues' point, with their file grid
READ_TIMEOUT_S = 60.0

QueueKey = tuple[int, int]  # (topic_id, queue)


@dataclass(frozen=True)
class Seen:
    """A message as a member's log holds it."""

    index: int
    pos: int
    topic_id: int
    queue: int
    queue_offset: int
    body: bytes


@dataclass(frozen=True)
class HeldQueue:
    """A consume queue as a member's files hold it: its offsets min..next-1, and their units."""

    min_offset: int
    next_offset: int
    units: bytes


# -- reading ----------------------------------------------------------------------------------------------


def read_messages(http: httpx.Client, url: str, start: int) -> list[Seen]:
    """The messages of a member's log from `start` on, as it holds them (consistency=local): one NDJSON
    stream of every committed entry."""
    response = http.get(f"{url}/v1/entries", params={"start": start, "consistency": "local", "control": "true"},
                        headers={"accept": "application/x-ndjson"}, timeout=READ_TIMEOUT_S)
    response.raise_for_status()
    entries = [json.loads(line) for line in response.text.splitlines() if line]
    if entries and "error" in entries[-1]:
        raise httpx.HTTPError(f"the stream ended with {entries[-1]['error']}")
    return [Seen(e["index"], e["pos"], e["topic_id"], e["queue"], e["queue_offset"], entry_body(e))
            for e in entries if e["type"] == "message"]


@dataclass(frozen=True)
class MemberMessages:
    """A member's messages from its topics' creation on; `whole`: its log begins at or before it."""

    messages: list[Seen]
    whole: bool


def read_members(urls: dict[str, str], appends: list[Op]) -> tuple[dict[str, MemberMessages], list[str]]:
    """Each member's messages, from the topic's creation on (nothing when no message was acknowledged);
    and the members that could not be read."""
    topics = [placed.topic_id for op in appends for placed in op.placed]
    if not topics:
        return {}, []
    views, problems = {}, []
    with httpx.Client() as http:
        for member_id, url in urls.items():
            try:
                begin = http.get(f"{url}/v1/cluster", timeout=5).json()["begin_index"]
                views[member_id] = MemberMessages(read_messages(http, url, max(begin, min(topics))),
                                                  begin <= min(topics))
            except (httpx.HTTPError, ValueError, KeyError) as exc:
                problems.append(f"{member_id}'s messages could not be read after the run: {exc}")
    return views, problems


def offline_messages(log: MemberLog) -> list[Seen]:
    """The messages of a member's log as its files hold them."""
    return [Seen(e.index, e.pos, e.topic_id, e.queue, e.queue_offset, e.body) for e in log.entries
            if e.kind == "message" and e.topic_id is not None and e.queue is not None and e.queue_offset is not None]


def read_consume_queues(data_dir: Path) -> dict[QueueKey, HeldQueue]:
    """A stopped member's consume queues, read from a copy of their files (opening a queue may tidy its
    files: the member's own stay as it left them)."""
    root = data_dir / CONSUME_QUEUE_DIR
    if not root.is_dir():
        return {}
    point = json.loads((root / POINT_NAME).read_text())
    grid = FileGrid(point["first_file_units"], point["file_units_max"])
    held = {}
    with tempfile.TemporaryDirectory(prefix="raftlog-cq-") as tmp:
        copy = Path(tmp) / CONSUME_QUEUE_DIR
        shutil.copytree(root, copy)
        for topic in sorted(p for p in copy.iterdir() if p.is_dir()):
            for queue in sorted({int(name.partition("-")[0]) for name in os.listdir(topic)}):
                cq = ConsumeQueue(topic, queue, grid)
                held[(int(topic.name), queue)] = HeldQueue(cq.min_offset, cq.next_offset,
                                                           cq.units(cq.min_offset, cq.next_offset - cq.min_offset))
                cq.close_files()
    return held


def entry_sizes(data_dir: Path, positions: Iterable[int]) -> dict[int, int]:
    """The size of the entry at each position, as its header in the data files says (one file open at
    a time: a long run's log has thousands)."""
    data_file_size = open_data_dir(str(data_dir)).data_file_size
    sizes = {}
    for start, group in itertools.groupby(positions, key=lambda pos: pos - pos % data_file_size):
        fd = os.open(data_dir / "data" / f"{start:020d}", os.O_RDONLY)
        try:
            for pos in group:
                _magic, size, *_ = HEADER.unpack(os.pread(fd, HEADER.size, pos - start))
                sizes[pos] = size
        finally:
            os.close(fd)
    return sizes


# -- checks -----------------------------------------------------------------------------------------------


def check_answers(appends: list[Op], verdict: Verdict) -> None:
    """Each acknowledged batch of messages was answered with one place per message, all in its key's
    queue of one topic, at consecutive offsets and entries."""
    for op in appends:
        if op.key is None or op.outcome != "ok":
            continue
        verdict.messages_acked += len(op.bodies)
        places = op.placed
        first = places[0] if places else None
        if first is None or len(places) != len(op.bodies) or any(
                (p.topic_id, p.queue, p.queue_offset, p.index) != (
                    first.topic_id, key_queue(op.key, QUEUES), first.queue_offset + k, first.index + k)
                for k, p in enumerate(places)):
            verdict.queue_misplaced += len(op.bodies)
            verdict.note(f"the answer to {len(op.bodies)} messages of key {op.key} placed them at {places} "
                         f"({describe(op)})", op)


def check_placed(appends: list[Op], views: dict[str, list[Seen]], verdict: Verdict) -> None:
    """Every member holds each acknowledged message where its answer put it: its topic, queue, queue
    offset, entry and position, with its body."""
    by_index = {member: {seen.index: seen for seen in view} for member, view in views.items()}
    for op in appends:
        if op.key is None or op.outcome != "ok":
            continue
        for body, placed in zip(op.bodies, op.placed, strict=False):
            expected = Seen(placed.index, placed.pos, placed.topic_id, placed.queue, placed.queue_offset, body)
            wrong = {member: held.get(placed.index) for member, held in by_index.items()
                     if held.get(placed.index) != expected}
            if wrong:
                verdict.queue_misplaced += 1
                verdict.note(f"{body!r}, answered at offset {placed.queue_offset} of queue {placed.queue} (entry "
                             f"{placed.index}, pos {placed.pos}), is not there on {sorted(wrong)}: "
                             f"{next(iter(wrong.values()))} ({describe(op)})", op)


def check_queue_order(member: str, messages: list[Seen], verdict: Verdict, from_zero: bool = True) -> None:
    """A member's messages, in log order, number each queue's from 0 with no gap and no repeat; a log
    that begins after its topics' creation (retention, a snapshot install: not `from_zero`) may hold a
    queue from a later offset."""
    expected: dict[QueueKey, int] = {}
    for seen in messages:
        key = (seen.topic_id, seen.queue)
        start = 0 if from_zero else seen.queue_offset
        if seen.queue_offset != expected.get(key, start):
            verdict.queue_gaps += 1
            verdict.note(f"{member}: queue {seen.queue} of topic {seen.topic_id} has offset {seen.queue_offset} at "
                         f"entry {seen.index}, after {expected.get(key, start) - 1}")
        expected[key] = seen.queue_offset + 1


def check_members_agree(views: dict[str, list[Seen]], verdict: Verdict) -> None:
    """Every member gives each queue offset to the same message, at the same entry, and each queue
    ends at the same offset on every member."""
    offsets = {member: {(s.topic_id, s.queue, s.queue_offset): (s.index, s.body) for s in view}
               for member, view in views.items()}
    keys = {key for held in offsets.values() for key in held}
    for key in sorted(keys):
        copies = {member: held.get(key) for member, held in offsets.items()}
        if len(set(copies.values())) > 1:
            verdict.queue_divergent += 1
            verdict.note(f"offset {key[2]} of queue {key[1]} of topic {key[0]}: members differ: {copies}")


def check_consume_queues(member: str, log: MemberLog, held: dict[QueueKey, HeldQueue], sizes: dict[int, int],
                         verdict: Verdict) -> int:
    """A member's consume queues are those its log gives: a unit (pos, size, tags' code) for every
    committed message, at its offset, and none past the log's messages; offsets below the log's first
    message only for entries before the log's beginning (retention took them). Returns how many units
    its queues hold."""
    derived: dict[QueueKey, dict[int, bytes]] = defaultdict(dict)
    committed_end: dict[QueueKey, int] = {}
    for e in log.entries:
        if e.kind != "message" or e.topic_id is None or e.queue is None or e.queue_offset is None:
            continue
        key = (e.topic_id, e.queue)
        derived[key][e.queue_offset] = UNIT.pack(e.pos, sizes[e.pos], tags_code(e.tags))
        if e.index <= log.committed_index:
            committed_end[key] = e.queue_offset + 1
    begin_pos = log.entries[0].pos if log.entries else 0
    for key in sorted({*derived, *held}):
        problem = _queue_problem(derived.get(key, {}), committed_end.get(key), held.get(key), begin_pos)
        if problem is not None:
            verdict.consume_queues_wrong += 1
            verdict.note(f"{member}: consume queue {key[1]} of topic {key[0]} {problem}")
    return sum(cq.next_offset - cq.min_offset for cq in held.values())


def _queue_problem(units: dict[int, bytes], committed_end: int | None, cq: HeldQueue | None,
                   begin_pos: int) -> str | None:
    """What is wrong with one consume queue against its log's units by offset, or None."""
    if cq is None:
        return f"is missing; the log holds committed messages up to offset {committed_end - 1}" if committed_end \
            else None
    log_first = min(units, default=cq.next_offset)
    log_end = max(units, default=log_first - 1) + 1
    if committed_end is not None and cq.next_offset < committed_end:
        return f"ends at offset {cq.next_offset}; the log's committed messages go up to {committed_end - 1}"
    if cq.next_offset > log_end:
        return f"runs to offset {cq.next_offset - 1}, past the log's messages (up to {log_end - 1})"
    for offset in range(cq.min_offset, cq.next_offset):
        unit = cq.units[(offset - cq.min_offset) * UNIT_SIZE:(offset - cq.min_offset + 1) * UNIT_SIZE]
        if offset < log_first:
            if UNIT.unpack(unit)[0] >= begin_pos:
                return f"holds {UNIT.unpack(unit)} at offset {offset}, before the log's first message, {log_first}"
        elif unit != units.get(offset):
            theirs = UNIT.unpack(units[offset]) if offset in units else None
            return f"holds {UNIT.unpack(unit)} at offset {offset}; the log gives {theirs}"
    if cq.min_offset > log_first:
        return f"begins at offset {cq.min_offset}; the log holds messages from {log_first}"
    return None


def check_topics(appends: list[Op], views: dict[str, MemberMessages], logs: dict[str, MemberLog],
                 data_dirs: dict[str, Path], verdict: Verdict) -> dict[str, int]:
    """Every check above: the answers, the members' logs as their APIs read them after the run, and
    each stopped member's files (its log's messages, and its consume queues against them). Returns
    how many units each member's consume queues hold."""
    check_answers(appends, verdict)
    messages = {member: view.messages for member, view in views.items()}
    check_placed(appends, messages, verdict)
    for member, view in views.items():
        check_queue_order(member, view.messages, verdict, view.whole)
    check_members_agree(messages, verdict)
    units = {}
    for member, log in logs.items():
        stored = offline_messages(log)
        whole = not stored or not log.entries or log.entries[0].index <= min(s.topic_id for s in stored)
        check_queue_order(f"{member}'s files", stored, verdict, whole)
        try:
            held = read_consume_queues(data_dirs[member])
            sizes = entry_sizes(data_dirs[member], [s.pos for s in stored])
        except (OSError, ValueError, KeyError, ConsumeQueueError) as exc:
            verdict.consume_queues_wrong += 1
            verdict.note(f"{member}: its consume queues do not read back: {exc!r}")
            continue
        units[member] = check_consume_queues(member, log, held, sizes, verdict)
    return units
