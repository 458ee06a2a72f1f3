"""Everything that can refuse a stream into one table, checked before anything is written: the table
(found or created), its key, and the DataFrame's fit; the result is the settings of its micro-batches."""

from __future__ import annotations

import json
import logging
import os
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from icesink import paths
from icesink.catalog.config import CatalogConfig, resolve_catalog
from icesink.catalog.ledger import Ledger
from icesink.catalog.loader import open_catalog
from icesink.errors import ConfigError, SchemaMismatchError
from icesink.iceberg.describe import writer_spec
from icesink.iceberg.pending_tables import PendingTable
from icesink.iceberg.schemas import AddColumn
from icesink.properties import unknown_property
from icesink.settings import check_environment
from icesink.sink.change_stream import (
    change_spec,
    check_key_columns,
    dataframe_key_names,
    extra_columns,
    resolve_equality_fields,
)
from icesink.sink.event_time import EventTimeSettings, resolve_event_time
from icesink.sink.evolution import known_field_ids
from icesink.sink.options import StreamOptions
from icesink.sink.pending_options import pending_note
from icesink.sink.projection import plan_schema, schema_refusal
from icesink.sink.sink_settings import SinkSettings
from icesink.sink.spark_writer import spark_writer_refusal
from icesink.sink.tables import resolve_table, table_exists
from icesink.table_options import Late, Writer

if TYPE_CHECKING:
    from pyiceberg.catalog.sql import SqlCatalog
    from pyiceberg.table import Table
    from pyspark.sql import DataFrame
    from pyspark.sql.types import StructType

    from icesink.sink.projection import Projection
    from icesink.sink.sink_settings import SinkSettings
    from icesink.writer.spec import ChangeSpec

log = logging.getLogger("icesink.stream")


def preflight(df: DataFrame, options: StreamOptions, deferred: bool = False) -> tuple[SinkSettings, SqlCatalog]:
    """Everything that can refuse a stream, checked before its query starts: the table (found or
    created), its key, the DataFrame's fit; returns the settings of the stream's micro-batches.

    A table created ``deferred`` enters the catalog with its first commit (a stream into several tables)."""

    table = options.table
    if not options.checkpoint_location:
        raise ConfigError(
            f"table {table}: checkpoint_location is required; exactly-once needs Spark's checkpoint to survive restarts"
        )
    check_stream_environment()
    config = resolve_catalog(options.catalog)
    catalog_handle = open_catalog(config, pending_tables=True)
    if options.equality_fields and not table_exists(catalog_handle, config, table):
        check_key_columns(table, df.schema, options.equality_fields)  # a new table takes its key from the DataFrame
    event_time = resolve_event_time(options, df.schema)  # before the table: a refusal here creates none
    upstream = event_time.watermark_column if event_time is not None else None
    iceberg_table = resolve_table(
        catalog_handle,
        config,
        table,
        df.schema,
        options.create_table,
        options.partition_by,
        options.equality_fields or (),
        # Not row data: a change stream's operation, and the upstream watermark the stream follows.
        [c for c in (options.op_column, upstream) if c],
        properties={k: str(v) for k, v in (options.table_properties or {}).items()},
        deferred=deferred,
    )
    return _fitted(df.schema, options, iceberg_table, config, event_time, df), catalog_handle


def check_stream_environment() -> None:
    """The environment a stream starts in: unknown ``ICESINK_*`` settings refused, a missing worker Python said."""
    check_environment()
    if not os.environ.get("PYSPARK_PYTHON"):
        log.warning("PYSPARK_PYTHON is not set; executors must run a Python that has icesink and pyarrow installed")


def table_settings(
    schema: StructType, options: StreamOptions, iceberg_table: Table, config: CatalogConfig
) -> SinkSettings:
    """The settings of rows of ``schema`` written into ``iceberg_table``, a table the caller has just found or
    created itself (a router meeting a table): preflight's checks of the key and of the rows' fit, on that table.

    The table is not looked up again: a table dropped in between (a pending one, by an operator) must not be
    created anew here, published and empty. Rows known by their schema alone are written by the Arrow writer,
    which is the one this checks them against."""

    if options.writer == Writer.SPARK:
        raise ValueError(f"table {options.table}: the Spark writer is checked against the DataFrame, by preflight")
    return _fitted(schema, options, iceberg_table, config, resolve_event_time(options, schema), None)


def _fitted(
    schema: StructType,
    options: StreamOptions,
    iceberg_table: Table,
    config: CatalogConfig,
    event_time: EventTimeSettings | None,
    df: DataFrame | None,
) -> SinkSettings:
    """The settings of a stream whose table is found; a refusal concerning a pending table also says how its
    options can still change. ``df``: the rows, where Spark's writer may be planned for them."""

    _warn_unknown_properties(iceberg_table, options.table)
    try:
        changes, passthrough = _plan_changes(schema, options, iceberg_table, config, event_time, df)
    except (ConfigError, SchemaMismatchError) as e:
        if not isinstance(iceberg_table, PendingTable):
            raise
        raise type(e)(f"{e}. {pending_note(options.table)}") from e
    return SinkSettings.of(options, config, changes=changes, passthrough=tuple(passthrough), event_time=event_time)


def _warn_unknown_properties(iceberg_table: Table, table: str) -> None:
    """``icesink.*`` properties of the table that icesink does not read, set by another tool: warned about, not
    refused, since the stream may write a table whose properties are not its own to change."""

    for name in sorted(iceberg_table.properties):
        unknown = unknown_property(name)
        if unknown is not None:
            log.warning(
                "table %s: its properties hold %s; icesink does not read it, so what it was meant to set is not "
                "applied. Correct it where it was set (ALTER TABLE ... SET TBLPROPERTIES / UNSET TBLPROPERTIES, or "
                "pyiceberg's set_properties / remove_properties)",
                table,
                unknown,
            )


def _plan_changes(
    schema: StructType,
    options: StreamOptions,
    iceberg_table: Table,
    config: CatalogConfig,
    event_time: EventTimeSettings | None,
    df: DataFrame | None,
) -> tuple[ChangeSpec | None, list[str]]:
    """The stream's key and change columns as the table names them now, and the DataFrame's fit to the table's
    schema (its event-time columns read, not written, where the table lacks them): refused here, before the query
    starts, where it cannot fit."""

    table, checkpoint_location = options.table, options.checkpoint_location
    assert checkpoint_location is not None
    known_job = options.job_id or query_id_of(checkpoint_location)
    known = known_field_ids(Ledger(config), iceberg_table, table, known_job)
    # The key as the table names it now (another tool may have renamed it since), and as the DataFrame does.
    keys = resolve_equality_fields(iceberg_table, table, options.equality_fields, known, schema)
    if (options.op_column or options.op_values or options.sequence_by) and not keys:
        raise ConfigError(
            f"table {table}: op_column, op_values and sequence_by need a key: pass equality_fields, or give the "
            "table identifier fields"
        )
    changes = None
    passthrough: list[str] = []
    if keys:
        check_key_columns(table, schema, dataframe_key_names(iceberg_table, table, keys, known))
        changes = change_spec(
            iceberg_table, table, schema, keys, options.op_column, options.op_values, options.sequence_by
        )
        passthrough = extra_columns(changes, iceberg_table)
    if changes is not None and options.late == Late.DEAD_LETTER:  # a key the table's identifier fields give
        raise ConfigError(
            f"table {table}: late='dead_letter' applies to appends, and the table has identifier fields "
            f"({', '.join(keys or ())}), so the stream applies changes; a late change is applied like the others, "
            "since setting one change of a key aside would leave its row at an older state. Leave late out"
        )
    plan = plan_schema(schema, iceberg_table.schema(), table, passthrough, known)
    if event_time is not None and not options.evolve_schema:
        # An event-time or split column the table has no field for (by the stream's field ids, then by name, as
        # every column is matched) is read by the tasks and not written (with evolve_schema it is added, as any
        # new column is).
        added = {c.name for c in plan.changes if isinstance(c, AddColumn) and not c.parent}
        read_only = [c for c in event_time.columns if c in added and c not in passthrough]
        if read_only:
            passthrough += read_only
            plan = plan_schema(schema, iceberg_table.schema(), table, passthrough, known)
    # A column renamed in the table looks new to a stream whose job (Spark's query id, kept in a checkpoint
    # location this process cannot read) is unknown here: the first micro-batch knows it and decides.
    deferred = known_job is None and not paths.parse(checkpoint_location).is_local
    only_additions = all(isinstance(c, AddColumn) for c in plan.changes)
    if plan.changes and not options.evolve_schema and not (deferred and only_additions):
        raise SchemaMismatchError(schema_refusal(table, plan.changes[0]))
    if options.writer == Writer.SPARK and plan.projection is not None:
        assert df is not None, "the Spark writer is planned for a DataFrame"
        _check_spark_writer(df, options, iceberg_table, changes, event_time, plan.projection)
    return changes, passthrough


def _check_spark_writer(
    df: DataFrame,
    options: StreamOptions,
    iceberg_table: Table,
    changes: ChangeSpec | None,
    event_time: EventTimeSettings | None,
    projection: Projection,
) -> None:
    """``writer='spark'`` refused where Spark's Parquet writer cannot write the stream's rows as the table needs."""
    table = options.table
    spec = writer_spec(iceberg_table, table, options.job_id or "check", changes)
    if event_time is not None:
        spec = replace(spec, event_time=event_time.spec(projection, None))
    refusal = spark_writer_refusal(spec, projection.apply(df, iceberg_table.schema()))
    if refusal:
        raise ConfigError(f"table {table}: writer='spark' cannot write this stream: {refusal}")


def query_id_of(checkpoint_location: str) -> str | None:
    """The id Spark keeps in a local checkpoint location's ``metadata`` file (the default job id)."""

    try:
        location = paths.parse(checkpoint_location)
        if not location.is_local:
            return None
        with open(Path(location.path) / "metadata", encoding="utf-8") as f:
            value = json.loads(f.readline()).get("id")
    except (OSError, ValueError, AttributeError):
        return None
    return value if isinstance(value, str) else None
