"""Upserts: icesink vs pyiceberg's own ``table.upsert``, and the read cost of equality deletes.

(a) icesink: a 10,000-row change batch (half updates of existing keys, half
    inserts) streamed with ``equality_fields=["id"]`` into a 1,000,000-row table
    of 100 data files, end to end (stream start to committed snapshot), with
    icesink's default (the committer resolves the batch's equality deletes into
    position deletes in the same commit) and with
    ``icesink.equality-deletes.convert-at-commit=false`` (equality deletes kept);
(b) pyiceberg ``table.upsert`` of the same batch into an identical table;
(c) Iceberg Java 1.9.2's ``MERGE INTO`` (merge-on-read; Spark 3.5 in the interop
    environment, a process of its own per round, timed inside the started
    session) of the same batch into an identical copy in a Hadoop catalog.
Then ``icesink.read`` of the (default) icesink table after 1, 10 and 50 such
batches, against reading the same rows compacted into a table without delete
files, and against reading the initial 100 files (the same layout, no deletes).

    .venv/bin/python bench/upsert.py [--rows 1000000] [--files 100] [--batch 10000]
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
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

SPARK_SCHEMA = "id long, name string, amount double, ts timestamp"
START = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)


def rows(ids: Any, version: int) -> Any:
    import numpy as np
    import pyarrow as pa

    ids = np.asarray(ids, dtype=np.int64)
    start = int(START.timestamp() * 1_000_000)
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "name": pa.array([f"v{version}-customer-{i % 100_003}" for i in ids.tolist()]),
            "amount": pa.array((ids % 1000) * 1.5 + version, pa.float64()),
            "ts": pa.array(start + ids * 1_000_000, pa.timestamp("us", tz="UTC")),
        }
    )


def iceberg_schema() -> Any:
    from pyiceberg.schema import Schema
    from pyiceberg.types import DoubleType, LongType, NestedField, StringType, TimestamptzType

    return Schema(
        NestedField(1, "id", LongType(), required=True),
        NestedField(2, "name", StringType(), required=False),
        NestedField(3, "amount", DoubleType(), required=False),
        NestedField(4, "ts", TimestamptzType(), required=False),
        identifier_field_ids=[1],
    )


def build_table(catalog: Any, name: str, total: int, files: int) -> Any:
    """``total`` rows in exactly ``files`` data files (one append each)."""
    table = catalog.create_table(name, schema=iceberg_schema())
    per_file = total // files
    arrow_schema = table.schema().as_arrow()
    for number in range(files):
        table.append(rows(range(number * per_file, (number + 1) * per_file), 0).cast(arrow_schema))
    return catalog.load_table(name)


ROOT = Path(__file__).parent.parent
JAVA_PYTHON = ROOT / ".venv-iceberg-java" / "bin" / "python"


def hadoop_copy(warehouse: Path, metadata_location: str, name: str) -> Path:
    """The table's current metadata as table ``bench.<name>`` of a Hadoop catalog (its metadata directory).

    Data files stay where they are; the copy's commits write new metadata files of their own.
    """
    metadata = warehouse / "bench" / name / "metadata"
    metadata.mkdir(parents=True)
    shutil.copy(metadata_location.removeprefix("file://"), metadata / "v1.metadata.json")
    (metadata / "version-hint.text").write_text("1")
    return metadata


def run_java(script: str, *arguments: str) -> dict[str, Any]:
    """One of the Iceberg Java scripts in bench/, in the interop environment; its JSON report."""
    import subprocess

    env = {k: v for k, v in os.environ.items() if not k.startswith("PYSPARK")}
    done = subprocess.run(
        [str(JAVA_PYTHON), str(ROOT / "bench" / script), *arguments],
        capture_output=True,
        text=True,
        env=env,
        timeout=1800,
    )
    if done.returncode != 0:
        raise RuntimeError(done.stderr[-3000:])
    report: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return report


def stream_upserts(spark: Any, inputs: Path, table: str, checkpoint: Path, config: Any) -> None:
    """Upsert the change batches in ``inputs`` into ``table`` by ``id``, one micro-batch each, to the end."""
    import icesink

    icesink.stream(
        spark.readStream.schema(SPARK_SCHEMA).option("maxFilesPerTrigger", 1).parquet(str(inputs)),
        table=table,
        checkpoint_location=str(checkpoint),
        trigger={"availableNow": True},
        equality_fields=["id"],
        catalog=config,
    ).awaitTermination()


def change_batch(total: int, size: int, number: int) -> Any:
    """Half updates of existing keys, half inserts of new keys; distinct per batch number."""
    import numpy as np

    rng = np.random.default_rng(number)
    updates = rng.choice(total, size // 2, replace=False)
    inserts = np.arange(total + number * size, total + number * size + size // 2)
    return rows(np.concatenate([updates, inserts]), number + 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--files", type=int, default=100)
    parser.add_argument("--batch", type=int, default=10_000)
    parser.add_argument("--reads", default="1,10,50", help="read after this many change batches")
    parser.add_argument("--repeat", type=int, default=5, help="rounds of (a), (b), (c), each on fresh tables")
    parser.add_argument("--no-java", action="store_true", help="leave out (c), Iceberg Java's MERGE INTO")
    args = parser.parse_args()
    with_java = not args.no_java
    if with_java and not JAVA_PYTHON.exists():
        raise SystemExit(f"{JAVA_PYTHON} is missing: run `make install-interop` first (or pass --no-java)")

    import pyarrow.parquet as pq
    from _spark import local_spark

    import icesink
    from icesink.catalog.config import CatalogConfig
    from icesink.catalog.loader import open_catalog
    from icesink.paths import file_uri

    work = Path(tempfile.mkdtemp(prefix="icesink-bench-upsert-"))
    spark = local_spark()
    try:
        config = CatalogConfig("bench", f"sqlite:///{work / 'catalog.db'}", file_uri(work / "wh"), embedded=True)
        catalog = open_catalog(config)
        catalog.create_namespace("bench")
        inputs = work / "changes"
        inputs.mkdir()

        def stream_changes(table: str, checkpoint: str) -> float:
            started = time.perf_counter()
            stream_upserts(spark, inputs, table, work / checkpoint, config)
            return time.perf_counter() - started

        # Warm up Spark (JVM, Python workers) on a table of its own so that (a) measures icesink, not start-up.
        warm_inputs = work / "warm"
        warm_inputs.mkdir()
        pq.write_table(change_batch(1000, 100, 0), warm_inputs / "warm.parquet")
        icesink.stream(
            spark.readStream.schema(SPARK_SCHEMA).parquet(str(warm_inputs)),
            table="bench.warmup",
            checkpoint_location=str(work / "warm-ckpt"),
            trigger={"availableNow": True},
            create_table=True,
            equality_fields=["id"],
            catalog=config,
        ).awaitTermination()

        # (a) and (b): the same first change batch into identical tables, on fresh tables every round.
        first = change_batch(args.rows, args.batch, 0)
        pq.write_table(first, inputs / "batch-00000.parquet")
        icesink_times, keep_times, pyiceberg_times, java_times = [], [], [], []
        java_results: list[str] = []
        keep = {"icesink.equality-deletes.convert-at-commit": "false"}
        for round_number in range(args.repeat):
            build_table(catalog, f"bench.icesink_{round_number}", args.rows, args.files)
            kept = build_table(catalog, f"bench.keep_{round_number}", args.rows, args.files)
            with kept.transaction() as transaction:
                transaction.set_properties(keep)
            peer = build_table(catalog, f"bench.pyiceberg_{round_number}", args.rows, args.files)
            icesink_times.append(stream_changes(f"bench.icesink_{round_number}", f"ckpt-{round_number}"))
            keep_times.append(stream_changes(f"bench.keep_{round_number}", f"ckpt-keep-{round_number}"))
            started = time.perf_counter()
            result = peer.upsert(first.cast(peer.schema().as_arrow()), join_cols=["id"])
            pyiceberg_times.append(time.perf_counter() - started)
            assert (result.rows_updated, result.rows_inserted) == (args.batch // 2, args.batch // 2)
            if with_java:
                java_table = build_table(catalog, f"bench.java_{round_number}", args.rows, args.files)
                hadoop_copy(work / "hadoop", java_table.metadata_location, f"merge_{round_number}")
                report = run_java(
                    "java_merge.py",
                    f"file://{work / 'hadoop'}",
                    f"bench.merge_{round_number}",
                    str(inputs / "batch-00000.parquet"),
                )
                java_times.append(report["seconds"])
                java_results.append(report["metadata_location"])
        ours = icesink.read("bench.icesink_0", catalog=config).sort_by("id")
        theirs = catalog.load_table("bench.pyiceberg_0").scan().to_arrow().sort_by("id")
        assert ours.to_pylist() == theirs.select(ours.column_names).to_pylist(), "both upserts must agree"
        assert icesink.read("bench.keep_0", catalog=config).sort_by("id").to_pylist() == ours.to_pylist()
        # With position deletes, pyiceberg reads icesink's table itself.
        assert catalog.load_table("bench.icesink_0").scan().to_arrow().sort_by("id").to_pylist() == ours.to_pylist()
        if with_java:
            from pyiceberg.table import StaticTable

            merged = StaticTable.from_metadata(java_results[0]).scan().to_arrow().sort_by("id")
            assert merged.select(ours.column_names).to_pylist() == ours.to_pylist(), "MERGE INTO must agree"
        icesink_seconds = statistics.median(icesink_times)
        keep_seconds = statistics.median(keep_times)
        pyiceberg_seconds = statistics.median(pyiceberg_times)

        # The 100 original files alone (time travel to before the first upsert): the layout's own read cost.
        appends = [
            s
            for s in catalog.load_table("bench.icesink_0").metadata.snapshots
            if s.summary is not None and s.summary.operation.value == "append"
        ]
        base_snapshot = max(appends, key=lambda s: s.sequence_number).snapshot_id
        base = []
        for _ in range(3):
            started = time.perf_counter()
            icesink.read("bench.icesink_0", snapshot_id=base_snapshot, catalog=config)
            base.append(time.perf_counter() - started)

        reads: dict[str, Any] = {}
        done = 1
        for target in (int(n) for n in args.reads.split(",")):
            for number in range(done, target):
                pq.write_table(change_batch(args.rows, args.batch, number), inputs / f"batch-{number:05d}.parquet")
            if target > done:
                stream_changes("bench.icesink_0", "ckpt-0")
                done = target
            with_deletes = []
            for _ in range(3):
                started = time.perf_counter()
                state = icesink.read("bench.icesink_0", catalog=config)
                with_deletes.append(time.perf_counter() - started)
            # The same rows, compacted into a table with no delete files.
            compact_name = f"bench.compact_{target}"
            compact = catalog.create_table(compact_name, schema=iceberg_schema())
            compact.append(state.cast(compact.schema().as_arrow()))
            without = []
            for _ in range(3):
                started = time.perf_counter()
                icesink.read(compact_name, catalog=config)
                without.append(time.perf_counter() - started)
            table = catalog.load_table("bench.icesink_0")
            reads[str(target)] = {
                "rows": state.num_rows,
                "data_files": int(table.current_snapshot().summary["total-data-files"]),
                "delete_files": int(table.current_snapshot().summary["total-delete-files"]),
                "read_seconds_with_deletes": round(statistics.median(with_deletes), 3),
                "read_seconds_without_deletes": round(statistics.median(without), 3),
                "ratio": round(statistics.median(with_deletes) / statistics.median(without), 2),
            }
        report: dict[str, Any] = {
            "table_rows": args.rows,
            "table_files": args.files,
            "change_rows": args.batch,
            "icesink_upsert_seconds": round(icesink_seconds, 3),
            "icesink_keeping_equality_deletes_seconds": round(keep_seconds, 3),
            "pyiceberg_upsert_seconds": round(pyiceberg_seconds, 3),
            "icesink_rounds": [round(t, 3) for t in icesink_times],
            "icesink_keeping_equality_deletes_rounds": [round(t, 3) for t in keep_times],
            "pyiceberg_rounds": [round(t, 3) for t in pyiceberg_times],
            "speedup": round(pyiceberg_seconds / icesink_seconds, 1),
            "speedup_keeping_equality_deletes": round(pyiceberg_seconds / keep_seconds, 1),
            **(
                {
                    "java_merge_into_seconds": round(statistics.median(java_times), 3),
                    "java_merge_into_rounds": [round(t, 3) for t in java_times],
                    "java_over_icesink": round(statistics.median(java_times) / icesink_seconds, 2),
                }
                if with_java
                else {}
            ),
            "read_seconds_initial_files_no_deletes": round(statistics.median(base), 3),
            "reads_after_batches": reads,
        }
        print(json.dumps(report, indent=2))
        record_figures(args, report)
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)


def record_figures(args: argparse.Namespace, report: dict[str, Any]) -> None:
    """The medians into bench/results/upsert.json, a chart of the default 10,000 changes into 1,000,000 rows.

    Only that size is recorded (its title says so): runs of other sizes are not. With --no-java the chart
    keeps its earlier Iceberg Java figure.
    """
    from figures import record_values

    if (args.rows, args.files, args.batch) != (1_000_000, 100, 10_000):
        print("upsert: not recorded: the chart is of 10,000 changes into 1,000,000 rows in 100 files", file=sys.stderr)
        return
    group = "one change batch"
    updates = {
        "icesink (converted at commit)": {group: report["icesink_upsert_seconds"]},
        "icesink (equality deletes kept)": {group: report["icesink_keeping_equality_deletes_seconds"]},
        "pyiceberg table.upsert": {group: report["pyiceberg_upsert_seconds"]},
    }
    if "java_merge_into_seconds" in report:
        updates["Iceberg Java MERGE INTO"] = {group: report["java_merge_into_seconds"]}
    record_values("upsert", updates, " ".join(["bench/upsert.py", *sys.argv[1:]]))


if __name__ == "__main__":
    main()
