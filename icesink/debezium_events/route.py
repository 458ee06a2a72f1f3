"""Debezium change events routed to their tables, one micro-batch at a time (on the driver).

Executors decode every Kafka record once (:mod:`icesink.debezium_events.decode`, in one ``mapInArrow`` pass)
into its source table, upsert or delete, key, position and row as JSON; the decoded micro-batch is kept
(persisted) for the write. The driver reads a summary of it, one row per source table and distinct Connect
schema (never a row per record), and gives each source table its Iceberg table and the Spark schema its rows
have: every column any of the micro-batch's schemas has, each in the widest type that holds all of its values
exactly (:func:`icesink.debezium_events.connect_types.widest`). The rows of every table are then written in one
Spark job (:mod:`icesink.writer.json_tables`). This is the general way; a micro-batch that brings nothing the
stream has not met skips the summary and is written by the job that decodes it (:mod:`icesink.sink.known_routes`).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from icesink.debezium_events.decode_task import INPUT_COLUMNS, KAFKA_COLUMNS, PARSED_DDL, REJECTED, parse_task
from icesink.debezium_events.sources import SourceTable
from icesink.debezium_events.stream_spec import Debezium
from icesink.errors import ConfigError, SchemaMismatchError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame
    from pyspark.sql.types import StructType

log = logging.getLogger(__name__)

OP_COLUMN = "__icesink_op"
POSITION_COLUMN = "__icesink_position"


# --- on the driver: the micro-batch's tables ----------------------------------------------------------------------


@dataclass(frozen=True)
class Location:
    """A Kafka record, as errors name it."""

    topic: str | None
    partition: int | None
    offset: int | None

    def __str__(self) -> str:
        if self.topic is None and self.offset is None:
            return "a record without Kafka coordinates"
        return f"topic {self.topic}, partition {self.partition}, offset {self.offset}"


@dataclass(frozen=True)
class SeenSchema:
    """One Connect row schema of a source in the micro-batch, and the first record that has it."""

    schema: dict[str, Any]
    first: Location


@dataclass
class SourceSummary:
    """What the micro-batch holds of one source table (from an aggregation, not from its rows)."""

    source: SourceTable
    keys: set[str] = field(default_factory=set)
    schemas: dict[str, SeenSchema] = field(default_factory=dict)  # by schema id
    columns_without_schema: set[str] = field(default_factory=set)
    records: int = 0
    without_schema: int = 0  # records that had no schema (typed by the table as they are written)


@dataclass(frozen=True)
class Summary:
    sources: tuple[SourceSummary, ...]
    rejected: int  # records decoding could not apply (kept for the dead-letter table)


def decode_records(spec: Debezium, batch_df: DataFrame) -> DataFrame:
    """The micro-batch decoded (see :data:`PARSED_DDL`); the general path persists it, so that every later step
    reads it, not the source."""
    from pyspark.sql import functions as F

    present = [c for c in (*INPUT_COLUMNS, *KAFKA_COLUMNS) if c in batch_df.columns]
    if any(c not in batch_df.columns for c in INPUT_COLUMNS):
        raise ConfigError(
            f"icesink.debezium needs the columns key and value (as Spark's Kafka source gives them); the stream has "
            f"{', '.join(batch_df.columns)}"
        )
    # Key and value reach Python as bytes, whatever Kafka holds: a record that is not UTF-8 is one to refuse
    # (or keep as it came), not a task that fails.
    text = [F.col(c).cast("binary").alias(c) if c in INPUT_COLUMNS else F.col(c) for c in present]
    keep_rejected = spec.dead_letter is not None
    return batch_df.select(*text).mapInArrow(parse_task(present, keep_rejected, spec), PARSED_DDL)


def summarize(parsed: DataFrame) -> Summary:
    """One row per source table, keys, schema and column set (Spark aggregates; the driver reads a few rows)."""
    from pyspark.sql import functions as F

    rows = (
        parsed.groupBy("source", "keys", "schema_id", "shape")
        .agg(
            F.max("row_schema").alias("row_schema"),
            F.min(F.struct("topic", "partition", "offset")).alias("first"),
            F.count(F.lit(1)).alias("n"),
        )
        .collect()
    )
    sources: dict[str, SourceSummary] = {}
    rejected = 0
    for row in rows:
        if row["source"] == REJECTED:
            rejected += row["n"]
            continue
        summary = sources.get(row["source"])
        if summary is None:
            summary = sources[row["source"]] = SourceSummary(SourceTable.of_key(row["source"]))
        summary.keys.add(row["keys"])
        summary.records += row["n"]
        first = Location(row["first"]["topic"], row["first"]["partition"], row["first"]["offset"])
        if row["schema_id"]:
            seen = summary.schemas.get(row["schema_id"])
            if seen is None or _order(first) < _order(seen.first):
                summary.schemas[row["schema_id"]] = SeenSchema(json.loads(row["row_schema"]), first)
        else:
            summary.without_schema += row["n"]
            summary.columns_without_schema.update(json.loads(row["shape"]) if row["shape"] else ())
    return Summary(tuple(sorted(sources.values(), key=lambda s: s.source.key)), rejected)


def _order(location: Location) -> tuple[str, int, int]:
    return (location.topic or "", location.partition or 0, location.offset or 0)


@dataclass(frozen=True)
class ColumnOrigin:
    """A type a column has in the micro-batch, and the first record that has it (for messages)."""

    type_name: str
    first: Location


@dataclass(frozen=True)
class RoutedTable:
    """One table's part of a micro-batch: the Spark schema of its rows (with the change columns) and its key."""

    identifier: str
    source: SourceTable | None  # None: the dead-letter table
    schema: StructType
    keys: tuple[str, ...]
    records: int
    origins: Mapping[str, tuple[ColumnOrigin, ...]] = field(default_factory=dict)  # column path → its types

    @property
    def dead_letter(self) -> bool:
        return self.source is None

    def holders(self, path: str) -> str:
        """Which records of the micro-batch give the column ``path`` which type, for messages."""
        origins = self.origins.get(path, ())
        return "; ".join(f"{o.type_name} from {o.first}" for o in origins)


def rejected_schema() -> StructType:
    from pyspark.sql import types as T

    return T.StructType(
        [
            T.StructField("topic", T.StringType()),
            T.StructField("partition", T.IntegerType()),
            T.StructField("offset", T.LongType()),
            T.StructField("key", T.BinaryType()),
            T.StructField("value", T.BinaryType()),
            T.StructField("error", T.StringType()),
        ]
    )


def route(
    spec: Debezium,
    summary: Summary,
    known: Callable[[str], StructType | None],
    infer: Callable[[SourceTable], StructType],
) -> list[RoutedTable]:
    """The micro-batch's tables, each with the schema of its rows; the dead-letter table last (when it may get
    rows: records decoding rejected, or records without schemas that the write may still reject).

    ``known(identifier)`` is the Spark schema of an existing table, for events without a schema; ``infer(source)``
    the types of the source's records without schemas, read from their values.
    """
    refuse_shared_targets(spec, [s.source for s in summary.sources])
    routed: list[RoutedTable] = []
    for one in summary.sources:
        identifier = spec.identifier(one.source)
        where = f"table {identifier} (source {one.source})"
        if len(one.keys) != 1:
            raise SchemaMismatchError(
                f"{where}: the micro-batch's events carry different keys ({' and '.join(sorted(one.keys))}); icesink "
                "keys a table by one primary key",
                table=identifier,
            )
        key_names = tuple(json.loads(next(iter(one.keys))))
        schema, origins = _schema(identifier, where, one, known, infer)
        _refuse_ambiguous_names(identifier, where, schema)
        routed.append(
            RoutedTable(identifier, one.source, _with_change_columns(schema), key_names, one.records, origins)
        )
    may_reject = summary.rejected or any(s.without_schema for s in summary.sources)
    if spec.dead_letter is not None and may_reject:
        routed.append(RoutedTable(spec.dead_letter, None, rejected_schema(), (), summary.rejected))
    return routed


def _with_change_columns(schema: StructType) -> StructType:
    from pyspark.sql import types as T

    return T.StructType(
        [*schema.fields, T.StructField(OP_COLUMN, T.StringType()), T.StructField(POSITION_COLUMN, T.StringType())]
    )


def refuse_shared_targets(spec: Debezium, sources: Sequence[SourceTable]) -> None:
    """Two source tables into one Iceberg table would mix two key spaces (and two schemas): refused."""
    by_target: dict[str, list[SourceTable]] = {}
    for source in sources:
        identifier = spec.identifier(source)
        if identifier == spec.dead_letter:
            raise ConfigError(
                f"table {spec.dead_letter}: it is the dead_letter table, and source table {source} goes there too; "
                "nothing of the micro-batch was written. Name another dead_letter table, or map the source elsewhere",
                table=spec.dead_letter,
            )
        by_target.setdefault(identifier, []).append(source)
    for identifier, shared in sorted(by_target.items()):
        if len(shared) > 1:
            raise ConfigError(shared_target_message(spec, identifier, shared), table=identifier)


def shared_target_message(spec: Debezium, identifier: str, sources: Sequence[SourceTable]) -> str:
    """Why two sources cannot share a table, and the mapping that separates them."""
    ordered = sorted(sources, key=lambda s: s.key)
    # The short names, unless two sources share one (two databases, two connectors): then every part.
    plain = len({str(s) for s in sources}) == len(sources)
    described = " and ".join(str(s) if plain else s.describe() for s in ordered)
    keys = ", ".join(f"{_separating_name(s, sources)!r}: '...'" for s in ordered)
    return (
        f"table {identifier}: source tables {described} both go there; nothing of the micro-batch was written. "
        f"Map each to a table of its own: icesink.debezium(..., tables={{{keys}}})"
    )


def _separating_name(source: SourceTable, others: Sequence[SourceTable]) -> str:
    """The shortest name of ``source`` a mapping can use that no other of ``others`` has."""
    taken = {n for o in others if o != source for n in o.names}
    return next((n for n in reversed(source.names) if n not in taken), source.names[0])


def _refuse_ambiguous_names(identifier: str, where: str, schema: StructType) -> None:
    """Spark resolves column names case-insensitively: ``Col`` and ``col`` cannot both be columns of a stream."""
    seen: dict[str, str] = {}
    for name in schema.names:
        if name in (OP_COLUMN, POSITION_COLUMN):
            raise SchemaMismatchError(
                f"{where}: a source column is named {name}, which icesink uses itself", table=identifier, column=name
            )
        other = seen.setdefault(name.lower(), name)
        if other != name:
            raise SchemaMismatchError(
                f"{where}: the source has columns {other!r} and {name!r}, which differ only in case; Spark cannot "
                "tell them apart. Rename one at the source (or with a Debezium column.rename transform)",
                table=identifier,
                column=name,
            )


def _schema(
    identifier: str,
    where: str,
    one: SourceSummary,
    known: Callable[[str], StructType | None],
    infer: Callable[[SourceTable], StructType],
) -> tuple[StructType, dict[str, tuple[ColumnOrigin, ...]]]:
    """The columns of the table's events in this micro-batch, and which records give each its type.

    With schemas: every field any of the micro-batch's Connect schemas has (events before a column was added
    lack it, and read it as null; a field dropped at the source stays, null from then on), each in the widest
    type of its schemas. Without: the table's own columns, and the values' inferred types for columns the table
    does not have yet.
    """
    from pyspark.sql import types as T

    from icesink.debezium_events.connect_types import merge_schemas, struct_type

    if one.schemas:
        seen = sorted(one.schemas.values(), key=lambda s: _order(s.first))
        schema, origins = merge_schemas([(struct_type(s.schema, where), s.first) for s in seen], where)
        return schema, {path: tuple(ColumnOrigin(t, first) for t, first in o) for path, o in origins.items()}
    existing = known(identifier)
    columns = {f.name: f for f in (existing.fields if existing is not None else [])}
    if one.columns_without_schema - set(columns):
        inferred = infer(one.source)
        columns.update({f.name: f for f in inferred.fields if f.name not in columns})
    return T.StructType(list(columns.values())), {}
