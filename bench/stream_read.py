"""Reading tables as streams: ``read_stream`` against Spark reading the same Parquet files.

(a) Appends: a table of ``--snapshots`` append snapshots (``--rows`` in all) is
    read from the start with ``icesink.read_stream(mode="append")`` and
    ``Trigger.AvailableNow`` into Spark's ``noop`` sink, against
    ``spark.read.parquet`` of the same data files into the same sink, and
    against Spark's own file stream source over a directory of those files
    (all in one Spark session, alternating, medians of ``--repeat`` runs).
(b) Changelog: the table of ``bench/upsert.py`` (1,000,000 rows in 100 files)
    after ``--batches`` change batches of 10,000 rows; its changelog since the
    initial load is read the same way; reported as changes per second, and
    against ``spark.read.parquet`` of the data files those batches added. Each
    round reads a table of its own, so that no round finds row groups an
    earlier round left in the Python workers.
(c) Several tables: the table of (a) and a second of a quarter of its rows,
    in one ``read_stream(tables=[...], mode="append")``.

Each read is timed twice: the whole query, from ``start()`` to its end (Spark
starts the source's Python process, which imports pyiceberg and opens the
catalog: a cost per query, not per micro-batch), and its micro-batches alone
(Spark's ``triggerExecution``: planning, reading, committing offsets).

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
from upsert import SPARK_SCHEMA, build_table, change_batch, stream_upserts


def timed_stream(spark: Any, table: str, config: Any, checkpoint: Path, **options: Any) -> tuple[float, float]:
    """Seconds of the whole query (start to end: Spark starts the source's Python process, which opens the
    catalog) and of its micro-batches alone (Spark's triggerExecution: planning, reading, committing)."""
    import icesink

    df = icesink.read_stream(
        spark, table, catalog={"name": config.name, "uri": config.uri, "warehouse": config.warehouse}, **options
    )
    return timed_query(df, checkpoint)


def timed_query(df: Any, checkpoint: Path) -> tuple[float, float]:
    started = time.perf_counter()
    query = df.writeStream.format("noop").option("checkpointLocation", str(checkpoint)).trigger(availableNow=True)
    running = query.start()
    running.awaitTermination()
    whole = time.perf_counter() - started
    batches = sum(p["durationMs"].get("triggerExecution", 0) for p in running.recentProgress if p["numInputRows"])
    return whole, batches / 1000


def timed_file_stream(spark: Any, directory: Path, checkpoint: Path) -> tuple[float, float]:
    """Spark's own streaming read of the same Parquet files (its file source over a directory of them)."""
    return timed_query(spark.readStream.schema(SPARK_SCHEMA).parquet(str(directory)), checkpoint)


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
        directory = work / "appends-files"  # the same files, where Spark's file source can list them
        directory.mkdir()
        for path in paths:
            os.link(path, directory / Path(path).name)
        timed_parquet(spark, paths)  # warm-up of every path
        timed_stream(spark, "bench.appends", config, work / "warm", mode="append")
        timed_file_stream(spark, directory, work / "warm-files")
        ours, theirs, file_stream = [], [], []
        for round_number in range(args.repeat):
            ours.append(timed_stream(spark, "bench.appends", config, work / f"a-{round_number}", mode="append"))
            theirs.append(timed_parquet(spark, paths))
            file_stream.append(timed_file_stream(spark, directory, work / f"f-{round_number}"))
        append_result = compared(args.rows, ours, theirs, file_stream)
        append_result["snapshots"] = args.snapshots

        # (b) changelog of upserts: a table per round, so that no round reads row groups an earlier one left in
        # the Python workers (a real catch-up read reads each base file once, then reuses it)
        tables = [
            build_upserted(spark, catalog, config, work, f"bench.upserted_{n}", args.batches)
            for n in range(args.repeat)
        ]
        changelog, plain = [], []
        for round_number, (name, base, added) in enumerate(tables):
            start = str(_first_after(catalog.load_table(name), base))
            changelog.append(timed_stream(spark, name, config, work / f"c-{round_number}", starting=start))
            plain.append(timed_parquet(spark, added))
        changes = icesink.changes(tables[0][0], tables[0][1], catalog=config).num_rows
        changelog_result = compared(changes, changelog, plain)
        changelog_result["batches"] = args.batches

        # (c) the stream of several tables: the appended table and a second one, in one stream
        build_table(catalog, "bench.appends_b", args.rows // 4, max(args.snapshots // 4, 1))
        both = paths + [f.path.removeprefix("file://") for f in live_files(catalog.load_table("bench.appends_b")).data]
        several, several_plain = [], []
        for round_number in range(args.repeat):
            several.append(
                timed_stream(
                    spark,
                    None,
                    config,
                    work / f"t-{round_number}",
                    tables=["bench.appends", "bench.appends_b"],
                    mode="append",
                )
            )
            several_plain.append(timed_parquet(spark, both))
        tables_result = compared(args.rows + args.rows // 4, several, several_plain)
        results = {"appends": append_result, "changelog": changelog_result, "tables": tables_result}
        print(json.dumps(results, indent=2))
        record_figures(args, results)
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)


def record_figures(args: argparse.Namespace, results: dict[str, dict[str, Any]]) -> None:
    """The medians into bench/results/stream_read.json, whose groups name the rows and the changes read.

    Its 4,000,000 rows are in the default 20 snapshots: runs with other --snapshots are not recorded, and other
    --rows or --batches give groups the chart does not have.
    """
    if args.snapshots != 20:
        print("stream_read: not recorded: the chart is of 20 append snapshots", file=sys.stderr)
        return
    groups = {
        "appends": f"{results['appends']['rows']:,} appended rows",
        "changelog": f"changelog: {results['changelog']['rows']:,} changes",
        "tables": f"two tables: {results['tables']['rows']:,} appended rows",
    }
    series = {
        "icesink.read_stream (whole query)": "read_stream_seconds",
        "icesink.read_stream (its micro-batches)": "read_stream_micro_batch_seconds",
        "Spark reading the same Parquet files": "spark_parquet_seconds",
    }
    record_values(
        "stream_read",
        {name: {groups[case]: results[case][key] for case in groups} for name, key in series.items()},
        " ".join(["bench/stream_read.py", *sys.argv[1:]]),
    )


def compared(
    rows: int, ours: list[tuple[float, float]], parquet: list[float], files: list[tuple[float, float]] | None = None
) -> dict[str, Any]:
    """Medians and ratios: the whole query (start-up included) and its micro-batches alone, against Spark."""
    whole = statistics.median(w for w, _ in ours)
    batches = statistics.median(b for _, b in ours)
    spark_read = statistics.median(parquet)
    result: dict[str, Any] = {
        "rows": rows,
        "read_stream_seconds": round(whole, 3),
        "read_stream_micro_batch_seconds": round(batches, 3),
        "spark_parquet_seconds": round(spark_read, 3),
        "read_stream_rows_per_second": round(rows / whole),
        "ratio": round(spark_read / whole, 2),
        "micro_batch_ratio": round(spark_read / batches, 2),
    }
    if files:
        file_whole = statistics.median(w for w, _ in files)
        result["spark_file_stream_seconds"] = round(file_whole, 3)
        result["spark_file_stream_micro_batch_seconds"] = round(statistics.median(b for _, b in files), 3)
        result["ratio_to_file_stream"] = round(file_whole / whole, 2)
    return result


def build_upserted(
    spark: Any, catalog: Any, config: Any, work: Path, name: str, batches: int
) -> tuple[str, int, list[str]]:
    """The bench/upsert.py table after ``batches`` change batches: its name, the snapshot before them, and the data
    files they added."""
    import pyarrow.parquet as pq

    from icesink.iceberg.scan import live_files

    build_table(catalog, name, 1_000_000, 100)
    base = catalog.load_table(name).current_snapshot().snapshot_id
    inputs = work / f"changes-{name}"
    inputs.mkdir()
    for number in range(batches):
        pq.write_table(change_batch(1_000_000, 10_000, number), inputs / f"batch-{number:05d}.parquet")
    stream_upserts(spark, inputs, name, work / f"upsert-ckpt-{name}", config)
    table = catalog.load_table(name)
    before = {f.path for f in live_files(table, base).data}
    added = [f.path.removeprefix("file://") for f in live_files(table).data if f.path not in before]
    return name, base, added


def _first_after(table: Any, base: int) -> int:
    """The first snapshot after ``base`` on main (a changelog read starting there skips the initial load)."""
    snapshot = table.current_snapshot()
    while snapshot.parent_snapshot_id != base:
        snapshot = table.metadata.snapshot_by_id(snapshot.parent_snapshot_id)
    return int(snapshot.snapshot_id)


if __name__ == "__main__":
    main()
