"""Debezium change events, as Kafka Connect's JsonConverter writes them, decoded into plain changes.

Runs on the executors (no Spark, no catalog). Each Kafka record becomes at most one :class:`Change`: the
source table it belongs to, upsert or delete, its key, its row, its position in the source, and the Connect
schema of its row. With a schema, every value is checked against its own Connect type (a decimal's precision
and scale, an integer's range, a float's width) and rewritten into the one spelling
:mod:`icesink.writer.json_rows` reads exactly into the column type :mod:`icesink.debezium_events.connect_types`
gives it (a decimal as its exact digits, a timestamp in ISO 8601, a date as ``YYYY-MM-DD``, a ``float`` as the
double equal to it); bytes stay base64. Without a schema, the row is kept as the exact JSON text the record held
(its numbers keep every digit), to be typed by the table.

What the format is (read from JsonConverter and Debezium's sources): a value is
``{"schema": ..., "payload": ...}`` with schemas enabled, the payload alone without; ``payload.op`` is
``c``/``r``/``u``/``d`` (``t`` truncate and ``m`` message are refused/skipped), ``after`` the row (null
for a delete), ``source`` where it happened; a tombstone (null value) follows each delete and carries
nothing. The key is a struct of the primary key columns.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any, NamedTuple

from icesink import fast_json
from icesink.debezium_events.connect_values import (
    DATES,
    DECIMAL,
    TIME_MICROS,
    TIME_MILLIS,
    TIME_NANOS,
    TIMESTAMP_MICROS,
    TIMESTAMP_MILLIS,
    TIMESTAMP_NANOS,
    VARIABLE_DECIMAL,
    ZONED_TIMESTAMP,
    FieldError,
    RowSchema,
    read_fields,
    reader,
)
from icesink.debezium_events.envelope import (
    DecodeError,
    Prefixes,
    field_schema,
    member_text,
    parse_object,
    payload_after,
    text_of,
    where_of,
)
from icesink.debezium_events.sources import SourceTable, source_table

__all__ = [
    "DATES",
    "DECIMAL",
    "DELETE",
    "TIMESTAMP_MICROS",
    "TIMESTAMP_MILLIS",
    "TIMESTAMP_NANOS",
    "TIME_MICROS",
    "TIME_MILLIS",
    "TIME_NANOS",
    "UPSERT",
    "VARIABLE_DECIMAL",
    "ZONED_TIMESTAMP",
    "Change",
    "DecodeError",
    "Decoder",
    "SourceTable",
    "decode",
]

UPSERT, DELETE = "U", "D"


class Change(NamedTuple):
    """One change of one row: ``op`` is :data:`UPSERT` or :data:`DELETE`; ``row`` holds the key for a delete."""

    source: SourceTable
    op: str
    key_names: tuple[str, ...]
    row: dict[str, Any]  # canonical values (see the module docstring); as parsed without a schema
    position: str  # sorts like the source order of this key's changes
    row_schema: dict[str, Any] | None  # the Connect schema of ``after``, None without schemas
    schema_id: str = ""  # names ``row_schema`` (a digest of it); empty without schemas
    row_text: str | None = None  # without schemas: the row's exact JSON text, every digit as written
    source_ms: int | None = None  # source.ts_ms: when the change was made in the source database

    @property
    def source_table(self) -> str:
        return str(self.source)


class Decoder:
    """Decodes one task's records; remembers the schemas it has read, which most records share.

    JsonConverter writes ``{"schema": ..., "payload": ...}``, and the schema is most of the bytes: a record whose
    bytes start with the schema of a record seen before (the same text, byte for byte) has only its payload read.
    """

    def __init__(self, target: Callable[[SourceTable], str] | None = None) -> None:
        self._target = target  # the table a source table goes to, for messages
        self._values = Prefixes()  # → the row schema (None: the value schema has no 'after')
        self._keys = Prefixes()  # → the key schema's readers
        self._row_schemas: dict[str, RowSchema] = {}
        self._sources: dict[tuple[Any, ...], SourceTable] = {}

    def decode(
        self,
        key: str | bytes | None,
        value: str | bytes | None,
        topic: str | None = None,
        partition: int | None = None,
        offset: int | None = None,
    ) -> Change | None:
        """The change a Kafka record holds, or None for a tombstone (and for a logical message)."""
        if value is None:
            return None  # the tombstone after a delete: Kafka's compaction marker, not a change
        at = (topic, partition, offset)
        envelope, row_schema, value_text = self._envelope(value, at)
        if not isinstance(envelope, dict):
            raise DecodeError(
                f"{where_of(*at)}: the value is JSON but not a Debezium change event (an object with 'op')"
            )
        op = envelope.get("op")
        if op is None and _is_not_a_row_event(envelope):
            return None  # a heartbeat, transaction marker or schema change sharing the subscription
        if op == "m":
            return None
        if op == "t":
            raise DecodeError(
                f"{where_of(*at)}: a TRUNCATE event ({self._source(envelope, topic)}); icesink does not empty "
                "tables on its own. Leave truncates out at the source (skipped.operations=t), or empty the table "
                "on purpose"
            )
        if op not in ("c", "r", "u", "d"):
            raise DecodeError(
                f"{where_of(*at)}: {op!r} is not a Debezium operation (c, r, u, d); is this a Debezium topic?"
            )
        source = self._source(envelope, topic)
        key_payload, key_readers, key_text = self._key(key, at)
        if not isinstance(key_payload, dict) or not key_payload:
            raise DecodeError(
                f"{where_of(*at)}: the event of {source} has no key (a struct of the primary key columns); icesink "
                "applies changes by primary key: give the table one, or set Debezium's message.key.columns"
            )
        try:
            if op == "d":
                row = _deleted_key(envelope.get("before"), key_payload, key_readers, row_schema)
                row_text = key_text if row_schema is None and key_readers is None else None
            else:
                row, row_text = self._upserted(envelope, op, row_schema, value_text, at, source)
        except FieldError as e:
            raise DecodeError(f"{self.where(at, source)}: {e.describe()}") from None
        source_block = envelope.get("source")
        return Change(
            source,
            DELETE if op == "d" else UPSERT,
            tuple(key_payload),
            row,
            _position(source_block if isinstance(source_block, dict) else {}, partition, offset),
            row_schema.schema if row_schema else None,
            row_schema.schema_id if row_schema else "",
            row_text,
            _milliseconds(source_block.get("ts_ms")) if isinstance(source_block, dict) else None,
        )

    def _upserted(
        self,
        envelope: dict[str, Any],
        op: str,
        row_schema: RowSchema | None,
        value_text: str | None,
        at: tuple[Any, ...],
        source: SourceTable,
    ) -> tuple[dict[str, Any], str | None]:
        """The new row of a create, read or update, and (without a schema) its exact text."""
        after = envelope.get("after")
        if not isinstance(after, dict):
            raise DecodeError(f"{self.where(at, source)}: a {op!r} event without an 'after' row")
        _refuse_unavailable(after, self, at, source)
        if row_schema is None:
            return after, member_text(value_text, "after")
        return row_schema.read(after), None

    def where(self, at: tuple[Any, ...], source: SourceTable) -> str:
        if self._target is None:
            return where_of(*at)
        return f"{where_of(*at)}: table {self._target(source)} (source {source})"

    def _source(self, envelope: dict[str, Any], topic: str | None) -> SourceTable:
        block = envelope.get("source")
        if isinstance(block, dict):
            names = (block.get("name"), block.get("db"), block.get("schema"), block.get("table"), topic)
            try:
                known = self._sources.get(names)
            except TypeError:  # a name that is not a string, number or null: read it the long way
                return source_table(envelope, topic)
            if known is None:
                known = self._sources[names] = source_table(envelope, topic)
            return known
        return source_table(envelope, topic)

    def _envelope(self, value: str | bytes, at: tuple[Any, ...]) -> tuple[Any, RowSchema | None, str | None]:
        """The payload, the row schema (None without schemas), and the value's text when it has no schema."""
        data = value.encode() if isinstance(value, str) else value
        known = self._values.find(data, at[0])
        if known is not None:
            start, row_schema = known
            decimals = row_schema is None or row_schema.decimals
            doubles = row_schema.doubles if row_schema is not None else frozenset()
            return payload_after(data, start, "value", at, decimals, doubles), row_schema, None
        text = text_of(data, "value", at)
        message, spans = parse_object(text, at, "value")
        if isinstance(message, dict) and set(message) == {"schema", "payload"}:
            schema = message["schema"]
            row_schema = self._row_schema(schema) if isinstance(schema, dict) else None
            if spans["schema"][1] < spans["payload"][0]:  # schema first, as JsonConverter writes it
                self._values.add(text[: spans["payload"][0]].encode(), row_schema, at[0])
            return message["payload"], row_schema, None
        return message, None, text

    def _key(
        self, key: str | bytes | None, at: tuple[Any, ...]
    ) -> tuple[Any, dict[str, Callable[[Any], Any]] | None, str | None]:
        """The key's payload, its schema's readers (None without a schema), and its text without a schema."""
        if key is None:
            return None, None, None
        data = key.encode() if isinstance(key, str) else key
        known = self._keys.find(data, at[0])
        if known is not None:
            start, readers = known
            return payload_after(data, start, "key", at, True), readers, None
        text = text_of(data, "key", at)
        message, spans = parse_object(text, at, "key")
        if isinstance(message, dict) and set(message) == {"schema", "payload"}:
            schema = message["schema"]
            fields = schema.get("fields", []) if isinstance(schema, dict) else []
            readers = {f["field"]: reader(f) for f in fields if isinstance(f, dict) and "field" in f}
            if spans["schema"][1] < spans["payload"][0]:
                self._keys.add(text[: spans["payload"][0]].encode(), readers, at[0])
            return message["payload"], readers if isinstance(schema, dict) else None, None
        return message, None, text

    def _row_schema(self, value_schema: dict[str, Any]) -> RowSchema | None:
        row = field_schema(value_schema, "after")
        if row is None:
            return None
        text = json.dumps(row, sort_keys=True)
        known = self._row_schemas.get(text)
        if known is None:
            known = self._row_schemas[text] = RowSchema.of(row, text)
        return known


_DEFAULT_DECODER: Decoder | None = None


def decode(
    key: str | bytes | None,
    value: str | bytes | None,
    topic: str | None = None,
    partition: int | None = None,
    offset: int | None = None,
) -> Change | None:
    """The change a Kafka record holds, or None for a tombstone (see :class:`Decoder`)."""
    global _DEFAULT_DECODER
    if _DEFAULT_DECODER is None:
        _DEFAULT_DECODER = Decoder()
    return _DEFAULT_DECODER.decode(key, value, topic, partition, offset)


# What PostgreSQL's connector sends for an unchanged TOASTed value (text, and bytes as base64): not the value.
UNAVAILABLE = ("__debezium_unavailable_value", "X19kZWJleml1bV91bmF2YWlsYWJsZV92YWx1ZQ==")


def _refuse_unavailable(after: dict[str, Any], decoder: Decoder, at: tuple[Any, ...], source: SourceTable) -> None:
    """An upsert would write the placeholder over the real value: refused, naming the column."""
    for name, value in after.items():  # type tests first: comparing a number with a text is slow
        kind = type(value)
        if (kind is str and value in UNAVAILABLE) or (kind is list and any(v in UNAVAILABLE for v in value)):
            raise DecodeError(
                f"{decoder.where(at, source)}: column {name!r} holds Debezium's placeholder for an unchanged "
                "TOASTed value, not the value; applying the change would overwrite the real one. Set REPLICA "
                "IDENTITY FULL on the source table, so that updates carry every value"
            )


def _is_not_a_row_event(payload: dict[str, Any]) -> bool:
    """Records Debezium writes beside row events: heartbeats, transaction markers, schema changes."""
    return (
        set(payload) <= {"ts_ms"} or {"status", "id"} <= set(payload) or "ddl" in payload or "tableChanges" in payload
    )


def _deleted_key(
    before: Any,
    key_payload: dict[str, Any],
    key_readers: dict[str, Callable[[Any], Any]] | None,
    row_schema: RowSchema | None,
) -> dict[str, Any]:
    """The deleted row's key, typed by the key's schema, else by the row's (a key written without a schema
    holds a timestamp or a decimal in its raw form, which only the row's schema can read)."""
    if (
        key_readers is None
        and row_schema is not None
        and isinstance(before, dict)
        and all(k in before for k in key_payload)
    ):
        return read_fields({name: before[name] for name in key_payload}, row_schema.readers)
    if key_readers is not None:
        return read_fields(key_payload, key_readers)
    if row_schema is not None:
        return read_fields(key_payload, row_schema.readers)
    return key_payload


_BINLOG_NUMBER = re.compile(r"(\d+)$")


def _milliseconds(value: Any) -> int | None:
    """A ``ts_ms`` as Debezium writes it (a JSON number), or None for anything else."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _position(source: dict[str, Any], partition: int | None, offset: int | None) -> str:
    """A string that sorts as the source order of one key's changes.

    Where the source gives a position that orders every change (PostgreSQL's ``source.sequence``: last commit
    LSN, then LSN; MySQL's binlog file number, position and row), that position, then the Kafka offset (for
    changes of one position: a snapshot's reads). A key's changes can be in two Kafka partitions (its key's
    bytes changed with its schema, or the topic got partitions), and offsets of two partitions say nothing of
    which came first. Otherwise the Kafka offset (a partition keeps the order the connector wrote); without
    one, what the source has: the LSN alone (not monotonic across interleaved transactions), ``ts_ms``.
    """
    ordered = _ordering_position(source)
    if ordered is not None:
        return ordered + (f"k{offset:020d}" if offset is not None else "")
    if offset is not None:
        return f"k{partition or 0:010d}{offset:020d}"
    if source.get("lsn") is not None:
        return f"p{0:020d}{int(source['lsn']):020d}"
    return f"t{int(source.get('ts_ms') or 0):020d}"


def _ordering_position(source: dict[str, Any]) -> str | None:
    """The source's position where it orders every change of the source (None where it does not)."""
    sequence = source.get("sequence")
    if sequence:
        try:
            last_commit, lsn = fast_json.loads(sequence)
            return f"p{int(last_commit or 0):020d}{int(lsn or 0):020d}"
        except (ValueError, TypeError):
            pass
    if source.get("file") is not None:
        number = _BINLOG_NUMBER.search(str(source["file"]))
        file_number = int(number.group(1)) if number else 0
        return f"m{file_number:010d}{int(source.get('pos') or 0):020d}{int(source.get('row') or 0):010d}"
    return None
