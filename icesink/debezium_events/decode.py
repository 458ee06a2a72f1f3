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

import base64
import binascii
import datetime
import decimal
import hashlib
import json
import math
import re
import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

# Logical type names (the schema's ``name``).
DECIMAL = "org.apache.kafka.connect.data.Decimal"
VARIABLE_DECIMAL = "io.debezium.data.VariableScaleDecimal"
DATES = ("org.apache.kafka.connect.data.Date", "io.debezium.time.Date")
TIME_MILLIS = ("org.apache.kafka.connect.data.Time", "io.debezium.time.Time")
TIME_MICROS = "io.debezium.time.MicroTime"
TIME_NANOS = "io.debezium.time.NanoTime"
TIMESTAMP_MILLIS = ("org.apache.kafka.connect.data.Timestamp", "io.debezium.time.Timestamp")
TIMESTAMP_MICROS = "io.debezium.time.MicroTimestamp"
TIMESTAMP_NANOS = "io.debezium.time.NanoTimestamp"
ZONED_TIMESTAMP = "io.debezium.time.ZonedTimestamp"
# A decimal's precision when its schema names none (Connect's own decimals carry only the scale).
DEFAULT_DECIMAL_PRECISION = 38

UPSERT, DELETE = "U", "D"
_EPOCH = datetime.datetime(1970, 1, 1)
_EPOCH_DATE = datetime.date(1970, 1, 1)
_WIDE = decimal.Context(prec=200)
_INTEGER_RANGES = {
    "int8": (-(2**7), 2**7 - 1),
    "int16": (-(2**15), 2**15 - 1),
    "int32": (-(2**31), 2**31 - 1),
    "int64": (-(2**63), 2**63 - 1),
}
# How JSON writers spell the doubles JSON has no numbers for (Jackson quotes them).
_NON_FINITE = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf, "+Infinity": math.inf}
# Numbers with a fraction stay exact: a decimal written as a JSON number (decimal.format=NUMERIC) keeps every digit.
_DECODER = json.JSONDecoder(parse_float=decimal.Decimal)
_WHITESPACE = re.compile(r"[ \t\n\r]*")


class DecodeError(ValueError):
    """A record that is not a Debezium change event icesink can apply; the message says which and why."""


class _Bad(ValueError):
    """A value its own schema says it cannot be; the message says why (the caller names the column)."""


@dataclass(frozen=True)
class SourceTable:
    """The table of the source database a change comes from, as Debezium's ``source`` block names it.

    ``connector`` is the connector's logical name (``topic.prefix``), ``database`` the database, ``schema`` the
    schema (None where the database has none, as MySQL's); ``table`` is the table's own name, dots and all.
    """

    connector: str | None
    database: str | None
    schema: str | None
    table: str

    def __str__(self) -> str:
        """``schema.table`` (PostgreSQL) or ``database.table`` (MySQL), as the source names it."""
        container = self.schema or self.database
        return f"{container}.{self.table}" if container else self.table

    @property
    def names(self) -> tuple[str, ...]:
        """The names a mapping may give it by, most specific first: ``database.schema.table``,
        ``schema.table`` (or ``database.table``), ``table``."""
        full = f"{self.database}.{self.schema}.{self.table}" if self.database and self.schema else None
        return tuple(dict.fromkeys(n for n in (full, str(self), self.table) if n))

    @property
    def key(self) -> str:
        """One string per source table (what a micro-batch is grouped by)."""
        return json.dumps([self.connector, self.database, self.schema, self.table], ensure_ascii=False)

    @classmethod
    def of_key(cls, key: str) -> SourceTable:
        connector, database, schema, table = json.loads(key)
        return cls(connector, database, schema, table)

    def describe(self) -> str:
        """Every part of the name, for messages about two sources that share a shorter one."""
        parts = [f"connector {self.connector}"] if self.connector else []
        parts += [f"database {self.database}"] if self.database else []
        parts += [f"schema {self.schema}"] if self.schema else []
        return f"{self} ({', '.join([*parts, f'table {self.table}'])})"


@dataclass(frozen=True)
class Change:
    """One change of one row: ``op`` is :data:`UPSERT` or :data:`DELETE`; ``row`` holds the key for a delete."""

    source: SourceTable
    op: str
    key_names: tuple[str, ...]
    row: dict[str, Any]  # canonical values (see the module docstring); as parsed without a schema
    position: str  # sorts like the source order of this key's changes
    row_schema: dict[str, Any] | None  # the Connect schema of ``after``, None without schemas
    schema_id: str = ""  # names ``row_schema`` (a digest of it); empty without schemas
    row_text: str | None = None  # without schemas: the row's exact JSON text, every digit as written

    @property
    def source_table(self) -> str:
        return str(self.source)


@dataclass(frozen=True)
class _RowSchema:
    """A Connect schema of ``after`` with what reading rows of it needs (built once per schema)."""

    schema: dict[str, Any] | None
    schema_id: str
    fields: dict[str, dict[str, Any]]
    readers: dict[str, Callable[[Any], Any]]
    decimals: bool  # some field is a decimal, which may come as a JSON number: read numbers exactly


class Decoder:
    """Decodes one task's records; remembers the schemas it has read, which most records share.

    JsonConverter writes ``{"schema": ..., "payload": ...}``, and the schema is most of the bytes: a record whose
    bytes start with the schema of a record seen before (the same text, byte for byte) has only its payload read.
    """

    def __init__(self, target: Callable[[SourceTable], str] | None = None) -> None:
        self._target = target  # the table a source table goes to, for messages
        self._prefixes: dict[bytes, tuple[Any, _RowSchema | None]] = {}  # schema text → (value schema, row schema)
        self._recent: bytes | None = None
        self._row_schemas: dict[str, _RowSchema] = {}

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
        where = _where(topic, partition, offset)
        envelope, row_schema, value_text = self._envelope(value, where)
        if not isinstance(envelope, dict):
            raise DecodeError(f"{where}: the value is JSON but not a Debezium change event (an object with 'op')")
        op = envelope.get("op")
        if op is None and _is_not_a_row_event(envelope):
            return None  # a heartbeat, transaction marker or schema change sharing the subscription
        if op == "m":
            return None
        if op == "t":
            raise DecodeError(
                f"{where}: a TRUNCATE event ({_source_table(envelope, topic)}); icesink does not empty tables on "
                "its own. Leave truncates out at the source (skipped.operations=t), or empty the table on purpose"
            )
        if op not in ("c", "r", "u", "d"):
            raise DecodeError(f"{where}: {op!r} is not a Debezium operation (c, r, u, d); is this a Debezium topic?")
        source = _source_table(envelope, topic)
        key_payload, key_schema, key_text = _key(key, where)
        if not isinstance(key_payload, dict) or not key_payload:
            raise DecodeError(
                f"{where}: the event of {source} has no key (a struct of the primary key columns); icesink applies "
                "changes by primary key: give the table one, or set Debezium's message.key.columns"
            )
        where = self._where_in(source, where)
        key_names = tuple(key_payload)
        row_text = None
        if op == "d":
            row = _deleted_key(envelope.get("before"), key_payload, key_schema, row_schema, where)
            change_op = DELETE
            if row_schema is None and key_schema is None:
                row_text = key_text
        else:
            after = envelope.get("after")
            if not isinstance(after, dict):
                raise DecodeError(f"{where}: a {op!r} event without an 'after' row")
            _refuse_unavailable(after, where)
            row = _read_row(after, row_schema, where)
            change_op = UPSERT
            if row_schema is None:
                row_text = _member_text(value_text, "after")
        source_block = envelope.get("source")
        return Change(
            source=source,
            op=change_op,
            key_names=key_names,
            row=row,
            position=_position(source_block if isinstance(source_block, dict) else {}, partition, offset),
            row_schema=row_schema.schema if row_schema else None,
            schema_id=row_schema.schema_id if row_schema else "",
            row_text=row_text,
        )

    def _where_in(self, source: SourceTable, where: str) -> str:
        if self._target is None:
            return where
        return f"{where}: table {self._target(source)} (source {source})"

    def _envelope(self, value: str | bytes, where: str) -> tuple[Any, _RowSchema | None, str | None]:
        """The payload, the row schema (None without schemas), and the value's text when it has no schema."""
        data = value.encode() if isinstance(value, str) else value
        recent = self._recent
        if recent is not None and data.startswith(recent):
            return self._with_known_schema(data, recent, where)
        for prefix in self._prefixes:
            if data.startswith(prefix):
                self._recent = prefix
                return self._with_known_schema(data, prefix, where)
        text = _text(data, "value", where)
        message, spans = _parse_object(text, where, "value")
        if isinstance(message, dict) and set(message) == {"schema", "payload"}:
            schema = message["schema"]
            row_schema = self._row_schema(schema) if isinstance(schema, dict) else None
            schema_end = spans["schema"][1]
            payload_start = spans["payload"][0]
            if schema_end < payload_start:  # schema first, as JsonConverter writes it: remember its bytes
                prefix = text[:payload_start].encode()
                self._prefixes[prefix] = (schema, row_schema)
                self._recent = prefix
            return message["payload"], row_schema, None
        return message, None, text

    def _with_known_schema(self, data: bytes, prefix: bytes, where: str) -> tuple[Any, _RowSchema | None, None]:
        _, row_schema = self._prefixes[prefix]
        rest = _text(data[len(prefix) :], "value", where).rstrip()
        if not rest.endswith("}"):
            raise DecodeError(f"{where}: the record's value is not JSON (it ends before its last '}}')")
        try:
            payload = json.loads(
                rest[:-1], parse_float=decimal.Decimal if row_schema is None or row_schema.decimals else float
            )
        except ValueError as e:
            raise DecodeError(f"{where}: the record's value is not JSON ({e})") from e
        return payload, row_schema, None

    def _row_schema(self, value_schema: dict[str, Any]) -> _RowSchema | None:
        row = _field_schema(value_schema, "after")
        if row is None:
            return None
        text = json.dumps(row, sort_keys=True)
        known = self._row_schemas.get(text)
        if known is None:
            fields = {f["field"]: f for f in row.get("fields", []) if isinstance(f, dict) and "field" in f}
            readers = {name: _reader(field) for name, field in fields.items()}
            digest = hashlib.sha1(text.encode(), usedforsecurity=False).hexdigest()
            decimals = DECIMAL in text or VARIABLE_DECIMAL in text
            known = self._row_schemas[text] = _RowSchema(row, digest, fields, readers, decimals)
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


def schema_id_of(row_schema: dict[str, Any]) -> str:
    """The name :class:`Change` gives a row schema."""
    return hashlib.sha1(json.dumps(row_schema, sort_keys=True).encode(), usedforsecurity=False).hexdigest()


# What PostgreSQL's connector sends for an unchanged TOASTed value (text, and bytes as base64): not the value.
UNAVAILABLE = ("__debezium_unavailable_value", "X19kZWJleml1bV91bmF2YWlsYWJsZV92YWx1ZQ==")


def _refuse_unavailable(after: dict[str, Any], where: str) -> None:
    """An upsert would write the placeholder over the real value: refused, naming the column."""
    for name, value in after.items():
        if value in UNAVAILABLE or (isinstance(value, list) and any(v in UNAVAILABLE for v in value)):
            raise DecodeError(
                f"{where}: column {name!r} holds Debezium's placeholder for an unchanged TOASTed value, not the "
                "value; applying the change would overwrite the real one. Set REPLICA IDENTITY FULL on the source "
                "table, so that updates carry every value"
            )


def _is_not_a_row_event(payload: dict[str, Any]) -> bool:
    """Records Debezium writes beside row events: heartbeats, transaction markers, schema changes."""
    return (
        set(payload) <= {"ts_ms"} or {"status", "id"} <= set(payload) or "ddl" in payload or "tableChanges" in payload
    )


def _key(key: str | bytes | None, where: str) -> tuple[Any, dict[str, Any] | None, str | None]:
    """The key's payload, its schema, and (without a schema) its exact text."""
    if key is None:
        return None, None, None
    text = _text(key.encode() if isinstance(key, str) else key, "key", where)
    message, _ = _parse_object(text, where, "key")
    if isinstance(message, dict) and set(message) == {"schema", "payload"}:
        schema = message["schema"]
        return message["payload"], schema if isinstance(schema, dict) else None, None
    return message, None, text


def _deleted_key(
    before: Any,
    key_payload: dict[str, Any],
    key_schema: dict[str, Any] | None,
    row_schema: _RowSchema | None,
    where: str,
) -> dict[str, Any]:
    """The deleted row's key, typed by the key's schema, else by the row's (a key written without a schema
    holds a timestamp or a decimal in its raw form, which only the row's schema can read)."""
    if (
        key_schema is None
        and row_schema is not None
        and isinstance(before, dict)
        and all(k in before for k in key_payload)
    ):
        return {name: _read(row_schema.readers.get(name), before[name], where, name) for name in key_payload}
    if isinstance(key_schema, dict):
        fields = {f["field"]: f for f in key_schema.get("fields", []) if isinstance(f, dict) and "field" in f}
        return {
            name: _read(_reader(fields[name]) if name in fields else None, v, where, name)
            for name, v in key_payload.items()
        }
    if row_schema is not None:
        return {name: _read(row_schema.readers.get(name), v, where, name) for name, v in key_payload.items()}
    return key_payload


def _read_row(after: dict[str, Any], row_schema: _RowSchema | None, where: str) -> dict[str, Any]:
    if row_schema is None:
        return after
    readers = row_schema.readers
    return {name: _read(readers.get(name), value, where, name) for name, value in after.items()}


def _read(reader: Callable[[Any], Any] | None, value: Any, where: str, column: str) -> Any:
    if value is None:
        return None
    if reader is None:
        return value  # a field the schema does not describe: as the JSON had it
    try:
        return reader(value)
    except _Bad as e:
        raise DecodeError(f"{where}: column {column!r} holds {_shown(value)}, {e}") from None
    except (ValueError, TypeError, OverflowError, KeyError, AttributeError, decimal.InvalidOperation) as e:
        raise DecodeError(f"{where}: column {column!r} holds {_shown(value)}, which cannot be read: {e}") from None


def _text(data: bytes, what: str, where: str) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise DecodeError(f"{where}: the record's {what} is not JSON ({e})") from e


def _parse_object(text: str, where: str, what: str) -> tuple[Any, dict[str, tuple[int, int]]]:
    """The JSON value of ``text``; for an object, also where each of its members' values starts and ends."""
    try:
        start = _WHITESPACE.match(text, 0).end()  # type: ignore[union-attr]
        if not text.startswith("{", start):
            return json.loads(text), {}
        spans: dict[str, tuple[int, int]] = {}
        result: dict[str, Any] = {}
        index = _WHITESPACE.match(text, start + 1).end()  # type: ignore[union-attr]
        if text.startswith("}", index):
            return _only(text, index + 1, result), spans
        while True:
            if not text.startswith('"', index):
                raise ValueError(f"expected a member name at character {index}")
            name, index = json.decoder.scanstring(text, index + 1)  # type: ignore[attr-defined]
            index = _WHITESPACE.match(text, index).end()  # type: ignore[union-attr]
            if not text.startswith(":", index):
                raise ValueError(f"expected ':' at character {index}")
            index = _WHITESPACE.match(text, index + 1).end()  # type: ignore[union-attr]
            member, end = _DECODER.raw_decode(text, index)
            spans[name] = (index, end)
            result[name] = member
            index = _WHITESPACE.match(text, end).end()  # type: ignore[union-attr]
            if text.startswith(",", index):
                index = _WHITESPACE.match(text, index + 1).end()  # type: ignore[union-attr]
                continue
            if text.startswith("}", index):
                return _only(text, index + 1, result), spans
            raise ValueError(f"expected ',' or '}}' at character {index}")
    except ValueError as e:
        raise DecodeError(f"{where}: the record's {what} is not JSON ({e})") from e


def _only(text: str, end: int, result: Any) -> Any:
    if text[end:].strip():
        raise ValueError(f"extra data at character {end}")
    return result


def _member_text(text: str | None, name: str) -> str | None:
    """The exact JSON text of a member of the (schemaless) value, every digit as written."""
    if text is None:
        return None
    _, spans = _parse_object(text, "", "value")
    span = spans.get(name)
    return text[span[0] : span[1]] if span else None


def _field_schema(schema: dict[str, Any], name: str) -> dict[str, Any] | None:
    for field in schema.get("fields", []):
        if isinstance(field, dict) and field.get("field") == name:
            return dict(field)
    return None


def _where(topic: str | None, partition: int | None, offset: int | None) -> str:
    parts = [f"topic {topic}" if topic is not None else "a record"]
    if partition is not None:
        parts.append(f"partition {partition}")
    if offset is not None:
        parts.append(f"offset {offset}")
    return ", ".join(parts)


def _source_table(envelope: dict[str, Any], topic: str | None) -> SourceTable:
    """The source block's names; from the topic (``prefix.schema.table``) when the source says nothing."""
    source = envelope.get("source")
    source = source if isinstance(source, dict) else {}
    table = source.get("table")
    if table:
        return SourceTable(_name(source.get("name")), _name(source.get("db")), _name(source.get("schema")), str(table))
    if topic:
        parts = topic.split(".")
        return SourceTable(parts[0] if len(parts) > 2 else None, None, parts[-2] if len(parts) > 1 else None, parts[-1])
    raise DecodeError("an event whose source names no table, outside any topic")


def _name(value: Any) -> str | None:
    return str(value) if value not in (None, "") else None


_BINLOG_NUMBER = re.compile(r"(\d+)$")


def _position(source: dict[str, Any], partition: int | None, offset: int | None) -> str:
    """A string that sorts as the source order of one key's changes.

    The Kafka offset when there is one (a key's changes stay in one partition, in source order); else
    PostgreSQL's (last commit LSN, LSN) from ``source.sequence``, or MySQL's (binlog file number, position,
    row); ``ts_ms`` last.
    """
    if offset is not None:
        return f"k{partition or 0:010d}{offset:020d}"
    sequence = source.get("sequence")
    if sequence:
        try:
            last_commit, lsn = json.loads(sequence)
            return f"p{int(last_commit or 0):020d}{int(lsn or 0):020d}"
        except (ValueError, TypeError):
            pass
    if source.get("lsn") is not None:
        return f"p{0:020d}{int(source['lsn']):020d}"
    if source.get("file") is not None:
        number = _BINLOG_NUMBER.search(str(source["file"]))
        file_number = int(number.group(1)) if number else 0
        return f"m{file_number:010d}{int(source.get('pos') or 0):020d}{int(source.get('row') or 0):010d}"
    return f"t{int(source.get('ts_ms') or 0):020d}"


# --- reading a value of a Connect type, checked against the type -----------------------------------------------------


def _reader(schema: dict[str, Any]) -> Callable[[Any], Any]:
    """A function from a JSON value of this Connect schema to its canonical value (raises _Bad or ValueError)."""
    name = schema.get("name")
    kind = schema.get("type")
    if name == DECIMAL:
        parameters = schema.get("parameters") or {}
        scale = int(parameters.get("scale", 0))
        precision = int(parameters.get("connect.decimal.precision", DEFAULT_DECIMAL_PRECISION))
        return lambda value: _decimal_text(value, precision, scale)
    if name == VARIABLE_DECIMAL:
        return lambda value: _decimal_text(value["value"], None, int(value["scale"]))
    if name in DATES:
        return lambda value: (_EPOCH_DATE + datetime.timedelta(days=_whole(value, "int32"))).isoformat()
    if name in TIME_MILLIS:
        return lambda value: _whole(value, "int32") * 1000
    if name == TIME_MICROS:
        return lambda value: _whole(value, "int64")
    if name == TIME_NANOS:
        return lambda value: _micros_of_nanos(_whole(value, "int64"))
    if name in TIMESTAMP_MILLIS:
        return lambda value: _timestamp(_whole(value, "int64") * 1000)
    if name == TIMESTAMP_MICROS:
        return lambda value: _timestamp(_whole(value, "int64"))
    if name == TIMESTAMP_NANOS:
        return lambda value: _timestamp(_micros_of_nanos(_whole(value, "int64")))
    if name == ZONED_TIMESTAMP:
        return lambda value: _zoned(_string(value))
    if kind in _INTEGER_RANGES:
        return lambda value: _whole(value, kind)
    if kind in ("float", "float32"):
        return _single
    if kind in ("double", "float64"):
        return _double
    if kind == "boolean":
        return _boolean
    if kind == "string":
        return _string
    if kind == "bytes":
        return _base64
    if kind == "struct":
        fields = {f["field"]: _reader(f) for f in schema.get("fields", []) if isinstance(f, dict) and "field" in f}
        return lambda value: _struct(value, fields)
    if kind == "array":
        items = _reader(schema["items"]) if isinstance(schema.get("items"), dict) else _as_is
        return lambda value: [None if v is None else items(v) for v in _array(value)]
    if kind == "map":
        keys = _reader(schema["keys"]) if isinstance(schema.get("keys"), dict) else _as_is
        values = _reader(schema["values"]) if isinstance(schema.get("values"), dict) else _as_is
        return lambda value: _map(value, keys, values)
    return _as_is


def _as_is(value: Any) -> Any:
    return value


def _whole(value: Any, kind: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise _Bad(f"which is not a whole number, as its type {kind} says")
    low, high = _INTEGER_RANGES[kind]
    if not low <= value <= high:
        raise _Bad(f"which is out of the range of its type {kind}")
    return value


def _double(value: Any) -> float:
    if isinstance(value, str) and value in _NON_FINITE:
        return _NON_FINITE[value]
    if isinstance(value, bool) or not isinstance(value, int | float | decimal.Decimal):
        raise _Bad("which is not a number, as its type double says")
    return float(value)  # correctly rounded from the digits, as any JSON reader gives


def _single(value: Any) -> float:
    """A 32-bit float's value, as the double equal to it (what Iceberg gives when a float column is widened)."""
    number = _double(value)
    if math.isnan(number) or math.isinf(number):
        return number
    try:
        return float(struct.unpack("f", struct.pack("f", number))[0])
    except OverflowError:
        raise _Bad("which is out of the range of its type float") from None


def _boolean(value: Any) -> bool:
    if not isinstance(value, bool):
        raise _Bad("which is not true or false, as its type boolean says")
    return value


def _string(value: Any) -> str:
    if not isinstance(value, str):
        raise _Bad("which is not a string, as its type says")
    return value


def _base64(value: Any) -> str:
    if not isinstance(value, str):
        raise _Bad("which is not base64 text, as its type bytes is written")
    try:
        base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise _Bad("which is not base64 text, as its type bytes is written") from None
    return value


def _struct(value: Any, fields: dict[str, Callable[[Any], Any]]) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise _Bad("which is not an object, as its type struct says")
    return {k: None if v is None else fields.get(k, _as_is)(v) for k, v in value.items()}


def _array(value: Any) -> list[Any]:
    if not isinstance(value, list):
        raise _Bad("which is not an array, as its type says")
    return value


def _map(value: Any, keys: Callable[[Any], Any], values: Callable[[Any], Any]) -> Any:
    if isinstance(value, dict):
        return {k: None if v is None else values(v) for k, v in value.items()}
    # A map whose keys are not strings: JsonConverter writes [key, value] pairs.
    return [
        {"key": None if k is None else keys(k), "value": None if v is None else values(v)} for k, v in _array(value)
    ]


def _decimal_text(value: Any, precision: int | None, scale: int) -> str:
    """The decimal's exact digits; with a ``precision``, checked to fit ``decimal(precision, scale)``."""
    if isinstance(value, int | float | decimal.Decimal) and not isinstance(value, bool):
        number = decimal.Decimal(repr(value) if isinstance(value, float) else value)  # decimal.format=NUMERIC
    elif isinstance(value, str):
        unscaled = int.from_bytes(base64.b64decode(value, validate=True), "big", signed=True)
        number = decimal.Decimal(unscaled).scaleb(-scale, _WIDE)
    else:
        raise _Bad("which is not a decimal (base64 of its unscaled value, or a number)")
    if precision is not None:
        unscaled_value = number.scaleb(scale, _WIDE)
        if unscaled_value != unscaled_value.to_integral_value():
            raise _Bad(f"which has more digits after the point than its type decimal({precision}, {scale}) holds")
        if abs(unscaled_value) >= decimal.Decimal(10) ** precision:
            raise _Bad(f"which has more digits than its type decimal({precision}, {scale}) holds")
    return format(number, "f")


def _micros_of_nanos(nanos: int) -> int:
    if nanos % 1000:
        raise _Bad("which is finer than microseconds, which Iceberg 2 tables cannot hold (nothing is rounded away)")
    return nanos // 1000


def _timestamp(micros: int) -> str:
    try:
        moment = _EPOCH + datetime.timedelta(microseconds=micros)
    except OverflowError:
        raise _Bad("which is outside the years 1 to 9999 that icesink writes") from None
    return moment.isoformat(timespec="microseconds")


def _zoned(text: str) -> str:
    """An ISO 8601 time with an offset, as UTC with at most microseconds (PostgreSQL pads to its precision)."""
    if text in ("infinity", "-infinity"):
        raise _Bad("PostgreSQL's infinity, which has no timestamp value")
    match = re.fullmatch(r"(.*T\d\d:\d\d:\d\d)(?:\.(\d+))?(Z|[+-]\d\d:\d\d)", text)
    if match is None:
        raise _Bad("which is not an ISO 8601 time with an offset")
    head, fraction, zone = match.groups()
    moment = datetime.datetime.fromisoformat(f"{head}{'+00:00' if zone == 'Z' else zone}")
    if fraction and len(fraction) > 6 and int(fraction[6:]) != 0:
        raise _Bad("which is finer than microseconds, which Iceberg's timestamptz cannot hold")
    moment = moment.replace(microsecond=int((fraction or "0")[:6].ljust(6, "0")))
    return moment.astimezone(datetime.UTC).replace(tzinfo=None).isoformat(timespec="microseconds") + "Z"


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:80] + "…"
