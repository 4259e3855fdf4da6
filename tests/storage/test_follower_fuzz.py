"""Hostile peer input, property-based: the push decoder and the store's follower append.

Whatever bytes arrive, the decoder answers a PushRequest or PeerMessageError, nothing else; and a
follower store either refuses a push's entries (AppendRejectedError) with its files and end
untouched, or takes exactly a prefix of the leader's entries, never anything else.
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from raftlog.api.peer_codec import PeerMessageError, decode_push, encode_push
from raftlog.raft.messages import PushRequest, PushType
from raftlog.storage import Store
from raftlog.storage.codec import HEADER_SIZE
from raftlog.storage.errors import AppendRejectedError
from tests.storage.conftest import SMALL, body, file_bytes

LEADER_ENTRIES = 12
FOLLOWER_HAS = 5  # the follower holds entries 0..4; the push carries 5..11, crossing data files


def valid_push_body(data: bytes = b"\x00" * HEADER_SIZE) -> bytes:
    request = PushRequest("default", "n1", 7, PushType.APPEND, 3, first_index=5, count=1, data=data,
                          pre_log_index=4, pre_log_term=7)
    return encode_push(request)


def mutate(data: bytes, kind: str, at: float, value: int) -> bytes:
    """One hostile change: cut, flip a byte, an absurd 4- or 8-byte field, or garbage after."""
    i = int(at * len(data)) % max(len(data), 1)
    if kind == "cut":
        return data[:i]
    if kind == "flip":
        return data[:i] + bytes([data[i] ^ (value % 255 + 1)]) + data[i + 1:]
    if kind in ("int32", "int64"):
        width = 4 if kind == "int32" else 8
        field = (value % (1 << (8 * width))).to_bytes(width, "big")
        return data[:i] + field + data[i + width:]
    return data + value.to_bytes(8, "big", signed=True)


mutations = st.tuples(st.sampled_from(["cut", "flip", "int32", "int64", "tail"]), st.floats(0, 1),
                      st.sampled_from([0, 1, -1, 2**31 - 1, 2**31, 2**63 - 1]) | st.integers(-(2**63), 2**63 - 1))


def decodes(data: bytes) -> bool:
    """Whether `data` decodes; anything but a PushRequest or PeerMessageError fails the test."""
    try:
        request = decode_push(data)
    except PeerMessageError:
        return False
    assert isinstance(request, PushRequest) and request.count >= 0 and request.type in PushType
    return True


@settings(max_examples=400, deadline=None)
@given(data=st.binary(max_size=300))
def test_the_push_decoder_takes_any_bytes(data: bytes) -> None:
    decodes(data)


@settings(max_examples=400, deadline=None)
@given(mutation=mutations)
def test_the_push_decoder_takes_any_damage_to_a_push(mutation: tuple[str, float, int]) -> None:
    decodes(mutate(valid_push_body(), *mutation))


def test_an_undamaged_push_decodes_and_a_cut_one_does_not() -> None:
    assert decodes(valid_push_body()) and not decodes(valid_push_body()[:20])


async def build(root: Path) -> tuple[bytes, list[tuple[int, int, bytes]]]:
    """A follower's directory holding 0..4 of a leader's 12 entries; the raw push of 5..11 and the
    leader's (index, term, body) of every entry."""
    leader = Store.open(root / "leader", SMALL)
    follower = Store.open(root / "follower", SMALL)
    try:
        for i in range(LEADER_ENTRIES):
            await leader.append_as_leader([body(i, 40 + 13 * i)], 1 + i // 4)
        await follower.append_as_follower(bytes(leader.read_range(0, FOLLOWER_HAS, 1 << 20).data))
        parts, index = [], FOLLOWER_HAS
        while index < LEADER_ENTRIES:  # a read stops at the end of a data file
            raw = leader.read_range(index, LEADER_ENTRIES, 1 << 20)
            parts.append(bytes(raw.data))
            index += raw.count
        push = b"".join(parts)
        entries = [(i, leader.get(i).term, bytes(leader.get(i).body)) for i in range(LEADER_ENTRIES)]
        return push, entries
    finally:
        await leader.close()
        await follower.close()


@dataclass(frozen=True)
class Template:
    root: Path
    push: bytes
    entries: list[tuple[int, int, bytes]]
    files: bytes  # the follower's data and index files


@pytest.fixture(scope="module")
def template() -> Iterator[Template]:
    root = Path(tempfile.mkdtemp(prefix="raftlog-fuzz-"))
    try:
        push, entries = asyncio.run(build(root))
        yield Template(root, push, entries, segment_bytes(root / "follower"))
    finally:
        shutil.rmtree(root)


def segment_bytes(path: Path) -> bytes:
    return file_bytes(path / "data") + file_bytes(path / "index")


async def follow(path: Path, data: bytes, template: Template) -> None:
    store = Store.open(path, SMALL)
    try:
        before = (store.end_index, store.write_pos, store.end_chain_crc)
        try:
            end = (await store.append_as_follower(data)).end_index
        except AppendRejectedError:
            assert (store.end_index, store.write_pos, store.end_chain_crc) == before
            end = None
        took = [(i, store.get(i).term, bytes(store.get(i).body)) for i in range(store.end_index + 1)]
    finally:
        await store.close()
    if end is None:
        assert segment_bytes(path) == template.files  # not a byte written
    else:
        assert end >= FOLLOWER_HAS and took == template.entries[:end + 1]  # a prefix of the leader's log


def run_on_a_copy(template: Template, data: bytes) -> None:
    path = Path(tempfile.mkdtemp(prefix="raftlog-fuzz-case-"))
    try:
        shutil.copytree(template.root / "follower", path / "follower")
        asyncio.run(follow(path / "follower", data, template))
    finally:
        shutil.rmtree(path)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutation=mutations)
def test_a_follower_takes_only_the_leaders_entries(template: Template, mutation: tuple[str, float, int]) -> None:
    run_on_a_copy(template, mutate(template.push, *mutation))


@pytest.mark.parametrize(("what", "damage"), [
    ("undamaged: taken whole", lambda push: push),
    ("cut mid-entry", lambda push: push[:len(push) // 2 + 7]),
    ("a bad body CRC", lambda push: push[:HEADER_SIZE + 3] + b"?" + push[HEADER_SIZE + 4:]),
    ("an absurd size", lambda push: push[:4] + (2**31 - 1).to_bytes(4, "big") + push[8:]),
    ("a term below the log's", lambda push: push[:16] + (0).to_bytes(8, "big") + push[24:]),
])
def test_named_damage(template: Template, what: str, damage: Callable[[bytes], bytes]) -> None:
    """The property's cases by name; the first shows it is not vacuous (the push is taken)."""
    data = damage(template.push)
    run_on_a_copy(template, data)
    if data == template.push:
        path = Path(tempfile.mkdtemp(prefix="raftlog-fuzz-case-"))
        try:
            shutil.copytree(template.root / "follower", path / "follower")

            async def take() -> int:
                store = Store.open(path / "follower", SMALL)
                try:
                    return (await store.append_as_follower(data)).end_index
                finally:
                    await store.close()

            assert asyncio.run(take()) == LEADER_ENTRIES - 1
        finally:
            shutil.rmtree(path)
