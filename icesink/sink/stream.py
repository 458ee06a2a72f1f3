"""``icesink.stream``: start a Spark streaming query that writes into an Iceberg table."""

from __future__ import annotations

import datetime
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from pyspark.sql import DataFrame as SparkDataFrame

from icesink.catalog.config import CatalogConfig, resolve_catalog
from icesink.catalog.ledger import Ledger
from icesink.catalog.loader import open_catalog
from icesink.debezium_events.decode_task import INPUT_COLUMNS
from icesink.debezium_events.stream_spec import Debezium
from icesink.errors import ConfigError, IcesinkError, NotStreamingError
from icesink.iceberg.pending_tables import PendingAwareCatalog
from icesink.settings import check_environment
from icesink.sink.batch import MicroBatchHandler
from icesink.sink.checkpoint_location import checkpoint_location, clear_unfinished_first_offset
from icesink.sink.checkpoint_targets import (
    Targets,
    recording_targets,
    refuse_other_targets,
    table_identities,
)
from icesink.sink.dead_letter import check_dead_letter, dead_letter_settings, sets_late_rows_aside
from icesink.sink.debezium_router import DebeziumRouter
from icesink.sink.options import Committer, StreamOptions, StreamWideOptions, Target, args_doc
from icesink.sink.preflight import check_stream_environment, preflight
from icesink.sink.routing import StaticRouter, TargetSettings
from icesink.sink.sink_settings import SinkSettings
from icesink.sink.tables import table_exists
from icesink.table_options import TableOptions, refuse_wrong_types

if TYPE_CHECKING:
    from pyiceberg.catalog.sql import SqlCatalog
    from pyspark.sql import DataFrame
    from pyspark.sql.streaming.query import StreamingQuery

    from icesink.sink.routing import TargetSettings

log = logging.getLogger("icesink.stream")


def stream(  # Over 60 lines: one keyword argument per option, spelled out as users call it.
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
    event_time: str | None = None,
    lateness: str | datetime.timedelta | None = None,
    watermark_from: str | None = None,
    late: str = "write",
    dead_letter: str | None = None,
    branch: str | None = None,
    split_by: Sequence[str] | None = None,
    idle_timeout: str | datetime.timedelta = "5 minutes",
    on_partition_done: Callable[[dict[str, object]], None] | None = None,
    audit: Sequence[Callable[..., list[str]]] = (),
    publish: str | datetime.timedelta | None = None,
    on_audit_failure: str = "continue",
) -> StreamingQuery:
    """Start writing a streaming DataFrame into an Iceberg table, exactly once per micro-batch.

    The options are those of :class:`~icesink.sink.options.StreamOptions` (described there, once).

    Returns:
        The running ``StreamingQuery``.
    """
    per_table = TableOptions(
        create_table=create_table,
        partition_by=partition_by,
        table_properties=table_properties,
        equality_fields=equality_fields,
        op_column=op_column,
        op_values=op_values,
        sequence_by=sequence_by,
        writer=writer,  # type: ignore[arg-type]  # a string: StreamOptions makes it a Writer, or refuses it
        maintain=maintain,
        evolve_schema=evolve_schema,
        event_time=event_time,
        lateness=lateness,
        watermark_from=watermark_from,
        late=late,  # type: ignore[arg-type]  # a string: StreamOptions makes it a Late, or refuses it
        branch=branch,
        audit=audit,
    )
    own = StreamWideOptions(
        checkpoint_location=checkpoint_location,
        trigger=trigger,
        job_id=job_id,
        catalog=catalog,
        committer=committer,  # type: ignore[arg-type]  # a string: StreamOptions makes it a Committer
        query_name=query_name,
        expire_snapshots=expire_snapshots,
        atomic=atomic,
        split_by=split_by,
        idle_timeout=idle_timeout,
        dead_letter=dead_letter,
        on_partition_done=on_partition_done,
        publish=publish,
        on_audit_failure=on_audit_failure,
    )
    return _stream(df, table, tables, own, per_table)


def _stream(
    df: DataFrame,
    table: str | None,
    tables: Mapping[str, Target] | Debezium | None,
    own: StreamWideOptions,
    per_table: TableOptions,
) -> StreamingQuery:
    if tables is not None:
        if table is not None:
            raise ConfigError(f"icesink.stream takes table= or tables=, not both (tables: {_named(tables)})")
        return _stream_tables(df, tables, own, per_table)
    if table is None:
        raise ConfigError("icesink.stream needs table='namespace.table' (or tables={...} for several tables)")
    if not isinstance(table, str):
        raise ConfigError(f"icesink.stream: table takes a table name 'namespace.table', not {table!r}")
    try:
        refuse_wrong_types(own, f"table {table}")  # before its query name or location is used
        _refuse_split_by_alone(own, [per_table], f"table {table}")
    except ConfigError as e:
        e.located(table)
        raise
    _check_streaming(df, table)
    location = checkpoint_location(df, own.checkpoint_location, own.query_name, table)
    dead_letter: tuple[SinkSettings, bool] | None = None
    try:
        options = own.joined(table, per_table, checkpoint_location=location)
        config = resolve_catalog(options.catalog)
        refuse_other_targets(df, location, Targets({table: None}, catalog=config.describe()), config)
        check_dead_letter(own.dead_letter, [options], f"table {table}")
        # Before the table: a dead-letter table that cannot take late rows refuses the stream before it creates any.
        dead_letter = dead_letter_settings(df, options) if sets_late_rows_aside([options]) else None
        settings, catalog_handle = preflight(df, options)
    except IcesinkError as e:
        if dead_letter is not None and dead_letter[1]:
            _drop_created(dead_letter[0].catalog, [dead_letter[0].table])
        e.located(table)
        raise
    return start(df, options, [TargetSettings(settings)], catalog_handle, dead_letter[0] if dead_letter else None)


def _stream_tables(
    df: DataFrame, tables: Mapping[str, Target] | Debezium, own: StreamWideOptions, per_table: TableOptions
) -> StreamingQuery:
    """One stream into several tables: each target checked as a stream of its own, then one query."""

    named = _named(tables)
    refuse_wrong_types(own, f"tables {named}")  # before its query name or location is used
    given = per_table.given()
    if given:
        where = (
            "pass partition_by, table_properties, evolve_schema or maintain to icesink.debezium(...); its tables "
            "are written by the Arrow writer (they are keyed)"
            if isinstance(tables, Debezium)
            else "pass it in each icesink.Target(...)"
        )
        raise ConfigError(
            f"tables {named}: {', '.join(given)} belong(s) to one table; {where} (the stream takes "
            f"{', '.join(StreamWideOptions.names())})"
        )
    if isinstance(tables, Debezium):
        return _stream_debezium_checked(df, tables, own, named)
    if not isinstance(tables, Mapping) or not tables:
        raise ConfigError(
            f'tables= needs at least one table ({{"ns.table": icesink.Target(...), ...}}) or icesink.debezium(...), '
            f"not {named}"
        )
    _refuse_split_by_alone(own, [t for t in tables.values() if isinstance(t, TableOptions)], f"tables {named}")
    _check_streaming(df, named)
    location = checkpoint_location(df, own.checkpoint_location, own.query_name, ",".join(sorted(tables)))
    own = replace(own, checkpoint_location=location)
    # Every target's options are checked before any table is created: a mistake in the last one's options leaves
    # no pending table of the first one behind.
    planned = [_target_options(df, identifier, target, own) for identifier, target in tables.items()]
    check_dead_letter(own.dead_letter, [options for options, _, _ in planned], f"tables {named}")
    check_environment()
    config = resolve_catalog(own.catalog)
    refuse_other_targets(df, location, Targets(dict.fromkeys(tables), catalog=config.describe()), config)
    # Without a location the first preflight refuses the stream before it creates anything.
    existing = (
        _existing_tables(config, [options.table for options, _, _ in planned]) if own.checkpoint_location else set()
    )
    stream_options = planned[-1][0]
    # Before the tables: a dead-letter table that cannot take late rows refuses the stream before it creates any.
    late = sets_late_rows_aside([options for options, _, _ in planned])
    dead_letter = dead_letter_settings(df, stream_options) if late and own.checkpoint_location else None
    created = [dead_letter[0].table] if dead_letter is not None and dead_letter[1] else []
    targets: list[TargetSettings] = []
    catalog_handle = None
    for options, selected, target in planned:
        try:
            settings, catalog_handle = preflight(selected, options, deferred=True)
        except IcesinkError as e:
            # The tables this start created for the targets before it go again: they hold no rows yet. (The refused
            # target's own stays pending, so that starting again with other options creates it anew.)
            _drop_created(config, created + [t.settings.table for t in targets if t.settings.table not in existing])
            e.located(options.table)
            raise
        targets.append(TargetSettings(settings, target.select))
    assert catalog_handle is not None
    return start(df, stream_options, targets, catalog_handle, dead_letter[0] if dead_letter else None)


def _stream_debezium_checked(df: DataFrame, tables: Debezium, own: StreamWideOptions, named: str) -> StreamingQuery:
    """A Debezium stream, once the options it cannot take are refused."""
    if own.dead_letter is not None:
        raise ConfigError(
            f"tables {named}: a Debezium stream names its dead-letter table in icesink.debezium(dead_letter=...); "
            "its late changes are applied like the others, since setting one aside would leave its row at an "
            "older state"
        )
    if own.split_by is not None:
        raise ConfigError(
            f"tables {named}: a Debezium stream's splits are its Kafka topics and partitions; leave split_by out"
        )
    _refuse_split_by_alone(own, [tables.table_options], f"tables {named}")
    _check_streaming(df, named)
    location = checkpoint_location(df, own.checkpoint_location, own.query_name, f"debezium-{tables.namespace}")
    config = resolve_catalog(own.catalog)
    refuse_other_targets(df, location, Targets({}, tables.namespace, catalog=config.describe()), config)
    return _stream_debezium(df, tables, replace(own, checkpoint_location=location))


def _refuse_split_by_alone(own: StreamWideOptions, per_table: Sequence[TableOptions], where: str) -> None:
    """split_by and idle_timeout say how a watermark is kept: given without any event_time, they would do nothing."""
    timed = any(options.event_time is not None or options.watermark_from is not None for options in per_table)
    given = [name for name in ("split_by", "on_partition_done") if getattr(own, name) is not None]
    if own.idle_timeout != StreamWideOptions.idle_timeout:
        given.append("idle_timeout")
    if given and not timed:
        hint = "name the event-time column with event_time (in each icesink.Target that has one, or in "
        hint += "icesink.debezium(event_time='source.ts_ms'))"
        verb = "apply" if len(given) > 1 else "applies"
        raise ConfigError(f"{where}: {' and '.join(given)} {verb} to a stream with event_time; {hint}")


def _existing_tables(config: CatalogConfig, identifiers: list[str]) -> set[str]:
    """The tables among these that exist (or are pending) before the stream starts."""
    catalog = open_catalog(config, pending_tables=True)
    return {identifier for identifier in identifiers if table_exists(catalog, config, identifier)}


def _drop_created(config: CatalogConfig, identifiers: list[str]) -> None:
    """Pending tables this start created, given up again; one some stream staged a checkpoint for meanwhile (another
    stream created the same table at the same moment) is left alone."""
    catalog = open_catalog(config, pending_tables=True)
    assert isinstance(catalog, PendingAwareCatalog)
    ledger = Ledger(config)
    for identifier in identifiers:
        if ledger.for_table(identifier):
            continue
        try:
            catalog.drop_pending_table(identifier)
        except Exception as e:  # the refusal is what the user needs to see; this only tidies up
            log.warning(
                "table %s: the pending table this stream created is left (%s); `icesink tables drop-pending` "
                "removes it",
                identifier,
                e,
            )


def _target_options(
    df: DataFrame, identifier: str, target: object, own: StreamWideOptions
) -> tuple[StreamOptions, DataFrame, Target]:
    """One target's options and DataFrame, checked: what its preflight takes."""

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
    try:
        return own.joined(identifier, target.table_options()), selected, target
    except IcesinkError as e:
        e.located(identifier)
        raise


def _named(tables: object) -> str:
    if isinstance(tables, Debezium):
        return f"{tables.namespace}.* (Debezium)"
    return ", ".join(map(str, tables)) if isinstance(tables, Mapping) else repr(tables)


def _stream_debezium(df: DataFrame, spec: Debezium, own: StreamWideOptions) -> StreamingQuery:
    """One stream of Debezium events into one table per source table, found and created as they come."""

    name = _named(spec)
    missing = [c for c in INPUT_COLUMNS if c not in df.columns]
    if missing:
        raise ConfigError(
            f"tables {name}: the stream has no column {missing[0]!r}; icesink.debezium reads key and value as "
            f"Spark's Kafka source gives them (its columns: {', '.join(df.columns)})"
        )
    try:
        given = spec.table_options
        options = own.joined(name, TableOptions(branch=given.branch, audit=given.audit))
    except ConfigError as e:
        e.table = None  # the stream's name, not a table: its tables are found as events come
        raise
    if spec.table_options.maintain and options.committer != Committer.INLINE:
        raise ConfigError(
            f"tables {name}: icesink.debezium(maintain=True) applies to the inline committer; with "
            "committer='daemon' pass --maintain to icesink committer run"
        )
    if not options.checkpoint_location:
        raise ConfigError(f"tables {name}: checkpoint_location is required; exactly-once needs Spark's checkpoint")
    check_stream_environment()
    config = resolve_catalog(options.catalog)
    catalog = open_catalog(config, pending_tables=True)
    stream_settings = SinkSettings.of(options, config)
    router = DebeziumRouter(spec, own, catalog, config)
    handler = MicroBatchHandler(stream_settings, router, catalog, atomic=options.atomic)
    return _start_query(df, options, handler, Targets({}, spec.namespace, catalog=config.describe()))


def _check_streaming(df: DataFrame, table: str) -> None:
    if not isinstance(df, SparkDataFrame):
        raise NotStreamingError(f"table {table}: icesink.stream needs a Spark DataFrame, got {type(df).__name__}")
    if not df.isStreaming:
        raise NotStreamingError(
            f"table {table}: the DataFrame is not streaming; build it with spark.readStream "
            "(for a one-off load, use readStream with trigger={'availableNow': True})"
        )


def start(
    df: DataFrame,
    options: StreamOptions,
    targets: Sequence[TargetSettings],
    catalog: SqlCatalog,
    dead_letter: SinkSettings | None = None,
) -> StreamingQuery:
    """The streaming query, writing every micro-batch through icesink into its tables (and its late rows into
    ``dead_letter``)."""

    # A table's rows on time and its late rows are committed together, or neither.
    atomic = options.atomic and (len(targets) > 1 or dead_letter is not None)
    router = StaticRouter(targets, read_twice=dead_letter is not None)
    handler = MicroBatchHandler(targets[0].settings, router, catalog, atomic, dead_letter)
    names = [t.settings.table for t in targets]
    return _start_query(
        df,
        options,
        handler,
        Targets.of(table_identities(targets[0].settings.catalog, names, catalog), targets[0].settings.catalog),
    )


def _start_query(df: DataFrame, options: StreamOptions, handler: Any, targets: Targets) -> StreamingQuery:
    clear_unfinished_first_offset(options.checkpoint_location)
    handler = recording_targets(handler, df, options.checkpoint_location, targets)  # see ``checkpoint_targets``
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
