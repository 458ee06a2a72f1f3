"""What keeping an event-time watermark costs a micro-batch.

A stream of ``--batches`` micro-batches of 1,000,000 rows each (id long, name string, amount double, ts
timestamp; ``ts`` one second apart, so each micro-batch holds about 12 days and the watermark moves on by as
much) goes into a new table partitioned by ``day(ts)`` with icesink's Arrow writer, alternating, ``--repeat``
times:

* ``plain``: ``icesink.stream`` without a watermark;
* ``one_split``: the same with ``event_time="ts"`` and ``lateness="5 minutes"``, the stream one split
  (``split_by=[]``): the event time is a column the table has, so nothing more crosses to the Python workers;
* ``splits``: the same with 8 splits (a ``partition`` column the table does not have, read by the tasks and not
  written): its 4 bytes a row cross to the workers too, and every batch of rows mixes the 8 splits (the worst
  case: each batch's splits are grouped);
* ``kafka_splits``: the same 8 splits laid out as Spark's Kafka source delivers them, each topic partition's
  records in a run of their own (a task reads one partition), so that a batch of rows is one split's;
* ``plain_kept`` and ``kept_splits``: the last two again with the split column kept as a column of the table
  (as a table that records each row's Kafka partition has it), so that nothing crosses to the workers that
  the table does not write anyway: what the watermark itself costs, apart from carrying a column;
* ``plain_reads_split`` and ``plain_reads_kafka_split``: ``plain``, reading the split column from the input too
  (the rows filtered on it, a filter every row passes, then the column dropped): the baselines of ``splits`` and
  ``kafka_splits``. A Kafka source reads each record's partition whether or not anything uses it, while Spark's
  Parquet reader skips a column nothing asks for, so ``plain`` reads less of the input than a stream that splits
  by the column, which is not the watermark's cost (``bench/split_observation.py`` measures the hand-off of the
  column alone).

Each micro-batch is timed by Spark (its progress's ``triggerExecution``: reading, the tasks' observation of the
event times, writing, the driver's fold, staging, and the inline committer's commit with the partition record,
about 12 days made done per commit); the first of each stream (starting up) is left out. Reports the median of
each and their ratios to their baselines (``kept_splits`` to ``plain_kept``, ``splits`` and ``kafka_splits`` to the
plain streams reading the same input columns, the others to ``plain``; goal: under 2% more), and to ``plain``.

    .venv/bin/python bench/watermark_cost.py [--rows 1000000] [--batches 6] [--repeat 3]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parent.parent))

SCHEMA = "id long, name string, amount double, ts timestamp, partition int, kafka_partition int"


def make_input(directory: Path, rows: int, files: int) -> None:
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    directory.mkdir(parents=True)
    per_file = rows // files
    start = int(datetime.datetime(2026, 11, 1, tzinfo=datetime.UTC).timestamp() * 1_000_000)
    rng = np.random.default_rng(7)
    for number in range(files):
        ids = np.arange(number * per_file, (number + 1) * per_file, dtype=np.int64)
        table = pa.table(
            {
                "id": ids,
                "name": pa.array([f"customer-{i % 100_003:06d}" for i in ids.tolist()]),
                "amount": rng.uniform(0, 1000, per_file),
                "ts": pa.array(start + ids * 1_000_000, pa.timestamp("us", tz="UTC")),
                "partition": pa.array((ids % 8).astype("int32")),
                # Kafka's layout: Spark's Kafka source reads each topic partition's records in a task of its own,
                # so each run of rows is one split's.
                "kafka_partition": pa.array(((ids - ids[0]) * 8 // per_file).astype("int32")),
            }
        )
        path = directory / f"part-{number:03d}.parquet"
        pq.write_table(table, path, compression="zstd")
        os.utime(path, (1_750_000_000 + number, 1_750_000_000 + number))  # the file source takes them in order


KINDS = (
    "plain",
    "one_split",
    "splits",
    "kafka_splits",
    "plain_kept",
    "kept_splits",
    "plain_reads_split",
    "plain_reads_kafka_split",
)
# Each kind against the stream without a watermark that reads the same input; the others against plain.
BASELINES = {"kept_splits": "plain_kept", "splits": "plain_reads_split", "kafka_splits": "plain_reads_kafka_split"}
PLAIN_KINDS = ("plain", "plain_kept", "plain_reads_split", "plain_reads_kafka_split")


def run_once(spark: Any, source: Path, root: Path, number: int, kind: str) -> list[float]:
    """The seconds of each micro-batch of one stream over every input file, one file per micro-batch."""
    from pyspark.sql import functions as F

    import icesink

    config = icesink.CatalogConfig("bench", f"sqlite:///{root / 'catalog.db'}", (root / "warehouse").as_uri())
    df = spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).parquet(str(source))
    options: dict[str, Any] = {"event_time": "ts", "lateness": "5 minutes", "split_by": ["partition"]}
    if kind == "plain":
        df, options = df.drop("partition", "kafka_partition"), {}
    elif kind == "one_split":
        df, options = df.drop("partition", "kafka_partition"), {**options, "split_by": []}
    elif kind == "splits":
        df = df.drop("kafka_partition")
    elif kind == "kafka_splits":
        df, options = df.drop("partition"), {**options, "split_by": ["kafka_partition"]}
    elif kind == "plain_kept":
        df, options = df.drop("partition"), {}
    elif kind in ("plain_reads_split", "plain_reads_kafka_split"):
        read = "partition" if kind == "plain_reads_split" else "kafka_partition"
        df, options = df.where(F.col(read) >= 0).drop("partition", "kafka_partition"), {}
    else:
        df, options = df.drop("partition"), {**options, "split_by": ["kafka_partition"]}
    query = icesink.stream(
        df,
        table=f"bench.events_{number}",
        checkpoint_location=str(root / f"checkpoint-{number}"),
        trigger={"availableNow": True},
        catalog=config,
        create_table=True,
        partition_by=["day(ts)"],
        **options,
    )
    query.awaitTermination()
    progress = sorted(query.recentProgress, key=lambda p: p.batchId)
    return [p.durationMs["triggerExecution"] / 1000 for p in progress if p.numInputRows > 0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=1_000_000, help="rows per micro-batch")
    parser.add_argument("--batches", type=int, default=6)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()

    from _spark import local_spark

    from icesink.catalog import database
    from icesink.catalog.config import CatalogConfig

    spark = local_spark()
    root = Path(tempfile.mkdtemp(prefix="icesink-watermark-"))
    try:
        make_input(root / "input", args.rows * args.batches, args.batches)
        database.upgrade(CatalogConfig("bench", f"sqlite:///{root / 'catalog.db'}", (root / "warehouse").as_uri()))
        run_once(spark, root / "input", root, 0, "splits")  # warm-up: the JVM and the Python workers
        times: dict[str, list[float]] = {kind: [] for kind in KINDS}
        number = 0
        for attempt in range(args.repeat):
            for kind in KINDS if attempt % 2 == 0 else KINDS[::-1]:
                number += 1
                times[kind] += run_once(spark, root / "input", root, number, kind)[1:]
        medians = {kind: statistics.median(values) for kind, values in times.items()}
        result = {
            "rows_per_batch": args.rows,
            "batches": args.batches,
            "repeat": args.repeat,
            "seconds": {kind: [round(v, 3) for v in values] for kind, values in times.items()},
            "median_seconds": {kind: round(v, 3) for kind, v in medians.items()},
            "over_baseline": {
                kind: round(medians[kind] / medians[BASELINES.get(kind, "plain")], 4)
                for kind in KINDS
                if kind not in PLAIN_KINDS
            },
            "over_plain": {kind: round(medians[kind] / medians["plain"], 4) for kind in KINDS if kind != "plain"},
        }
        print(json.dumps(result, indent=2))
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
