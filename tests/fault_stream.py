"""A streaming job run as its own process by the fault-injection tests, so it can be killed for real.

Usage: python -m tests.fault_stream INPUT CHECKPOINT CATALOG_NAME URI WAREHOUSE TABLE COMMITTER [MODE [WRITER]]

MODE is ``append`` (default: orders) or ``cdc`` (changes keyed by region and id);
WRITER is ``icesink.stream``'s ``writer`` (default ``auto``).
"""

from __future__ import annotations

import os
import sys

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)


def main(argv: list[str]) -> None:
    input_dir, checkpoint, name, uri, warehouse, table, committer = argv[:7]
    mode = argv[7] if len(argv) > 7 else "append"
    writer = argv[8] if len(argv) > 8 else "auto"
    import icesink
    from icesink.catalog.config import CatalogConfig
    from tests.changes import SPARK_CHANGE_SCHEMA
    from tests.streams import SPARK_SCHEMA, local_session

    spark = local_session()
    schema = SPARK_CHANGE_SCHEMA if mode == "cdc" else SPARK_SCHEMA
    df = spark.readStream.schema(schema).option("maxFilesPerTrigger", 1).parquet(input_dir)
    changes = {"equality_fields": ["region", "id"], "op_column": "op", "sequence_by": "seq"} if mode == "cdc" else {}
    query = icesink.stream(
        df,
        table=table,
        checkpoint_location=checkpoint,
        trigger={"availableNow": True},
        create_table=True,
        # resolve(): object-store settings come from PYICEBERG_CATALOG__<NAME>__S3__* variables.
        catalog=CatalogConfig.resolve(name=name, uri=uri, warehouse=warehouse),
        committer=committer,
        writer=writer,
        **changes,  # type: ignore[arg-type]
    )
    query.awaitTermination()
    spark.stop()


if __name__ == "__main__":
    main(sys.argv[1:])
