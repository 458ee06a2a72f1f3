"""Debezium change events routed to their tables, one micro-batch at a time (on the driver).

Executors decode every Kafka record once (:mod:`icesink.debezium_events.decode`, in one ``mapInArrow`` pass)
into its source table, upsert or delete, key, position and row as JSON; the driver collects the
tables of the micro-batch with the newest Connect schema of each, and gives every table a DataFrame
typed by that schema (:mod:`icesink.debezium_events.schemas`) with the operation and position as the
change columns. A table seen for the first time is created with its key as identifier fields; a
column the source added later is added to the table (``evolve_schema``).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import pyarrow as pa

from icesink.errors import ConfigError, SchemaMismatchError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame
    from pyspark.sql.types import StructType

OP_COLUMN = "__icesink_op"
POSITION_COLUMN = "__icesink_position"
PARSED_DDL = "source string, op string, keys string, row_schema string, row string, position string"
INPUT_COLUMNS = ("key", "value")
KAFKA_COLUMNS = ("topic", "partition", "offset")


@dataclass(frozen=True)
class Debezium:
    """``tables=`` for a stream of Debezium change events (see :func:`debezium`)."""

    namespace: str
    names: Mapping[str, str] = field(default_factory=dict)
    partition_by: Mapping[str, Sequence[str]] = field(default_factory=dict)
    table_properties: Mapping[str, str] | None = None
    evolve_schema: bool = True

    def identifier(self, source_table: str) -> str:
        """The Iceberg table of a source table: a mapping's, else ``namespace.<table>``."""
        for name in (source_table, source_table.rsplit(".", 1)[-1]):
            if name in self.names:
                return self.names[name]
        return f"{self.namespace}.{source_table.rsplit('.', 1)[-1]}"


def debezium(
    namespace: str,
    *,
    tables: Mapping[str, str] | None = None,
    partition_by: Mapping[str, Sequence[str]] | None = None,
    table_properties: Mapping[str, str] | None = None,
    evolve_schema: bool = True,
) -> Debezium:
    """Route Debezium change events to one table each: ``icesink.stream(df, tables=icesink.debezium("inventory"))``.

    ``df`` has the columns Spark's Kafka source gives: ``key`` and ``value`` (string or binary, JSON as
    Kafka Connect's JsonConverter writes it, with or without ``schema``) and optionally ``topic``,
    ``partition``, ``offset``. Each source table goes to ``namespace.<table>``, or where ``tables`` maps
    it (by ``schema.table``, ``database.table`` or ``table``). ``partition_by`` and ``table_properties``
    apply to the tables icesink creates (partition only by key columns); ``evolve_schema`` adds the
    columns the source adds.
    """
    if not isinstance(namespace, str) or not namespace or namespace.startswith(".") or namespace.endswith("."):
        raise ConfigError(
            f"icesink.debezium: namespace must be a namespace name such as 'inventory', not {namespace!r}"
        )
    return Debezium(namespace, dict(tables or {}), dict(partition_by or {}), table_properties, evolve_schema)


def parse_task(
    columns: Sequence[str],
) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The ``mapInArrow`` function that decodes a micro-batch's records (``columns``: those present)."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from icesink.debezium_events.decode import decode

        for batch in batches:
            records = batch.to_pydict()
            out: dict[str, list[str]] = {n: [] for n in ("source", "op", "keys", "row_schema", "row", "position")}
            for i in range(batch.num_rows):
                change = decode(*(records[c][i] if c in records else None for c in (*INPUT_COLUMNS, *KAFKA_COLUMNS)))
                if change is None:
                    continue
                out["source"].append(change.source_table)
                out["op"].append(change.op)
                out["keys"].append(json.dumps(change.key_names))
                out["row_schema"].append(json.dumps(change.row_schema, sort_keys=True) if change.row_schema else "")
                out["row"].append(json.dumps(change.row))
                out["position"].append(change.position)
            yield pa.record_batch([pa.array(v, pa.string()) for v in out.values()], names=list(out))

    return run


@dataclass(frozen=True)
class RoutedTable:
    """One table's part of a micro-batch: its rows, typed, with the change columns, and its key."""

    identifier: str
    rows: DataFrame
    keys: tuple[str, ...]


def route(
    spec: Debezium, batch_df: DataFrame, known: Callable[[str], StructType | None]
) -> tuple[list[RoutedTable], DataFrame]:
    """The micro-batch's tables, and the decoded DataFrame (persisted: unpersist it when done).

    ``known(identifier)`` is the Spark schema of an existing table, for events without a schema.
    """
    from pyspark.sql import functions as F

    present = [c for c in (*INPUT_COLUMNS, *KAFKA_COLUMNS) if c in batch_df.columns]
    if any(c not in batch_df.columns for c in INPUT_COLUMNS):
        raise ConfigError(
            f"icesink.debezium needs the columns key and value (as Spark's Kafka source gives them); the stream has "
            f"{', '.join(batch_df.columns)}"
        )
    text = [F.col(c).cast("string").alias(c) if c in INPUT_COLUMNS else F.col(c) for c in present]
    parsed = batch_df.select(*text).mapInArrow(parse_task(present), PARSED_DDL).persist()
    summary = (
        parsed.groupBy("source")
        .agg(F.max_by("row_schema", "position").alias("row_schema"), F.collect_set("keys").alias("keys"))
        .collect()
    )
    routed = []
    for source, row_schema, keys in sorted(summary, key=lambda r: r[0]):
        identifier = spec.identifier(source)
        if len(keys) != 1:
            raise SchemaMismatchError(
                f"table {identifier} (source {source}): the micro-batch's events carry different keys "
                f"({' and '.join(sorted(keys))}); icesink keys a table by one primary key"
            )
        key_names = tuple(json.loads(keys[0]))
        schema = _schema(identifier, source, row_schema, parsed, known)
        if OP_COLUMN in schema.names or POSITION_COLUMN in schema.names:
            raise SchemaMismatchError(f"table {identifier}: a source column is named {OP_COLUMN} or {POSITION_COLUMN}")
        rows = (
            parsed.where(F.col("source") == source)
            .select(F.from_json("row", schema, {"mode": "FAILFAST"}).alias("r"), "op", "position")
            .select(
                *[F.col("r").getField(n).alias(n) for n in schema.names],
                F.col("op").alias(OP_COLUMN),
                F.col("position").alias(POSITION_COLUMN),
            )
        )
        routed.append(RoutedTable(identifier, rows, key_names))
    return routed, parsed


def _schema(
    identifier: str, source: str, row_schema: str, parsed: DataFrame, known: Callable[[str], StructType | None]
) -> StructType:
    """The newest Connect schema of the table's events; without one, the table's, else the values' own."""
    from pyspark.sql import functions as F

    from icesink.debezium_events.schemas import struct_type

    if row_schema:
        return struct_type(json.loads(row_schema), f"table {identifier} (source {source})")
    existing = known(identifier)
    if existing is not None:
        return existing
    rows = parsed.where(F.col("source") == source).select("row")
    spark = parsed.sparkSession
    return spark.read.json(rows.rdd.map(lambda r: r[0])).schema
