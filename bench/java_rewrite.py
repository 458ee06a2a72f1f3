"""Iceberg Java 1.9.2's own compaction of a Hadoop-catalog table: ``CALL system.rewrite_data_files``.

Runs in the interop environment (``make install-interop``: pyspark 3.5.9 and the
Iceberg 1.9.2 Spark runtime jar from PyPI), never in icesink's:

    .venv-iceberg-java/bin/python bench/java_rewrite.py WAREHOUSE NAMESPACE.TABLE [KEY=VALUE ...]

Prints one JSON line: the seconds the procedure took (Spark already started,
as a scheduled maintenance job would find it) and the procedure's result row.
"""

from __future__ import annotations

import glob
import json
import os
import sys
import time


def main(warehouse: str, table: str, options: list[str]) -> None:
    import snowpark_connect_deps_iceberg
    from pyspark.sql import SparkSession

    jars = glob.glob(
        os.path.join(
            os.path.dirname(snowpark_connect_deps_iceberg.__file__), "jars", "iceberg-spark-runtime-3.5_2.12-*.jar"
        )
    )
    spark = (
        SparkSession.builder.master("local[2]")
        .config("spark.jars", ",".join(jars))
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.extensions", "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions")
        .config("spark.sql.catalog.lake", "org.apache.iceberg.spark.SparkCatalog")
        .config("spark.sql.catalog.lake.type", "hadoop")
        .config("spark.sql.catalog.lake.warehouse", warehouse)
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    spark.sql(f"SELECT count(*) FROM lake.{table}").collect()  # warm: JVM, catalog, first scan
    pairs = ", ".join(f"'{k}', '{v}'" for k, v in (o.split("=", 1) for o in options))
    started = time.perf_counter()
    row = spark.sql(f"CALL lake.system.rewrite_data_files(table => '{table}', options => map({pairs}))").collect()[0]
    seconds = time.perf_counter() - started
    print(json.dumps({"seconds": seconds, "result": row.asDict()}, default=str))
    spark.stop()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3:])
