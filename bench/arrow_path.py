"""Where the Arrow writer's time goes: the JVM-to-Python hand-off against the encoding.

Reads the same Parquet input (default 2,000,000 rows: id long, name string,
amount double, ts timestamp) with Spark 4.3 and, alternating, ``--repeat`` times:

* ``spark_write``: Spark's own ``df.write.parquet`` (zstd), what icesink's
  Spark writer does for unpartitioned tables;
* ``handoff``: ``mapInArrow`` with a function that only counts the rows it is
  handed (Spark's default Arrow batches of 10,000 rows), the hand-off alone;
* ``handoff_100k``: the same with ``spark.sql.execution.arrow.maxRecordsPerBatch``
  at 100,000;
* ``arrow_writer``: ``mapInArrow`` running icesink's task writer (conform,
  metrics, Parquet encoding at zstd level 3, files on local disk), what
  ``writer="arrow"`` runs per micro-batch, without the streaming query around it.

Reports median seconds and how busy the machine's cores were (from
``/proc/stat``) during each, which tells whether overlapping steps could help.

    .venv/bin/python bench/arrow_path.py [--rows 2000000] [--files 8] [--repeat 5]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parent.parent))

from append_throughput import SCHEMA, make_input

BATCH_SIZE = "spark.sql.execution.arrow.maxRecordsPerBatch"


def cpu_counters() -> tuple[int, int]:
    """Total and idle (idle + iowait) jiffies of all cores."""
    with open("/proc/stat") as f:
        values = [int(v) for v in f.readline().split()[1:]]
    return sum(values), values[3] + values[4]


def count_rows(batches: Iterator[Any]) -> Iterator[Any]:
    import pyarrow as pa

    rows = sum(batch.num_rows for batch in batches)
    yield pa.record_batch([pa.array([rows], pa.int64())], names=["rows"])


def arrow_writer_spec(location: str, checkpoint: int) -> Any:
    from icesink.writer.spec import ColumnSpec, WriterSpec

    columns = (
        ColumnSpec(1, "id", "long", False),
        ColumnSpec(2, "name", "string", False),
        ColumnSpec(3, "amount", "double", False),
        ColumnSpec(4, "ts", "timestamptz", False),
    )
    spec = WriterSpec("bench.arrow_path", location, columns, (), 0, "bench")
    return spec.for_checkpoint(checkpoint)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--files", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()

    from _spark import local_spark

    from icesink.paths import file_uri
    from icesink.writer.task import RESULT_SCHEMA_DDL, write_task

    spark = local_spark()
    work = Path(tempfile.mkdtemp(prefix="icesink-bench-arrow-path-"))
    try:
        make_input(work / "input", args.rows, args.files)
        df = spark.read.schema(SCHEMA).parquet(str(work / "input"))

        def spark_write(run: int) -> None:
            df.write.option("compression", "zstd").parquet(str(work / f"spark-{run}"))

        def handoff(batch_rows: str) -> Callable[[int], None]:
            def run(_: int) -> None:
                spark.conf.set(BATCH_SIZE, batch_rows)
                try:
                    (row,) = df.mapInArrow(count_rows, "rows long").groupBy().sum("rows").collect()
                    assert row[0] == args.rows
                finally:
                    spark.conf.unset(BATCH_SIZE)

            return run

        def arrow_writer(run: int) -> None:
            spec = arrow_writer_spec(file_uri(work / f"arrow-{run}"), run)
            results = df.mapInArrow(write_task(spec), RESULT_SCHEMA_DDL).collect()
            assert len(results) == df.rdd.getNumPartitions()

        paths: dict[str, Callable[[int], None]] = {
            "spark_write": spark_write,
            "handoff": handoff("10000"),
            "handoff_100k": handoff("100000"),
            "arrow_writer": arrow_writer,
        }
        for path in paths.values():  # warm-up: every path's code compiled once
            path(1000)
        seconds: dict[str, list[float]] = {name: [] for name in paths}
        busy: dict[str, list[float]] = {name: [] for name in paths}
        for run in range(args.repeat):
            for name, path in paths.items():
                total, idle = cpu_counters()
                started = time.perf_counter()
                path(run)
                seconds[name].append(time.perf_counter() - started)
                total_after, idle_after = cpu_counters()
                busy[name].append(1 - (idle_after - idle) / max(1, total_after - total))
        spark_median = statistics.median(seconds["spark_write"])
        report = {
            name: {
                "seconds": round(statistics.median(times), 3),
                "over_spark_write": round(statistics.median(times) / spark_median, 2),
                "cores_busy_percent": round(100 * statistics.median(busy[name])),
                "runs": [round(t, 2) for t in times],
            }
            for name, times in seconds.items()
        }
        print(json.dumps({"rows": args.rows, **report}, indent=2))
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
