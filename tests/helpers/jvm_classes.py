"""A class-data-sharing archive for the test suite's Spark JVMs, one per virtual environment.

The suite starts a Spark driver dozens of times: every restart of a stream a crash test kills, every page of
the docs, every read by Iceberg Java. Each start loads and verifies the same ten thousand classes from
Spark's jars. The JDK's class-data sharing (``-XX:SharedArchiveFile``) maps them from an archive made
once instead: measured on 2 cores, a local session and its first job start in about 7.5 s instead of 15.5.
It changes how fast classes load, nothing a test observes.

``python tests/helpers/jvm_classes.py``, run by the Python of a virtual environment holding pyspark
(``make test`` does it for both of the suite's), runs a small job of the kinds the tests run with
``-XX:ArchiveClassesAtExit`` and keeps the archive as ``<environment>/spark-classes.jsa``.
:func:`with_class_archive` adds it to a driver's Java options where it exists. The archive names the
jars it was made from; a JVM finding them changed (pyspark reinstalled) warns and loads its classes as
before. Standard library and pyspark only: Iceberg Java's environment runs it too.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

ARCHIVE_NAME = "spark-classes.jsa"
# How the tests start a driver that lives for seconds (the archive serves the suite's long-lived one too).
QUICK_START = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"


def class_archive() -> Path:
    """The archive of this interpreter's environment (it may not exist)."""
    return Path(sys.prefix) / ARCHIVE_NAME


def with_class_archive(java_options: str) -> str:
    """``java_options`` with the environment's archive, when there is one."""
    archive = class_archive()
    if not archive.is_file() or any(c.isspace() for c in str(archive)):  # Spark splits the options at whitespace
        return java_options
    return f"{java_options} -XX:SharedArchiveFile={archive}".strip()


def build() -> int:
    """Make the archive; 0 when it is in place. Written under another name first and renamed once the JVM
    has exited, since a JVM mapping a cut archive dies."""
    from pyspark.sql import SparkSession

    archive = class_archive()
    partial = archive.with_name(f"{ARCHIVE_NAME}.partial")  # what a failed attempt leaves, the next one overwrites
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = (
        SparkSession.builder.master("local[2]")
        .config("spark.driver.extraJavaOptions", f"{QUICK_START} -XX:ArchiveClassesAtExit={partial} -Xlog:cds=off")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    with tempfile.TemporaryDirectory() as work:
        _run_typical_jobs(spark, Path(work))
    gateway = spark.sparkContext._gateway
    spark.stop()
    process = gateway.proc  # type: ignore[union-attr]
    gateway.shutdown()  # type: ignore[union-attr]
    process.stdin.close()  # the gateway's JVM exits when its input closes, and writes the archive as it does
    process.wait(timeout=300)
    if not partial.is_file() or partial.stat().st_size == 0:
        print(f"no class archive was made (the JDK wrote nothing to {partial}); Spark starts as before")
        return 1
    os.replace(partial, archive)
    print(f"wrote {archive} ({archive.stat().st_size >> 20} MiB)")
    return 0


def _run_typical_jobs(spark: Any, work: Path) -> None:
    """A batch and a streaming query through the parts of Spark the tests use: JSON, Parquet, SQL, a shuffle,
    Arrow batches to Python workers, ``foreachBatch``."""
    from pyspark.sql import functions as F

    rows = [{"id": i, "value": f'{{"a": {i}, "b": "x{i}"}}', "ts": "2026-01-01T00:00:00Z"} for i in range(200)]
    source = work / "in"
    source.mkdir()
    (source / "part.json").write_text("\n".join(json.dumps(r) for r in rows))
    frame = spark.read.schema("id long, value string, ts timestamp").json(str(source))
    parsed = frame.select("id", F.from_json("value", "a long, b string").alias("v"), "ts")
    parsed.groupBy(F.col("id") % 7).agg(F.count("*"), F.max("ts")).collect()

    def identity(batches: Any) -> Any:
        yield from batches

    columns = parsed.select("id", "v.b")
    if importlib.util.find_spec("pyarrow") is not None:  # Iceberg Java's environment has no Arrow
        columns = columns.mapInArrow(identity, "id long, b string")
    columns.write.parquet(str(work / "out"))
    spark.read.parquet(str(work / "out")).createOrReplaceTempView("out")
    spark.sql("SELECT b, count(*) FROM out GROUP BY b ORDER BY b").collect()
    stream = spark.readStream.schema("id long, value string, ts timestamp").json(str(source))
    query = (
        stream.writeStream.foreachBatch(lambda batch, _: batch.write.mode("append").parquet(str(work / "stream")))
        .option("checkpointLocation", str(work / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()


if __name__ == "__main__":
    sys.exit(build())
