"""Upserts into growing tables: does a 10,000-change micro-batch cost the same at 1M, 8M and 32M rows?

For each table size, a table of that many rows (ids 0..N-1, written in id order
by icesink's own writer and committed by its committer, as a stream followed by
compaction leaves a table: 512 MiB files of row groups of about a million rows)
receives, through ``icesink.stream(..., equality_fields=["id"])`` on Spark,
``--batches`` micro-batches of 10,000 changes each, in two key patterns:

* recent: 5,000 updates of keys among the newest 1% of the table (at least 10,000 keys), 5,000 new keys;
* spread: 5,000 updates of keys drawn from the whole table, 5,000 new keys;
* recent-unordered: as recent, in a table whose keys have no order (each row's key is its row number
  scrambled, as with uuids or hashes): bounds and statistics cannot tell row groups apart, bloom filters can.

Each pattern runs on its own copy of the table. Reported per size and pattern:
the median seconds per micro-batch (stream start to committed snapshot), the
equality delete files readers see after the batches (0 when every batch was
converted at commit), and, as the peer, Iceberg Java 1.9.2's ``MERGE INTO``
(merge-on-read, Spark 3.5, timed inside its warmed-up session) of the first
batch into a copy of the same table. Every table is read back once at the end
and checked against the rows the changes should leave.

    .venv/bin/python bench/upsert_scale.py [--sizes 1000000,8000000,32000000] [--batches 5] [--no-java]

``--label before`` runs it against another checkout's ``icesink`` (set
``PYTHONPATH``) and records the figures as that series.
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

from upsert import JAVA_PYTHON, SPARK_SCHEMA, START, hadoop_copy, iceberg_schema, run_java

BATCH = 10_000
CHUNK = 1_000_000  # rows generated and handed to the writer at a time


def rows(ids: Any, version: int, unordered: bool = False) -> Any:
    """The benchmark's rows for these row numbers (as bench/upsert.py's, built without a Python loop); with
    ``unordered``, the key of row n is n scrambled, so that row groups' bounds span all keys."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    ids = np.asarray(ids, dtype=np.int64)
    keys = _scrambled(ids) if unordered else ids
    names = pa.array([f"v{version}-customer-{i}" for i in range(100_003)])
    start = int(START.timestamp() * 1_000_000)
    return pa.table(
        {
            "id": pa.array(keys, pa.int64()),
            "name": pc.take(names, pa.array(ids % 100_003)),
            "amount": pa.array((ids % 1000) * 1.5 + version, pa.float64()),
            "ts": pa.array(start + ids * 1_000_000, pa.timestamp("us", tz="UTC")),
        }
    )


def _scrambled(numbers: Any) -> Any:
    """A bijection of int64 whose values for consecutive numbers look random (a splitmix64 finaliser)."""
    import numpy as np

    z = numbers.astype(np.uint64) + np.uint64(0x9E3779B97F4A7C15)
    with np.errstate(over="ignore"):
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return (z ^ (z >> np.uint64(31))).astype(np.int64)


PATTERNS = {
    # pattern: (which rows are updated, keys unordered)
    "recent": ("recent", False),
    "spread": ("spread", False),
    "recent-unordered": ("recent", True),
}


def changes(total: int, pattern: str, number: int) -> Any:
    """5,000 updates (of the newest 1% of rows, or of any row) and 5,000 new rows; distinct per batch."""
    import numpy as np

    which, unordered = PATTERNS[pattern]
    rng = np.random.default_rng(1000 + number)
    low = max(0, total - max(total // 100, BATCH)) if which == "recent" else 0
    updates = rng.choice(np.arange(low, total), BATCH // 2, replace=False)
    inserts = np.arange(total + number * BATCH, total + number * BATCH + BATCH // 2)
    return rows(np.concatenate([updates, inserts]), number + 1, unordered)


def build(config: Any, name: str, total: int, unordered: bool = False) -> Any:
    """``total`` rows in row order, written by icesink's writer and committed by its committer."""
    from icesink.catalog.ledger import Ledger
    from icesink.catalog.loader import open_catalog
    from icesink.committer.commit import TableCommitter
    from icesink.committer.staging import stage_checkpoint
    from icesink.iceberg.describe import writer_spec
    from icesink.writer.task import TaskWriter

    catalog = open_catalog(config)
    table = catalog.create_table(name, schema=iceberg_schema())
    writer = TaskWriter(writer_spec(table, name, "load").for_checkpoint(0), task_id=0, attempt=0)
    for start in range(0, total, CHUNK):
        writer.write(rows(range(start, min(total, start + CHUNK)), 0, unordered))
    stage_checkpoint(Ledger(config), table, name, "load", 0, [writer.complete()])
    TableCommitter.of(config).commit_pending(name)
    return catalog.load_table(name)


def check(config: Any, name: str, total: int, batches: list[Any]) -> None:
    """The table holds every id once, with the last version written for it."""
    import pyarrow.compute as pc

    import icesink

    read = icesink.read(name, catalog=config).select(["id", "name"])
    expected_rows = total + sum(b.num_rows // 2 for b in batches)
    assert read.num_rows == expected_rows, f"{name}: {read.num_rows} rows, expected {expected_rows}"
    assert pc.count_distinct(read.column("id")).as_py() == expected_rows, f"{name}: an id is there twice"
    latest: dict[int, str] = {}
    for batch in batches:
        latest.update(zip(batch.column("id").to_pylist(), batch.column("name").to_pylist(), strict=True))
    wanted = read.filter(pc.is_in(read.column("id"), value_set=pc.unique(batches[-1].column("id"))))
    for row in wanted.to_pylist():
        assert row["name"] == latest[row["id"]], f"{name}: id {row['id']} holds {row['name']!r}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="1000000,8000000,32000000")
    parser.add_argument("--batches", type=int, default=5)
    parser.add_argument("--patterns", default=",".join(PATTERNS))
    parser.add_argument("--no-java", action="store_true", help="leave out Iceberg Java's MERGE INTO")
    parser.add_argument("--label", default="after", help="the series the figures are recorded as")
    parser.add_argument(
        "--convert-max-rows",
        type=int,
        help="set icesink.equality-deletes.convert-max-rows on the tables (default: the table property's default)",
    )
    args = parser.parse_args()
    with_java = not args.no_java
    if with_java and not JAVA_PYTHON.exists():
        raise SystemExit(f"{JAVA_PYTHON} is missing: run `make install-interop` first (or pass --no-java)")

    import pyarrow.parquet as pq
    from _spark import local_spark

    import icesink
    from icesink.catalog.config import CatalogConfig
    from icesink.catalog.loader import open_catalog
    from icesink.iceberg.scan import live_files
    from icesink.paths import file_uri

    work = Path(tempfile.mkdtemp(prefix="icesink-bench-upsert-scale-"))
    spark = local_spark()
    report: dict[str, Any] = {"label": args.label, "batch": BATCH, "sizes": {}}
    try:
        config = CatalogConfig("bench", f"sqlite:///{work / 'catalog.db'}", file_uri(work / "wh"), embedded=True)
        catalog = open_catalog(config)
        catalog.create_namespace("bench")

        def stream(table: str, inputs: Path, checkpoint: str) -> float:
            started = time.perf_counter()
            df = spark.readStream.schema(SPARK_SCHEMA).option("maxFilesPerTrigger", 1).parquet(str(inputs))
            icesink.stream(
                df,
                table=table,
                checkpoint_location=str(work / checkpoint),
                trigger={"availableNow": True},
                equality_fields=["id"],
                catalog=config,
            ).awaitTermination()
            return time.perf_counter() - started

        warm = work / "warm"
        warm.mkdir()
        pq.write_table(rows(range(900, 1100), 1), warm / "warm.parquet")
        build(config, "bench.warm", 1000)
        stream("bench.warm", warm, "warm-ckpt")

        for total in (int(s) for s in args.sizes.split(",")):
            per_size: dict[str, Any] = {}
            bases: dict[bool, Any] = {}
            for pattern in args.patterns.split(","):
                unordered = PATTERNS[pattern][1]
                if unordered not in bases:
                    started = time.perf_counter()
                    bases[unordered] = base = build(config, f"bench.base_{total}_{int(unordered)}", total, unordered)
                    built = time.perf_counter() - started
                    files, row_groups = len(live_files(base).data), _row_groups(base)
                    print(f"{total} rows: {files} data files, {row_groups} row groups, built in {built:.0f} s")
                    per_size.update(data_files=files, row_groups=row_groups)
                base = bases[unordered]
                name = f"bench.{pattern.replace('-', '_')}_{total}"
                registered = catalog.register_table(name, base.metadata_location)
                if args.convert_max_rows is not None:
                    with registered.transaction() as transaction:
                        transaction.set_properties(
                            {"icesink.equality-deletes.convert-max-rows": str(args.convert_max_rows)}
                        )
                inputs = work / f"in-{pattern}-{total}"
                inputs.mkdir()
                written = []
                seconds = []
                for number in range(args.batches):
                    batch = changes(total, pattern, number)
                    written.append(batch)
                    pq.write_table(batch, inputs / f"batch-{number:05d}.parquet")
                    seconds.append(stream(name, inputs, f"ckpt-{pattern}-{total}"))
                    print(f"  {pattern} batch {number}: {seconds[-1]:.2f} s", flush=True)
                table = catalog.load_table(name)
                live = live_files(table)
                check(config, name, total, written)
                result: dict[str, Any] = {
                    "batch_seconds_median": round(statistics.median(seconds), 3),
                    "batch_seconds": [round(s, 3) for s in seconds],
                    "equality_delete_files": len(live.equality_deletes),
                    "position_delete_files": len(live.position_deletes),
                }
                if with_java:
                    copy = f"merge_{pattern.replace('-', '_')}_{total}"
                    hadoop_copy(work / "hadoop", base.metadata_location, copy)
                    java = run_java(
                        "java_merge.py",
                        f"file://{work / 'hadoop'}",
                        f"bench.{copy}",
                        str(inputs / "batch-00000.parquet"),
                    )
                    result["java_merge_into_seconds"] = round(java["seconds"], 3)
                    print(f"  {pattern}: Iceberg Java MERGE INTO {java['seconds']:.2f} s", flush=True)
                per_size[pattern] = result
            report["sizes"][str(total)] = per_size
            for pattern in args.patterns.split(","):
                catalog.drop_table(f"bench.{pattern.replace('-', '_')}_{total}")
            shutil.rmtree(work / "wh" / "bench", ignore_errors=True)
        print(json.dumps(report, indent=2))
        record_figures(args, report)
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)


def _row_groups(table: Any) -> int:
    import pyarrow.parquet as pq

    from icesink.iceberg.scan import live_files

    count = 0
    for live in live_files(table).data:
        with table.io.new_input(live.path).open() as stream:
            count += pq.ParquetFile(stream).metadata.num_row_groups
    return count


def _group(total: int, pattern: str) -> str:
    return f"{total // 1_000_000}M, {pattern.replace('recent-unordered', 'unordered')}"


def record_figures(args: argparse.Namespace, report: dict[str, Any]) -> None:
    from figures import record_values

    # Every figure of the run, per label; a run of some sizes or patterns keeps the others' figures.
    raw = Path(__file__).parent / "results" / f"upsert_scale-{args.label.replace(' ', '-').replace(',', '')}.json"
    kept = json.loads(raw.read_text()) if raw.exists() else {"sizes": {}}
    for total, per_size in report["sizes"].items():
        kept["sizes"].setdefault(total, {}).update(per_size)
    kept.update(label=args.label, batch=BATCH, command=" ".join(["bench/upsert_scale.py", *sys.argv[1:]]))
    raw.write_text(json.dumps(kept, indent=2) + "\n")
    if args.batches < 3 or args.convert_max_rows is not None:
        print("upsert_scale: not charted: fewer than 3 batches, or a limit of its own", file=sys.stderr)
        return
    updates: dict[str, dict[str, float]] = {f"icesink ({args.label})": {}}
    for total, per_size in report["sizes"].items():
        for pattern in args.patterns.split(","):
            group = _group(int(total), pattern)
            updates[f"icesink ({args.label})"][group] = per_size[pattern]["batch_seconds_median"]
            if "java_merge_into_seconds" in per_size[pattern]:
                updates.setdefault("Iceberg Java MERGE INTO", {})[group] = per_size[pattern]["java_merge_into_seconds"]
    record_values("upsert_scale", updates, " ".join(["bench/upsert_scale.py", *sys.argv[1:]]))


if __name__ == "__main__":
    main()
