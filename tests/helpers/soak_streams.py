"""Four streaming jobs in one Spark application, two per table, staging for a separate committer.

Usage: python -m tests.helpers.soak_streams INPUT_ROOT CHECKPOINT_ROOT CATALOG_NAME URI WAREHOUSE

INPUT_ROOT holds one directory per job (``a``, ``b``, ``c``, ``d``); jobs a and b
write ``soak.first``, c and d ``soak.second``. Exits when every job has
written all of its input.
"""

from __future__ import annotations

import os
import sys

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

JOBS = {"a": "soak.first", "b": "soak.first", "c": "soak.second", "d": "soak.second"}


def main(argv: list[str]) -> None:
    input_root, checkpoint_root, name, uri, warehouse = argv[:5]
    import icesink
    from icesink.catalog.config import CatalogConfig
    from tests.helpers.streams import SPARK_SCHEMA, local_session

    spark = local_session()
    config = CatalogConfig(name=name, uri=uri, warehouse=warehouse)
    queries = []
    for job, table in JOBS.items():
        df = spark.readStream.schema(SPARK_SCHEMA).option("maxFilesPerTrigger", 1).parquet(f"{input_root}/{job}")
        queries.append(
            icesink.stream(
                df,
                table=table,
                checkpoint_location=f"{checkpoint_root}/{job}",
                trigger={"availableNow": True},
                job_id=f"soak-{job}",
                catalog=config,
                committer="daemon",
            )
        )
    for query in queries:
        query.awaitTermination()
    spark.stop()


if __name__ == "__main__":
    main(sys.argv[1:])
