"""The compiled codec (storage/_codec.c) at the edges of its types, after the audit of issue 44:
a caller's list changed while a batch is encoded, sequences and ints past what a stamp or an
int64 holds, an `end` near int64's minimum, and the GIL while a CRC runs over a large buffer.
At each edge the compiled codec and the Python reference give the same result or the same
refusal (the compiled one refuses with None, and the reference words it)."""

from __future__ import annotations

import contextlib
import functools
import gc
import itertools
import operator
import struct
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from raftlog.storage import batch, codec
from raftlog.storage.batch import Batch, reference_encode
from raftlog.storage.codec import HEADER_SIZE, SEQUENCE_BITS, Magic, reference_check_next

SEQUENCE_MAX = (1 << SEQUENCE_BITS) - 1
U64_MAX = (1 << 64) - 1
INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1

pytestmark = pytest.mark.skipif(codec.compiled is None, reason="the compiled codec is not built")


def outcome(call: Any, *args: Any) -> Any:
    """A batch's parts, or the type of what the call raised."""
    try:
        result = call(*args)
    except (ValueError, OverflowError, struct.error) as exc:
        return type(exc)
    assert isinstance(result, Batch)
    return (bytes(result.data), result.runs, result.fillers, result.index_records, result.positions,
            result.last_chain_crc, result.end_pos)


def compiled_outcome(*args: Any) -> Any:
    parts = codec.compiled.encode_batch(*args)
    if parts is None:
        return None
    data, runs, fillers, records, positions, chain, end_pos = parts
    return bytes(data), runs, fillers, records, positions, chain, end_pos


def test_a_list_changed_by_a_finalizer_while_its_batch_is_encoded_leaves_the_batch_whole() -> None:
    """Any allocation may run the garbage collector, and with it Python code (here a gc callback)
    that changes the caller's list between the pass that sizes the buffer and the one that fills it.
    In a child process: before the fix it wrote past the buffer."""
    script = textwrap.dedent("""
        import gc
        from raftlog.storage import codec
        from raftlog.storage.batch import reference_encode

        args = (5, 2, 1, 0, 0, 7, 1 << 20)
        original = [bytes([i]) * 10 for i in range(50)]
        grown = [b"z" * 100_000] * 60
        encodings = {bytes(reference_encode(b, *args).data) for b in (original, grown)}
        for threshold in range(1, 9):  # the collection comes at one allocation or another
            shared, fired = list(original), []

            def grow(phase, info):
                if phase == "start" and not fired:
                    fired.append(True)
                    shared[:] = grown

            gc.collect()
            gc.callbacks.append(grow)
            gc.set_threshold(threshold)
            parts = codec.compiled.encode_batch(shared, *args)
            changed = bool(fired)
            gc.set_threshold(700)
            gc.callbacks.remove(grow)
            print(changed, parts is not None and bytes(parts[0]) in encodings)
    """)
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    lines = [line.split() for line in run.stdout.splitlines()]
    assert len(lines) == 8 and all(whole == "True" for _, whole in lines)
    assert any(changed == "True" for changed, _ in lines)  # the list did change during a call


BOUND_STAMPS = [  # (producer_id, epoch, first sequence) and the count of bodies
    ((9, 1, SEQUENCE_MAX), 1),  # the last sequence: fits
    ((9, 1, SEQUENCE_MAX - 2), 3),
    ((9, 1, SEQUENCE_MAX), 2),  # one past the last
    ((9, 1, 1 << SEQUENCE_BITS), 1),
    ((9, 1, U64_MAX), 1),  # first_seq + count wraps a u64 to 0
    ((9, 1, U64_MAX - 1), 3),
    ((9, 1, 1 << 64), 1),  # past a u64 (the "K" format masked it to 0)
    ((9, 1, -1), 1),  # negative (masked to U64_MAX)
    ((9, 1, -(1 << 64) + 5), 1),  # negative, masked to 5
    ((9, -1, 0), 1),
    ((9, 1 << 16, 0), 1),
    ((9, (1 << 16) - 1, 0), 1),  # the last epoch: fits
    ((-1, 1, 0), 1),  # a producer id past a u64 either way
    ((1 << 64, 1, 0), 1),
    ((U64_MAX, 1, 0), 1),  # the last producer id: fits
]


@pytest.mark.parametrize(("stamp", "count"), BOUND_STAMPS)
def test_a_stamp_at_its_bounds_is_taken_or_refused_by_both_alike(stamp: tuple[int, int, int], count: int) -> None:
    args = ([b"x" * 3] * count, 5, 2, Magic.PRODUCED, 0, 0, 7, 1 << 20, stamp)
    expected = outcome(reference_encode, *args)
    assert expected in (ValueError,) or isinstance(expected, tuple)
    assert outcome(batch.encode_leader_batch, *args) == expected
    assert compiled_outcome(*args) == (None if expected is ValueError else expected)


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 4), st.data())
def test_a_stamp_near_its_bounds_gets_the_same_outcome(count: int, data: st.DataObject) -> None:
    def near(*bounds: int) -> st.SearchStrategy[int]:
        return st.sampled_from(bounds).flatmap(lambda b: st.integers(b - 3, b + 3))

    stamp = (data.draw(near(0, U64_MAX, 1 << 64)), data.draw(near(0, (1 << 16) - 1)),
             data.draw(near(0, SEQUENCE_MAX - count, U64_MAX, -(1 << 64))))
    args = ([b"y"] * count, 5, 2, Magic.PRODUCED, 0, 0, 7, 4096, stamp)
    expected = outcome(reference_encode, *args)
    assert outcome(batch.encode_leader_batch, *args) == expected
    assert compiled_outcome(*args) == (None if expected is ValueError else expected)


@pytest.mark.parametrize("at", range(8))
def test_an_int_past_int64_is_left_to_the_reference(at: int) -> None:
    """The compiled codec refuses an argument its C type cannot hold (it raised OverflowError, where
    the reference raises struct.error or decides)."""
    ints = [5, 2, 1, 0, 0, 7, 1 << 20]  # first_index, term, magic, channel, write_pos, prev_chain, file_size
    if at < len(ints):
        ints[at] = 1 << 64
        args = ([b"x"], *ints)
        assert codec.compiled.encode_batch(*args) is None
        assert outcome(batch.encode_leader_batch, *args) == outcome(reference_encode, *args)
    entry = codec.encode_entry(Magic.NORMAL, 5, 2, 0, b"body", 7)
    checks = [0, len(entry), 5, 2, 0, 7, 1024]  # offset, end, index, term_floor, write_pos, prev_chain, file_size
    checks[at % len(checks)] = -(1 << 64) if at % 2 else 1 << 64
    assert codec.compiled.check_next(entry, *checks, False) is None
    assert codec.compiled.split_bodies(b"", 1 << 64) is None


ENDS_NEAR_MIN = [INT64_MIN, INT64_MIN + 1, INT64_MIN + HEADER_SIZE - 1, INT64_MIN + HEADER_SIZE, -1, 0]


def test_an_end_near_int64s_minimum_is_refused_without_overflow() -> None:
    """`end - HEADER_SIZE` overflowed for an end near INT64_MIN (undefined behaviour); an offset far past
    the buffer could then be read. In a child process: a wild read would take it down."""
    script = textwrap.dedent(f"""
        from raftlog.storage import codec
        entry = codec.encode_entry(1, 5, 2, 0, b"body", 7)
        for end in {ENDS_NEAR_MIN}:
            for offset in (0, 1 << 40, (1 << 62) + 1, {INT64_MAX}):
                assert codec.compiled.check_next(entry, offset, end, 5, 2, -1, -1, 0, False) is None, (offset, end)
        print("ok")
    """)
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.split() == ["ok"]


@pytest.mark.parametrize("end", ENDS_NEAR_MIN)
def test_a_reader_at_an_end_near_int64s_minimum_gets_the_references_verdict(end: int) -> None:
    entry = codec.encode_entry(Magic.NORMAL, 5, 2, 0, b"body", 7)
    for offset in (0, 10):
        expected = reference_check_next(entry, offset, end, 5, 2, None, None, 0, False)
        assert codec.check_next(entry, offset, end, 5, 2, None, None, 0, False) == expected
        assert codec.compiled.check_next(entry, offset, end, 5, 2, -1, -1, 0, False) is None


@contextlib.contextmanager
def counting_thread() -> Iterator[itertools.count[int]]:
    """A thread that counts, already counting; the garbage collector off meanwhile (a collection could
    run Python code, and so let the thread run, where the GIL is not released)."""
    counter, stop = itertools.count(), threading.Event()

    def count() -> None:
        while not stop.is_set():
            next(counter)

    thread = threading.Thread(target=count, daemon=True)
    thread.start()
    gc.disable()
    try:
        while repr(counter) == "count(0)":
            pass
        yield counter
    finally:
        gc.enable()
        stop.set()
        thread.join()


def advanced_during(call: Any, counter: itertools.count[int]) -> bool:
    """Whether the counting thread moved on while `call` ran. The counter is read just before and just
    after the call in one pass of C code (map over operator.call, no Python frame between), so the
    other thread can run only where the call itself releases the GIL; no timing is involved."""
    read = functools.partial(repr, counter)
    before, _, after = map(operator.call, (read, call, read))
    return bool(before != after)


@pytest.mark.parametrize("entry_point", ["check_next", "encode_batch", "validate_batch"])
def test_a_crc_over_a_large_buffer_lets_other_threads_run(entry_point: str) -> None:
    body = bytes(64 << 20)  # computed up to eight times (the first time the thread runs ends it)
    entry = codec.encode_entry(Magic.NORMAL, 5, 2, 0, body, 7)
    call = {
        "check_next": functools.partial(codec.compiled.check_next, entry, 0, len(entry), 5, 2, 0, 7, 1 << 30, False),
        "encode_batch": functools.partial(codec.compiled.encode_batch, [body], 5, 2, 1, 0, 0, 7, 1 << 30),
        "validate_batch": functools.partial(codec.compiled.validate_batch, entry, 5, 2, 0, 7, 1 << 30),
    }[entry_point]
    assert call() is not None  # a sound entry: its CRC is computed
    with counting_thread() as counter:
        assert any(advanced_during(call, counter) for _ in range(8))


def test_a_small_crc_keeps_the_gil() -> None:
    """Below 64 KiB the release would cost more than the CRC: the counter stays still (which also shows
    that the window read above lets nothing else run unless the call releases the GIL)."""
    entry = codec.encode_entry(Magic.NORMAL, 5, 2, 0, bytes(1000), 7)
    call = functools.partial(codec.compiled.check_next, entry, 0, len(entry), 5, 2, 0, 7, 1 << 20, False)
    with counting_thread() as counter:
        assert not any(advanced_during(call, counter) for _ in range(200))
