"""Fuzz targets for the compiled codec (storage/_codec.c): one per function of raftlog.storage._codec,
each taking bytes, each checking the compiled function against the Python reference (the same result,
or the same refusal: None from the compiled one where the reference raises). An assertion that fails,
or a crash, is a finding.

Every input is a case: `Draw` reads the values a target needs off the front of the bytes (zeros past
their end). Most inputs make a valid batch with the reference encoder and then damage it, so the
fuzzer spends its time past the CRC checks; ints come near their edges (int64's, a u32's, a stamp's).

Run by `make fuzz` under atheris (coverage-guided; an AddressSanitizer build of the extension where
clang is installed): `python -m tests.storage.fuzz_codec --seconds 60 [--target NAME] [--corpus DIR]`.
tests/storage/test_fuzz_brief.py runs each target briefly on the plain build in `make test`.
RAFTLOG_FUZZ_CODEC names another build of the extension (the ASan one) to load in its place.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import struct
import sys
from collections.abc import Callable, Sequence
from typing import Any


def _load_codec_build() -> None:
    """Load the build that RAFTLOG_FUZZ_CODEC names as raftlog.storage._codec, before storage.codec
    imports the installed one."""
    path = os.environ.get("RAFTLOG_FUZZ_CODEC")
    if not path:
        return
    name = "raftlog.storage._codec"
    assert "raftlog.storage.codec" not in sys.modules, "storage.codec has the installed build already"
    spec = importlib.util.spec_from_file_location(name, path,
                                                  loader=importlib.machinery.ExtensionFileLoader(name, path))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    sys.modules[name] = module


_load_codec_build()

from raftlog.api.bodies import BatchFormatError, decode_bodies, encode_bodies, reference_decode  # noqa: E402
from raftlog.storage import batch, codec  # noqa: E402
from raftlog.storage.batch import Batch, reference_encode, reference_validate  # noqa: E402
from raftlog.storage.codec import ENTRY_MAGICS, HEADER_SIZE, Magic, Stamp, reference_check_next  # noqa: E402
from raftlog.storage.errors import AppendRejectedError, EntryTooLargeError  # noqa: E402

INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1
U32_MAX = (1 << 32) - 1
# ints at the edges of the types the C side reads them into, and of the format's fields
EDGES = (INT64_MIN, INT64_MIN + 1, INT64_MIN + HEADER_SIZE - 1, -(1 << 64), -(1 << 60), -(1 << 31) - 1, -2, -1, 0,
         1, 8, 9, HEADER_SIZE, (1 << 31) - 1, 1 << 31, U32_MAX, 1 << 32, (1 << 48) - 1, 1 << 48, 1 << 60,
         INT64_MAX - 1, INT64_MAX, 1 << 63, (1 << 64) - 1, 1 << 64)


class Draw:
    """The values a target needs, read off the front of a fuzzer's input (zeros past its end). The first
    byte makes half the inputs tame: a valid case, no edge and no damage (else few would get past the
    checks of a random input); the others are perturbed."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.at = 0
        self.tame = False
        self.tame = self.bool()

    def bytes(self, size_max: int) -> bytes:
        size = self.int(0, size_max)
        taken = self.data[self.at:self.at + size]
        self.at += size
        return taken

    def int(self, lo: int, hi: int) -> int:
        width = (hi - lo).bit_length() // 8 + 1
        raw = self.data[self.at:self.at + width]
        self.at += width
        return lo + int.from_bytes(raw, "big") % (hi - lo + 1)

    def bool(self) -> bool:
        return self.int(0, 1) == 1

    def pick(self, options: Sequence[Any]) -> Any:
        return options[self.int(0, len(options) - 1)]

    def choose(self, right: Any, *wrong: Any) -> Any:
        """`right`, or where the input is perturbed, one in three times one of `wrong`."""
        return right if self.tame or self.int(0, 2) else self.pick(wrong)

    def edgy(self, lo: int, hi: int) -> int:
        """An int in [lo, hi]; where the input is perturbed, one in five times an edge of a type, perhaps a
        step off it."""
        if self.tame or self.int(0, 4):
            return self.int(lo, hi)
        return int(self.pick(EDGES)) + self.int(-2, 2)

    def rest(self) -> bytes:
        taken = self.data[self.at:]
        self.at = len(self.data)
        return taken


def damage(draw: Draw, data: bytes) -> bytes:
    """`data` with a few bytes changed, perhaps cut short, where the input is perturbed."""
    if draw.tame:
        return data
    changed = bytearray(data)
    for _ in range(draw.int(0, 3)):
        if changed:
            changed[draw.int(0, len(changed) - 1)] = draw.int(0, 255)
    if changed and draw.int(0, 3) == 0:
        del changed[draw.int(0, len(changed) - 1):]
    return bytes(changed)


def in_range(*values: int) -> bool:
    """Values the C side takes as they are (storage/_codec.c's IN_RANGE): beyond, the reference decides."""
    return all(-(1 << 60) < v < 1 << 60 for v in values)


def refusal(exc: BaseException) -> tuple[type, str]:
    return type(exc), str(exc)


# split_bodies: a client's binary batch (api.bodies)

def fuzz_split_bodies(data: bytes) -> None:
    draw = Draw(data)
    max_entries = draw.choose(None, 0, 1, 2, 3, 8, draw.edgy(0, 20))
    if draw.bool():
        payload = damage(draw, encode_bodies([draw.bytes(40) for _ in range(draw.int(0, 8))]))
    else:
        payload = draw.rest()
    try:
        expected: Any = reference_decode(payload, max_entries)
    except BatchFormatError as exc:
        expected = refusal(exc)
    try:
        assert decode_bodies(payload, max_entries) == expected
    except BatchFormatError as exc:
        assert refusal(exc) == expected
    compiled = codec.compiled.split_bodies(payload, -1 if max_entries is None else max_entries)
    if compiled is not None:
        assert compiled == expected
    elif max_entries is None or INT64_MIN <= max_entries <= INT64_MAX:
        assert isinstance(expected, tuple), "the compiled split refused a batch the reference takes"


# check_next: an entry a reader or a follower checks

def stored(draw: Draw) -> tuple[bytes, list[int], int, int, int, int, int, bool]:
    """Entries as a push carries them or as a data file holds them (fillers and all), perhaps damaged:
    (bytes, entry offsets, first index, term, first pos, chain before, file size, in_file)."""
    file_size = draw.int(HEADER_SIZE + 9, 1024)
    magic = draw.pick([1, 2, 3, 4, 4, 5])
    first, term, chain = draw.edgy(0, 1 << 40), draw.int(1, 1 << 40), draw.int(0, U32_MAX)
    stamp = Stamp(draw.int(0, (1 << 64) - 1), draw.int(0, 3), draw.int(0, 1 << 20)) if magic == Magic.PRODUCED \
        else None
    bodies = [draw.bytes(file_size // 2) for _ in range(draw.int(1, 6))]
    try:
        sent = reference_encode(bodies, first, term, magic, 0, 0, chain, file_size, stamp)
    except (EntryTooLargeError, ValueError, struct.error):
        return draw.rest(), [0], first, term, 0, chain, file_size, False
    in_file = draw.bool()
    if in_file:
        image = bytearray(sent.end_pos + file_size)
        for start, end, pos in sent.runs:
            image[pos:pos + end - start] = bytes(sent.data)[start:end]
        for pos in sent.fillers:
            image[pos:pos - pos % file_size + file_size] = codec.encode_blank(file_size - pos % file_size)
        return damage(draw, bytes(image)), [*sent.positions, sent.end_pos], first, term, 0, chain, file_size, True
    offsets = [p - sent.positions[0] for p in sent.positions]
    return damage(draw, bytes(sent.data)), offsets, first, term, sent.positions[0], chain, file_size, False


def fuzz_check_next(data: bytes) -> None:
    draw = Draw(data)
    buf, offsets, first, term, first_pos, chain, file_size, in_file = stored(draw)
    nth = draw.int(0, len(offsets) - 1)
    offset = draw.choose(offsets[nth], draw.edgy(0, len(buf)))
    end = draw.choose(len(buf), draw.edgy(0, len(buf)))
    index = draw.choose(first + nth, first + nth + 1, draw.edgy(0, 1 << 40))
    term_floor = draw.choose(term, term - 1, term + 1, draw.edgy(0, 1 << 40))
    write_pos: int | None = draw.choose(offsets[nth] + (0 if in_file else first_pos), None, offset + 1,
                                        draw.edgy(0, 1 << 20))
    prev_chain: int | None = draw.choose(chain, None, chain ^ 1, draw.edgy(0, U32_MAX))
    file_size = draw.choose(file_size, draw.edgy(HEADER_SIZE + 9, 4096))
    write_pos = None if write_pos == -1 else write_pos  # (-1 is the C side's None)
    prev_chain = None if prev_chain == -1 else prev_chain
    args = (buf, offset, end, index, term_floor, write_pos, prev_chain, file_size, in_file)
    try:
        expected: Any = reference_check_next(*args)
    except (struct.error, ValueError, ZeroDivisionError, OverflowError) as exc:
        expected = refusal(exc)
    try:
        assert codec.check_next(*args) == expected
    except (struct.error, ValueError, ZeroDivisionError, OverflowError) as exc:
        assert refusal(exc) == expected
    compiled = codec.compiled.check_next(buf, offset, end, index, term_floor, -1 if write_pos is None else write_pos,
                                         -1 if prev_chain is None else prev_chain, file_size, in_file)
    if compiled is not None:
        assert compiled == expected, "the compiled check found a sound entry the reference does not"
    elif offset >= 0 and 0 <= end <= len(buf) and in_range(index, term_floor, file_size) \
            and (write_pos is None or (write_pos >= 0 and in_range(write_pos) and file_size > 8)) \
            and (prev_chain is None or 0 <= prev_chain <= U32_MAX):
        assert expected[0] is not None, "the compiled check refused an entry the reference finds sound"


# encode_batch: a leader's batch of clients' bodies

def parts_of(result: Batch) -> tuple[Any, ...]:
    return (bytes(result.data), result.runs, result.fillers, result.index_records, result.positions,
            result.last_chain_crc, result.end_pos)


def encoded(call: Callable[..., Batch], *args: Any) -> Any:
    try:
        return parts_of(call(*args))
    except (EntryTooLargeError, ValueError, struct.error, OverflowError) as exc:
        return refusal(exc)


def fuzz_encode_batch(data: bytes) -> None:
    draw = Draw(data)
    file_size = draw.edgy(HEADER_SIZE + 9, 2048)
    bodies = [draw.bytes(draw.pick([16, 300, 1200])) for _ in range(draw.int(0, 8))]
    magic = draw.choose(draw.pick([1, 2, 3, 4, 4, 4, 5]), *sorted(ENTRY_MAGICS), 0, 99)
    stamped = (magic == Magic.PRODUCED) != draw.choose(False, True)
    sequence_end = (1 << 48) - len(bodies)
    stamp = (draw.edgy(0, (1 << 64) - 1), draw.edgy(0, (1 << 16) - 1),
             draw.choose(draw.pick([0, 1, sequence_end]), sequence_end + 1, draw.edgy(0, 1 << 48))) if stamped else None
    args = (bodies, draw.edgy(0, 1 << 40), draw.edgy(0, 1 << 40), magic, draw.edgy(-(1 << 31), (1 << 31) - 1),
            draw.edgy(0, 4 * file_size), draw.edgy(0, U32_MAX), file_size, stamp)
    expected = encoded(reference_encode, *args)
    assert encoded(batch.encode_leader_batch, *args) == expected
    if magic not in ENTRY_MAGICS:
        return  # (the compiled encoder's caller checks the entry type: storage.batch.encode_leader_batch)
    compiled = codec.compiled.encode_batch(list(bodies), *args[1:])
    if compiled is not None:
        data_, runs, fillers, records, positions, chain, end_pos = compiled
        assert (bytes(data_), runs, fillers, records, positions, chain, end_pos) == expected, \
            "the compiled encoder made other bytes than the reference"
    elif in_range(args[1], args[5], file_size) and args[5] >= 0 and file_size > 8 \
            and -(1 << 63) <= args[2] < 1 << 63 and -(1 << 31) <= args[4] < 1 << 31:
        assert isinstance(expected[0], type), "the compiled encoder refused a batch the reference encodes"


# validate_batch: a follower's check of a leader's push

def fuzz_validate_batch(data: bytes) -> None:
    draw = Draw(data)
    file_size = draw.int(HEADER_SIZE + 9, 2048)
    first, term, pos, chain = draw.int(1, 1 << 40), draw.int(1, 1 << 40), draw.int(0, 3 * file_size), \
        draw.int(0, U32_MAX)
    sent_data, at, tail = b"", (first, pos, chain), None
    try:
        for n in range(draw.int(1, 2)):
            magic = draw.pick([1, 2, 3, 4, 4, 5])
            stamp = Stamp(draw.int(0, 7), draw.int(0, 3), draw.int(0, 1 << 20)) if magic == Magic.PRODUCED else None
            bodies = [draw.bytes(file_size // 2) for _ in range(draw.int(1, 8))]
            sent = reference_encode(bodies, at[0], term, magic, 0, at[1], at[2], file_size, stamp)
            chunk = bytes(sent.data)
            if n == 0 and stamp is not None and sent.count > 1 and draw.bool():  # pushed from inside: a tail
                entries = codec.iter_entries(chunk)
                k = draw.int(1, sent.count - 1)
                head = max(i for i in range(k + 1) if entries[i].magic == Magic.PRODUCED)
                tail = (at[0] + head, stamp._replace(sequence=stamp.sequence + head))
                first, pos, chain = at[0] + k, entries[k - 1].pos + entries[k - 1].size, entries[k - 1].chain_crc
                chunk = chunk[sum(e.size for e in entries[:k]):]
            sent_data += chunk
            at = (sent.last_index + 1, sent.end_pos, sent.last_chain_crc)
    except EntryTooLargeError:
        sent_data = b""
    pushed = damage(draw, sent_data) if sent_data and draw.choose(True, False) else draw.rest()
    first = draw.choose(first, first + 1, first - 1, draw.edgy(0, 1 << 40))
    term = draw.choose(term, term + 1, draw.edgy(0, 1 << 40))
    write_pos = draw.choose(pos, None, pos + 1, draw.edgy(0, 1 << 20))
    prev_chain = draw.choose(chain, None, chain ^ 1, draw.edgy(0, U32_MAX))
    tail = draw.choose(tail, None, None if tail is None else (tail[0] - 1, tail[1]),
                       (draw.edgy(0, 1 << 40), Stamp(draw.edgy(0, 7), draw.edgy(0, 3), draw.edgy(0, 1 << 48))))
    prev_chain = None if prev_chain == -1 else prev_chain  # (-1 is the C side's None)
    check_validation(pushed, first, term, write_pos, prev_chain, file_size, tail)


def holds_head(index: int, stamp: Stamp) -> bool:
    """A tail's head that the C side takes: an index in range, and a stamp's fields as a stamp stores them."""
    return in_range(index) and index >= 0 and 0 <= stamp.producer_id < 1 << 64 and 0 <= stamp.epoch < 1 << 16 \
        and 0 <= stamp.sequence < 1 << 48


def check_validation(pushed: bytes, first: int, term: int, write_pos: int | None, prev_chain: int | None,
                     file_size: int, tail: tuple[int, Stamp] | None) -> None:
    args = (first, term, write_pos, prev_chain, file_size, tail)
    errors = (AppendRejectedError, ValueError, struct.error, OverflowError, ZeroDivisionError)

    def validated(call: Callable[..., Batch]) -> Any:
        try:
            result = call(memoryview(pushed), *args)
        except errors as exc:
            return refusal(exc)
        return (*parts_of(result)[1:], result.last_term, result.control_indices, result.produced, result.queued)

    expected = validated(reference_validate)
    assert validated(batch.validate_after) == expected
    if len(pushed) < HEADER_SIZE or write_pos is None:
        return  # (the reference alone decides)
    compiled = codec.compiled.validate_batch(pushed, first, term, write_pos, -1 if prev_chain is None else prev_chain,
                                             file_size, None if tail is None else (tail[0], *tail[1]))
    if compiled is not None:
        runs, fillers, records, positions, last_term, chain, end_pos, controls, produced, queued = compiled
        assert (runs, fillers, records, positions, chain, end_pos, last_term, controls, produced, queued) == expected, \
            "the compiled validation took a batch otherwise than the reference"
    elif in_range(first, write_pos, file_size) and write_pos >= 0 and (prev_chain is None or prev_chain >= 0) \
            and -(1 << 63) <= term < 1 << 63 and (tail is None or holds_head(*tail)):
        assert isinstance(expected[0], type), "the compiled validation refused a batch the reference takes"


TARGETS: dict[str, Callable[[bytes], None]] = {
    "split_bodies": fuzz_split_bodies,
    "check_next": fuzz_check_next,
    "encode_batch": fuzz_encode_batch,
    "validate_batch": fuzz_validate_batch,
}


def main(argv: list[str]) -> None:
    """Fuzz one target under atheris: --target NAME --seconds N [--corpus DIR] [libFuzzer flags]."""
    import argparse

    import atheris  # (the dev extra's; make fuzz runs it)

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--target", choices=sorted(TARGETS), required=True)
    parser.add_argument("--seconds", type=int, default=60)
    parser.add_argument("--corpus", help="a directory the fuzzer keeps its inputs in (made if missing)")
    args, libfuzzer = parser.parse_known_args(argv)
    flags = [f"-max_total_time={args.seconds}", "-print_final_stats=1", *libfuzzer]
    if args.corpus:
        os.makedirs(args.corpus, exist_ok=True)
        flags.append(args.corpus)
    for module in (batch, codec, sys.modules["raftlog.api.bodies"]):  # the reference's branches guide it too
        for value in list(vars(module).values()):
            if getattr(value, "__module__", None) == module.__name__ and hasattr(value, "__code__"):
                atheris.instrument_func(value)
    print(f"fuzz_codec: {args.target} for {args.seconds} s, extension {codec.compiled.__file__}", flush=True)
    atheris.Setup([sys.argv[0], *flags], TARGETS[args.target])
    atheris.Fuzz()


if __name__ == "__main__":
    main(sys.argv[1:])
