"""Reading tables as streams: ``read_stream`` against Spark reading the same Parquet files.

(a) Appends: a table of ``--snapshots`` append snapshots (``--rows`` in all) is
    read from the start with ``icesink.read_stream(mode="append")`` and
    ``Trigger.AvailableNow`` into Spark's ``noop`` sink, against
    ``spark.read.parquet`` of the same data files into the same sink (both in
    one Spark session, alternating, medians of ``--repeat`` runs).
(b) Changelog: the table of ``bench/upsert.py`` (1,000,000 rows in 100 files)
    after ``--batches`` change batches of 10,000 rows; its changelog since the
    initial load is read the same way; reported as changes per second, and
    against ``spark.read.parquet`` of the data files those batches added.

    .venv/bin/python bench/stream_read.py [--rows 4000000] [--snapshots 20] [--batches 20] [--repeat 3]
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
from pathlib import Path
from typing import Any

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parent.parent))

from figures import record_values
from upsert import SPARK_SCHEMA, build_table, change_batch


def timed_stream(spark: Any, table: str, config: Any, checkpoint: Path, **options: Any) -> float:
    import icesink

    df = icesink.read_stream(
        spark, table, catalog={"name": config.name, "uri": config.uri, "warehouse": config.warehouse}, **options
    )
    started = time.perf_counter()
    query = df.writeStream.format("noop").option("checkpointLocation", str(checkpoint)).trigger(availableNow=True)
    query.start().awaitTermination()
    return time.perf_counter() - started


def timed_parquet(spark: Any, paths: list[str]) -> float:
    started = time.perf_counter()
    spark.read.parquet(*paths).write.format("noop").mode("overwrite").save()
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=4_000_000)
    parser.add_argument("--snapshots", type=int, default=20)
    parser.add_argument("--batches", type=int, default=20)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()

    from _spark import local_spark

    import icesink
    from icesink.catalog.config import CatalogConfig
    from icesink.catalog.loader import open_catalog
    from icesink.iceberg.scan import live_files
    from icesink.paths import file_uri

    work = Path(tempfile.mkdtemp(prefix="icesink-bench-read-"))
    spark = local_spark()
    try:
        config = CatalogConfig("bench", f"sqlite:///{work / 'catalog.db'}", file_uri(work / "wh"), embedded=True)
        catalog = open_catalog(config)
        catalog.create_namespace("bench")

        # (a) appends
        appended = build_table(catalog, "bench.appends", args.rows, args.snapshots)
        paths = [f.path.removeprefix("file://") for f in live_files(appended).data]
        timed_parquet(spark, paths)  # warm-up of both paths
        timed_stream(spark, "bench.appends", config, work / "warm", mode="append")
        ours, theirs = [], []
        for round_number in range(args.repeat):
            ours.append(timed_stream(spark, "bench.appends", config, work / f"a-{round_number}", mode="append"))
            theirs.append(timed_parquet(spark, paths))
        append_result = {
            "rows": args.rows,
            "snapshots": args.snapshots,
            "read_stream_seconds": round(statistics.median(ours), 3),
            "spark_parquet_seconds": round(statistics.median(theirs), 3),
            "read_stream_rows_per_second": round(args.rows / statistics.median(ours)),
            "spark_parquet_rows_per_second": round(args.rows / statistics.median(theirs)),
            "ratio": round(statistics.median(theirs) / statistics.median(ours), 2),
        }

        # (b) changelog of upserts
        name = "bench.upserted"
        build_table(catalog, name, 1_000_000, 100)
        base = catalog.load_table(name).current_snapshot().snapshot_id
        inputs = work / "changes"
        inputs.mkdir()
        import pyarrow.parquet as pq

        for number in range(args.batches):
            pq.write_table(change_batch(1_000_000, 10_000, number), inputs / f"batch-{number:05d}.parquet")
        icesink.stream(
            spark.readStream.schema(SPARK_SCHEMA).option("maxFilesPerTrigger", 1).parquet(str(inputs)),
            table=name,
            checkpoint_location=str(work / "upsert-ckpt"),
            trigger={"availableNow": True},
            equality_fields=["id"],
            catalog=config,
        ).awaitTermination()
        changes = icesink.changes(name, base, catalog=config)
        table = catalog.load_table(name)
        before = {f.path for f in live_files(table, base).data}
        added = [f.path.removeprefix("file://") for f in live_files(table).data if f.path not in before]
        changelog, plain = [], []
        for round_number in range(args.repeat):
            start = str(_first_after(table, base))
            changelog.append(timed_stream(spark, name, config, work / f"c-{round_number}", starting=start))
            plain.append(timed_parquet(spark, added))
        changelog_result = {
            "batches": args.batches,
            "changes": changes.num_rows,
            "read_stream_seconds": round(statistics.median(changelog), 3),
            "changes_per_second": round(changes.num_rows / statistics.median(changelog)),
            "spark_parquet_of_added_files_seconds": round(statistics.median(plain), 3),
            "ratio": round(statistics.median(plain) / statistics.median(changelog), 2),
        }
        print(json.dumps({"appends": append_result, "changelog": changelog_result}, indent=2))
        record_figures(args, append_result, changelog_result)
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)


def record_figures(args: argparse.Namespace, appends: dict[str, Any], changelog: dict[str, Any]) -> None:
    """The medians into bench/results/stream_read.json, whose groups name the rows and the changes read.

    Its 4,000,000 rows are in the default 20 snapshots: runs with other --snapshots are not recorded, and other
    --rows or --batches give groups the chart does not have.
    """
    if args.snapshots != 20:
        print("stream_read: not recorded: the chart is of 20 append snapshots", file=sys.stderr)
        return
    rows, changes = f"{appends['rows']:,} appended rows", f"changelog: {changelog['changes']:,} changes"
    record_values(
        "stream_read",
        {
            "icesink.read_stream": {rows: appends["read_stream_seconds"], changes: changelog["read_stream_seconds"]},
            "Spark reading the same Parquet files": {
                rows: appends["spark_parquet_seconds"],
                changes: changelog["spark_parquet_of_added_files_seconds"],
            },
        },
        " ".join(["bench/stream_read.py", *sys.argv[1:]]),
    )


def _first_after(table: Any, base: int) -> int:
    """The first snapshot after ``base`` on main (a changelog read starting there skips the initial load)."""
    snapshot = table.current_snapshot()
    while snapshot.parent_snapshot_id != base:
        snapshot = table.metadata.snapshot_by_id(snapshot.parent_snapshot_id)
    return int(snapshot.snapshot_id)


if __name__ == "__main__":
    main()
