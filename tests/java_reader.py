"""Reads an Iceberg table with Iceberg's Java reference implementation and prints its rows as JSON lines.

Runs in its own virtual environment (pyspark 3.5.9 and the Iceberg 1.9.2
Spark runtime jar shipped in ``snowpark-connect-deps-iceberg``), never in
icesink's: ``python java_reader.py METADATA_JSON COLUMN[,COLUMN…]``.
"""

from __future__ import annotations

import glob
import json
import os
import sys


def main(metadata_location: str, columns: str) -> None:
    import snowpark_connect_deps_iceberg
    from pyspark.sql import SparkSession

    jars = glob.glob(
        os.path.join(
            os.path.dirname(snowpark_connect_deps_iceberg.__file__), "jars", "iceberg-spark-runtime-3.5_2.12-*.jar"
        )
    )
    spark = (
        SparkSession.builder.master("local[1]")
        .config("spark.jars", ",".join(jars))
        .config("spark.ui.enabled", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    rows = spark.read.format("iceberg").load(metadata_location).select(*columns.split(",")).collect()
    for row in rows:
        print(json.dumps(row.asDict(), default=str))
    spark.stop()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
