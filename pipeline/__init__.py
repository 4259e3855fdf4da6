"""Spark data source and jobs over the public API and the storage codecs.

    from raftlog.pipeline import register
    register(spark)
    spark.read.format("raftlog").option("url", "http://127.0.0.1:7200").load()
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def register(spark: SparkSession) -> None:
    """Make `format("raftlog")` known to this session (batch, streaming and offline reads)."""
    from raftlog.pipeline.source import RaftlogDataSource

    spark.dataSource.register(RaftlogDataSource)


__all__ = ["register"]
