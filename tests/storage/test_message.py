"""A message entry's body: what is encoded is what every reader decodes, and a damaged one is refused."""

from __future__ import annotations

import zlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from raftlog.storage.codec import Stamp
from raftlog.storage.message import (
    MESSAGE_HEADER_SIZE,
    TAGS_CODE_OFFSET,
    MessageFormatError,
    Meta,
    decode_message,
    encode_message,
    key_queue,
    message_prefix_size,
    tag_code,
)

texts = st.text(max_size=20)
stamps = st.none() | st.builds(Stamp, st.integers(0, 2**64 - 1), st.integers(0, 2**16 - 1), st.integers(0, 2**48 - 1))


@given(st.integers(0, 2**64 - 1), st.integers(0, 2**32 - 1), st.integers(0, 2**64 - 1), st.lists(texts, max_size=3),
       st.lists(texts, max_size=3), st.dictionaries(texts, texts, max_size=3), st.binary(max_size=64), stamps)
def test_a_message_decodes_as_encoded(topic_id: int, queue: int, offset: int, keys: list[str], tags: list[str],
                                      properties: dict[str, str], body: bytes, stamp: Stamp | None) -> None:
    meta = Meta.of(keys, tags, properties)
    encoded = encode_message(topic_id, queue, offset, meta.encode(), meta.tags_code, body, stamp)
    message = decode_message(memoryview(encoded))
    assert (message.topic_id, message.queue, message.queue_offset, message.stamp) == (topic_id, queue, offset, stamp)
    assert (message.keys, message.tags, message.properties) == (tuple(keys), tuple(tags), properties)
    assert bytes(message.body) == body
    assert len(encoded) - message_prefix_size(encoded) == len(body)
    assert int.from_bytes(encoded[TAGS_CODE_OFFSET:TAGS_CODE_OFFSET + 8], "big") == meta.tags_code


def test_a_tag_filter_passes_its_tag_and_rejects_most_others() -> None:
    code = Meta.of(tags=["red", "green"]).tags_code
    assert code & tag_code("red") == tag_code("red") and code & tag_code("green") == tag_code("green")
    others = [f"tag-{i}" for i in range(1000)]
    passed = sum(code & tag_code(t) == tag_code(t) for t in others)
    assert passed < 20  # a Bloom code of 2 tags in 64 bits: the member checks the tags exactly after it


def test_a_keys_queue_is_its_crc32_modulo_the_queue_count() -> None:
    assert key_queue("customer-42", 8) == zlib.crc32(b"customer-42") % 8 == key_queue(b"customer-42", 8)


@pytest.mark.parametrize("cut", [0, MESSAGE_HEADER_SIZE - 1, MESSAGE_HEADER_SIZE + 3])
def test_a_cut_message_is_refused(cut: int) -> None:
    meta = Meta.of(["k"], ["t"], {"a": "b"})
    encoded = encode_message(1, 2, 3, meta.encode(), meta.tags_code, b"body")
    with pytest.raises(MessageFormatError):
        decode_message(memoryview(encoded[:cut]))


def test_meta_past_its_length_is_refused() -> None:
    meta = Meta.of(["key"]).encode()
    encoded = encode_message(1, 0, 0, meta[:-1], 0, b"")  # the key's length runs past the meta
    with pytest.raises(MessageFormatError, match="past their meta"):
        decode_message(memoryview(encoded))
