"""Stream sample orders and a change feed into Iceberg tables on the embedded default, maintain, show.

Run with ``make demo``:

1. orders (appends) stream into ``demo.orders``, partitioned by day;
2. a change feed of order statuses (inserts, updates, deletes keyed by
   ``order_id``) streams into ``demo.order_status``: every micro-batch is one
   row delta whose deletes the committer resolved into position deletes;
3. ``icesink maintain --all`` compacts the keyed table's small files and
   deletes into one file, in one ``replace`` commit;
4. its snapshots are listed, and a few rows are read back with pyiceberg itself.

Every run adds one more input file to each stream, so a second run commits
one more snapshot to each; the checkpoints keep earlier files from being
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
CHANGES = ROOT / "changes"
KEYED = "demo.order_status"
STATUSES = ("placed", "paid", "shipped", "delivered")


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


def write_change_file(number: int, changes: int = 300, keys: int = 200) -> None:
    """Status changes of orders: inserts, updates and deletes (op I/U/D) with an update time."""
    rng = random.Random(1000 + number)
    start = datetime.datetime(2026, 11, 1, tzinfo=datetime.UTC) + datetime.timedelta(hours=number)
    CHANGES.mkdir(parents=True, exist_ok=True)
    tmp = CHANGES / f".changes-{number:04d}.json.tmp"
    with tmp.open("w") as f:
        for i in range(changes):
            f.write(
                json.dumps(
                    {
                        "order_id": rng.randrange(keys),
                        "status": rng.choice(STATUSES),
                        "op": rng.choices("IUD", weights=(3, 6, 1))[0],
                        "updated_at": (start + datetime.timedelta(seconds=i)).isoformat(),
                    }
                )
                + "\n"
            )
    tmp.rename(CHANGES / f"changes-{number:04d}.json")


def main() -> None:
    from pyspark.sql import SparkSession

    import icesink
    from icesink.cli import main as cli

    existing = len(list(INPUT.glob("orders-*.json"))) if INPUT.exists() else 0
    for number in range(existing, existing + (5 if existing == 0 else 1)):
        write_input_file(number)
        write_change_file(number)

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
    changes = (
        spark.readStream.schema("order_id long, status string, op string, updated_at timestamp")
        .option("maxFilesPerTrigger", 1)
        .json(str(CHANGES))
    )
    icesink.stream(
        changes,
        table=KEYED,
        checkpoint_location=str(ROOT / "changes-checkpoint"),
        trigger={"availableNow": True},
        create_table=True,
        equality_fields=["order_id"],
        op_column="op",
        sequence_by="updated_at",
    ).awaitTermination()
    spark.stop()
    print(f"\nSnapshots of {TABLE} (warehouse: ./warehouse):\n")
    cli(["snapshots", "list", TABLE], standalone_mode=False)
    print(f"\nMaintenance of {KEYED} (icesink maintain {KEYED} --all):\n")
    cli(["maintain", KEYED, "--all"], standalone_mode=False)
    print(f"\nSnapshots of {KEYED}: appends, row deltas, the maintenance commit\n")
    cli(["snapshots", "list", KEYED], standalone_mode=False)
    print(f"\nA few rows of {KEYED}, read by pyiceberg itself (it refuses equality deletes; icesink wrote none):\n")
    from icesink.catalog.config import CatalogConfig
    from icesink.catalog.loader import open_catalog

    rows = open_catalog(CatalogConfig.resolve()).load_table(KEYED).scan(limit=5).to_arrow()
    print(rows.to_pandas().to_string(index=False))
    print("\nTables:\n")
    cli(["tables", "list"], standalone_mode=False)


if __name__ == "__main__":
    main()
