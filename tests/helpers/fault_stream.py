"""A streaming job run as its own process by the fault-injection tests, so it can be killed for real.

Usage: python -m tests.helpers.fault_stream INPUT CHECKPOINT CATALOG_NAME URI WAREHOUSE TABLE COMMITTER [MODE [WRITER]]

MODE is ``append`` (default: orders), ``cdc`` (changes keyed by region and id), ``late`` (id and ts, with late
rows set aside in ``<TABLE> late``) or ``changelog`` (INPUT is then a table whose changelog, read with
``icesink.read_stream``, is applied to TABLE);
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
    from tests.helpers.changes import SPARK_CHANGE_SCHEMA
    from tests.helpers.streams import SPARK_SCHEMA, local_session

    spark = local_session()
    # resolve(): object-store settings come from PYICEBERG_CATALOG__<NAME>__S3__* variables.
    catalog = CatalogConfig.resolve(name=name, uri=uri, warehouse=warehouse)
    changes: dict[str, object] = {}
    if mode == "changelog":
        source = icesink.read_stream(
            spark, input_dir, catalog={"name": name, "uri": uri, "warehouse": warehouse}, max_files_per_trigger=2
        )
        df = source.drop("_commit_snapshot_id", "_commit_timestamp")
        changes = {"equality_fields": ["region", "id"], "op_column": "_change_type", "sequence_by": "_change_ordinal"}
    elif mode == "late":  # rows below the watermark go to TABLE's dead-letter table, "<TABLE> late"
        df = spark.readStream.schema("id long, ts timestamp").option("maxFilesPerTrigger", 1).parquet(input_dir)
        changes = {"event_time": "ts", "lateness": "10 minutes", "late": "dead_letter", "dead_letter": f"{table} late"}
    else:
        schema = SPARK_CHANGE_SCHEMA if mode == "cdc" else SPARK_SCHEMA
        df = spark.readStream.schema(schema).option("maxFilesPerTrigger", 1).parquet(input_dir)
    if mode == "cdc":
        changes = {"equality_fields": ["region", "id"], "op_column": "op", "sequence_by": "seq"}
    query = icesink.stream(
        df,
        table=table,
        checkpoint_location=checkpoint,
        trigger={"availableNow": True},
        create_table=True,
        catalog=catalog,
        committer=committer,
        writer=writer,
        **changes,  # type: ignore[arg-type]
    )
    query.awaitTermination()
    spark.stop()


if __name__ == "__main__":
    main(sys.argv[1:])
