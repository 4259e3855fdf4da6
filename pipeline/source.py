"""The `raftlog` Spark data source: batch and streaming reads over the public API, offline reads of files.

    spark.read.format("raftlog").option("url", "http://127.0.0.1:7200").load()
    spark.read.format("raftlog").load("/var/lib/raftlog/n0")             # offline
    spark.readStream.format("raftlog").option("url", ...).load()         # offsets are log indices

Planning (on the driver) checks the options and asks the members, or reads the
directory, so a bad option fails before any task runs. Partitions are index
ranges dealt out over the members in turn, so followers serve most reads.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from raftlog.pipeline import offline, online
from raftlog.pipeline.entries import TYPE_NAMES
from raftlog.pipeline.options import PipelineError, ReadOptions, parse_options
from raftlog.storage.codec import BOOKKEEPING_MAGICS

SCHEMA = ("index long, term long, pos long, type string, channel int, body binary, body_crc int, "
          "chain_crc int, producer_id long, producer_epoch long, sequence long, topic_id long, queue int, "
          "queue_offset long, keys array<string>, tags array<string>, properties map<string,string>")

BOOKKEEPING_TYPES = tuple(sorted(TYPE_NAMES[m] for m in BOOKKEEPING_MAGICS))  # names: pa.array would import pandas


def schema_ddl(options: ReadOptions) -> str:
    return (SCHEMA + (", body_text string" if options.text else "")
            + (", corrupt string" if options.mark_corrupt else ""))


@dataclass(frozen=True)
class RangePartition(InputPartition):
    """Entries first..last (inclusive), read from urls[0] or, if it fails, the others in turn."""

    first: int
    last: int
    urls: tuple[str, ...]


@dataclass(frozen=True)
class FilePartition(InputPartition):
    file: offline.DataFile
    data_file_size: int
    committed_index: int


class RaftlogDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "raftlog"

    def __init__(self, options: dict[str, str]) -> None:
        super().__init__(options)
        self.parsed = parse_options(options)

    def schema(self) -> str:
        return schema_ddl(self.parsed)

    def reader(self, schema: StructType) -> DataSourceReader:
        return OfflineReader(self.parsed) if self.parsed.offline else BatchReader(self.parsed)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        if self.parsed.offline:
            raise PipelineError("raftlog: a stream reads a running cluster ('url'), not a data directory")
        return StreamReader(self.parsed)


def plan_ranges(options: ReadOptions, urls: Sequence[str], start: int, end: int) -> list[RangePartition]:
    """Index ranges, each starting at the next member in turn."""
    return [RangePartition(first, last, tuple(urls[i % len(urls):]) + tuple(urls[:i % len(urls)]))
            for i, (first, last) in enumerate(options.split(start, end))]


def read_partition(options: ReadOptions, partition: InputPartition) -> Iterator[pa.RecordBatch]:
    """The partition's entries; the control entries (named consumers' commits) only with option `control`."""
    if isinstance(partition, FilePartition):
        batches = offline.read_file(partition.file, partition.data_file_size, partition.committed_index,
                                    text=options.text, mark_corrupt=options.mark_corrupt,
                                    committed_only=options.committed_only, batch_rows=options.batch_rows)
    else:
        assert isinstance(partition, RangePartition)
        batches = online.read_range(partition.urls, partition.first, partition.last, text=options.text,
                                    batch_rows=options.batch_rows, timeout_s=options.timeout_s,
                                    access=options.access)
    return batches if options.control else (_without_control(batch) for batch in batches)


def _without_control(batch: pa.RecordBatch) -> pa.RecordBatch:
    """The rows of data: the bookkeeping entries (named consumers' commits, producer sessions, the
    cluster version) left out, as the API's reads of data leave them out."""
    types = batch.column("type")
    data = functools.reduce(pc.and_, (pc.not_equal(types, name) for name in BOOKKEEPING_TYPES))
    return batch.filter(pc.fill_null(data, True))  # an unreadable entry's row stays


class BatchReader(DataSourceReader):
    def __init__(self, options: ReadOptions) -> None:
        self.options = options
        view = online.discover(options.urls, options.timeout_s, options.access)
        self.start = view.begin_index if options.start_index is None else options.start_index
        self.end = view.committed_index if options.end_index is None else options.end_index
        if self.start > self.end and options.end_index is not None:
            raise PipelineError(f"raftlog: startIndex {self.start} is above endIndex {self.end}")
        if self.end > view.committed_index:
            raise PipelineError(f"raftlog: endIndex {self.end} is not committed yet (commit index "
                                f"{view.committed_index})")
        if self.start < view.begin_index:
            raise PipelineError(f"raftlog: startIndex {self.start} was cleaned (the log begins at "
                                f"{view.begin_index})")
        self.urls = view.urls

    def partitions(self) -> Sequence[InputPartition]:
        return plan_ranges(self.options, self.urls, self.start, self.end)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_partition(self.options, partition)


class OfflineReader(DataSourceReader):
    def __init__(self, options: ReadOptions) -> None:
        assert options.path is not None
        self.options = options
        self.data_dir = offline.open_data_dir(options.path)

    def partitions(self) -> Sequence[InputPartition]:
        d = self.data_dir
        return [FilePartition(f, d.data_file_size, d.committed_index) for f in d.files if f.first_index is not None]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_partition(self.options, partition)


class StreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Offsets are {"index": the next index to read}; a micro-batch reads committed entries only, so
    a restarted query re-reads exactly the journaled range and continues from its end."""

    def __init__(self, options: ReadOptions) -> None:
        self.options = options
        view = online.discover(options.urls, options.timeout_s, options.access)
        self.urls = view.urls
        self.start = view.begin_index if options.start_index is None else options.start_index
        if self.start < view.begin_index:  # as a batch read: planning fails, not the first task with a 410
            raise PipelineError(f"raftlog: startIndex {self.start} was cleaned (the log begins at "
                                f"{view.begin_index})")
        self.target: int | None = None  # Trigger.AvailableNow: nothing past this offset

    def initialOffset(self) -> dict:
        """A new query (no checkpoint of its own): after its named consumer's position, if it has one."""
        consumer = self.options.consumer
        position = None if consumer is None else online.consumer_position(
            self.urls, consumer, self.options.timeout_s, self.options.access)
        return {"index": self.start if position is None else position + 1}

    def commit(self, end: dict) -> None:
        """A micro-batch is done up to `end`: its last entry is the named consumer's position (the
        group keeps it: another query, the admin page and retention's floor see it)."""
        consumer = self.options.consumer
        if consumer is not None and end["index"] > 0:
            online.commit_consumer(self.urls, consumer, end["index"] - 1, self.options.timeout_s,
                                   self.options.access)

    def getDefaultReadLimit(self) -> ReadLimit:
        limit = self.options.max_entries_per_trigger
        return ReadAllAvailable() if limit is None else ReadMaxRows(limit)

    def prepareForTriggerAvailableNow(self) -> None:
        self.target = self._available()

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        end = self._available() if self.target is None else self.target
        if isinstance(limit, ReadMaxRows):
            end = min(end, start["index"] + limit.max_rows)
        if self.options.end_index is not None:
            end = min(end, self.options.end_index + 1)
        return {"index": max(end, start["index"])}

    def reportLatestOffset(self) -> dict:
        return {"index": self._available()}

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        return plan_ranges(self.options, self.urls, start["index"], end["index"] - 1)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_partition(self.options, partition)

    def _available(self) -> int:
        """One past the commit index: the offset after everything readable now."""
        return online.discover(self.urls, self.options.timeout_s, self.options.access).committed_index + 1
