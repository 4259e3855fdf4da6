"""The offline reader and the entry decoder on files a real store wrote (no Spark needed)."""

from __future__ import annotations

import os
import shutil
import zlib
from pathlib import Path

import pyarrow as pa
import pytest

from raftlog.pipeline.entries import CorruptDataError, Decoder
from raftlog.pipeline.offline import CHECKPOINT_FILE, DataDir, open_data_dir, read_file
from raftlog.pipeline.online import _decode_stream
from raftlog.pipeline.options import PipelineError
from raftlog.storage import Checkpoint, Store, StoreConfig
from raftlog.storage.codec import BLANK, BLANK_MAGIC, HEADER, HEADER_SIZE, Magic, Stamp
from tests.pipeline.conftest import signed32

# 6 entries of 100-byte bodies to a file: every test crosses data files
SMALL = StoreConfig(data_file_size=1016, index_file_size=10 * 32)


def body(i: int, size: int = 100) -> bytes:
    return (f"entry-{i}-".encode() * size)[:size]


async def make_node(path: Path, count: int, committed: int, config: StoreConfig = SMALL,
                    body_size: int = 100) -> list[tuple[int, int, int, bytes]]:
    """A data directory with `count` entries over two terms and a checkpoint saying `committed`."""
    path.mkdir(parents=True, exist_ok=True)
    checkpoint = Checkpoint.open(path / CHECKPOINT_FILE, create=True)
    store = Store.open(path, config)
    written = []
    for i in range(count):
        term = 1 if i < count // 2 else 2
        result = await store.append_as_leader([body(i, body_size)], term)
        written.append((result.first_index, term, result.positions[0], body(i, body_size)))
    await store.flush()
    checkpoint.note_progress(committed, committed)
    await store.close()
    await checkpoint.close()
    return written


def read_all(data_dir: DataDir, **kwargs: object) -> pa.Table:
    options = {"text": False, "mark_corrupt": False, "committed_only": False, "batch_rows": 4, **kwargs}
    batches = [b for f in data_dir.files for b in read_file(f, data_dir.data_file_size, data_dir.committed_index,
                                                           **options)]  # type: ignore[arg-type]
    return pa.Table.from_batches(batches)


def damage(path: Path, written: list[tuple[int, int, int, bytes]], index: int, offset_in_body: int = 10) -> None:
    pos = written[index][2] + HEADER_SIZE + offset_in_body
    data = path / "data" / f"{pos - pos % SMALL.data_file_size:020d}"
    with open(data, "r+b") as f:
        f.seek(pos % SMALL.data_file_size)
        byte = f.read(1)
        f.seek(pos % SMALL.data_file_size)
        f.write(bytes([byte[0] ^ 0x40]))


@pytest.mark.parametrize("file_size", [1016, 6 * 148 + 40], ids=["filler with a header's room", "short filler"])
async def test_reads_every_entry_across_files_with_its_metadata(tmp_path: Path, file_size: int) -> None:
    written = await make_node(tmp_path, 40, committed=39, config=StoreConfig(file_size, 10 * 32))
    data_dir = open_data_dir(str(tmp_path))
    assert len(data_dir.files) > 5 and data_dir.committed_index == 39
    table = read_all(data_dir, text=True)
    assert table.column("index").to_pylist() == list(range(40))
    assert table.column("term").to_pylist() == [w[1] for w in written]
    assert table.column("pos").to_pylist() == [w[2] for w in written]
    assert table.column("body").to_pylist() == [w[3] for w in written]
    assert table.column("body_text").to_pylist() == [w[3].decode() for w in written]
    assert table.column("type").to_pylist() == ["normal"] * 40
    assert table.column("body_crc").to_pylist() == [signed32(zlib.crc32(w[3])) for w in written]


async def test_committed_only_stops_at_the_checkpoint(tmp_path: Path) -> None:
    await make_node(tmp_path, 20, committed=12)
    table = read_all(open_data_dir(str(tmp_path)), committed_only=True)
    assert table.column("index").to_pylist() == list(range(13))


async def test_a_damaged_committed_entry_fails_the_read_naming_file_and_index(tmp_path: Path) -> None:
    written = await make_node(tmp_path, 20, committed=19)
    damage(tmp_path, written, 9)
    with pytest.raises(CorruptDataError, match=r"corrupt entry 9 .*body CRC mismatch") as caught:
        read_all(open_data_dir(str(tmp_path)))
    assert str(tmp_path / "data") in str(caught.value)


async def test_marked_damage_is_a_row_that_says_why(tmp_path: Path) -> None:
    written = await make_node(tmp_path, 20, committed=19)
    damage(tmp_path, written, 9)
    table = read_all(open_data_dir(str(tmp_path)), mark_corrupt=True)
    corrupt = dict(zip(table.column("index").to_pylist(), table.column("corrupt").to_pylist(), strict=True))
    assert len(corrupt) == 20
    assert corrupt[9] == "body CRC mismatch"
    assert all(reason is None for i, reason in corrupt.items() if i != 9)


async def test_a_torn_tail_after_the_commit_index_is_left_out_like_recovery_does(tmp_path: Path) -> None:
    written = await make_node(tmp_path, 20, committed=17)
    damage(tmp_path, written, 19)
    table = read_all(open_data_dir(str(tmp_path)))
    assert table.column("index").to_pylist() == list(range(19))


async def test_the_chain_is_checked_across_files(tmp_path: Path) -> None:
    """A replaced first entry of a file, with a body CRC of its own, breaks the chain from the file before."""
    written = await make_node(tmp_path, 20, committed=19)
    first_of_second_file = next(i for i, w in enumerate(written) if w[2] >= SMALL.data_file_size)
    pos = written[first_of_second_file][2]
    path = tmp_path / "data" / f"{pos - pos % SMALL.data_file_size:020d}"
    raw = bytearray(path.read_bytes())
    offset = pos % SMALL.data_file_size
    fields = list(HEADER.unpack_from(raw, offset))
    new_body = b"X" * fields[8]
    fields[7] = zlib.crc32(new_body)
    HEADER.pack_into(raw, offset, *fields)
    raw[offset + HEADER_SIZE:offset + HEADER_SIZE + len(new_body)] = new_body
    path.write_bytes(bytes(raw))
    with pytest.raises(CorruptDataError, match=f"corrupt entry {first_of_second_file} .*chain CRC mismatch"):
        read_all(open_data_dir(str(tmp_path)))


async def test_entries_larger_than_a_scan_step_are_read(tmp_path: Path) -> None:
    written = await make_node(tmp_path, 12, committed=11, config=StoreConfig(8192, 10 * 32), body_size=3000)
    table = read_all(open_data_dir(str(tmp_path)), batch_rows=1)  # a scan step of 256 bytes
    assert table.column("body").to_pylist() == [w[3] for w in written]


async def test_committed_entries_missing_from_the_last_file_are_an_error(tmp_path: Path) -> None:
    """Zeros where committed entries should be: the node would refuse to start; the reader says so too."""
    written = await make_node(tmp_path, 20, committed=19)
    pos = written[19][2]  # the last file holds 18 and 19
    data = tmp_path / "data" / f"{pos - pos % SMALL.data_file_size:020d}"
    raw = bytearray(data.read_bytes())
    raw[pos % SMALL.data_file_size:] = bytes(len(raw) - pos % SMALL.data_file_size)
    data.write_bytes(bytes(raw))
    with pytest.raises(CorruptDataError, match="the log ends at 18 but the checkpoint says 19 is committed"):
        read_all(open_data_dir(str(tmp_path)))
    table = read_all(open_data_dir(str(tmp_path)), mark_corrupt=True)
    assert table.column("index").to_pylist()[-1] == 19
    assert table.column("corrupt").to_pylist()[-1] == "the log ends at 18 but the checkpoint says 19 is committed"


async def test_a_stray_filler_is_not_taken_for_the_end_of_a_file(tmp_path: Path) -> None:
    written = await make_node(tmp_path, 20, committed=19)
    pos = written[13][2]
    data = tmp_path / "data" / f"{pos - pos % SMALL.data_file_size:020d}"
    with open(data, "r+b") as f:
        f.seek(pos % SMALL.data_file_size)
        f.write(BLANK.pack(BLANK_MAGIC, 8))
    with pytest.raises(CorruptDataError, match=r"corrupt entry 13 .*file-end filler of 8 bytes"):
        read_all(open_data_dir(str(tmp_path)))


def test_a_directory_that_is_not_a_node_is_refused(tmp_path: Path) -> None:
    with pytest.raises(PipelineError, match="is not a raftlog data directory"):
        open_data_dir(str(tmp_path))


async def test_a_stopped_nodes_copy_reads_the_same(tmp_path: Path) -> None:
    await make_node(tmp_path / "node", 15, committed=14)
    shutil.copytree(tmp_path / "node", tmp_path / "copy")
    os.remove(tmp_path / "copy" / "LOCK")
    assert read_all(open_data_dir(str(tmp_path / "copy"))).equals(read_all(open_data_dir(str(tmp_path / "node"))))


@pytest.mark.parametrize("cut", [1, 7, 48, 49, 100, 147, 148, 500])
async def test_the_stream_decoder_gives_the_same_rows_however_the_bytes_arrive(tmp_path: Path, cut: int) -> None:
    written = await make_node(tmp_path, 6, committed=5)
    raw = (tmp_path / "data" / f"{0:020d}").read_bytes()[:written[-1][2] + HEADER_SIZE + 100]  # all six
    chunks = [raw[i:i + cut] for i in range(0, len(raw), cut)]
    decoder = Decoder(0, None)
    batches = list(_decode_stream("test", iter(chunks), decoder, batch_rows=2))
    if decoder.rows:
        batches.append(decoder.batch())
    table = pa.Table.from_batches(batches)
    assert table.column("index").to_pylist() == list(range(6))
    assert table.column("body").to_pylist() == [w[3] for w in written]


async def test_a_producers_entries_are_read_with_their_bodies_as_sent_and_their_stamps(tmp_path: Path) -> None:
    """Stamped entries among plain ones, across data files: bodies as the client sent them, type normal,
    the producer and sequence in their columns (null for the plain ones)."""
    checkpoint = Checkpoint.open(tmp_path / CHECKPOINT_FILE, create=True)
    store = Store.open(tmp_path, SMALL)
    expected = []
    for i in range(12):
        if i % 3:
            await store.append_as_leader([body(i, 60), body(i + 100, 60)], 1, Magic.PRODUCED,
                                         stamp=Stamp(2**63 - 1 - i, 7, 1000 + 2 * i))
            expected += [(body(i, 60), 2**63 - 1 - i, 1000 + 2 * i), (body(i + 100, 60), 2**63 - 1 - i, 1001 + 2 * i)]
        else:
            await store.append_as_leader([body(i, 60)], 1)
            expected.append((body(i, 60), None, None))
    await store.flush()
    checkpoint.note_progress(len(expected) - 1, len(expected) - 1)
    await store.close()
    await checkpoint.close()
    table = read_all(open_data_dir(str(tmp_path)), text=True)
    assert list(zip(table.column("body").to_pylist(), table.column("producer_id").to_pylist(),
                    table.column("sequence").to_pylist(), strict=True)) == expected
    assert set(table.column("type").to_pylist()) == {"normal"}
    assert set(table.column("producer_epoch").to_pylist()) == {7, None}
    assert table.column("body_text").to_pylist() == [b.decode() for b, _, _ in expected]


async def test_a_batch_stamped_once_is_read_with_each_entrys_stamp_across_cuts_files_and_damage(
        tmp_path: Path) -> None:
    """One producer's batch over three data files, read 4 rows at a time: each file starts with a head
    of its own, the rows cut between a head and its continuations still get the head's stamp, and a
    damaged continuation is a row with no stamp (its distance is not to be trusted), as are those of a
    damaged head; their neighbours are whole."""
    checkpoint = Checkpoint.open(tmp_path / CHECKPOINT_FILE, create=True)
    store = Store.open(tmp_path, SMALL)
    appended = await store.append_as_leader([body(i) for i in range(15)], 1, Magic.PRODUCED, stamp=Stamp(5, 2, 70))
    magics = [store.get(i).magic for i in range(15)]
    await store.flush()
    checkpoint.note_progress(14, 14)
    await store.close()
    await checkpoint.close()
    assert magics.count(Magic.PRODUCED) == 3 and magics.count(Magic.CONTINUED) == 12  # a head in each file
    table = read_all(open_data_dir(str(tmp_path)))
    assert table.column("sequence").to_pylist() == list(range(70, 85))
    assert table.column("body").to_pylist() == [body(i) for i in range(15)]
    written = [(i, 1, pos, b"") for i, pos in enumerate(appended.positions)]
    damage(tmp_path, written, 8, offset_in_body=1)
    table = read_all(open_data_dir(str(tmp_path)), mark_corrupt=True)
    rows = list(zip(table.column("sequence").to_pylist(), table.column("corrupt").to_pylist(), strict=True))
    assert rows[8] == (None, "body CRC mismatch")
    assert rows[:8] + rows[9:] == [(70 + i, None) for i in range(15) if i != 8]
    damage(tmp_path, written, 12, offset_in_body=3)  # the third file's head: its continuations have no stamp
    table = read_all(open_data_dir(str(tmp_path)), mark_corrupt=True)
    rows = list(zip(table.column("sequence").to_pylist(), table.column("corrupt").to_pylist(), strict=True))
    assert rows[12:] == [(82, "body CRC mismatch"), (None, None), (None, None)]
