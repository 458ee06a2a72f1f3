"""``icesink.stream``: start a Spark streaming query that writes into an Iceberg table."""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from icesink.catalog.config import CatalogConfig, resolve_catalog
from icesink.errors import ConfigError, NotStreamingError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame
    from pyspark.sql.streaming.query import StreamingQuery

log = logging.getLogger("icesink.stream")

COMMITTERS = ("inline", "daemon")
WRITERS = ("auto", "spark", "arrow")


def stream(
    df: DataFrame,
    table: str,
    checkpoint_location: str | None = None,
    *,
    trigger: Mapping[str, Any] | None = None,
    create_table: bool = False,
    partition_by: Sequence[str] = (),
    table_properties: Mapping[str, str] | None = None,
    job_id: str | None = None,
    catalog: str | CatalogConfig | Mapping[str, str] | None = None,
    committer: str = "inline",
    query_name: str | None = None,
    equality_fields: Sequence[str] | None = None,
    op_column: str | None = None,
    op_values: Mapping[str, str] | None = None,
    sequence_by: str | None = None,
    expire_snapshots: bool = False,
    writer: str = "auto",
    maintain: bool = False,
    evolve_schema: bool = False,
) -> StreamingQuery:
    """Start writing a streaming DataFrame into an Iceberg table, exactly once per micro-batch.

    Args:
        df: a streaming DataFrame whose columns fit the table.
        table: ``namespace.table`` in the catalog.
        checkpoint_location: Spark's checkpoint directory; the job id is derived from it.
        trigger: keyword arguments of ``DataStreamWriter.trigger``, e.g. ``{"processingTime": "10 seconds"}``.
        create_table: create the table from the DataFrame's schema if it does not exist.
        partition_by: partition fields of a new table: ``"col"``, ``"day(ts)"``, ``"bucket(16, id)"``, ….
        table_properties: properties of a new table (``write.target-file-size-bytes``, ``icesink.maintain.*``, …);
            an existing table keeps its own.
        job_id: a stable name for this writer; by default Spark's query id stored in the checkpoint.
        catalog: catalog name, :class:`CatalogConfig` or properties; default: pyiceberg configuration,
            else the embedded SQLite catalog under ``./warehouse``.
        committer: ``"inline"`` commits from the driver after every batch; ``"daemon"`` only stages,
            leaving commits to ``icesink committer run``.
        query_name: Spark query name.
        equality_fields: the key of a change stream: every row replaces the table's row with the same
            key (upsert). Defaults to the table's identifier fields; a new table gets them as identifier fields.
        op_column: CDC: the column holding each row's operation; ``op_values`` maps its values to
            ``insert``/``update``/``delete`` (default ``{"I": "insert", "U": "update", "D": "delete"}``).
        sequence_by: orders the changes of one key within a micro-batch; the last one wins.
        expire_snapshots: with the inline committer, drop snapshots past the table's ``history.expire.*``
            retention in every commit (as ``icesink committer run --expire-snapshots`` does).
        maintain: with the inline committer, run the table's due maintenance (equality deletes left in
            the table become position deletes, small files are compacted) after commits, as
            ``icesink committer run --maintain`` does; the next micro-batch waits at most
            ``icesink.maintain.max-seconds`` plus one compaction group.
        evolve_schema: let the stream change the table's schema where the DataFrame no longer fits it and
            the change loses nothing: DataFrame columns the table lacks are added as optional columns, a
            wider type widens the column (int to long, float to double, a decimal's precision), a required
            column that receives nulls becomes optional. Each change is a metadata commit of its own, made
            before the checkpoint that needs it. Without it, each of these stops the stream with the column
            named. Renames, drops and narrowing are never made.
        writer: who writes the Parquet files. ``"auto"`` (default): Spark's own Parquet writer where it can
            do all the table asks (appends to an unpartitioned table on a file system path), icesink's Arrow
            writer elsewhere; ``"spark"``: Spark's writer or an error saying why not; ``"arrow"``: always
            icesink's Arrow writer (partition transforms, object stores, change streams, per-row checks).

    Returns:
        The running ``StreamingQuery``.
    """
    from pyspark.sql import DataFrame as SparkDataFrame

    from icesink import paths
    from icesink.catalog.loader import open_catalog
    from icesink.committer.ledger import Ledger
    from icesink.errors import SchemaMismatchError
    from icesink.iceberg.describe import writer_spec
    from icesink.iceberg.schemas import AddColumn
    from icesink.sink.batch import BatchWriter, SinkSettings
    from icesink.sink.changes import (
        change_spec,
        check_key_columns,
        dataframe_key_names,
        extra_columns,
        resolve_equality_fields,
    )
    from icesink.sink.evolution import known_field_ids
    from icesink.sink.schema import plan_schema, schema_refusal
    from icesink.sink.spark_writer import spark_writer_refusal
    from icesink.sink.tables import resolve_table, table_exists

    if not isinstance(df, SparkDataFrame):
        raise NotStreamingError(f"table {table}: icesink.stream needs a Spark DataFrame, got {type(df).__name__}")
    if not df.isStreaming:
        raise NotStreamingError(
            f"table {table}: the DataFrame is not streaming; build it with spark.readStream "
            "(for a one-off load, use readStream with trigger={'availableNow': True})"
        )
    if writer not in WRITERS:
        raise ConfigError(f"table {table}: writer must be one of {WRITERS}, not {writer!r}")
    if committer not in COMMITTERS:
        raise ConfigError(f"table {table}: committer must be one of {COMMITTERS}, not {committer!r}")
    spark = df.sparkSession
    checkpoint_location = checkpoint_location or spark.conf.get("spark.sql.streaming.checkpointLocation", None)
    if not checkpoint_location:
        raise ConfigError(
            f"table {table}: checkpoint_location is required; exactly-once needs Spark's checkpoint to survive restarts"
        )
    if maintain and committer != "inline":
        raise ConfigError(
            f"table {table}: maintain applies to the inline committer; with committer='daemon' "
            "pass --maintain to icesink committer run"
        )
    if expire_snapshots and committer != "inline":
        raise ConfigError(
            f"table {table}: expire_snapshots applies to the inline committer; with committer='daemon' "
            "pass --expire-snapshots to icesink committer run"
        )
    from icesink.settings import check_environment

    check_environment()
    if not os.environ.get("PYSPARK_PYTHON"):
        log.warning("PYSPARK_PYTHON is not set; executors must run a Python that has icesink and pyarrow installed")

    config = resolve_catalog(catalog)
    catalog_handle = open_catalog(config)
    if equality_fields and not table_exists(catalog_handle, config, table):
        check_key_columns(table, df.schema, equality_fields)  # a new table takes its key from the DataFrame
    non_data = [c for c in (op_column,) if c]
    iceberg_table = resolve_table(
        catalog_handle,
        config,
        table,
        df.schema,
        create_table,
        partition_by,
        equality_fields or (),
        non_data,
        properties={k: str(v) for k, v in (table_properties or {}).items()},
    )
    # Refuse a stream that cannot fit before the query starts.
    known_job = job_id or query_id_of(checkpoint_location)
    known = known_field_ids(Ledger(config), iceberg_table, table, known_job)
    # The key as the table names it now (another tool may have renamed it since), and as the DataFrame does.
    keys = resolve_equality_fields(iceberg_table, table, equality_fields, known, df.schema)
    if (op_column or op_values or sequence_by) and not keys:
        raise ConfigError(
            f"table {table}: op_column, op_values and sequence_by need a key: pass equality_fields, or give the "
            "table identifier fields"
        )
    changes = None
    passthrough: list[str] = []
    if keys:
        check_key_columns(table, df.schema, dataframe_key_names(iceberg_table, table, keys, known))
        changes = change_spec(iceberg_table, table, df.schema, keys, op_column, op_values, sequence_by)
        passthrough = extra_columns(changes, iceberg_table)
    plan = plan_schema(df.schema, iceberg_table.schema(), table, passthrough, known)
    # A column renamed in the table looks new to a stream whose job (Spark's query id, kept in a checkpoint
    # location this process cannot read) is unknown here: the first micro-batch knows it and decides.
    deferred = known_job is None and not paths.parse(checkpoint_location).is_local
    if plan.changes and not evolve_schema and not (deferred and all(isinstance(c, AddColumn) for c in plan.changes)):
        raise SchemaMismatchError(schema_refusal(table, plan.changes[0]))
    spec = writer_spec(iceberg_table, table, job_id or "check", changes)
    if writer == "spark" and plan.projection is not None:
        refusal = spark_writer_refusal(spec, plan.projection.apply(df, iceberg_table.schema()))
        if refusal:
            raise ConfigError(f"table {table}: writer='spark' cannot write this stream: {refusal}")

    settings = SinkSettings(
        table=table,
        catalog=config,
        job_id=job_id,
        inline_commit=committer == "inline",
        expire_snapshots=expire_snapshots,
        changes=changes,
        passthrough=tuple(passthrough),
        writer=writer,
        checkpoint_location=checkpoint_location,
        maintain=maintain,
        evolve_schema=evolve_schema,
    )
    handler = BatchWriter(settings, catalog_handle)
    stream_writer = df.writeStream.foreachBatch(handler).option("checkpointLocation", checkpoint_location)
    if trigger:
        stream_writer = stream_writer.trigger(**trigger)
    if query_name:
        stream_writer = stream_writer.queryName(query_name)
    return stream_writer.start()


def query_id_of(checkpoint_location: str) -> str | None:
    """The id Spark keeps in a local checkpoint location's ``metadata`` file (the default job id)."""
    import json
    from pathlib import Path

    from icesink import paths

    try:
        location = paths.parse(checkpoint_location)
        if not location.is_local:
            return None
        with open(Path(location.path) / "metadata", encoding="utf-8") as f:
            value = json.loads(f.readline()).get("id")
    except (OSError, ValueError, AttributeError):
        return None
    return value if isinstance(value, str) else None
