"""The Spark 3.5 session the Iceberg Java benchmark scripts share (interop environment only).

A local[2] session with the Iceberg 1.9.2 runtime jar shipped in the
``snowpark-connect-deps-iceberg`` wheel, Iceberg's SQL extensions, and a
Hadoop catalog ``lake`` over ``warehouse``.
"""

from __future__ import annotations

import glob
import os
from typing import Any


def iceberg_session(warehouse: str) -> Any:
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
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.extensions", "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions")
        .config("spark.sql.catalog.lake", "org.apache.iceberg.spark.SparkCatalog")
        .config("spark.sql.catalog.lake.type", "hadoop")
        .config("spark.sql.catalog.lake.warehouse", warehouse)
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    return spark
