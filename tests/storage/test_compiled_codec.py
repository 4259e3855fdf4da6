"""The compiled codec (storage/_codec.c) against the Python reference (storage.codec, storage.batch,
api.bodies): the same bytes for every batch a leader encodes, the same verdict on every batch a
follower is sent and on every entry a reader checks, valid, damaged or hostile, and the same
bodies from every client's binary batch (a rejection is the reference's, word for word)."""

from __future__ import annotations

import dataclasses
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from raftlog.api.bodies import BatchFormatError, decode_bodies, encode_bodies, reference_decode
from raftlog.storage import batch, codec
from raftlog.storage.batch import Batch, reference_encode, reference_validate, validate_follower_batch
from raftlog.storage.codec import (
    HEADER_SIZE,
    MIN_BLANK_LEN,
    Magic,
    Stamp,
    check_next,
    encode_blank,
    reference_check_next,
)
from raftlog.storage.errors import AppendRejectedError, EntryTooLargeError
from raftlog.storage.message import Meta, encode_message
from raftlog.storage.record import Stamps

FILE_SIZES = st.integers(HEADER_SIZE + MIN_BLANK_LEN + 1, 2048)  # small files: fillers in most batches
U32 = st.integers(0, 2**32 - 1)
MAGICS = st.sampled_from([1, 2, 3, 4, 4])


@st.composite
def stamps(draw: st.DrawFn, magic: int) -> Stamp | None:
    """A PRODUCED batch's stamp (None for the other entry types)."""
    if magic != Magic.PRODUCED:
        return None
    return Stamp(draw(st.integers(0, 2**64 - 1)), draw(st.integers(0, 2**16 - 1)),
                 draw(st.sampled_from([0, 1, 2**40, 2**48 - 20])))


def test_the_compiled_codec_is_built() -> None:
    """make test installs the package, which builds it (a machine without a compiler runs the reference)."""
    assert codec.compiled is not None


def parts(batch: Batch) -> dict[str, Any]:
    fields = {field.name: getattr(batch, field.name) for field in dataclasses.fields(batch)}
    fields["data"] = bytes(batch.data)
    return fields


def outcome(call: Any, *args: Any) -> dict[str, Any] | tuple[type, str]:
    """A batch's parts, or the error it raised and its words."""
    try:
        return parts(call(*args))
    except (AppendRejectedError, EntryTooLargeError) as exc:
        return type(exc), str(exc)


@st.composite
def leader_batches(draw: st.DrawFn) -> tuple[Any, ...]:
    file_size = draw(FILE_SIZES)
    bodies = draw(st.lists(st.binary(min_size=0, max_size=file_size), min_size=1, max_size=20))
    write_pos = draw(st.integers(0, 4 * file_size))
    magic = draw(MAGICS)
    return (bodies, draw(st.integers(1, 2**40)), draw(st.integers(0, 2**40)), magic,
            draw(st.integers(-2**31, 2**31 - 1)), write_pos, draw(U32), file_size, draw(stamps(magic)))


@settings(max_examples=400, deadline=None)
@given(leader_batches())
def test_a_leaders_batch_is_encoded_to_the_same_bytes(args: tuple[Any, ...]) -> None:
    expected = outcome(reference_encode, *args)
    assert outcome(batch.encode_leader_batch, *args) == expected
    assert (codec.compiled.encode_batch(*args) is None) == isinstance(expected, tuple)  # it took the batch itself


@st.composite
def messages_of(draw: st.DrawFn, bodies: list[bytes]) -> list[bytes]:
    """`bodies` as one queue's messages, with contiguous offsets and sequences (or, now and then, a message
    of another queue, an offset or a sequence out of step, a stamp cut short)."""
    topic, queue, offset = draw(st.integers(0, 2**64 - 2)), draw(st.integers(0, 2**32 - 1)), \
        draw(st.integers(0, 2**63))
    stamp = draw(st.none() | st.builds(Stamp, st.integers(0, 2**64 - 1), st.integers(0, 2**16 - 1),
                                       st.integers(0, 2**47)))
    meta = Meta.of(["k"], draw(st.lists(st.text(max_size=3), max_size=2)))
    messages = []
    for i, body in enumerate(bodies):
        step = i + draw(st.sampled_from([0, 0, 0, 0, 1]))
        messages.append(encode_message(topic + draw(st.sampled_from([0, 0, 0, 0, 1])), queue, offset + step,
                                       meta.encode(), meta.tags_code, body,
                                       None if stamp is None else stamp._replace(sequence=stamp.sequence + step)))
    if draw(st.booleans()):  # cut: a header, or a stamp, short of its size
        at = draw(st.integers(0, len(messages) - 1))
        messages[at] = messages[at][:draw(st.integers(0, 50))]
    return messages


@st.composite
def follower_batches(draw: st.DrawFn) -> tuple[Any, ...]:
    """A valid batch as a leader sends it (two leader batches back to back, perhaps of two producers,
    the first perhaps pushed from inside, after its head: the log's tail), then perhaps damaged: bytes
    flipped or cut, or sent to a log that does not end where the leader's did (or its tail's head)."""
    file_size = draw(FILE_SIZES)
    first, term, pos, chain = draw(st.integers(1, 2**40)), draw(st.integers(1, 2**40)), \
        draw(st.integers(0, 3 * file_size)), draw(U32)
    sent_data, at, tail = b"", (first, pos, chain), None
    try:
        for n in range(draw(st.integers(1, 2))):
            bodies = draw(st.lists(st.binary(min_size=0, max_size=file_size // 2), min_size=1, max_size=8))
            magic = draw(st.sampled_from([1, 2, 3, 4, 4, 9, 9]))
            if magic == Magic.MESSAGE:
                bodies = draw(messages_of(bodies))
            stamp = draw(stamps(magic))
            sent = reference_encode(bodies, at[0], term, magic, 0, at[1], at[2], file_size, stamp)
            data = bytes(sent.data)
            if n == 0 and stamp is not None and sent.count > 1 and draw(st.booleans()):  # the log holds its start
                entries = codec.iter_entries(data)
                k = draw(st.integers(1, sent.count - 1))
                head = max(i for i in range(k + 1) if entries[i].magic == Magic.PRODUCED)
                tail = (at[0] + head, stamp._replace(sequence=stamp.sequence + head))
                first, pos, chain = at[0] + k, entries[k - 1].pos + entries[k - 1].size, entries[k - 1].chain_crc
                data = data[sum(e.size for e in entries[:k]):]
            sent_data += data
            at = (sent.last_index + 1, sent.end_pos, sent.last_chain_crc)
    except EntryTooLargeError:
        sent_data = b""
    data = bytearray(sent_data or draw(st.binary(min_size=0, max_size=200)))
    for _ in range(draw(st.integers(0, 3))):
        if data and draw(st.booleans()):
            at = draw(st.integers(0, len(data) - 1))
            data[at] = draw(st.integers(0, 255))
    if data and draw(st.booleans()):
        del data[draw(st.integers(0, len(data) - 1)):]
    return (bytes(data),
            first + draw(st.sampled_from([0, 0, 0, 1, -1])),
            term + draw(st.sampled_from([0, 0, 0, 1, -1])),
            draw(st.sampled_from([pos, pos, None, pos + 1])),
            draw(st.sampled_from([chain, chain, None, chain ^ 1])),
            file_size,
            draw(st.sampled_from([tail, tail, None, None if tail is None else (tail[0] - 1, tail[1])])))


@settings(max_examples=800, deadline=None)
@given(follower_batches())
def test_a_followers_batch_gets_the_same_verdict(args: tuple[Any, ...]) -> None:
    expected = outcome(reference_validate, *args)
    assert outcome(batch.validate_after, memoryview(args[0]), *args[1:]) == expected
    data, first, term, pos, chain, file_size, tail = args
    if len(data) >= HEADER_SIZE and pos is not None:  # (else the reference alone decides)
        compiled = codec.compiled.validate_batch(data, first, term, pos, -1 if chain is None else chain, file_size,
                                                 None if tail is None else (tail[0], *tail[1]))
        assert (compiled is None) == isinstance(expected, tuple)


def test_a_rejection_is_worded_by_the_reference() -> None:
    sent = reference_encode([b"a", b"b"], 5, 2, 1, 0, 0, 7, 1024)
    damaged = bytearray(sent.data)
    damaged[-1] ^= 0xFF
    assert codec.compiled.validate_batch(bytes(damaged), 5, 2, 0, 7, 1024) is None
    assert outcome(validate_follower_batch, bytes(damaged), 5, 2, 0, 7, 1024) == (
        AppendRejectedError, str(AppendRejectedError(6, "body CRC mismatch")))


@st.composite
def stored_entries(draw: st.DrawFn) -> tuple[Any, ...]:
    """Entries as a data file holds them (fillers and all) or as a push carries them, perhaps
    damaged, and a reader's expectations at an offset in them, right or wrong."""
    file_size = draw(FILE_SIZES)
    bodies = draw(st.lists(st.binary(min_size=0, max_size=file_size // 2), min_size=1, max_size=8))
    first, term, chain = draw(st.integers(0, 2**40)), draw(st.integers(1, 2**40)), draw(U32)
    magic = draw(MAGICS)
    try:
        sent = reference_encode(bodies, first, term, magic, 0, 0, chain, file_size, draw(stamps(magic)))
    except EntryTooLargeError:
        return bytes(draw(st.binary(max_size=200))), 0, first, term, None, None, file_size, False
    in_file = draw(st.booleans())
    if in_file:  # the file image: runs where they go, a filler closing each full file
        image = bytearray(sent.end_pos + file_size)
        for start, end, pos in sent.runs:
            image[pos:pos + end - start] = bytes(sent.data[start:end])
        for pos in sent.fillers:
            image[pos:pos - pos % file_size + file_size] = encode_blank(file_size - pos % file_size)
        data, offsets = image, sent.positions + sent.fillers + [sent.end_pos]
    else:
        data, offsets = bytearray(sent.data), [p - sent.positions[0] for p in sent.positions]
    for _ in range(draw(st.integers(0, 2))):
        at = draw(st.integers(0, len(data) - 1))
        data[at] = draw(st.integers(0, 255))
    if not in_file and draw(st.booleans()):
        del data[draw(st.integers(0, len(data) - 1)):]
    nth = draw(st.integers(0, len(offsets) - 1))
    at = offsets[nth]
    write_pos = draw(st.sampled_from([at if in_file else sent.positions[0] + at, None, at + 1]))
    return (bytes(data), min(at, len(data)), first + nth + draw(st.sampled_from([0, 0, 1])),
            term - draw(st.sampled_from([0, 1])), write_pos, draw(st.sampled_from([chain, None, chain ^ 1])),
            file_size, in_file)


@settings(max_examples=800, deadline=None)
@given(stored_entries())
def test_every_entry_a_reader_checks_gets_the_same_verdict(args: tuple[Any, ...]) -> None:
    data, offset, index, term_floor, write_pos, chain, file_size, in_file = args
    expected = reference_check_next(data, offset, len(data), index, term_floor, write_pos, chain, file_size, in_file)
    assert check_next(data, offset, len(data), index, term_floor, write_pos, chain, file_size, in_file) == expected
    compiled = codec.compiled.check_next(data, offset, len(data), index, term_floor,
                                         -1 if write_pos is None else write_pos, -1 if chain is None else chain,
                                         file_size, in_file)
    assert compiled in (None, expected) and (compiled is None) == (expected[0] is not None)


def test_a_sound_entry_is_found_by_both_and_a_damaged_one_worded_by_the_reference() -> None:
    sent = reference_encode([b"a", b"b"], 5, 2, 1, 0, 0, 7, 1024)
    data = bytes(sent.data)
    second = sent.positions[1]
    assert check_next(data, second, len(data), 6, 2, second, None, 1024, False)[0] is None
    damaged = data[:-1] + bytes([data[-1] ^ 0xFF])
    assert codec.compiled.check_next(damaged, second, len(damaged), 6, 2, second, -1, 1024, False) is None
    assert check_next(damaged, second, len(damaged), 6, 2, second, None, 1024, False)[0] == "body CRC mismatch"


def split(call: Any, data: bytes, max_entries: int | None) -> list[bytes] | tuple[type, str]:
    try:
        return call(data, max_entries)  # type: ignore[no-any-return]
    except BatchFormatError as exc:
        return type(exc), str(exc)


@settings(max_examples=400, deadline=None)
@given(st.lists(st.binary(max_size=40), max_size=12), st.integers(0, 3), st.data(),
       st.one_of(st.none(), st.integers(0, 12)))
def test_a_clients_binary_batch_is_split_into_the_same_bodies(bodies: list[bytes], damage: int, data: st.DataObject,
                                                              max_entries: int | None) -> None:
    sent = bytearray(encode_bodies(bodies))
    for _ in range(damage):  # a length made larger or smaller, or the batch cut short
        if sent:
            at = data.draw(st.integers(0, len(sent) - 1))
            sent[at] = data.draw(st.integers(0, 255))
    if sent and data.draw(st.booleans()):
        del sent[data.draw(st.integers(0, len(sent) - 1)):]
    expected = split(reference_decode, bytes(sent), max_entries)
    assert split(decode_bodies, bytes(sent), max_entries) == expected
    assert (codec.compiled.split_bodies(bytes(sent), -1 if max_entries is None else max_entries) is None) == (
        isinstance(expected, tuple))


def test_a_produced_entry_too_short_for_its_stamp_is_refused_by_both() -> None:
    """A hostile leader's PRODUCED entry with sound CRCs but a body that cannot hold the stamp."""
    entry = codec.encode_entry(Magic.PRODUCED, 5, 2, 0, b"short", 7)
    assert codec.compiled.check_next(entry, 0, len(entry), 5, 2, 0, 7, 1024, False) is None
    verdict = check_next(entry, 0, len(entry), 5, 2, 0, 7, 1024, False)[0]
    assert verdict == "a produced entry's body of 5 bytes cannot hold its 16-byte stamp"
    assert outcome(validate_follower_batch, entry, 5, 2, 0, 7, 1024) == (
        AppendRejectedError, str(AppendRejectedError(5, verdict)))


def test_a_producers_batch_is_stamped_once_and_again_where_it_starts_a_file() -> None:
    """A PRODUCED head, then CONTINUED entries a byte longer than the client's bodies; the entry that
    starts the next data file is a head again, so no file holds a continuation of another's head."""
    sent = batch.encode_leader_batch([bytes(100)] * 8, 5, 2, Magic.PRODUCED, 0, 0, 7, 600, Stamp(9, 1, 40))
    entries = codec.iter_entries(bytes(sent.data))
    starts = {e.index for e in entries if e.pos % 600 == 0}
    assert starts and [e.magic for e in entries] == [
        Magic.PRODUCED if e.index == 5 or e.index in starts else Magic.CONTINUED for e in entries]
    assert [e.size for e in entries] == [48 + 16 + 100 if e.magic == Magic.PRODUCED else 48 + 1 + 100
                                         for e in entries]
    stamps_ = Stamps(lambda i: entries[i - 5])
    assert [stamps_(e) for e in entries] == [Stamp(9, 1, 40 + i) for i in range(8)]
    assert sent.produced == () and reference_validate(sent.data, 5, 2, 0, 7, 600).produced == ((9, 1, 40, 5, 12),)


def test_a_push_from_inside_a_batch_continues_the_logs_head_and_no_other() -> None:
    sent = reference_encode([b"a", b"b", b"c"], 5, 2, Magic.PRODUCED, 0, 0, 7, 4096, Stamp(9, 1, 40))
    entries = codec.iter_entries(bytes(sent.data))
    rest, after = bytes(sent.data)[entries[0].size:], (6, 2, entries[1].pos, entries[0].chain_crc, 4096)
    for validate in (batch.validate_after, reference_validate):
        assert validate(memoryview(rest), *after[:1], 2, *after[2:], (5, Stamp(9, 1, 40))).produced == (
            (9, 1, 41, 6, 7),)
    for tail in (None, (4, Stamp(9, 1, 40))):  # no batch before, or another head
        assert codec.compiled.validate_batch(rest, 6, 2, entries[1].pos, entries[0].chain_crc, 4096,
                                             None if tail is None else (tail[0], *tail[1])) is None
        assert outcome(batch.validate_after, memoryview(rest), 6, 2, entries[1].pos, entries[0].chain_crc, 4096,
                       tail) == (AppendRejectedError, str(AppendRejectedError(
                           6, "a continued entry's distance 1 names no head of the batch it continues")))


def test_a_continued_entry_must_point_back_into_its_own_file() -> None:
    """Sound CRCs, a distance of 0 or past the log's start, or a continuation that starts a file."""
    for index, pos, distance, verdict in (
            (5, 100, 0, "a continued entry's distance 0 back from index 5 names no entry"),
            (5, 100, 6, "a continued entry's distance 6 back from index 5 names no entry"),
            (5, 1024, 1, "a continued entry starts a data file, apart from its head")):
        entry = codec.encode_entry(Magic.CONTINUED, index, 2, pos, codec.DISTANCE.pack(distance) + b"x", 7)
        assert codec.compiled.check_next(entry, 0, len(entry), index, 2, pos, 7, 1024, False) is None
        assert check_next(entry, 0, len(entry), index, 2, pos, 7, 1024, False)[0] == verdict
    short = codec.encode_entry(Magic.CONTINUED, 5, 2, 100, b"", 7)
    assert codec.compiled.check_next(short, 0, len(short), 5, 2, 100, 7, 1024, False) is None
    assert check_next(short, 0, len(short), 5, 2, 100, 7, 1024, False)[0] == \
        "a continued entry's body of 0 bytes cannot hold its 1-byte distance"


def test_every_256th_entry_of_a_batch_is_a_head_again_so_a_distance_fits_its_byte() -> None:
    sent = batch.encode_leader_batch([b"x"] * 600, 0, 1, Magic.PRODUCED, 0, 0, 0, 1 << 20, Stamp(3, 0, 0))
    assert bytes(sent.data) == bytes(reference_encode([b"x"] * 600, 0, 1, Magic.PRODUCED, 0, 0, 0, 1 << 20,
                                                      Stamp(3, 0, 0)).data)
    entries = codec.iter_entries(bytes(sent.data))
    assert [e.index for e in entries if e.magic == Magic.PRODUCED] == [0, 256, 512]
    assert max(codec.DISTANCE.unpack_from(e.body)[0] for e in entries if e.magic == Magic.CONTINUED) == 255
    stamps_ = Stamps(lambda i: entries[i])
    assert [stamps_(e).sequence for e in entries] == list(range(600))  # type: ignore[union-attr]
    assert reference_validate(sent.data, 0, 1, 0, 0, 1 << 20).produced == ((3, 0, 0, 0, 599),)
