"""Where a stream's per-split event times are cheapest to observe: carried to the Python write tasks, or in the JVM.

A watermark per split (``split_by``) needs each row's split. When the split is a column the table does not have
(Kafka's ``partition``), the write tasks see it only if it crosses from the JVM to the Python workers with the
rows; ``bench/watermark_cost.py`` measures that at 7-14% of a micro-batch of 40-byte rows. The alternative is to
observe the splits where the rows are read: Spark's ``DataFrame.observe`` computes aggregates alongside a job,
but has no per-group aggregate, so each split needs aggregates of its own (its largest event time, its rows, its
late rows, its rows without a time: four, as the write tasks count them) and the split values must be known
before the job. This measures both on the same rows, cached in the JVM, handed to a Python task that only counts
them (so that what is timed is the hand-off and the observation, not a write):

* ``table columns``: id, name, amount, ts (what the table writes);
* ``+ split column``: the same and the ``partition`` column (8 splits), as icesink carries it today;
* ``+ observe, 8 splits`` and ``+ observe, 64 splits``: the table columns, with the per-split aggregates observed
  in the JVM (``partition`` taking 8 or 64 values).

Reports the median seconds of ``--repeat`` runs of each, alternating, and each against ``table columns``.

    .venv/bin/python bench/split_observation.py [--rows 1000000] [--repeat 7]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parent.parent))

TABLE_COLUMNS = ["id", "name", "amount", "ts"]
LATE_BEFORE_MICROS = 1_762_000_000_000_000  # a watermark inside the rows' times: some rows are late


def _count_rows(batches: Iterator[Any]) -> Iterator[Any]:
    import pyarrow as pa

    rows = sum(batch.num_rows for batch in batches)
    yield pa.RecordBatch.from_pydict({"rows": [rows]})


def _observed(df: Any, splits: int) -> Any:
    """``df`` with what the write tasks count per split (of ``splits`` known values) observed in the JVM."""
    from pyspark.sql import Observation
    from pyspark.sql import functions as F

    micros = F.unix_micros(F.col("ts"))
    late = micros < F.lit(LATE_BEFORE_MICROS)
    aggregates = []
    for split in range(splits):
        its = F.col("split") == split
        aggregates += [
            F.max(F.when(its, micros)).alias(f"latest_{split}"),
            F.count_if(its).alias(f"rows_{split}"),
            F.count_if(its & late).alias(f"late_{split}"),
            F.count_if(its & micros.isNull()).alias(f"untimed_{split}"),
        ]
    aggregates.append(F.count_if(~F.col("split").isin(list(range(splits)))).alias("unknown_splits"))
    return df.observe(Observation(), *aggregates)


def timed(frame: Any) -> float:
    started = time.perf_counter()
    frame.mapInArrow(_count_rows, "rows long").collect()
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()

    from _spark import local_spark
    from pyspark.sql import functions as F

    spark = local_spark()
    ids = spark.range(args.rows)
    rows = ids.select(
        F.col("id"),
        F.concat(F.lit("customer-"), F.lpad((F.col("id") % 100_003).cast("string"), 6, "0")).alias("name"),
        (F.col("id") % 1000 / 7).alias("amount"),
        F.timestamp_seconds(F.lit(1_761_955_200) + F.col("id")).alias("ts"),
        (F.col("id") % 8).cast("int").alias("split"),
        (F.col("id") % 64).cast("int").alias("split64"),
    ).cache()
    rows.count()
    kinds = {
        "table columns": lambda: rows.select(*TABLE_COLUMNS),
        "+ split column": lambda: rows.select(*TABLE_COLUMNS, "split"),
        "+ observe, 8 splits": lambda: _observed(rows, 8).select(*TABLE_COLUMNS),
        "+ observe, 64 splits": lambda: _observed(rows.drop("split").withColumnRenamed("split64", "split"), 64).select(
            *TABLE_COLUMNS
        ),
    }
    for make in kinds.values():  # warm-up: the Python workers and each plan's code
        timed(make())
    seconds: dict[str, list[float]] = {kind: [] for kind in kinds}
    for attempt in range(args.repeat):
        for kind in list(kinds) if attempt % 2 == 0 else list(kinds)[::-1]:
            seconds[kind].append(timed(kinds[kind]()))
    medians = {kind: statistics.median(values) for kind, values in seconds.items()}
    base = medians["table columns"]
    report = {
        "rows": args.rows,
        "seconds": {kind: round(value, 3) for kind, value in medians.items()},
        "against table columns": {kind: round(value / base, 3) for kind, value in medians.items()},
    }
    print(json.dumps(report, indent=2))
    spark.stop()


if __name__ == "__main__":
    main()
