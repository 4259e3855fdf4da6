"""Jobs over the `raftlog` data source: export to Parquet, audit replicas, stats.

Each takes a SparkSession, so the same code runs on `local[*]` and on a cluster
(`spark-submit`, or `--master` on the command line).
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from raftlog.pipeline import register
from raftlog.pipeline.offline import open_data_dir
from raftlog.pipeline.options import PipelineError

DEFAULT_MASTER = "local[*]"
EXPORT_RANGE = 1_000_000  # entries per `range_start` partition folder of an export
EXPORT_TRIGGER = 1_000_000  # entries per micro-batch of an export: the unit of progress
SCHEMA_SAMPLE = 1000  # JSON bodies sampled to infer the columns of an export
AUDIT_RANGE = 100_000

Progress = Callable[[str], None]


def session(master: str | None = None, app_name: str = "raftlog-pipeline") -> SparkSession:
    """A SparkSession with the `raftlog` source registered; workers run this interpreter."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = SparkSession.builder.appName(app_name).config("spark.sql.session.timeZone", "UTC")
    builder = builder.master(master or os.environ.get("RAFTLOG_SPARK_MASTER", DEFAULT_MASTER))
    spark = builder.getOrCreate()
    register(spark)
    return spark


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


# -- export -------------------------------------------------------------------------------

@dataclass(slots=True)
class ExportResult:
    entries: int  # exported by this run
    next_index: int  # where the next run starts
    seconds: float
    batches: int


def export(spark: SparkSession, urls: Sequence[str], out: str | Path, *, json_fields: bool = False,
           range_size: int = EXPORT_RANGE, max_per_trigger: int = EXPORT_TRIGGER,
           progress: Progress = _stderr) -> ExportResult:
    """Append the committed entries not exported yet to Parquet under `out`, partitioned by
    `range_start` (index ranges of `range_size`). A Spark checkpoint in `out/_checkpoint` records
    how far it got, so each run continues exactly where the last one stopped."""
    out = Path(out)
    url = ",".join(urls)
    reader = (spark.readStream.format("raftlog").option("url", url)
              .option("maxEntriesPerTrigger", str(max_per_trigger))
              .option("numPartitions", str(spark.sparkContext.defaultParallelism)))  # every core, every batch
    if json_fields:
        reader = reader.option("decode", "utf-8")
    frame = reader.load().withColumn("range_start", F.col("index") - F.col("index") % F.lit(range_size))
    if json_fields:
        frame = _with_json_columns(spark, frame, url, out / "_raftlog" / "json_schema.json")
    started = time.perf_counter()
    query = (frame.writeStream.format("parquet").partitionBy("range_start")
             .option("path", str(out)).option("checkpointLocation", str(out / "_checkpoint"))
             .trigger(availableNow=True).start())
    seen = -1  # the last batch reported (recentProgress keeps only the latest 100)
    batches = 0
    entries = 0
    next_index = None
    while True:
        done = query.awaitTermination(1)
        for report in query.recentProgress:
            if report["batchId"] <= seen:
                continue
            seen = report["batchId"]
            batches += 1
            rows = int(report["numInputRows"])
            entries += rows
            source = report["sources"][0]
            if source.get("endOffset"):
                next_index = json.loads(source["endOffset"])["index"]
            if rows:
                progress(f"export: {entries:,} entries so far, next index {next_index:,} "
                         f"({report.get('processedRowsPerSecond', 0):,.0f} entries/s in this batch)")
        if done:
            break
    if query.exception() is not None:
        raise query.exception()  # type: ignore[misc]
    if next_index is None:
        next_index = _checkpointed_next(out)
    return ExportResult(entries, next_index, time.perf_counter() - started, batches)


def _checkpointed_next(out: Path) -> int:
    """The next index recorded in the export's checkpoint (a run that found nothing new)."""
    offsets = out / "_checkpoint" / "offsets"
    logs = sorted((p for p in offsets.iterdir() if p.name.isdigit()), key=lambda p: int(p.name)) if offsets.exists() \
        else []
    if not logs:
        return 0
    return json.loads(logs[-1].read_text().splitlines()[-1])["index"]


def _with_json_columns(spark: SparkSession, frame: DataFrame, url: str, schema_file: Path) -> DataFrame:
    """The JSON bodies' fields as columns. Their schema is inferred once, from the first bodies, and
    kept beside the data so that every later run writes the same columns."""
    if schema_file.exists():
        schema = StructType.fromJson(json.loads(schema_file.read_text()))
    else:
        sample = (spark.read.format("raftlog").option("url", url).option("decode", "utf-8").load()
                  .where("type = 'normal'").limit(SCHEMA_SAMPLE).select("body_text"))
        schema = spark.read.json(sample.rdd.map(lambda row: row[0] or "")).schema
        schema = StructType([f for f in schema.fields if f.name != "_corrupt_record"])
        schema_file.parent.mkdir(parents=True, exist_ok=True)
        schema_file.write_text(json.dumps(schema.jsonValue()))
    if not schema.fields:
        raise PipelineError("raftlog: the first bodies are not JSON objects; export without --json-fields")
    taken = set(frame.columns)
    parsed = F.from_json(F.col("body_text"), schema)
    columns = [parsed[f.name].alias(f.name if f.name not in taken else f"body_{f.name}") for f in schema.fields]
    return frame.select(*[c for c in frame.columns if c != "body_text"], *columns)


# -- audit --------------------------------------------------------------------------------

@dataclass(slots=True)
class ReplicaSummary:
    data_dir: str
    begin_index: int  # where its log begins (store.json), whatever its files hold
    end_index: int | None
    committed_index: int
    corrupt: int


@dataclass(slots=True)
class RangeReport:
    first: int
    last: int
    agree: bool
    first_divergence: int | None
    divergent: int  # indexes in this range where replicas disagree


@dataclass(slots=True)
class AuditReport:
    replicas: list[ReplicaSummary]
    ranges: list[RangeReport]
    first_divergence: int | None
    divergence: list[dict[str, Any]] = field(default_factory=list)  # the replicas' entries at it
    shared_committed: int = -1  # last index of the committed prefix every replica holds, identical

    @property
    def agree(self) -> bool:
        return self.first_divergence is None


def audit(spark: SparkSession, data_dirs: Sequence[str], *, range_size: int = AUDIT_RANGE) -> AuditReport:
    """Compare replicas' files entry by entry (term, body CRC, chain CRC, damage), offline."""
    if len(data_dirs) < 2:
        raise PipelineError("raftlog: an audit compares at least two data directories")
    planned = [open_data_dir(d) for d in data_dirs]  # fails early on a bad directory
    committed = [d.committed_index for d in planned]
    # damage after a replica's committed index is a torn tail its node cuts on start: not a divergence
    frames = [spark.read.format("raftlog").option("onCorrupt", "mark").option("control", "true").load(str(d))
              .where(F.col("corrupt").isNull() | (F.col("index") <= committed[i]))
              .select(F.lit(i).alias("replica"), "index", "term", "body_crc", "chain_crc", "corrupt")
              for i, d in enumerate(data_dirs)]
    rows = _union(frames).cache()
    try:
        ends = {r["replica"]: r for r in rows.groupBy("replica").agg(
            F.min("index").alias("begin"), F.max("index").alias("end"),
            F.count(F.col("corrupt")).alias("corrupt")).collect()}
        replicas = [ReplicaSummary(str(d), planned[i].begin_index, _get(ends, i, "end"), committed[i],
                                   _get(ends, i, "corrupt") or 0) for i, d in enumerate(data_dirs)]
        ranges = _compare(rows, replicas, range_size)
        first = min((r.first_divergence for r in ranges if r.first_divergence is not None), default=None)
        report = AuditReport(replicas, ranges, first)
        if first is not None:
            found = {r["replica"]: r for r in rows.where(F.col("index") == first).collect()}
            report.divergence = [
                {"data_dir": str(d), "term": _get(found, i, "term"), "body_crc": _get(found, i, "body_crc"),
                 "chain_crc": _get(found, i, "chain_crc"),
                 "corrupt": _get(found, i, "corrupt") if i in found else "missing"}
                for i, d in enumerate(data_dirs)]
    finally:
        rows.unpersist()
    report.shared_committed = min(committed) if first is None else min(min(committed), first - 1)
    return report


def _get(rows: dict[int, Any], replica: int, name: str) -> Any:
    return rows[replica][name] if replica in rows else None


def _compare(rows: DataFrame, replicas: list[ReplicaSummary], range_size: int) -> list[RangeReport]:
    """Per index range: where the copies differ, are damaged, or one is missing. A replica must hold
    every index from its first up to its committed index (or its last, if that is higher)."""
    expected: Column = F.lit(0)
    for r in replicas:
        end = max(r.committed_index, r.end_index if r.end_index is not None else -1)
        expected = expected + F.col("index").between(r.begin_index, end).cast("int")
    per_index = (rows.groupBy("index").agg(
        F.count("*").alias("copies"),
        F.count_distinct(F.struct("term", "body_crc", "chain_crc")).alias("versions"),
        F.count(F.col("corrupt")).alias("damaged"))
        .withColumn("agree", (F.col("copies") == expected) & (F.col("versions") == 1) & (F.col("damaged") == 0)))
    return [RangeReport(r["first"], r["last"], r["divergent"] == 0, r["first_divergence"], r["divergent"])
            for r in per_index.groupBy((F.col("index") - F.col("index") % range_size).alias("range"))
            .agg(F.min("index").alias("first"), F.max("index").alias("last"),
                 F.sum((~F.col("agree")).cast("int")).alias("divergent"),
                 F.min(F.when(~F.col("agree"), F.col("index"))).alias("first_divergence"))
            .orderBy("range").collect()]


def _union(frames: list[DataFrame]) -> DataFrame:
    rows = frames[0]
    for frame in frames[1:]:
        rows = rows.unionByName(frame)
    return rows


# -- stats --------------------------------------------------------------------------------

@dataclass(slots=True)
class Stats:
    entries: int
    bytes: int
    by_term: list[dict[str, Any]]
    by_hour: list[dict[str, Any]] | None  # None without a time field


def stats(spark: SparkSession, *, urls: Sequence[str] = (), data_dir: str | None = None,
          time_field: str | None = None) -> Stats:
    """Entries and body bytes per term and, when bodies are JSON with a time field (epoch seconds,
    milliseconds, or an ISO-8601 string), per hour of that time."""
    reader = spark.read.format("raftlog")
    log = reader.load(data_dir) if data_dir is not None else reader.option("url", ",".join(urls)).load()
    frame = log.withColumn("bytes", F.length("body")).cache()
    try:
        totals = frame.agg(F.count("*").alias("entries"), F.sum("bytes").alias("bytes")).first()
        by_term = [r.asDict() for r in frame.groupBy("term").agg(
            F.count("*").alias("entries"), F.sum("bytes").alias("bytes"),
            F.min("index").alias("first_index"), F.max("index").alias("last_index")).orderBy("term").collect()]
        by_hour = None
        if time_field is not None:
            hour = F.date_trunc("hour", _event_time(time_field)).alias("hour")
            by_hour = [{**r.asDict(), "hour": r["hour"].isoformat() if r["hour"] else None}
                       for r in frame.groupBy(hour).agg(F.count("*").alias("entries"),
                                                       F.sum("bytes").alias("bytes")).orderBy("hour").collect()]
    finally:
        frame.unpersist()
    assert totals is not None
    return Stats(totals["entries"], totals["bytes"] or 0, by_term, by_hour)


def _event_time(time_field: str) -> Column:
    raw = F.get_json_object(F.col("body").cast("string"), f"$.{time_field}")
    number = raw.try_cast("double")
    from_number = F.when(number > 1e11, F.timestamp_millis(number.cast("long"))).otherwise(
        F.timestamp_seconds(number))
    return F.coalesce(from_number, F.try_to_timestamp(raw))


def as_json(value: Any) -> str:
    return json.dumps(asdict(value) if hasattr(value, "__dataclass_fields__") else value, default=str)

