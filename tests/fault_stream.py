"""A streaming job run as its own process by the fault-injection tests, so it can be killed for real.

Usage: python -m tests.fault_stream INPUT CHECKPOINT CATALOG_NAME URI WAREHOUSE TABLE COMMITTER
"""

from __future__ import annotations

import os
import sys

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)


def main(argv: list[str]) -> None:
    input_dir, checkpoint, name, uri, warehouse, table, committer = argv
    from pyspark.sql import SparkSession

    import icesink
    from icesink.catalog.config import CatalogConfig
    from tests.streams import SPARK_SCHEMA

    spark = (
        SparkSession.builder.master("local[2]")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    df = spark.readStream.schema(SPARK_SCHEMA).option("maxFilesPerTrigger", 1).parquet(input_dir)
    query = icesink.stream(
        df,
        table=table,
        checkpoint_location=checkpoint,
        trigger={"availableNow": True},
        create_table=True,
        catalog=CatalogConfig(name=name, uri=uri, warehouse=warehouse),
        committer=committer,
    )
    query.awaitTermination()
    spark.stop()


if __name__ == "__main__":
    main(sys.argv[1:])
