"""The fan-out writer's memory with many partitions per micro-batch.

One micro-batch of the same rows (default 8,000,000: id long, p int, name string of 40 characters, amount
double) streams into a table partitioned by identity on ``p``, which takes 10, 1,000 or 20,000 values, and
consecutive rows go to different partitions, so every batch Spark hands a task touches them all. Each task
gets more rows than it buffers (128 MiB), so it writes out before its input ends, as in any large micro-batch.
Two settings of ``icesink.write.max-open-files``:

* the default (100): at most 100 files open per task, the least recently written closed first;
* unbounded (1,000,000): every partition's file stays open until the task ends.

Python workers are not reused (``spark.python.worker.reuse=false``), so each run's peak is its own. Reported:
the peak resident memory of Spark's Python workers (sampled every 0.1 s), the wall time, the files written, and
whether the table holds exactly the input rows (count and sums, read back with ``icesink.read``).

    .venv/bin/python bench/fanout_memory.py [--rows 8000000] [--partitions 10,1000,20000]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
sys.path.insert(0, str(Path(__file__).parent))

from _memory import PeakMemory
from _spark import local_spark
from append_throughput import local_catalog
from figures import Figures, record

SCHEMA = "id long, p int, name string, amount double"
UNBOUNDED = 1_000_000


def make_input(directory: Path, rows: int, partitions: int, files: int = 8) -> None:
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    directory.mkdir(parents=True)
    per_file = rows // files
    for number in range(files):
        ids = pa.array(range(number * per_file, (number + 1) * per_file), pa.int64())
        # Consecutive ids go to different partitions: every batch Spark hands a task touches them all.
        p = pc.cast(pc.bit_wise_and(pc.multiply(ids, 7919), 0x7FFFFFFF), pa.int64())
        p = pc.cast(pc.subtract(p, pc.multiply(pc.divide(p, partitions), partitions)), pa.int32())
        names = pc.binary_join_element_wise(pc.cast(ids, pa.string()), "x" * 30, "")
        amount = pc.divide(pc.cast(ids, pa.float64()), 7.0)
        pq.write_table(
            pa.table({"id": ids, "p": p, "name": names, "amount": amount}), directory / f"part-{number}.parquet"
        )


def run(spark: Any, source: Path, work: Path, name: str, max_open: int) -> dict[str, Any]:
    import icesink

    catalog = local_catalog(work)
    df = spark.readStream.schema(SCHEMA).parquet(str(source))
    with PeakMemory() as peak:
        started = time.perf_counter()
        icesink.stream(
            df,
            table=f"bench.{name}",
            checkpoint_location=str(work / f"ckpt-{name}"),
            trigger={"availableNow": True},
            create_table=True,
            partition_by=["p"],
            table_properties={"icesink.write.max-open-files": str(max_open)},
            catalog=catalog,
        ).awaitTermination()
        seconds = time.perf_counter() - started
    import pyarrow.compute as pc

    table = icesink.read(f"bench.{name}", catalog=catalog)
    summary = _summary(f"bench.{name}", catalog.uri, catalog.warehouse)
    return {
        "python_workers_mib": peak.mib()["python_workers"],
        "seconds": round(seconds, 2),
        "rows": table.num_rows,
        "id_sum": pc.sum(table.column("id")).as_py(),
        "p_sum": pc.sum(table.column("p")).as_py(),
        "data_files": int(summary.get("total-data-files", 0)),
    }


def _summary(identifier: str, uri: str, warehouse: str) -> dict[str, str]:
    from pyiceberg.catalog.sql import SqlCatalog

    table = SqlCatalog("bench", uri=uri, warehouse=warehouse).load_table(identifier)
    snapshot = table.current_snapshot()
    return dict(snapshot.summary.additional_properties) if snapshot and snapshot.summary else {}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=8_000_000)
    parser.add_argument("--partitions", default="10,1000,20000")
    args = parser.parse_args()
    counts = [int(p) for p in args.partitions.split(",")]

    spark = local_spark(**{"spark.python.worker.reuse": "false", "spark.driver.memory": "4g"})
    report: dict[str, Any] = {"rows": args.rows, "runs": {}}
    with tempfile.TemporaryDirectory(prefix="icesink-fanout-") as tmp:
        work = Path(tmp)
        for partitions in counts:
            source = work / f"input-{partitions}"
            make_input(source, args.rows, partitions)
            for label, max_open in (("bounded (default 100)", 100), ("unbounded", UNBOUNDED)):
                name = f"p{partitions}_{'bounded' if max_open == 100 else 'unbounded'}"
                try:
                    result = run(spark, source, work, name, max_open)
                except Exception as e:  # an unbounded writer may run out of file descriptors: that is a result
                    cause = "too many open files" if "Too many open files" in str(e) else type(e).__name__
                    result = {"failed": cause, "python_workers_mib": None}
                report["runs"].setdefault(str(partitions), {})[label] = result
                print(json.dumps({"partitions": partitions, "writer": label, **result}), flush=True)
    expected = {"rows": args.rows, "id_sum": args.rows * (args.rows - 1) // 2}
    for partitions, runs in report["runs"].items():
        runs = {label: result for label, result in runs.items() if "failed" not in result}
        for label, result in runs.items():
            if result["rows"] != expected["rows"] or result["id_sum"] != expected["id_sum"]:
                sys.exit(f"{partitions} partitions, {label}: the table does not hold the input rows: {result}")
        sums = {result["p_sum"] for result in runs.values()}
        if len(sums) != 1:
            sys.exit(f"{partitions} partitions: the two writers wrote different rows: {runs}")
    bounded = {p: runs["bounded (default 100)"]["python_workers_mib"] for p, runs in report["runs"].items()}
    if str(counts[0]) in bounded:
        report["peak_ratio_to_fewest_partitions"] = {
            p: round(mib / bounded[str(counts[0])], 2) for p, mib in bounded.items()
        }
    print(json.dumps(report, indent=2))
    groups = list(report["runs"])
    record(
        Figures(
            benchmark="fanout_memory",
            title=f"Peak memory of Spark's Python workers: {args.rows:,} rows in one micro-batch",
            unit="MiB",
            better="lower",
            groups=[f"{int(p):,} partitions" for p in groups],
            series={
                f"icesink, max-open-files {label}": [report["runs"][p][label]["python_workers_mib"] for p in groups]
                for label in ("bounded (default 100)", "unbounded")
            },
            command=("bench/fanout_memory.py " + " ".join(sys.argv[1:])).strip(),
            note="; ".join(
                f"{label} at {int(p):,} partitions failed: {result['failed']}"
                for p, runs in report["runs"].items()
                for label, result in runs.items()
                if "failed" in result
            ),
        )
    )


if __name__ == "__main__":
    main()
