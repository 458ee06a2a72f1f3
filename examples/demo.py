"""Stream sample orders into an Iceberg table on the embedded default, then show its snapshots.

Run with ``make demo``. Every run adds one more input file, so a second run
commits one more snapshot; the checkpoint keeps earlier files from being
written twice.
"""

from __future__ import annotations

import datetime
import json
import os
import random
import sys
from pathlib import Path

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

ROOT = Path(".icesink-demo")
INPUT = ROOT / "input"
TABLE = "demo.orders"


def write_input_file(number: int, rows: int = 2_000) -> None:
    rng = random.Random(number)
    start = datetime.datetime(2026, 11, 1, tzinfo=datetime.UTC)
    INPUT.mkdir(parents=True, exist_ok=True)
    tmp = INPUT / f".orders-{number:04d}.json.tmp"
    with tmp.open("w") as f:
        for i in range(rows):
            f.write(
                json.dumps(
                    {
                        "order_id": number * rows + i,
                        "customer": f"customer-{rng.randrange(500):03d}",
                        "amount": round(rng.uniform(1, 500), 2),
                        "ordered_at": (start + datetime.timedelta(minutes=rng.randrange(60 * 24 * 7))).isoformat(),
                    }
                )
                + "\n"
            )
    tmp.rename(INPUT / f"orders-{number:04d}.json")  # the file source must never see half a file


def main() -> None:
    from pyspark.sql import SparkSession

    import icesink
    from icesink.cli import main as cli

    existing = len(list(INPUT.glob("orders-*.json"))) if INPUT.exists() else 0
    for number in range(existing, existing + (5 if existing == 0 else 1)):
        write_input_file(number)

    spark = (
        SparkSession.builder.master("local[*]")
        .appName("icesink-demo")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "4")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    orders = (
        spark.readStream.schema("order_id long, customer string, amount double, ordered_at timestamp")
        .option("maxFilesPerTrigger", 1)
        .json(str(INPUT))
    )
    query = icesink.stream(
        orders,
        table=TABLE,
        checkpoint_location=str(ROOT / "checkpoint"),
        trigger={"availableNow": True},
        create_table=True,
        partition_by=["day(ordered_at)"],
    )
    query.awaitTermination()
    spark.stop()
    print(f"\nSnapshots of {TABLE} (warehouse: ./warehouse):\n")
    cli(["snapshots", "list", TABLE], standalone_mode=False)
    print("\nTables:\n")
    cli(["tables", "list"], standalone_mode=False)


if __name__ == "__main__":
    main()
