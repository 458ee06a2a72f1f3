"""Maintenance: ``icesink maintain`` against Iceberg Java's own ``rewrite_data_files``, and reads after it.

The table of ``bench/upsert.py`` (1,000,000 rows in 100 files) receives 50
change batches of 10,000 rows (half updates, half inserts) through
``icesink.stream(equality_fields=["id"])``, once keeping the stream's equality
deletes and once with icesink's default (each checkpoint's equality deletes
resolved into position deletes at commit time). Then, on identical copies of
that table state (the same metadata file, registered again):

(a) ``icesink maintain --all`` (convert equality deletes, compact every file
    with deletes or below 75% of the target size), in this process;
(b) Iceberg Java 1.9.2 on Spark 3.5: ``CALL system.rewrite_data_files(table,
    options => map('delete-file-threshold','1'))`` on a Hadoop-catalog copy
    (the metadata file as ``metadata/v1.metadata.json`` plus a
    ``version-hint.text``), timed inside its already started Spark session.

Rounds alternate; medians are reported. Then ``icesink.read`` of the
maintained table against the same rows written once, without deletes, and
the file counts before and after. Both maintained tables are read back with
iceberg-rust and must hold the same rows.

    .venv/bin/python bench/maintain.py [--rows 1000000] [--files 100] [--batches 50] [--repeat 3]
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
from upsert import (
    JAVA_PYTHON,
    build_table,
    change_batch,
    hadoop_copy,
    iceberg_schema,
    run_java,
    stream_upserts,
)


def java_rewrite(warehouse: Path, metadata_location: str, name: str) -> dict[str, Any]:
    """Copy the metadata into a Hadoop-catalog table and let Iceberg Java rewrite it; returns its report."""
    metadata = hadoop_copy(warehouse, metadata_location, name)
    # The warehouse with a scheme: iceberg-rust refuses the plain paths Hadoop writes otherwise.
    report = run_java("java_rewrite.py", f"file://{warehouse}", f"bench.{name}", "delete-file-threshold=1")
    version = int((metadata / "version-hint.text").read_text().strip())
    report["metadata_location"] = f"file://{metadata / f'v{version}.metadata.json'}"
    return report


def rust_digest(metadata_location: str) -> tuple[int, int, float]:
    from datafusion import SessionContext
    from pyiceberg.table import StaticTable

    context = SessionContext()
    context.register_table("t", StaticTable.from_metadata(metadata_location))
    row = context.sql("SELECT count(*) AS n, sum(id) AS s, sum(amount) AS a FROM t").to_arrow_table().to_pylist()[0]
    return int(row["n"]), int(row["s"]), round(float(row["a"]), 3)


def timed(action: Any, repeat: int = 3) -> float:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        action()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--files", type=int, default=100)
    parser.add_argument("--batch", type=int, default=10_000)
    parser.add_argument("--batches", type=int, default=50)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--modes", default="keep,convert", help="keep: equality deletes; convert: position deletes")
    args = parser.parse_args()
    if not JAVA_PYTHON.exists():
        raise SystemExit(f"{JAVA_PYTHON} is missing: run `make install-interop` first")

    import pyarrow.compute as pc
    import pyarrow.parquet as pq
    from _spark import local_spark

    import icesink
    from icesink.catalog.config import CatalogConfig
    from icesink.catalog.loader import open_catalog
    from icesink.committer.maintainer import Maintainer
    from icesink.iceberg.scan import live_files
    from icesink.maintenance.policy import MaintenancePolicy
    from icesink.maintenance.run import MaintenanceRequest
    from icesink.paths import file_uri

    work = Path(tempfile.mkdtemp(prefix="icesink-bench-maintain-"))
    spark = local_spark()
    results: dict[str, Any] = {}
    try:
        config = CatalogConfig("bench", f"sqlite:///{work / 'catalog.db'}", file_uri(work / "wh"), embedded=True)
        catalog = open_catalog(config)
        catalog.create_namespace("bench")
        inputs = work / "changes"
        inputs.mkdir()
        for number in range(args.batches):
            pq.write_table(change_batch(args.rows, args.batch, number), inputs / f"batch-{number:05d}.parquet")
        for mode in args.modes.split(","):
            name = f"bench.streamed_{mode}"
            table = build_table(catalog, name, args.rows, args.files)
            if mode == "keep":
                with table.transaction() as transaction:
                    transaction.set_properties({"icesink.equality-deletes.convert-at-commit": "false"})
            started = time.perf_counter()
            stream_upserts(spark, inputs, name, work / f"ckpt-{mode}", config)
            stream_seconds = time.perf_counter() - started
            state = catalog.load_table(name)
            before = live_files(state)
            # (iceberg-rust applies 50 equality delete files slowly: icesink's reader gives the expected digest)
            before_rows = icesink.read(state)
            expected = (
                before_rows.num_rows,
                int(pc.sum(before_rows.column("id")).as_py()),
                round(float(pc.sum(before_rows.column("amount")).as_py()), 3),
            )

            ours, theirs = [], []
            java_reports: list[dict[str, Any]] = []
            maintained = None
            for round_number in range(args.repeat):
                for side in ("icesink", "java") if round_number % 2 == 0 else ("java", "icesink"):
                    copy = f"{mode}_{side}_{round_number}"
                    if side == "java":
                        report = java_rewrite(work / "hadoop", state.metadata_location, copy)
                        theirs.append(report["seconds"])
                        java_reports.append(report)
                        continue
                    registered = catalog.register_table(f"bench.{copy}", state.metadata_location)
                    began = time.perf_counter()
                    Maintainer(catalog, config).run(
                        registered, f"bench.{copy}", MaintenanceRequest(MaintenancePolicy(), everything=True)
                    )
                    ours.append(time.perf_counter() - began)
                    maintained = f"bench.{copy}"
            assert maintained is not None
            after = live_files(catalog.load_table(maintained))
            final_rows = icesink.read(maintained, catalog=config)
            assert rust_digest(catalog.load_table(maintained).metadata_location) == expected
            assert rust_digest(java_reports[-1]["metadata_location"]) == expected

            # The same rows written once: what a reader would pay without any history.
            fresh = f"bench.fresh_{mode}"
            plain = catalog.create_table(fresh, schema=iceberg_schema())
            plain.append(final_rows.cast(plain.schema().as_arrow()))
            read_maintained = timed(lambda name=maintained: icesink.read(name, catalog=config))
            read_fresh = timed(lambda name=fresh: icesink.read(name, catalog=config))
            read_before = timed(lambda name=name: icesink.read(name, catalog=config))
            results[mode] = {
                "stream_seconds_for_all_batches": round(stream_seconds, 2),
                "rows": final_rows.num_rows,
                "before": {
                    "data_files": len(before.data),
                    "position_delete_files": len(before.position_deletes),
                    "equality_delete_files": len(before.equality_deletes),
                },
                "after_icesink": {
                    "data_files": len(after.data),
                    "delete_files": len(after.position_deletes) + len(after.equality_deletes),
                },
                "after_java": java_reports[-1]["result"],
                "icesink_maintain_seconds": round(statistics.median(ours), 3),
                "java_rewrite_seconds": round(statistics.median(theirs), 3),
                "icesink_rounds": [round(t, 3) for t in ours],
                "java_rounds": [round(t, 3) for t in theirs],
                "java_over_icesink": round(statistics.median(theirs) / statistics.median(ours), 2),
                "read_seconds_before_maintenance": round(read_before, 3),
                "read_seconds_after_maintenance": round(read_maintained, 3),
                "read_seconds_same_rows_no_history": round(read_fresh, 3),
                "read_ratio_after_maintenance": round(read_maintained / read_fresh, 2),
            }
        print(json.dumps(results, indent=2))
        record_figures(args, results)
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)


def record_figures(args: argparse.Namespace, results: dict[str, Any]) -> None:
    """The medians into bench/results/maintain.json, a chart of the default 50 batches of 10,000 into 1,000,000 rows.

    Runs of other sizes are not recorded. A mode's group is named by the delete files it left before maintenance
    ("100 equality delete files"), as counted in this run: a count the chart does not have is not recorded.
    """
    if (args.rows, args.files, args.batch, args.batches) != (1_000_000, 100, 10_000, 50):
        print(
            "maintain: not recorded: the chart is of 50 batches of 10,000 into 1,000,000 rows in 100 files",
            file=sys.stderr,
        )
        return
    groups = {}
    for mode, result in results.items():
        kind = "equality" if mode == "keep" else "position"
        groups[mode] = f"{result['before'][f'{kind}_delete_files']} {kind} delete files"
    record_values(
        "maintain",
        {
            "icesink maintain --all": {groups[mode]: r["icesink_maintain_seconds"] for mode, r in results.items()},
            "Iceberg Java rewrite_data_files": {groups[mode]: r["java_rewrite_seconds"] for mode, r in results.items()},
        },
        " ".join(["bench/maintain.py", *sys.argv[1:]]),
    )


if __name__ == "__main__":
    main()
