"""A production-shaped streaming job: JSON order files in a directory → an Iceberg table.

Submit it to a cluster; every setting comes from the environment (docs/operations/deployment.md
lists them; docker-compose.yml sets them):

    export PYICEBERG_CATALOG__DEFAULT__URI=postgresql+psycopg2://icesink@db:5432/catalog
    export PYICEBERG_CATALOG__DEFAULT__WAREHOUSE=s3://lake/warehouse
    export PYICEBERG_CATALOG__DEFAULT__S3__ENDPOINT=http://minio:9000   # plus access key, secret, region
    export ICESINK_SOURCE_DIR=/data/orders ICESINK_TABLE=shop.orders ICESINK_CHECKPOINT_LOCATION=/data/ckpt/orders
    export ICESINK_COMMITTER=daemon ICESINK_TRIGGER="10 seconds"
    spark-submit --master spark://spark-master:7077 examples/stream_job.py

The executors need icesink and pyarrow importable by the Python that
``PYSPARK_PYTHON`` names (installed in the worker image, as in the Dockerfile),
and the object store's settings, which travel with the job; they never connect
to the catalog database.
"""

from __future__ import annotations

import logging
import sys

SCHEMA = "order_id long, customer string, amount double, ordered_at timestamp"


def trigger_of(text: str) -> dict[str, object]:
    if text == "available-now":
        return {"availableNow": True}
    return {"processingTime": text}


def main() -> int:
    from pyspark.sql import SparkSession

    import icesink
    from icesink.catalog.config import CatalogConfig
    from icesink.errors import IcesinkError
    from icesink.settings import check_environment, require, setting

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    try:
        check_environment()
        source = require("ICESINK_SOURCE_DIR")
        table = require("ICESINK_TABLE")
        checkpoint = require("ICESINK_CHECKPOINT_LOCATION")
        committer = setting("ICESINK_COMMITTER", "inline") or "inline"
        trigger = trigger_of(setting("ICESINK_TRIGGER", "10 seconds") or "10 seconds")
        catalog = CatalogConfig.resolve()
    except IcesinkError as e:  # a clear line before Spark starts, not a stack trace from inside it
        print(f"error: {e}", file=sys.stderr)
        return 2

    spark = SparkSession.builder.appName(f"icesink-{table}").config("spark.sql.session.timeZone", "UTC").getOrCreate()
    orders = spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 10).json(source)
    query = icesink.stream(
        orders,
        table=table,
        checkpoint_location=checkpoint,
        trigger=trigger,
        create_table=True,
        partition_by=["day(ordered_at)"],
        job_id=setting("ICESINK_JOB_ID"),
        catalog=catalog,
        committer=committer,
    )
    query.awaitTermination()
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
