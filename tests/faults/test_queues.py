"""The checks of a topic's queues on made-up answers and logs, and on a member's files: each kind of
violation is seen, a clean run passes (issue 45, part 7)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from raftlog.storage import Store, StoreConfig
from raftlog.storage.codec import Magic
from raftlog.storage.consume_queue import UNIT
from raftlog.storage.consume_queues import ConsumeQueues, DispatchedPoint
from raftlog.storage.message import Meta, encode_message, key_queue
from tests.faults.checker import MemberLog, Stored, Verdict, check, read_logs
from tests.faults.queues import (
    CONSUME_QUEUE_DIR,
    HeldQueue,
    Seen,
    check_answers,
    check_consume_queues,
    check_members_agree,
    check_placed,
    check_queue_order,
    entry_sizes,
    offline_messages,
    read_consume_queues,
)
from tests.faults.topics import KEYS, QUEUES
from tests.faults.workload import History, Op, Placed

TOPIC_ID = 7
KEY = KEYS[0]
QUEUE = key_queue(KEY, QUEUES)


def acked(bodies: list[bytes], offset: int, index: int, queue: int = QUEUE) -> Op:
    """An acknowledged batch of KEY's messages, answered at `offset` of `queue` from entry `index` on."""
    placed = [Placed(TOPIC_ID, queue, offset + k, index + k, 100 * (index + k)) for k in range(len(bodies))]
    return Op("append", "t0", "n1", 0.0, bodies, index=index, complete=0.1, outcome="ok", key=KEY, placed=placed)


def seen(index: int, offset: int, body: bytes, queue: int = QUEUE) -> Seen:
    return Seen(index, 100 * index, TOPIC_ID, queue, offset, body)


def test_an_answer_must_place_its_batch_at_consecutive_offsets_of_its_keys_queue() -> None:
    verdict = Verdict()
    check_answers([acked([b"a", b"b"], 0, 10)], verdict)
    assert verdict.ok and verdict.messages_acked == 2
    other_queue = acked([b"a"], 0, 10, queue=(QUEUE + 1) % QUEUES)
    skipping = acked([b"a", b"b"], 0, 10)
    skipping.placed[1] = Placed(TOPIC_ID, QUEUE, 2, 11, 1100)
    short = acked([b"a", b"b"], 0, 10)
    short.placed.pop()
    for op in (other_queue, skipping, short):
        verdict = Verdict()
        check_answers([op], verdict)
        assert verdict.queue_misplaced == len(op.bodies), op


def test_every_member_holds_each_acknowledged_message_where_its_answer_put_it() -> None:
    op = acked([b"a", b"b"], 3, 10)
    right = [seen(10, 3, b"a"), seen(11, 4, b"b")]
    verdict = Verdict()
    check_placed([op], {"n1": right, "n2": right}, verdict)
    assert verdict.ok
    for wrong in ([seen(10, 3, b"a"), seen(11, 5, b"b")],  # another offset
                  [seen(10, 3, b"a"), seen(11, 4, b"c")],  # another body
                  [seen(10, 3, b"a"), seen(11, 4, b"b", queue=(QUEUE + 1) % QUEUES)],  # another queue
                  [seen(10, 3, b"a")]):  # not there
        verdict = Verdict()
        check_placed([op], {"n1": right, "n2": wrong}, verdict)
        assert verdict.queue_misplaced == 1 and "['n2']" in verdict.problems[0], wrong


@pytest.mark.parametrize(("offsets", "from_zero", "gaps"), [
    ([0, 1, 2], True, 0),
    ([0, 2, 3], True, 1),  # a gap
    ([0, 1, 1], True, 1),  # a repeat
    ([1, 2], True, 1),  # not from 0
    ([5, 6], False, 0),  # a log that begins after the topic's creation
    ([5, 7], False, 1),
])
def test_each_queues_offsets_are_contiguous_from_0_in_log_order(offsets: list[int], from_zero: bool,
                                                                 gaps: int) -> None:
    other = (QUEUE + 1) % QUEUES
    messages = [seen(10 + 2 * k, offset, b"x") for k, offset in enumerate(offsets)]
    messages += [seen(11 + 2 * k, k, b"y", queue=other) for k in range(len(offsets))]  # interleaved, from 0
    verdict = Verdict()
    check_queue_order("n1", sorted(messages, key=lambda s: s.index), verdict, from_zero)
    assert verdict.queue_gaps == gaps, verdict.problems


def test_members_must_give_each_offset_to_the_same_message() -> None:
    ours = [seen(10, 0, b"a"), seen(11, 1, b"b")]
    verdict = Verdict()
    check_members_agree({"n1": ours, "n2": list(ours)}, verdict)
    assert verdict.ok
    check_members_agree({"n1": ours, "n2": [seen(10, 0, b"a"), seen(12, 1, b"b")]}, verdict)  # at another entry
    check_members_agree({"n1": ours, "n2": ours[:1]}, verdict)  # a queue that ends before
    assert verdict.queue_divergent == 2


def test_a_topics_entries_are_written_by_clients_or_created_by_one() -> None:
    """A message holds a body a topic writer sent as a message; a TOPIC entry needs a create sent."""
    history = History()
    history.add(acked([b"m"], 0, 1))
    history.add(Op("append", "w0", "n1", 0.0, [b"e"], index=2, complete=0.1, outcome="ok"))
    entries = [Stored(0, 1, 1, b"", "topic"), Stored(1, 1, 2, b"m", "message"), Stored(2, 1, 3, b"e", "normal")]
    assert check(history, {"n1": MemberLog(entries, 2)}, topic_creates=1).ok
    assert check(history, {"n1": MemberLog(entries, 2)}).wrong_type == 1
    swapped = [entries[0], Stored(1, 1, 2, b"m", "normal"), Stored(2, 1, 3, b"e", "message")]
    assert check(history, {"n1": MemberLog(swapped, 2)}, topic_creates=1).unwritten == 2


async def member_files(path: Path, queued: int) -> MemberLog:
    """A member's data dir: a plain entry, then 12 messages of two queues over several data files, the
    first `queued` of them dispatched into its consume queues; its log as the offline reader reads it."""
    store = Store.open(path, StoreConfig(data_file_size=1024, index_file_size=320))
    metas = [Meta.of([KEY], [f"tag-{i % 3}"] if i % 2 else []) for i in range(12)]
    bodies = [encode_message(TOPIC_ID, i % 2, i // 2, meta.encode(), meta.tags_code, b"x" * 90)
              for i, meta in enumerate(metas)]
    try:
        await store.append_as_leader([b"plain"], term=1)
        for body in bodies:
            await store.append_as_leader([body], term=1, magic=Magic.MESSAGE)
        await store.flush()
        queues = ConsumeQueues(path / CONSUME_QUEUE_DIR)
        for i in range(1, queued + 1):
            queues.dispatch([(TOPIC_ID, (i - 1) % 2, (i - 1) // 2, store.message_units(i, i))],
                            DispatchedPoint(i, store.pos_at(i)))
        queues.close()
    finally:
        await store.close()
    return read_logs({"n1": path})["n1"]


async def test_consume_queues_are_read_from_the_files_and_held_to_the_log(tmp_path: Path) -> None:
    log = MemberLog((await member_files(tmp_path / "n1", 12)).entries, 12)
    stored = offline_messages(log)
    assert [(s.queue, s.queue_offset) for s in stored] == [(i % 2, i // 2) for i in range(12)]
    held = read_consume_queues(tmp_path / "n1")
    assert {key: (cq.min_offset, cq.next_offset) for key, cq in held.items()} == {(TOPIC_ID, 0): (0, 6),
                                                                                    (TOPIC_ID, 1): (0, 6)}
    sizes = entry_sizes(tmp_path / "n1", [s.pos for s in stored])
    assert len(set(sizes.values())) > 1  # tags or none: the sizes differ, and each is its entry's
    verdict = Verdict()
    assert check_consume_queues("n1", log, held, sizes, verdict) == 12
    assert verdict.ok, verdict.problems
    queue = tmp_path / "n1" / CONSUME_QUEUE_DIR / str(TOPIC_ID)
    assert sorted(os.listdir(queue)) == ["0-00000000000000000000", "1-00000000000000000000"]  # its own, untouched


async def test_a_consume_queue_that_lacks_a_committed_message_is_wrong(tmp_path: Path) -> None:
    log = await member_files(tmp_path / "n1", 10)  # the last two messages not dispatched
    stored = offline_messages(log)
    held = read_consume_queues(tmp_path / "n1")
    sizes = entry_sizes(tmp_path / "n1", [s.pos for s in stored])
    verdict = Verdict()
    check_consume_queues("n1", MemberLog(log.entries, 10), held, sizes, verdict)  # committed up to 10: fine
    assert verdict.ok, verdict.problems
    check_consume_queues("n1", MemberLog(log.entries, 12), held, sizes, verdict)
    assert verdict.consume_queues_wrong == 2 and "committed messages go up to 5" in verdict.problems[0]


def test_a_consume_queue_unit_that_is_not_the_logs_is_wrong() -> None:
    entries = [Stored(i, 1, i, b"m", "message", 100 * i, TOPIC_ID, 0, i, ("t",) if i else ()) for i in range(3)]
    log = MemberLog(entries, 2)
    sizes = {100 * i: 60 for i in range(3)}
    units = [UNIT.pack(100 * i, 60, Meta.of(tags=e.tags).tags_code) for i, e in enumerate(entries)]

    def problems(cq: HeldQueue | None, begin: int = 0) -> list[str]:
        verdict = Verdict()
        check_consume_queues("n1", MemberLog(log.entries[begin:], 2), {(TOPIC_ID, 0): cq} if cq else {}, sizes,
                             verdict)
        assert verdict.consume_queues_wrong == (1 if verdict.problems else 0)
        return verdict.problems

    assert problems(HeldQueue(0, 3, b"".join(units))) == []
    assert "is missing" in problems(None)[0]
    assert "at offset 1" in problems(HeldQueue(0, 3, units[0] + UNIT.pack(100, 60, 0) + units[2]))[0]  # tags' code
    assert "past the log's messages" in problems(HeldQueue(0, 4, b"".join(units) + UNIT.pack(300, 60, 0)))[0]
    assert "begins at offset 1" in problems(HeldQueue(1, 3, b"".join(units[1:])))[0]
    assert problems(HeldQueue(0, 3, b"".join(units)), begin=1) == []  # offset 0 is before the log's beginning
    assert "before the log's first message" in problems(HeldQueue(0, 3, UNIT.pack(150, 60, 0) + b"".join(units[1:])),
                                                        begin=1)[0]
