"""Helpers for tests that run real Spark streams over a directory of input files."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from tests.helpers.jvm_classes import QUICK_START, with_class_archive
from tests.helpers.support import orders

SPARK_SCHEMA = "id long, name string, amount double, ts timestamp"


def add_input_files(directory: Path, batches: list[tuple[int, int]]) -> None:
    """One Parquet file per ``(start, count)``; file names sort in the given order."""
    directory.mkdir(parents=True, exist_ok=True)
    existing = len(list(directory.glob("*.parquet")))
    for number, (start, count) in enumerate(batches, start=existing):
        table = orders(start, count)
        tmp = directory / f".part-{number:05d}.tmp"
        pq.write_table(table, tmp)
        tmp.rename(directory / f"part-{number:05d}.parquet")
        order_for_file_source(directory / f"part-{number:05d}.parquet", number)


# Spark's file source takes files in modification-time order; files written within the
# same instant would tie, so each file's time is set from its number.
FILE_TIME_BASE = 1_750_000_000


def order_for_file_source(path: Path, number: int) -> None:
    os.utime(path, (FILE_TIME_BASE + number, FILE_TIME_BASE + number))


def input_stream(spark: Any, directory: Path, schema: str = SPARK_SCHEMA) -> Any:
    return spark.readStream.schema(schema).option("maxFilesPerTrigger", 1).parquet(str(directory))


def run_available(df: Any, **kwargs: Any) -> Any:
    """Run ``icesink.stream`` over everything available now and wait for it."""
    import icesink

    query = icesink.stream(df, trigger={"availableNow": True}, **kwargs)
    query.awaitTermination()
    return query


def expected_rows(batches: list[tuple[int, int]]) -> pa.Table:
    return pa.concat_tables([orders(start, count) for start, count in batches])


# A killable job's JVM lives for seconds: the quick-starting C1 compiler saves it about 2.5 s per start, and the
# environment's class archive (:mod:`tests.helpers.jvm_classes`) about 8 s more.
JOB_JAVA_OPTIONS = with_class_archive(QUICK_START)


def local_session(app_name: str = "icesink-test-job", **settings: str) -> Any:
    """A local[2] Spark session as every test uses it: the test session's, or a killable job's own."""
    from pyspark.sql import SparkSession

    java_options = JOB_JAVA_OPTIONS if app_name == "icesink-test-job" else with_class_archive("")
    if java_options:
        settings.setdefault("spark.driver.extraJavaOptions", java_options)

    builder = (
        SparkSession.builder.master("local[2]")
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
    )
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark
