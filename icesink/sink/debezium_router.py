"""The router of a Debezium stream: every micro-batch's tables, found, created and checked on first sight."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from icesink.catalog.loader import load_table
from icesink.debezium_events.route import OP_COLUMN, POSITION_COLUMN, Debezium, RoutedTable, route
from icesink.errors import SchemaMismatchError, TableNotFoundError
from icesink.sink.batch import Routed
from icesink.sink.options import StreamOptions

if TYPE_CHECKING:
    from pyiceberg.catalog.sql import SqlCatalog
    from pyspark.sql import DataFrame
    from pyspark.sql.types import StructType

    from icesink.catalog.config import CatalogConfig
    from icesink.sink.batch import SinkSettings

# Debezium's operations, decoded: c, r and u are upserts of ``after``, d deletes the key.
OP_VALUES = {"U": "update", "D": "delete"}


class DebeziumRouter:
    """Routes each micro-batch of Debezium events to its tables (see :mod:`icesink.debezium_events.route`)."""

    def __init__(
        self, spec: Debezium, stream_options: dict[str, Any], catalog: SqlCatalog, config: CatalogConfig
    ) -> None:
        self._spec = spec
        self._options = stream_options  # the stream's own options: job, catalog, committer, checkpoint location
        self._catalog = catalog
        self._config = config
        self._settings: dict[str, SinkSettings] = {}
        self._keys: dict[str, tuple[str, ...]] = {}  # each table's key, as its events first gave it
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
            raise _keyed_dead_letter(identifier, keys, "The stream did not start")

    def route(self, batch_df: DataFrame) -> Routed:
        tables, parsed = route(self._spec, batch_df, self._known)
        try:
            targets = [(self._settings_of(table), table.rows) for table in tables]
        except BaseException:
            parsed.unpersist()
            raise
        return Routed(targets, parsed.unpersist)

    def _settings_of(self, table: RoutedTable) -> SinkSettings:
        """The table's settings, from a preflight the first time it is seen (creating it if need be)."""
        from icesink.sink.preflight import preflight
        from icesink.sink.tables import resolve_table

        known = self._settings.get(table.identifier)
        if known is not None:
            if self._keys[table.identifier] != table.keys:
                raise _key_changed(table, self._keys[table.identifier])
            return known
        # Created here (if missing) without the change columns, which are the stream's, not the source's. The
        # dead-letter table takes appends.
        keyed = not table.dead_letter
        changes: dict[str, Any] = {
            "equality_fields": list(table.keys),
            "op_column": OP_COLUMN,
            "op_values": OP_VALUES,
            "sequence_by": POSITION_COLUMN,
        }
        resolve_table(
            self._catalog,
            self._config,
            table.identifier,
            table.rows.schema,
            True,
            tuple(self._spec.partition_by.get(table.identifier, ())),
            table.keys,
            (OP_COLUMN, POSITION_COLUMN) if keyed else (),
            {k: str(v) for k, v in (self._spec.table_properties or {}).items()},
            deferred=True,
        )
        options = StreamOptions(
            table=table.identifier,
            **self._options,
            create_table=True,
            partition_by=tuple(self._spec.partition_by.get(table.identifier, ())),
            table_properties=self._spec.table_properties,
            **(changes if keyed else {}),
            evolve_schema=self._spec.evolve_schema,
            maintain=self._spec.maintain,
        )
        identifier_fields = tuple(
            sorted(load_table(self._catalog, self._config, table.identifier).schema().identifier_field_names())
        )
        if keyed and identifier_fields and identifier_fields != tuple(sorted(table.keys)):
            raise _key_changed(table, identifier_fields)
        if not keyed and identifier_fields:  # keyed since the stream started
            raise _keyed_dead_letter(table.identifier, identifier_fields, "Nothing of the micro-batch was written")
        settings, _ = preflight(table.rows, options)
        self._settings[table.identifier] = settings
        self._keys[table.identifier] = table.keys
        return settings

    def _known(self, identifier: str) -> StructType | None:
        """An existing table's columns as Spark types (to type events that carry no schema)."""
        from pyspark.sql import types as T

        from icesink.spark_types import spark_type_of

        try:
            table = load_table(self._catalog, self._config, identifier)
        except TableNotFoundError:
            return None
        return T.StructType(
            [T.StructField(f.name, spark_type_of(f.field_type), not f.required) for f in table.schema().fields]
        )


def _keyed_dead_letter(identifier: str, keys: tuple[str, ...], outcome: str) -> SchemaMismatchError:
    return SchemaMismatchError(
        f"table {identifier}: it is the stream's dead_letter table, which takes every rejected record as a row of "
        f"its own, but it is keyed by ({', '.join(keys)}), so records would replace each other. {outcome}. Name "
        "a new table as dead_letter (icesink creates it), or drop the table's identifier fields"
    )


def _key_changed(table: RoutedTable, before: tuple[str, ...]) -> SchemaMismatchError:
    return SchemaMismatchError(
        f"table {table.identifier}: its events are keyed by ({', '.join(table.keys)}), but the table is keyed by "
        f"({', '.join(before)}); the source's primary key changed. Nothing of the micro-batch was written. "
        "Keying rows by another key would merge or split them: write the table anew under a new name (a "
        "mapping in icesink.debezium(tables=...)), or change its identifier fields first"
    )
