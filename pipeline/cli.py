"""`raftlog pipeline ...`: the Spark jobs from the command line (needs the `spark` extra).

    raftlog pipeline export --url URL --out DIR [--json-fields]    committed log -> Parquet, incrementally
    raftlog pipeline audit --data-dir A --data-dir B [...]         do replicas' files agree?
    raftlog pipeline stats (--url URL | --data-dir D) [--time-field ts]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import asdict
from typing import Any

DEFAULT_URL = "http://127.0.0.1:8001"


def add_commands(commands: Any) -> None:
    """Add `pipeline` and its jobs to the `raftlog` command's subparsers."""
    pipeline = commands.add_parser("pipeline", help="Spark jobs: export, audit, stats",
                                   description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    pipeline.add_argument("--master", help="Spark master (default $RAFTLOG_SPARK_MASTER, else local[*])")
    pipeline.add_argument("--json", action="store_true", help="print the result as one JSON object")
    jobs = pipeline.add_subparsers(dest="job", required=True)
    urls = os.environ.get("RAFTLOG_URL", DEFAULT_URL)

    export = jobs.add_parser("export", help="write the committed log to Parquet (appends what is new)")
    export.add_argument("--url", default=urls, help="members' client URLs, comma-separated")
    export.add_argument("--out", required=True, help="output directory (Parquet, with its checkpoint)")
    export.add_argument("--json-fields", action="store_true", help="JSON bodies: their fields as columns")
    export.set_defaults(job_run=_export)

    audit = jobs.add_parser("audit", help="compare replicas' data directories offline")
    audit.add_argument("--data-dir", action="append", required=True, help="a node's data directory (repeat)")
    audit.add_argument("--range-size", type=int, default=100_000, help="entries per reported range")
    audit.set_defaults(job_run=_audit)

    stats = jobs.add_parser("stats", help="entries and bytes per term and per hour")
    source = stats.add_mutually_exclusive_group()
    source.add_argument("--url", help="members' client URLs (default $RAFTLOG_URL)")
    source.add_argument("--data-dir", help="read a node's files instead")
    stats.add_argument("--time-field", help="JSON body field holding the entry's time, for per-hour figures")
    stats.set_defaults(job_run=_stats)
    pipeline.set_defaults(run=_run)


def _run(args: argparse.Namespace) -> int:
    try:
        from raftlog.pipeline import jobs
    except ImportError as exc:
        print(f"raftlog: the pipeline needs the spark extra (pip install 'raftlog[spark]'): {exc}", file=sys.stderr)
        return 2
    from pyspark.sql import SparkSession

    from raftlog.pipeline.options import PipelineError

    started = SparkSession.getActiveSession() is None  # else the caller's session (main() called in one): kept
    spark = jobs.session(args.master)
    spark.sparkContext.setLogLevel("ERROR")
    try:
        return int(args.job_run(args, jobs, spark))
    except PipelineError as exc:
        print(f"raftlog: {exc}", file=sys.stderr)
        return 2
    finally:
        if started:
            spark.stop()


def _export(args: argparse.Namespace, jobs: Any, spark: Any) -> int:
    result = jobs.export(spark, args.url.split(","), args.out, json_fields=args.json_fields)
    if args.json:
        print(json.dumps(asdict(result)))
    else:
        print(f"exported {result.entries:,} entries in {result.seconds:.1f} s; the next run starts at index "
              f"{result.next_index:,}")
    return 0


def _audit(args: argparse.Namespace, jobs: Any, spark: Any) -> int:
    report = jobs.audit(spark, args.data_dir, range_size=args.range_size)
    if args.json:
        print(json.dumps({**asdict(report), "agree": report.agree}))
        return 0 if report.agree else 1
    print(f"{'replica':40} {'begin':>10} {'end':>10} {'committed':>10} {'damaged':>8}")
    for r in report.replicas:
        print(f"{r.data_dir:40} {_n(r.begin_index):>10} {_n(r.end_index):>10} {r.committed_index:>10} {r.corrupt:>8}")
    print(f"\n{'range':>23}  {'status':10} {'first divergence':>16} {'divergent':>10}")
    for g in report.ranges:
        status = "agree" if g.agree else "DIVERGE"
        print(f"{g.first:>10} - {g.last:>10}  {status:10} {_n(g.first_divergence):>16} {g.divergent:>10}")
    if report.agree:
        print(f"\nthe replicas agree; committed prefix shared by all: up to index {report.shared_committed}")
        return 0
    print(f"\nfirst divergence at index {report.first_divergence}:")
    for copy in report.divergence:
        print(f"  {copy['data_dir']}: term {copy['term']} bodyCrc {copy['body_crc']} chainCrc {copy['chain_crc']}"
              + (f" DAMAGED ({copy['corrupt']})" if copy["corrupt"] else ""))
    print(f"committed prefix shared by all: up to index {report.shared_committed}")
    return 1


def _stats(args: argparse.Namespace, jobs: Any, spark: Any) -> int:
    url = args.url or (None if args.data_dir else os.environ.get("RAFTLOG_URL", DEFAULT_URL))
    result = jobs.stats(spark, urls=url.split(",") if url else (), data_dir=args.data_dir,
                        time_field=args.time_field)
    if args.json:
        print(json.dumps(asdict(result), default=str))
        return 0
    print(f"{result.entries:,} entries, {result.bytes:,} body bytes\n")
    print(f"{'term':>6} {'entries':>12} {'bytes':>14} {'first':>10} {'last':>10}")
    for t in result.by_term:
        print(f"{t['term']:>6} {t['entries']:>12,} {t['bytes'] or 0:>14,} {t['first_index']:>10} {t['last_index']:>10}")
    if result.by_hour is None:
        print("\nper hour: entries carry no time; give --time-field for JSON bodies with one")
    else:
        print(f"\n{'hour (UTC)':26} {'entries':>12} {'bytes':>14}")
        for h in result.by_hour:
            print(f"{h['hour'] or 'no time':26} {h['entries']:>12,} {h['bytes'] or 0:>14,}")
    return 0


def _n(value: int | None) -> str:
    return "-" if value is None else str(value)
