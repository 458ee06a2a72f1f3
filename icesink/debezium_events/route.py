"""Debezium change events routed to their tables, one micro-batch at a time (on the driver).

Executors decode every Kafka record once (:mod:`icesink.debezium_events.decode`, in one ``mapInArrow`` pass)
into its source table, upsert or delete, key, position and row as JSON; the driver collects the
tables of the micro-batch with the newest Connect schema of each, and gives every table a DataFrame
typed by that schema (:mod:`icesink.debezium_events.connect_types`) with the operation and position as the
change columns. A table seen for the first time is created with its key as identifier fields; a
column the source added later is added to the table (``evolve_schema``).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from icesink.errors import ConfigError, SchemaMismatchError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame
    from pyspark.sql.types import StructType

log = logging.getLogger(__name__)

OP_COLUMN = "__icesink_op"
POSITION_COLUMN = "__icesink_position"
PARSED_DDL = "source string, op string, keys string, row_schema string, row string, position string"
INPUT_COLUMNS = ("key", "value")
KAFKA_COLUMNS = ("topic", "partition", "offset")
# A record that cannot be applied, kept for a dead-letter table: its ``source`` is this (no source table is
# named so) and its ``row`` the record (key and value in base64: they may be any bytes) and the reason.
REJECTED = ""
REJECTED_DDL = "topic string, partition int, offset long, key string, value string, error string"


@dataclass(frozen=True)
class Debezium:
    """``tables=`` for a stream of Debezium change events (see :func:`debezium`)."""

    namespace: str
    names: Mapping[str, str] = field(default_factory=dict)
    partition_by: Mapping[str, Sequence[str]] = field(default_factory=dict)
    table_properties: Mapping[str, str] | None = None
    evolve_schema: bool = True
    maintain: bool = False
    dead_letter: str | None = None  # the table of records that cannot be applied; None: they stop the stream

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
    maintain: bool = False,
    dead_letter: str | None = None,
) -> Debezium:
    """Route Debezium change events to one table each: ``icesink.stream(df, tables=icesink.debezium("inventory"))``.

    ``df`` has the columns Spark's Kafka source gives: ``key`` and ``value`` (string or binary, JSON as
    Kafka Connect's JsonConverter writes it, with or without ``schema``) and optionally ``topic``,
    ``partition``, ``offset``. Each source table goes to ``namespace.<table>``, or where ``tables`` maps
    it (by ``schema.table``, ``database.table`` or ``table``). ``partition_by`` and ``table_properties``
    apply to the tables icesink creates (partition only by key columns); ``evolve_schema`` adds the
    columns the source adds; ``maintain`` has the inline committer maintain every table between commits,
    as ``icesink.stream(maintain=True)`` does for one.

    A record decoding cannot apply (not JSON or not UTF-8, not a change event, a truncate, no key, a value its
    column cannot hold exactly, Debezium's placeholder for an unchanged TOASTed value) stops the stream,
    naming it; with ``dead_letter="namespace.table"`` it goes to that table instead (created if missing,
    appends: ``topic``, ``partition``, ``offset``, ``key`` and ``value`` as the bytes Kafka held, ``error``),
    committed with the micro-batch's other tables, and the stream goes on without the change it held.
    """
    if not isinstance(namespace, str) or not namespace or namespace.startswith(".") or namespace.endswith("."):
        raise ConfigError(
            f"icesink.debezium: namespace must be a namespace name such as 'inventory', not {namespace!r}"
        )
    names = dict(tables or {})
    for source, target in names.items():
        if not _is_table_name(target):
            raise ConfigError(
                f"icesink.debezium: tables maps source table {source!r} to {target!r}; map it to a table name "
                "'namespace.table' (its options come from partition_by and table_properties)"
            )
    if dead_letter is not None and not _is_table_name(dead_letter):
        raise ConfigError(
            f"icesink.debezium: dead_letter must be a table name 'namespace.table' (or None), not {dead_letter!r}"
        )
    if dead_letter is not None and dead_letter in names.values():
        source = next(s for s, t in names.items() if t == dead_letter)
        raise ConfigError(
            f"icesink.debezium: {dead_letter!r} is both the dead_letter table and where source table {source!r} goes"
        )
    partitions = dict(partition_by or {})
    for target, fields in partitions.items():
        if isinstance(fields, str) or not all(isinstance(f, str) for f in fields):
            raise ConfigError(
                f"icesink.debezium: partition_by[{target!r}] must be a list of partition fields such as "
                f"['bucket(8, id)'], not {fields!r}"
            )
    for option, value in (("evolve_schema", evolve_schema), ("maintain", maintain)):
        if not isinstance(value, bool):
            raise ConfigError(f"icesink.debezium: {option} must be True or False, not {value!r}")
    return Debezium(namespace, names, partitions, table_properties, evolve_schema, maintain, dead_letter)


def _is_table_name(name: object) -> bool:
    """``namespace.table``, no part empty (as the catalog requires)."""
    return isinstance(name, str) and len(parts := name.split(".")) >= 2 and all(parts)


def parse_task(
    columns: Sequence[str], keep_rejected: bool = False
) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The ``mapInArrow`` function that decodes a micro-batch's records (``columns``: those present).

    A record that cannot be applied raises :class:`DecodeError`, or with ``keep_rejected`` becomes a row of
    source :data:`REJECTED`."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from icesink.debezium_events.decode import DecodeError, decode

        for batch in batches:
            records = batch.to_pydict()
            out: dict[str, list[str]] = {n: [] for n in ("source", "op", "keys", "row_schema", "row", "position")}
            for i in range(batch.num_rows):
                record = [records[c][i] if c in records else None for c in (*INPUT_COLUMNS, *KAFKA_COLUMNS)]
                try:
                    change = decode(*record)
                except Exception as e:  # with a dead-letter table, whatever a record makes decoding raise
                    if not keep_rejected:
                        raise
                    _reject(out, record, str(e) if isinstance(e, DecodeError) else f"{type(e).__name__}: {e}")
                    continue
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


def _reject(out: dict[str, list[str]], record: list[Any], error: str) -> None:
    import base64

    key, value, topic, partition, offset = record
    raw = {n: None if v is None else base64.b64encode(v).decode("ascii") for n, v in (("key", key), ("value", value))}
    row = {"topic": topic, "partition": partition, "offset": offset, **raw, "error": error}
    for name, text in (("source", REJECTED), ("op", ""), ("keys", "[]"), ("row_schema", ""), ("position", "")):
        out[name].append(text)
    out["row"].append(json.dumps(row))


@dataclass(frozen=True)
class RoutedTable:
    """One table's part of a micro-batch: its rows, typed, with the change columns, and its key."""

    identifier: str
    rows: DataFrame
    keys: tuple[str, ...]
    dead_letter: bool = False  # the stream's dead-letter table: appends of the records that cannot be applied


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
    # Key and value reach Python as bytes, whatever Kafka holds: a record that is not UTF-8 is one to refuse
    # (or keep as it came), not a task that fails.
    text = [F.col(c).cast("binary").alias(c) if c in INPUT_COLUMNS else F.col(c) for c in present]
    keep_rejected = spec.dead_letter is not None
    parsed = batch_df.select(*text).mapInArrow(parse_task(present, keep_rejected), PARSED_DDL).persist()
    summary = _sources(parsed)
    _refuse_shared_targets(spec, [r[0] for r in summary if r[0] != REJECTED])
    rejected = sum(r[3] for r in summary if r[0] == REJECTED)
    routed: list[RoutedTable] = []
    if rejected:
        # Said on the driver's log too: a dead-letter table is not where anyone looks first.
        log.warning(
            "icesink.debezium: %d record(s) of this micro-batch cannot be applied; they go to the dead-letter "
            "table %s, whose column error says why",
            rejected,
            spec.dead_letter,
        )
        routed.append(_dead_letters(spec, parsed))
    for source, dated_schemas, keys, _ in sorted(summary, key=lambda r: r[0]):
        if source == REJECTED:
            continue
        row_schemas = [schema for _, schema in dated_schemas]  # oldest first
        identifier = spec.identifier(source)
        where = f"table {identifier} (source {source})"
        if len(keys) != 1:
            raise SchemaMismatchError(
                f"{where}: the micro-batch's events carry different keys ({' and '.join(sorted(keys))}); icesink "
                "keys a table by one primary key"
            )
        key_names = tuple(json.loads(keys[0]))
        schema = _schema(identifier, where, source, [r for r in row_schemas if r], parsed, known)
        _refuse_ambiguous_names(where, schema)
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


def _sources(parsed: DataFrame) -> list[Any]:
    """Each source of the micro-batch: its schemas with their last positions (oldest first), keys and records."""
    from pyspark.sql import functions as F

    # Each distinct schema of a source with its last position: the newest schema wins where two disagree.
    schemas = parsed.groupBy("source", "row_schema").agg(F.max("position").alias("last"))
    return (
        schemas.groupBy("source")
        .agg(F.sort_array(F.collect_list(F.struct("last", "row_schema"))).alias("row_schemas"))
        .join(parsed.groupBy("source").agg(F.collect_set("keys").alias("keys"), F.count("*").alias("n")), "source")
        .select("source", "row_schemas", "keys", "n")
        .collect()
    )


def _dead_letters(spec: Debezium, parsed: DataFrame) -> RoutedTable:
    """The micro-batch's records that cannot be applied, as rows of the dead-letter table (no key: appends)."""
    from pyspark.sql import functions as F

    assert spec.dead_letter is not None
    rejected = parsed.where(F.col("source") == REJECTED).select(F.from_json("row", REJECTED_DDL).alias("r"))
    rows = rejected.select(
        "r.topic",
        "r.partition",
        "r.offset",
        F.unbase64("r.key").alias("key"),
        F.unbase64("r.value").alias("value"),
        "r.error",
    )
    return RoutedTable(spec.dead_letter, rows, (), dead_letter=True)


def _refuse_shared_targets(spec: Debezium, sources: Sequence[str]) -> None:
    """Two source tables into one Iceberg table would mix two key spaces (and two schemas): refused."""
    by_target: dict[str, list[str]] = {}
    for source in sources:
        if spec.identifier(source) == spec.dead_letter:
            raise ConfigError(
                f"table {spec.dead_letter}: it is the dead_letter table, and source table {source} goes there too; "
                "nothing of the micro-batch was written. Name another dead_letter table, or map the source elsewhere"
            )
        by_target.setdefault(spec.identifier(source), []).append(source)
    for identifier, shared in sorted(by_target.items()):
        if len(shared) > 1:
            raise ConfigError(
                f"table {identifier}: source tables {' and '.join(sorted(shared))} both go there; nothing of the "
                "micro-batch was written. Map each to a table of its own: icesink.debezium(..., tables={"
                + ", ".join(f"{s!r}: '...'" for s in sorted(shared))
                + "})"
            )


def _refuse_ambiguous_names(where: str, schema: StructType) -> None:
    """Spark resolves column names case-insensitively: ``Col`` and ``col`` cannot both be columns of a stream."""
    seen: dict[str, str] = {}
    for name in schema.names:
        if name in (OP_COLUMN, POSITION_COLUMN):
            raise SchemaMismatchError(f"{where}: a source column is named {name}, which icesink uses itself")
        other = seen.setdefault(name.lower(), name)
        if other != name:
            raise SchemaMismatchError(
                f"{where}: the source has columns {other!r} and {name!r}, which differ only in case; Spark cannot "
                "tell them apart. Rename one at the source (or with a Debezium column.rename transform)"
            )


def _schema(
    identifier: str,
    where: str,
    source: str,
    row_schemas: list[str],
    parsed: DataFrame,
    known: Callable[[str], StructType | None],
) -> StructType:
    """The columns of the table's events in this micro-batch.

    With schemas: every field any of the micro-batch's Connect schemas has (events before a column was
    added lack it, and read it as null; a field dropped at the source stays, null from then on). Without:
    the table's own columns, and the values' inferred types for columns the table does not have yet.
    """
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    from icesink.debezium_events.connect_types import struct_type

    if row_schemas:
        merged: dict[str, T.StructField] = {}
        for one in row_schemas:  # oldest first: a column's newest type wins, a column dropped since stays
            for column in struct_type(json.loads(one), where).fields:
                merged[column.name] = column
        return T.StructType(list(merged.values()))
    existing = known(identifier)
    rows = parsed.where(F.col("source") == source).select("row")
    inferred = parsed.sparkSession.read.json(rows.rdd.map(lambda r: r[0]))
    columns = {f.name: f for f in (existing.fields if existing is not None else [])}
    new = [(i, f) for i, f in enumerate(inferred.schema.fields) if f.name not in columns]
    if new:
        # A column only ever null here has no type yet (Spark would say string): it is added once a value shows.
        positional = inferred.toDF(*[f"_{i}" for i in range(len(inferred.columns))])
        counts = positional.select(*[F.count(F.col(f"_{i}")).alias(f"_{i}") for i, _ in new]).first()
        columns.update({f.name: f for i, f in new if counts is not None and counts[f"_{i}"] > 0})
    return T.StructType(list(columns.values()))
