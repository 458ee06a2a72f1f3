"""The router of a Debezium stream: every micro-batch decoded once, its tables found, created and checked on
first sight, and all of them written by one Spark job."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from pyspark.sql import functions as F
from pyspark.sql import types as T

from icesink.catalog.database import database_errors
from icesink.catalog.loader import load_table
from icesink.completeness.durations import duration_micros
from icesink.debezium_events.route import (
    OP_COLUMN,
    POSITION_COLUMN,
    RoutedTable,
    decode_records,
    route,
    summarize,
)
from icesink.debezium_events.sources import SourceTable
from icesink.debezium_events.stream_spec import Debezium
from icesink.errors import SchemaMismatchError, TableNotFoundError
from icesink.properties import SOURCE_PROPERTY
from icesink.results import decode_write_result
from icesink.sink.debezium_jobs import (
    distributed,
    general_target,
    one_job_target,
    spread_tables,
    write_task,
    write_task_tables,
)
from icesink.sink.debezium_refusals import explainer, key_changed, keyed_dead_letter, taken
from icesink.sink.event_time import EventTimeSettings
from icesink.sink.known_routes import KnownRoutes, KnownTable, collected, numbered_routes, task_tables_at
from icesink.sink.mapping_watch import MappingWatch
from icesink.sink.options import StreamWideOptions
from icesink.sink.phases import Phases
from icesink.sink.preflight import table_settings
from icesink.sink.routing import Routed, RoutedTarget
from icesink.sink.table_sink import PreparedWrite
from icesink.sink.tables import resolve_table
from icesink.spark_types import spark_type_of
from icesink.table_options import Writer
from icesink.writer.json_tables import (
    EVENT_TIME_COLUMN,
    OUTPUT_DDL,
    SPLIT_COLUMNS,
    JsonTable,
    result_rows,
)

if TYPE_CHECKING:
    from pyiceberg.table import Table
    from pyspark.sql import DataFrame
    from pyspark.sql.types import StructType

    from icesink.catalog.config import CatalogConfig
    from icesink.iceberg.pending_tables import PendingAwareCatalog
    from icesink.results import WriteResult
    from icesink.sink.sink_settings import SinkSettings

log = logging.getLogger("icesink.debezium_events.route")

# Debezium's operations, decoded: c, r and u are upserts of ``after``, d deletes the key.
OP_VALUES = {"U": "update", "D": "delete"}


class DebeziumRouter:
    """Routes each micro-batch of Debezium events to its tables (see :mod:`icesink.debezium_events.route`)."""

    def __init__(
        self, spec: Debezium, stream_options: StreamWideOptions, catalog: PendingAwareCatalog, config: CatalogConfig
    ) -> None:
        self._spec = spec
        self._options = stream_options  # the stream's own options: job, catalog, committer, checkpoint location
        self._catalog = catalog
        self._config = config
        self._settings: dict[str, SinkSettings] = {}
        self._keys: dict[str, tuple[str, ...]] = {}  # each table's key, as its events first gave it
        self._owners: dict[str, SourceTable] = {}  # each table's source table, as the table records it
        self._mapped = MappingWatch(spec, config)
        self._routes = KnownRoutes()  # what lets a micro-batch be written in one job
        if spec.dead_letter is not None:
            # At start, not at the first rejected record, which may come weeks later.
            self._check_dead_letter_table(spec.dead_letter)

    def _check_dead_letter_table(self, identifier: str) -> None:
        try:
            table = load_table(self._catalog, self._config, identifier, own=True)
        except TableNotFoundError:
            return  # created at the first record that cannot be applied
        keys = tuple(sorted(table.schema().identifier_field_names()))
        if keys:
            raise keyed_dead_letter(identifier, keys, "The stream did not start")

    def route(self, batch_df: DataFrame, job_id: str, checkpoint_id: int) -> Routed:
        known = self._routes.ready() if self._spec.table_options.event_time is None else None
        if known is not None:
            routed = self._route_in_one_job(batch_df, job_id, checkpoint_id, known)
            if routed is not None:
                return routed
            self._routes.missed()
        return self._route_generally(batch_df, job_id)

    def _route_generally(self, batch_df: DataFrame, job_id: str) -> Routed:
        """Decoded and kept, summarized (which tables, keys and schemas), then written by a second job."""
        parsed = decode_records(self._spec, batch_df).persist()
        try:
            summary = summarize(parsed)
            tables = route(self._spec, summary, self._known, lambda source: _inferred(parsed, source))
            for table in tables:
                self._check_owner(table)
            self._mapped.seen(job_id, tables)
            targets = [
                RoutedTarget(self._explained_settings_of(t), t.schema, optional=t.dead_letter, explain=explainer(t))
                for t in tables
            ]
        except BaseException:
            parsed.unpersist()
            raise

        def write_all(prepared: Sequence[PreparedWrite], phases: Phases) -> list[list[WriteResult]]:
            task_tables = write_task_tables(tables, prepared)
            results = self._write(parsed, tables, task_tables, summary.rejected, phases)
            self._routes.learned(summary, tables, task_tables, prepared)
            return results

        return Routed(
            targets,
            parsed.unpersist,
            write_all,
            refitted=self._routes.refitted,
            recreate=lambda identifier: self._recreated(identifier, batch_df, job_id),
        )

    def _route_in_one_job(
        self, batch_df: DataFrame, job_id: str, checkpoint_id: int, known: list[KnownTable]
    ) -> Routed | None:
        """Decoded, distributed and written by one job with the tables the stream knows (see
        :mod:`icesink.sink.known_routes`); None when the micro-batch cannot be written so."""
        tables = [k.table for k in known]
        spread = spread_tables(tables, batch_df.sparkSession.sparkContext.defaultParallelism)
        whole = [i not in spread and not t.dead_letter for i, t in enumerate(tables)]  # dead letters: whole always
        task_tables = task_tables_at(known, checkpoint_id, whole)
        routes, numbers, table_of = numbered_routes(known)
        target, route = one_job_target(numbers, table_of, tables)
        rows = distributed(decode_records(self._spec, batch_df), target, tables, route)
        outputs = rows.mapInArrow(write_task(tables, task_tables), OUTPUT_DDL).collect()
        write = collected(list(result_rows(outputs)), known, routes, [t.spec for t in task_tables])
        if write is None:
            return None
        try:
            self._routes.counted(known, write.counts)
            self._mapped.seen(job_id, [k.table for k in write.tables])
            targets = [
                RoutedTarget(
                    self._settings[k.table.identifier],
                    k.table.schema,
                    optional=k.table.dead_letter,
                    explain=explainer(k.table),
                )
                for k in write.tables
            ]
        except BaseException:
            write.let_go()
            raise

        def take_written(prepared: Sequence[PreparedWrite], phases: Phases) -> list[list[WriteResult]]:
            results = write.take(prepared, phases)
            self._say_rejected(write.rejected)
            return results

        def general() -> Routed:
            self._routes.missed()
            return self._route_generally(batch_df, job_id)

        return Routed(
            targets,
            write.let_go,
            take_written,
            general,
            write.check,
            self._routes.refitted,
            lambda identifier: self._recreated(identifier, batch_df, job_id),
        )

    def _recreated(self, identifier: str, batch_df: DataFrame, job_id: str) -> Callable[[], Routed] | None:
        """A table met before that another tool dropped since: forgotten, so that routing the micro-batch again
        creates it, as a restarted stream does (None: not a table of this stream's)."""
        if self._settings.pop(identifier, None) is None:
            return None
        self._keys.pop(identifier, None)
        self._owners.pop(identifier, None)
        self._routes.missed()  # the write learned for it is of the table dropped
        log.warning(
            "table=%s: dropped while this stream writes it; created again from its source's schema. It holds the "
            "changes from this micro-batch on: a snapshot of the source table (Debezium's incremental snapshot) "
            "brings back the rows that did not change since",
            identifier,
        )
        return lambda: self._route_generally(batch_df, job_id)

    def _write(
        self,
        parsed: DataFrame,
        tables: Sequence[RoutedTable],
        task_tables: Sequence[JsonTable],
        rejected_decoding: int,
        phases: Phases,
    ) -> list[list[WriteResult]]:
        """Every table's rows in one Spark job: distributed by table and key, each task writing its tables one
        after another (:mod:`icesink.writer.json_tables`)."""

        rows = distributed(parsed, general_target(tables), tables)
        outputs = rows.mapInArrow(write_task(tables, task_tables), OUTPUT_DDL).collect()
        phases.done("write")
        results: list[list[WriteResult]] = [[] for _ in tables]
        rejected = rejected_decoding
        for number, encoded, refused, _, _ in result_rows(outputs):
            rejected += refused
            if encoded is not None:
                results[number].append(decode_write_result(encoded))
        self._say_rejected(rejected)
        return results

    def _say_rejected(self, rejected: int) -> None:
        if rejected:
            # Said on the driver's log too: a dead-letter table is not where anyone looks first.
            log.warning(
                "icesink.debezium: %d record(s) of this micro-batch cannot be applied; they go to the dead-letter "
                "table %s, whose column error says why",
                rejected,
                self._spec.dead_letter,
            )

    def _explained_settings_of(self, table: RoutedTable) -> SinkSettings:
        try:
            return self._settings_of(table)
        except SchemaMismatchError as e:  # a table's first sight in this run fits it to the micro-batch too
            explain = explainer(table)
            if explain is None:
                raise
            raise explain(e, None) from e

    def _settings_of(self, table: RoutedTable) -> SinkSettings:
        """The table's settings, from a preflight the first time it is seen (creating it if need be)."""

        known = self._settings.get(table.identifier)
        if known is not None:
            if self._keys[table.identifier] != table.keys:
                raise key_changed(table, self._keys[table.identifier])
            return known
        keyed = not table.dead_letter  # created here if missing; the dead-letter table takes appends
        partition_by = tuple(self._spec.partition_by.get(table.identifier, ()))
        per_table = replace(
            self._spec.table_options,
            create_table=True,
            partition_by=partition_by,
            writer=Writer.ARROW,
            event_time=None,  # not a column of the table's rows: set below, as the decoded records carry it
            lateness=None,
        )
        if not keyed:  # dead letters are for operators to see at once, on main, whatever the stream's branch
            per_table = replace(per_table, branch=None, audit=())
        else:  # the stream's own change columns, not the source's
            per_table = replace(
                per_table,
                equality_fields=list(table.keys),
                op_column=OP_COLUMN,
                op_values=OP_VALUES,
                sequence_by=POSITION_COLUMN,
            )
        properties = {k: str(v) for k, v in (per_table.table_properties or {}).items()}
        iceberg = resolve_table(
            self._catalog,
            self._config,
            table.identifier,
            table.schema,
            True,
            partition_by,
            table.keys,
            (OP_COLUMN, POSITION_COLUMN) if keyed else (),
            {**properties, **_owner_property(table)},
            deferred=True,
        )
        self._record_owner(table, iceberg)
        options = self._options.joined(table.identifier, per_table)
        identifier_fields = tuple(sorted(iceberg.schema().identifier_field_names()))
        if keyed and identifier_fields and identifier_fields != tuple(sorted(table.keys)):
            raise key_changed(table, identifier_fields)
        if not keyed and identifier_fields:  # keyed since the stream started
            raise keyed_dead_letter(table.identifier, identifier_fields, "Nothing of the micro-batch was written")
        # Checked on the table in hand: looked up again, a pending table an operator dropped just now would be
        # created anew, published and empty.
        settings = table_settings(table.schema, options, iceberg, self._config)
        if keyed and self._spec.table_options.event_time is not None:
            lateness = self._spec.table_options.lateness
            event_time = EventTimeSettings(
                EVENT_TIME_COLUMN, duration_micros(lateness) if lateness is not None else 0, SPLIT_COLUMNS
            )
            settings = replace(settings, event_time=event_time)
        self._settings[table.identifier] = settings
        self._keys[table.identifier] = table.keys
        return settings

    def _check_owner(self, table: RoutedTable) -> None:
        """A table belongs to one source table for good: another one routed there is refused before anything
        is written (tables seen before in this stream; a table's first sight checks what the table records)."""
        owner = self._owners.get(table.identifier)
        if owner is not None and table.source is not None and owner != table.source:
            raise taken(self._spec, table, owner, "this stream wrote it")

    def _record_owner(self, table: RoutedTable, iceberg: Table) -> None:
        """The source the table records as its own (recorded now if it records none), checked against this one."""
        if table.source is None:
            return
        recorded = iceberg.properties.get(SOURCE_PROPERTY)
        owner = SourceTable.of_recorded(recorded) if recorded is not None else None
        if recorded is None:
            # A table created before tables recorded their source (or by another tool): it is this one's now.
            with database_errors(self._config), iceberg.transaction() as transaction:
                transaction.set_properties({SOURCE_PROPERTY: table.source.recorded()})
            log.info("table=%s: recorded as the table of source table %s", table.identifier, table.source)
            owner = table.source
        if owner != table.source:
            why = "its table property icesink.debezium.source says so" if owner else "it records another source"
            raise taken(self._spec, table, owner, why, recorded)
        self._owners[table.identifier] = table.source

    def _known(self, identifier: str) -> StructType | None:
        """An existing table's columns as Spark types (to type events that carry no schema)."""

        try:
            table = load_table(self._catalog, self._config, identifier)
        except TableNotFoundError:
            return None
        return T.StructType(
            [T.StructField(f.name, spark_type_of(f.field_type), not f.required) for f in table.schema().fields]
        )


def _inferred(parsed: DataFrame, source: SourceTable) -> StructType:
    """The types of the columns of a source's records without schemas, read from their values as Spark reads
    JSON (a column only ever null has no type yet: it is left out until a value shows)."""

    rows = parsed.where((F.col("source") == source.key) & (F.col("schema_id") == ""))
    inferred = parsed.sparkSession.read.json(rows.select("row").rdd.map(lambda r: r[0]))
    positional = inferred.toDF(*[f"_{i}" for i in range(len(inferred.columns))])
    counts = positional.select(*[F.count(F.col(f"_{i}")).alias(f"_{i}") for i in range(len(inferred.columns))]).first()
    return T.StructType([f for i, f in enumerate(inferred.schema.fields) if counts is not None and counts[f"_{i}"]])


def _owner_property(table: RoutedTable) -> dict[str, str]:
    return {SOURCE_PROPERTY: table.source.recorded()} if table.source is not None else {}
