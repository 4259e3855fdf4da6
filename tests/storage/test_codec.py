"""The entry and index formats against bytes written out by hand (DLEDGER.md, "Entry and index")."""

from __future__ import annotations

import zlib

import pytest

from raftlog.storage.codec import (
    HEADER_SIZE,
    INDEX_RECORD,
    POS_OFFSET,
    chain_crc,
    decode_entry,
    encode_blank,
    encode_entry,
    iter_entries,
    place,
)

HELLO_CRC = bytes.fromhex("3610a686")  # CRC-32 of b"hello"


def test_entry_bytes_match_dledger_layout() -> None:
    chain_input = bytes.fromhex("00000000" "0000000000000005" "0000000000000002") + HELLO_CRC
    chain = zlib.crc32(chain_input).to_bytes(4, "big")
    expected = (
        bytes.fromhex("00000001")  # magic NORMAL
        + bytes.fromhex("00000035")  # size 48 + 5
        + bytes.fromhex("0000000000000005")  # index
        + bytes.fromhex("0000000000000002")  # term
        + bytes.fromhex("00000000000003e8")  # pos 1000
        + bytes.fromhex("00000000")  # channel
        + chain
        + HELLO_CRC
        + bytes.fromhex("00000005")  # bodySize
        + b"hello"
    )
    encoded = encode_entry(1, 5, 2, 1000, b"hello", prev_chain_crc=0)
    assert encoded == expected
    assert encoded[POS_OFFSET:POS_OFFSET + 8] == (1000).to_bytes(8, "big")
    assert len(encoded) == HEADER_SIZE + 5


def test_chain_crc_covers_previous_chain_index_term_and_body_crc() -> None:
    prev = 0xDEADBEEF
    by_hand = zlib.crc32(bytes.fromhex("deadbeef" "0000000000000007" "0000000000000003") + HELLO_CRC)
    assert chain_crc(prev, 7, 3, int.from_bytes(HELLO_CRC, "big")) == by_hand
    entry = decode_entry(memoryview(encode_entry(2, 7, 3, 0, b"hello", prev_chain_crc=prev)))
    assert entry.chain_crc == by_hand
    assert (entry.magic, entry.index, entry.term, bytes(entry.body)) == (2, 7, 3, b"hello")


def test_crc_fields_above_2_31_are_java_int_bytes() -> None:
    encoded = encode_entry(1, 0, 0, 0, b"hello", prev_chain_crc=0)
    assert encoded[40:44] == HELLO_CRC  # 0x3610a686 fits; any CRC is stored as its 4 bytes
    body = b"\xff" * 3  # CRC-32 0xffffff00 > 2**31: must not overflow or change sign
    assert encode_entry(1, 0, 0, 0, body, 0)[40:44] == zlib.crc32(body).to_bytes(4, "big")


def test_index_record_layout() -> None:
    record = INDEX_RECORD.pack(1, 1000, 53, 5, 2)
    assert record == bytes.fromhex(
        "00000001" "00000000000003e8" "00000035" "0000000000000005" "0000000000000002")
    assert len(record) == 32


def test_blank_filler_is_minus_one_then_length() -> None:
    assert encode_blank(20) == bytes.fromhex("ffffffff" "00000014") + bytes(12)
    with pytest.raises(AssertionError):
        encode_blank(7)


@pytest.mark.parametrize(
    ("write_pos", "size", "expected"),
    [
        (0, 100, 0),  # fits
        (900, 100, 900),  # 900 + 100 + 8 == 1008 <= 1016: fits with room for a filler
        (909, 100, 1016),  # 909 + 100 + 8 > 1016: filler, next file
        (2032 + 10, 100, 2042),  # in a later file, positions are global
    ],
)
def test_place_keeps_room_for_the_filler(write_pos: int, size: int, expected: int) -> None:
    assert place(write_pos, size, 1016) == expected


def test_iter_entries_splits_raw_bytes() -> None:
    raw = encode_entry(1, 0, 1, 0, b"a", 0) + encode_entry(2, 1, 1, 49, b"", 0)
    entries = iter_entries(raw)
    assert [(e.index, e.magic, bytes(e.body)) for e in entries] == [(0, 1, b"a"), (1, 2, b"")]
