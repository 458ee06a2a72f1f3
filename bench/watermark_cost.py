"""What keeping an event-time watermark costs a micro-batch.

The same 1,000,000-row micro-batch (id long, name string, amount double, ts timestamp; ``ts`` one second
apart, so about 12 days) is streamed into a new table partitioned by ``day(ts)`` with icesink's Arrow writer,
alternating, ``--repeat`` times:

* ``plain``: ``icesink.stream`` without a watermark;
* ``watermark``: the same with ``event_time="ts"``, ``lateness="5 minutes"`` and 8 splits (a ``partition``
  column the table does not have, read by the tasks and not written, as Spark's Kafka source gives it).

Each run is one micro-batch with the inline committer, measured from the query's start to its end, so it holds
the tasks' observation of the event times, the driver's fold, and the committer's partition record (12 days, 11
of them made done). Reports the median seconds of each and their ratio (goal: under 2% more).

    .venv/bin/python bench/watermark_cost.py [--rows 1000000] [--repeat 5]
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
sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parent.parent))

SCHEMA = "id long, name string, amount double, ts timestamp, partition int"


def make_input(directory: Path, rows: int, files: int = 4) -> None:
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
            }
        )
        pq.write_table(table, directory / f"part-{number:03d}.parquet", compression="zstd")


def run_once(spark: Any, source: Path, root: Path, number: int, watermark: bool) -> float:
    import icesink

    config = icesink.CatalogConfig("bench", f"sqlite:///{root / 'catalog.db'}", (root / "warehouse").as_uri())
    df = spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1000).parquet(str(source))
    options: dict[str, Any] = {"event_time": "ts", "lateness": "5 minutes", "split_by": ["partition"]}
    if not watermark:
        df, options = df.drop("partition"), {}
    started = time.perf_counter()
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
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()

    from _spark import local_spark

    from icesink.catalog import database
    from icesink.catalog.config import CatalogConfig

    spark = local_spark()
    root = Path(tempfile.mkdtemp(prefix="icesink-watermark-"))
    try:
        make_input(root / "input", args.rows)
        database.upgrade(CatalogConfig("bench", f"sqlite:///{root / 'catalog.db'}", (root / "warehouse").as_uri()))
        run_once(spark, root / "input", root, 0, True)  # warm-up: the JVM and the Python workers
        times: dict[str, list[float]] = {"plain": [], "watermark": []}
        for attempt in range(args.repeat):
            for kind in ("plain", "watermark") if attempt % 2 == 0 else ("watermark", "plain"):
                number = 1 + len(times["plain"]) + len(times["watermark"])
                times[kind].append(run_once(spark, root / "input", root, number, kind == "watermark"))
        medians = {kind: statistics.median(values) for kind, values in times.items()}
        result = {
            "rows": args.rows,
            "repeat": args.repeat,
            "seconds": {kind: [round(v, 3) for v in values] for kind, values in times.items()},
            "median_seconds": {kind: round(v, 3) for kind, v in medians.items()},
            "watermark_over_plain": round(medians["watermark"] / medians["plain"], 4),
        }
        print(json.dumps(result, indent=2))
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
