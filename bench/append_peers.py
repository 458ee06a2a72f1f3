"""Appends against the tool a Spark user would pick instead: Iceberg Java 1.9.2's own streaming sink.

The same Parquet input (default 4,000,000 rows: id long, name string, amount
double, ts timestamp; zstd everywhere) is streamed, one micro-batch with
Trigger.AvailableNow, into an unpartitioned table and into one partitioned by
``day(ts)``:

* ``icesink.stream`` (Spark 4.3, this process; Spark's Parquet writer for the
  unpartitioned table, the Arrow writer for ``day(ts)``);
* Iceberg Java 1.9.2's ``writeStream.format("iceberg")`` into a Hadoop catalog
  (Spark 3.5.9, a process of its own per round from the interop environment,
  ``fanout-enabled``, timed after a warm-up round inside that process);
* Spark's plain batch write (Spark 4.3): ``df.write.parquet``, and
  ``partitionBy`` a date column computed from ``ts`` for the partitioned case,
  both as Spark does it by default (each task sorts its rows by partition) and
  with ``spark.sql.maxConcurrentOutputFileWriters`` (a writer open per
  partition, no sort): what icesink would get by handing identity or time
  partitions to Spark's writer instead of fanning rows out itself.

Rounds alternate between the three; medians are reported with the ratios.

    .venv/bin/python bench/append_peers.py [--rows 4000000] [--files 8] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
sys.path.insert(0, str(Path(__file__).parent))

from append_throughput import SCHEMA, local_catalog, make_input
from figures import record_values

ROOT = Path(__file__).parent.parent
JAVA_PYTHON = ROOT / ".venv-iceberg-java" / "bin" / "python"
# More than the input's 47 days: every task keeps a writer open per day and never sorts.
UNSORTED_WRITERS = 64


def icesink_run(spark: Any, source: Path, work: Path, name: str, by_day: bool, config: Any) -> float:
    import icesink

    df = spark.readStream.schema(SCHEMA).parquet(str(source))
    started = time.perf_counter()
    icesink.stream(
        df,
        table=f"bench.{name}",
        checkpoint_location=str(work / f"ckpt-{name}"),
        trigger={"availableNow": True},
        create_table=True,
        partition_by=["day(ts)"] if by_day else [],
        catalog=config,
    ).awaitTermination()
    return time.perf_counter() - started


def spark_run(spark: Any, source: Path, target: Path, by_day: bool, concurrent_writers: int = 0) -> float:
    from pyspark.sql import functions as F

    spark.conf.set("spark.sql.maxConcurrentOutputFileWriters", str(concurrent_writers))
    try:
        started = time.perf_counter()
        df = spark.read.schema(SCHEMA).parquet(str(source))
        writer = df.write.option("compression", "zstd")
        if by_day:
            writer = df.withColumn("day", F.to_date("ts")).write.option("compression", "zstd").partitionBy("day")
        writer.parquet(str(target))
        return time.perf_counter() - started
    finally:
        spark.conf.unset("spark.sql.maxConcurrentOutputFileWriters")


def java_run(source: Path, warehouse: Path, by_day: bool) -> float:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYSPARK")}
    command = [str(JAVA_PYTHON), str(ROOT / "bench" / "java_append.py"), str(source), f"file://{warehouse}", "1"]
    if by_day:
        command.append("--partition-by-day")
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=1800)
    if done.returncode != 0:
        raise RuntimeError(done.stderr[-3000:])
    seconds: list[float] = json.loads(done.stdout.strip().splitlines()[-1])["seconds"]
    return seconds[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=4_000_000)
    parser.add_argument("--files", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    if not JAVA_PYTHON.exists():
        raise SystemExit(f"{JAVA_PYTHON} is missing: run `make install-interop` first")

    from _spark import local_spark

    spark = local_spark()
    work = Path(tempfile.mkdtemp(prefix="icesink-bench-peers-"))
    report: dict[str, Any] = {"rows": args.rows, "spark": {"icesink": "4.3", "iceberg_java": "3.5.9 + Iceberg 1.9.2"}}
    try:
        make_input(work / "input", args.rows, args.files)
        config = local_catalog(work)
        for by_day in (False, True):
            kind = "day" if by_day else "unpartitioned"
            icesink_run(spark, work / "input", work, f"warm_{kind}", by_day, config)
            spark_run(spark, work / "input", work / f"warm-spark-{kind}", by_day)
            if by_day:
                spark_run(spark, work / "input", work / f"warm-unsorted-{kind}", by_day, UNSORTED_WRITERS)
            ours, java, plain, unsorted = [], [], [], []
            for number in range(args.repeat):
                ours.append(icesink_run(spark, work / "input", work, f"{kind}_{number}", by_day, config))
                java.append(java_run(work / "input", work / f"java-{kind}-{number}", by_day))
                plain.append(spark_run(spark, work / "input", work / f"spark-{kind}-{number}", by_day))
                if by_day:
                    target = work / f"spark-unsorted-{kind}-{number}"
                    unsorted.append(spark_run(spark, work / "input", target, by_day, UNSORTED_WRITERS))
            rate = {
                name: args.rows / statistics.median(t)
                for name, t in (("icesink", ours), ("java", java), ("spark", plain), ("unsorted", unsorted))
                if t
            }
            report[kind] = {
                "icesink_rows_per_s": round(rate["icesink"]),
                "iceberg_java_streaming_rows_per_s": round(rate["java"]),
                "spark_plain_write_rows_per_s": round(rate["spark"]),
                "icesink_over_iceberg_java": round(rate["icesink"] / rate["java"], 2),
                "icesink_over_spark_plain": round(rate["icesink"] / rate["spark"], 2),
                "icesink_seconds": [round(t, 2) for t in ours],
                "iceberg_java_seconds": [round(t, 2) for t in java],
                "spark_plain_seconds": [round(t, 2) for t in plain],
            }
            if unsorted:
                report[kind]["spark_unsorted_partitionby_rows_per_s"] = round(rate["unsorted"])
                report[kind]["icesink_over_spark_unsorted"] = round(rate["icesink"] / rate["unsorted"], 2)
                report[kind]["spark_unsorted_seconds"] = [round(t, 2) for t in unsorted]
        print(json.dumps(report, indent=2))
        record_figures(args, report)
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)


def record_figures(args: argparse.Namespace, report: dict[str, Any]) -> None:
    """The run's medians into bench/results/append_peers.json, a chart of the default 4,000,000 rows in 8 files.

    Runs of other sizes are not recorded. The plain write charted is Spark's default (sorted) one.
    """
    if (args.rows, args.files) != (4_000_000, 8):
        print("append_peers: not recorded: the chart is of 4,000,000 rows in 8 files", file=sys.stderr)
        return
    groups = {"unpartitioned": "unpartitioned", "day": "day(ts)"}
    record_values(
        "append_peers",
        {
            "icesink.stream": {group: report[kind]["icesink_rows_per_s"] for kind, group in groups.items()},
            "Iceberg Java streaming sink": {
                group: report[kind]["iceberg_java_streaming_rows_per_s"] for kind, group in groups.items()
            },
            "Spark plain write (sorted partitionBy)": {
                group: report[kind]["spark_plain_write_rows_per_s"] for kind, group in groups.items()
            },
        },
        " ".join(["bench/append_peers.py", *sys.argv[1:]]),
    )


if __name__ == "__main__":
    main()
