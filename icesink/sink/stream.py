"""``icesink.stream``: start a Spark streaming query that writes into an Iceberg table."""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from icesink.catalog.config import CatalogConfig, resolve_catalog
from icesink.debezium_events.route import Debezium
from icesink.errors import ConfigError, NotStreamingError
from icesink.sink.options import TABLE_OPTIONS, Committer, StreamOptions, Target, Writer, args_doc

if TYPE_CHECKING:
    from pyiceberg.catalog.sql import SqlCatalog
    from pyiceberg.table import Table
    from pyspark.sql import DataFrame
    from pyspark.sql.streaming.query import StreamingQuery

    from icesink.sink.batch import SinkSettings, TargetSettings
    from icesink.writer.spec import ChangeSpec

log = logging.getLogger("icesink.stream")


def stream(
    df: DataFrame,
    table: str | None = None,
    checkpoint_location: str | None = None,
    *,
    tables: Mapping[str, Target] | Debezium | None = None,
    atomic: bool = True,
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

    The options are those of :class:`~icesink.sink.options.StreamOptions` (described there, once).

    Returns:
        The running ``StreamingQuery``.
    """
    arguments = dict(locals())  # first, while it holds only the arguments
    del arguments["df"]
    if tables is not None:
        return _stream_tables(df, arguments)
    if table is None:
        raise ConfigError("icesink.stream needs table='namespace.table' (or tables={...} for several tables)")
    _check_streaming(df, table)
    arguments["checkpoint_location"] = _checkpoint_location(df, checkpoint_location)
    options = StreamOptions(**arguments)
    from icesink.sink.batch import TargetSettings

    settings, catalog_handle = preflight(df, options)
    return start(df, options, [TargetSettings(settings)], catalog_handle)


def _stream_tables(df: DataFrame, arguments: dict[str, Any]) -> StreamingQuery:
    """One stream into several tables: each target checked as a stream of its own, then one query."""
    from pyspark.sql import DataFrame as SparkDataFrame

    from icesink.sink.batch import TargetSettings

    tables: Mapping[str, Target] | Debezium = arguments.pop("tables")
    named = _named(tables)
    if arguments.pop("table") is not None:
        raise ConfigError(f"icesink.stream takes table= or tables=, not both (tables: {named})")
    given = [name for name in TABLE_OPTIONS if arguments[name] != StreamOptions.default_of(name)]
    if given:
        where = (
            "pass partition_by, table_properties or evolve_schema to icesink.debezium(...)"
            if isinstance(tables, Debezium)
            else "pass it in each icesink.Target(...)"
        )
        raise ConfigError(
            f"tables {named}: {', '.join(given)} belong(s) to one table; {where} (the stream takes "
            "checkpoint_location, trigger, job_id, catalog, committer, query_name, expire_snapshots and atomic)"
        )
    for name in TABLE_OPTIONS:
        del arguments[name]
    if isinstance(tables, Debezium):
        _check_streaming(df, named)
        arguments["checkpoint_location"] = _checkpoint_location(df, arguments["checkpoint_location"])
        return _stream_debezium(df, tables, arguments)
    if not isinstance(tables, Mapping) or not tables:
        raise ConfigError(
            f'tables= needs at least one table ({{"ns.table": icesink.Target(...), ...}}) or icesink.debezium(...), '
            f"not {named}"
        )
    _check_streaming(df, named)
    arguments["checkpoint_location"] = _checkpoint_location(df, arguments["checkpoint_location"])
    targets: list[TargetSettings] = []
    options = None
    catalog_handle = None
    for identifier, target in tables.items():
        if not isinstance(target, Target):
            raise ConfigError(f"table {identifier}: tables= maps each table to an icesink.Target, not {target!r}")
        if target.select is not None and not callable(target.select):
            raise ConfigError(
                f"table {identifier}: Target(select=...) takes a function of the micro-batch DataFrame, e.g. "
                f"lambda df: df.where(...), not {target.select!r}"
            )
        selected = target.select(df) if target.select is not None else df
        if not isinstance(selected, SparkDataFrame):
            raise ConfigError(
                f"table {identifier}: its Target's select returned {type(selected).__name__}, not a DataFrame"
            )
        options = StreamOptions(table=identifier, **arguments, **target.options())
        settings, catalog_handle = preflight(selected, options)
        targets.append(TargetSettings(settings, target.select))
    assert options is not None and catalog_handle is not None
    return start(df, options, targets, catalog_handle)


def _named(tables: object) -> str:
    if isinstance(tables, Debezium):
        return f"{tables.namespace}.* (Debezium)"
    return ", ".join(map(str, tables)) if isinstance(tables, Mapping) else repr(tables)


def _stream_debezium(df: DataFrame, spec: Debezium, arguments: dict[str, Any]) -> StreamingQuery:
    """One stream of Debezium events into one table per source table, found and created as they come."""
    from icesink.catalog.loader import open_catalog
    from icesink.debezium_events.route import INPUT_COLUMNS
    from icesink.settings import check_environment
    from icesink.sink.batch import BatchWriter, SinkSettings
    from icesink.sink.debezium_router import DebeziumRouter

    name = _named(spec)
    missing = [c for c in INPUT_COLUMNS if c not in df.columns]
    if missing:
        raise ConfigError(
            f"tables {name}: the stream has no column {missing[0]!r}; icesink.debezium reads key and value as "
            f"Spark's Kafka source gives them (its columns: {', '.join(df.columns)})"
        )
    options = StreamOptions(table=name, **arguments)
    if not options.checkpoint_location:
        raise ConfigError(f"tables {name}: checkpoint_location is required; exactly-once needs Spark's checkpoint")
    check_environment()
    config = resolve_catalog(options.catalog)
    catalog = open_catalog(config)
    stream_settings = SinkSettings(
        table=name,
        catalog=config,
        job_id=options.job_id,
        inline_commit=options.committer == Committer.INLINE,
        expire_snapshots=options.expire_snapshots,
        checkpoint_location=options.checkpoint_location,
    )
    router = DebeziumRouter(spec, arguments, catalog, config)
    return _start_query(df, options, BatchWriter(stream_settings, router, catalog, atomic=options.atomic))


def _checkpoint_location(df: DataFrame, given: str | None) -> str | None:
    """The location given, or the session's default one."""
    return given or df.sparkSession.conf.get("spark.sql.streaming.checkpointLocation", None)


def _check_streaming(df: DataFrame, table: str) -> None:
    from pyspark.sql import DataFrame as SparkDataFrame

    if not isinstance(df, SparkDataFrame):
        raise NotStreamingError(f"table {table}: icesink.stream needs a Spark DataFrame, got {type(df).__name__}")
    if not df.isStreaming:
        raise NotStreamingError(
            f"table {table}: the DataFrame is not streaming; build it with spark.readStream "
            "(for a one-off load, use readStream with trigger={'availableNow': True})"
        )


def preflight(df: DataFrame, options: StreamOptions) -> tuple[SinkSettings, SqlCatalog]:
    """Everything that can refuse a stream, checked before its query starts: the table (found or
    created), its key, the DataFrame's fit; returns the settings of the stream's micro-batches."""
    from icesink.catalog.loader import open_catalog
    from icesink.settings import check_environment
    from icesink.sink.batch import SinkSettings
    from icesink.sink.tables import resolve_table, table_exists

    table = options.table
    if not options.checkpoint_location:
        raise ConfigError(
            f"table {table}: checkpoint_location is required; exactly-once needs Spark's checkpoint to survive restarts"
        )
    check_environment()
    if not os.environ.get("PYSPARK_PYTHON"):
        log.warning("PYSPARK_PYTHON is not set; executors must run a Python that has icesink and pyarrow installed")
    config = resolve_catalog(options.catalog)
    catalog_handle = open_catalog(config)
    if options.equality_fields and not table_exists(catalog_handle, config, table):
        from icesink.sink.changes import check_key_columns

        check_key_columns(table, df.schema, options.equality_fields)  # a new table takes its key from the DataFrame
    iceberg_table = resolve_table(
        catalog_handle,
        config,
        table,
        df.schema,
        options.create_table,
        options.partition_by,
        options.equality_fields or (),
        [c for c in (options.op_column,) if c],
        properties={k: str(v) for k, v in (options.table_properties or {}).items()},
    )
    changes, passthrough = _plan_changes(df, options, iceberg_table, config)
    settings = SinkSettings(
        table=table,
        catalog=config,
        job_id=options.job_id,
        inline_commit=options.committer == Committer.INLINE,
        expire_snapshots=options.expire_snapshots,
        changes=changes,
        passthrough=tuple(passthrough),
        writer=options.writer,
        checkpoint_location=options.checkpoint_location,
        maintain=options.maintain,
        evolve_schema=options.evolve_schema,
    )
    return settings, catalog_handle


def _plan_changes(
    df: DataFrame, options: StreamOptions, iceberg_table: Table, config: CatalogConfig
) -> tuple[ChangeSpec | None, list[str]]:
    """The stream's key and change columns as the table names them now, and the DataFrame's fit to the
    table's schema: refused here, before the query starts, where it cannot fit."""
    from icesink import paths
    from icesink.committer.ledger import Ledger
    from icesink.errors import SchemaMismatchError
    from icesink.iceberg.describe import writer_spec
    from icesink.iceberg.schemas import AddColumn
    from icesink.sink.changes import (
        change_spec,
        check_key_columns,
        dataframe_key_names,
        extra_columns,
        resolve_equality_fields,
    )
    from icesink.sink.evolution import known_field_ids
    from icesink.sink.projection import plan_schema, schema_refusal
    from icesink.sink.spark_writer import spark_writer_refusal

    table, checkpoint_location = options.table, options.checkpoint_location
    assert checkpoint_location is not None
    known_job = options.job_id or query_id_of(checkpoint_location)
    known = known_field_ids(Ledger(config), iceberg_table, table, known_job)
    # The key as the table names it now (another tool may have renamed it since), and as the DataFrame does.
    keys = resolve_equality_fields(iceberg_table, table, options.equality_fields, known, df.schema)
    if (options.op_column or options.op_values or options.sequence_by) and not keys:
        raise ConfigError(
            f"table {table}: op_column, op_values and sequence_by need a key: pass equality_fields, or give the "
            "table identifier fields"
        )
    changes = None
    passthrough: list[str] = []
    if keys:
        check_key_columns(table, df.schema, dataframe_key_names(iceberg_table, table, keys, known))
        changes = change_spec(
            iceberg_table, table, df.schema, keys, options.op_column, options.op_values, options.sequence_by
        )
        passthrough = extra_columns(changes, iceberg_table)
    plan = plan_schema(df.schema, iceberg_table.schema(), table, passthrough, known)
    # A column renamed in the table looks new to a stream whose job (Spark's query id, kept in a checkpoint
    # location this process cannot read) is unknown here: the first micro-batch knows it and decides.
    deferred = known_job is None and not paths.parse(checkpoint_location).is_local
    only_additions = all(isinstance(c, AddColumn) for c in plan.changes)
    if plan.changes and not options.evolve_schema and not (deferred and only_additions):
        raise SchemaMismatchError(schema_refusal(table, plan.changes[0]))
    if options.writer == Writer.SPARK and plan.projection is not None:
        spec = writer_spec(iceberg_table, table, options.job_id or "check", changes)
        refusal = spark_writer_refusal(spec, plan.projection.apply(df, iceberg_table.schema()))
        if refusal:
            raise ConfigError(f"table {table}: writer='spark' cannot write this stream: {refusal}")
    return changes, passthrough


def start(
    df: DataFrame, options: StreamOptions, targets: Sequence[TargetSettings], catalog: SqlCatalog
) -> StreamingQuery:
    """The streaming query, writing every micro-batch through icesink into its tables."""
    from icesink.sink.batch import BatchWriter, StaticRouter

    atomic = options.atomic and len(targets) > 1
    return _start_query(df, options, BatchWriter(targets[0].settings, StaticRouter(targets), catalog, atomic))


def _start_query(df: DataFrame, options: StreamOptions, handler: Any) -> StreamingQuery:
    stream_writer = df.writeStream.foreachBatch(handler).option("checkpointLocation", options.checkpoint_location)
    if options.trigger:
        stream_writer = stream_writer.trigger(**options.trigger)
    if options.query_name:
        stream_writer = stream_writer.queryName(options.query_name)
    return stream_writer.start()


stream.__doc__ = (stream.__doc__ or "").replace(
    "    The options are those of :class:`~icesink.sink.options.StreamOptions` (described there, once).\n",
    args_doc() + "\n",
)


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
