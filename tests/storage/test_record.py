"""The one decoder of an entry's record (storage.record) against the others that resolve its fields on
their own: the compiled codec's follower check and the Python reference's (their producers' and
messages' runs: the same stamps, topics, queues and offsets), and the pipeline's numpy decoder (the
same types, bodies, stamps and message fields), on random logs that mix plain entries, producers'
batches, messages and control entries, read from any index, in any cuts."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from raftlog.pipeline.entries import Decoder
from raftlog.storage import codec
from raftlog.storage.batch import reference_encode, reference_validate
from raftlog.storage.codec import (
    HEADER_SIZE,
    Entry,
    Magic,
    ProducedRun,
    Stamp,
    add_produced,
    iter_entries,
    unpack_stamp,
)
from raftlog.storage.message import UNSTAMPED, Meta, QueuedRun, add_queued, encode_message
from raftlog.storage.record import MissingHeadError, Record, Records

FILE_SIZE = 1024  # small files: a producer's batch starts a head again in each
CONTROL = (Magic.NOOP, Magic.CONFIG_CHANGE, Magic.CONSUMER, Magic.PRODUCER_SESSION, Magic.CLUSTER_VERSION,
           Magic.TOPIC, Magic.QUEUE_COMMIT)
texts = st.text(st.characters(exclude_categories=("Cs",)), max_size=6)
bodies = st.binary(max_size=80)
producer_stamps = st.builds(Stamp, st.integers(0, 2**63 - 1), st.integers(0, 2**16 - 1), st.integers(0, 2**40))

Append = tuple[int, list[bytes], Stamp | None]  # an append: its magic, bodies and a producer's stamp


@st.composite
def messages(draw: st.DrawFn) -> bytes:
    meta = Meta.of(draw(st.lists(texts, max_size=2)), draw(st.lists(texts, max_size=2)),
                   draw(st.dictionaries(texts, texts, max_size=2)))
    return encode_message(draw(st.integers(0, 2**63 - 1)), draw(st.integers(0, 2**16 - 1)),
                          draw(st.integers(0, 2**63 - 1)), meta.encode(), meta.tags_code, draw(bodies),
                          draw(st.none() | producer_stamps))


appends = st.one_of(
    st.tuples(st.just(int(Magic.NORMAL)), st.lists(bodies, min_size=1, max_size=4), st.none()),
    st.tuples(st.just(int(Magic.PRODUCED)), st.lists(bodies, min_size=1, max_size=30), producer_stamps),
    st.tuples(st.just(int(Magic.MESSAGE)), st.lists(messages(), min_size=1, max_size=4), st.none()),
    st.tuples(st.sampled_from([int(m) for m in CONTROL]), st.lists(bodies, min_size=1, max_size=1), st.none()))


def encode_log(log: list[Append]) -> bytes:
    """The entries of `log` from index 0 back to back, as a stream of the stored format holds them."""
    data, index, pos, chain = [], 0, 0, 0
    for magic, sent, stamp in log:
        batch = reference_encode(sent, index, 1, magic, 0, pos, chain, FILE_SIZE, stamp)
        data.append(bytes(batch.data))
        index, pos, chain = batch.last_index + 1, batch.end_pos, batch.last_chain_crc
    return b"".join(data)


def records_from(entries: list[Entry], start: int) -> list[Record]:
    """The one decoder's records of the entries from `start`, a head before them read by index."""
    decode = Records(lambda index: entries[index])
    return [decode(entry) for entry in entries[start:]]


@settings(max_examples=150, deadline=None)
@given(st.lists(appends, min_size=1, max_size=12))
def test_the_follower_checks_find_the_stamps_and_queue_offsets_the_decoder_does(log: list[Append]) -> None:
    """A follower's producers' runs and messages' runs (the producer and queue offset tables) hold the
    stamps, topics, queues and offsets the record decoder gives, in the Python reference and compiled."""
    data = encode_log(log)
    produced: list[ProducedRun] = []
    queued: list[QueuedRun] = []
    for record, entry in zip(records_from(iter_entries(data), 0), iter_entries(data), strict=True):
        if entry.magic in codec.PRODUCER_MAGICS:
            assert record.producer is not None
            add_produced(produced, record.producer, record.index)
        elif entry.magic == Magic.MESSAGE:
            assert record.topic_id is not None and record.queue is not None and record.queue_offset is not None
            stamp = (UNSTAMPED, 0, 0) if record.producer is None else record.producer
            add_queued(queued, (record.topic_id, record.queue, record.queue_offset, *stamp), record.index)
    checked = reference_validate(data, 0, 0, 0, 0, FILE_SIZE)
    assert (checked.produced, checked.queued) == (tuple(produced), tuple(queued))
    if codec.compiled is not None:
        parts = codec.compiled.validate_batch(data, 0, 0, 0, 0, FILE_SIZE)
        assert (list(parts[8]), list(parts[9])) == (produced, queued)


@settings(max_examples=150, deadline=None)
@given(st.lists(appends, min_size=1, max_size=12), st.data())
def test_the_pipelines_decoder_gives_each_row_the_record_the_decoder_does(log: list[Append], data: Any) -> None:
    """Read from any index (a producer's batch begun before it: its head read by index), cut into record
    batches anywhere: the same type, body, stamp and message fields in every row."""
    raw = encode_log(log)
    entries = iter_entries(raw)
    start = data.draw(st.integers(0, len(entries) - 1), "start")
    cut = data.draw(st.integers(start, len(entries)), "cut")
    offsets = [0]
    for entry in entries:
        offsets.append(offsets[-1] + entry.size)
    decoder = Decoder(start, None, head_stamp=lambda index: unpack_stamp(entries[index].body))
    batches = []
    for first, last in ((start, cut), (cut, len(entries))):
        if last > first:
            assert decoder.feed(raw, offsets[first], offsets[last], None) == (offsets[last], None)
            batches.append(decoder.batch())
    assert rows_of(pa.Table.from_batches(batches)) == [as_row(record) for record in records_from(entries, start)]


def rows_of(table: pa.Table) -> list[tuple[Any, ...]]:
    columns = ("index", "term", "pos", "type", "body", "producer_id", "producer_epoch", "sequence", "topic_id",
               "queue", "queue_offset", "keys", "tags", "properties")
    return list(zip(*(table.column(name).to_pylist() for name in columns), strict=True))


def as_row(record: Record) -> tuple[Any, ...]:
    """A record as the pipeline's columns hold it."""
    producer = (None, None, None) if record.producer is None else tuple(record.producer)
    properties = None if record.properties is None else list(record.properties.items())
    return (record.index, record.term, record.pos, record.type, record.body, *producer, record.topic_id,
            record.queue, record.queue_offset, None if record.keys is None else list(record.keys),
            None if record.tags is None else list(record.tags), properties)


def test_a_message_reads_as_a_message_with_its_fields_and_its_own_body() -> None:
    meta = Meta.of(["customer-42"], ["order"], {"region": "eu"})
    stamp = Stamp(7, 1, 3)
    data = encode_log([(Magic.MESSAGE, [encode_message(12, 3, 5, meta.encode(), meta.tags_code, b"hello", stamp)],
                        None)])
    (record,) = records_from(iter_entries(data), 0)
    assert record == Record(0, 1, 0, "message", b"hello", 907060870, stamp, 12, None, 3, 5, ("customer-42",),
                            ("order",), {"region": "eu"})
    named = Records(topic_name={12: "orders"}.get)(iter_entries(data)[0])
    assert named.topic == "orders"


def test_a_continuation_whose_head_was_not_read_waits_for_it_to_be_known() -> None:
    """Without a way to read a head, a reading begun inside a producer's batch is told which head it
    needs (the client reads it by index), and goes on once it knows it."""
    entries = iter_entries(encode_log([(Magic.PRODUCED, [b"a", b"b", b"c"], Stamp(9, 1, 40))]))
    decode = Records()
    with pytest.raises(MissingHeadError) as missing:
        decode(entries[1])
    assert missing.value.head_index == 0
    decode.know(0, Stamp(9, 1, 40))
    assert [decode(e).producer for e in entries[1:]] == [Stamp(9, 1, 41), Stamp(9, 1, 42)]
    assert entries[1].size == HEADER_SIZE + 1 + 1  # the continuation's distance, then its body
