"""Debezium change events, as Kafka Connect's JsonConverter writes them, decoded into plain changes.

Runs on the executors (no Spark, no catalog). Each Kafka record becomes at most one :class:`Change`:
the table it belongs to, upsert or delete, its key, its row, its position in the source, and the
Connect schema of its row. Values of Debezium's logical types are rewritten into the one spelling
Spark's ``from_json`` reads exactly into the column type :mod:`icesink.debezium_events.connect_types` gives them
(a decimal as its exact digits, a timestamp in ISO 8601, a date as ``YYYY-MM-DD``); bytes stay base64.

What the format is (read from JsonConverter and Debezium's sources): a value is
``{"schema": ..., "payload": ...}`` with schemas enabled, the payload alone without; ``payload.op`` is
``c``/``r``/``u``/``d`` (``t`` truncate and ``m`` message are refused/skipped), ``after`` the row (null
for a delete), ``source`` where it happened; a tombstone (null value) follows each delete and carries
nothing. The key is a struct of the primary key columns.
"""

from __future__ import annotations

import base64
import datetime
import decimal
import json
import re
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

UPSERT, DELETE = "U", "D"
_EPOCH = datetime.datetime(1970, 1, 1)
_EPOCH_DATE = datetime.date(1970, 1, 1)
_WIDE = decimal.Context(prec=200)


class DecodeError(ValueError):
    """A record that is not a Debezium change event icesink can apply; the message says which and why."""


@dataclass(frozen=True)
class Change:
    """One change of one row: ``op`` is :data:`UPSERT` or :data:`DELETE`; ``row`` holds the key for a delete."""

    source_table: str  # schema.table (PostgreSQL) or database.table (MySQL), as the source names it
    op: str
    key_names: tuple[str, ...]
    row: dict[str, Any]  # canonical values (see the module docstring)
    position: str  # sorts like the source order of this key's changes
    row_schema: dict[str, Any] | None  # the Connect schema of ``after``, None without schemas


def decode(
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
    envelope, value_schema = _unwrap(_json(value, "value", where))
    if not isinstance(envelope, dict):
        raise DecodeError(f"{where}: the value is JSON but not a Debezium change event (an object with 'op')")
    op = envelope.get("op")
    if op is None and _is_not_a_row_event(envelope):
        return None  # a heartbeat, transaction marker or schema change sharing the subscription
    if op == "m":
        return None
    if op == "t":
        raise DecodeError(
            f"{where}: a TRUNCATE event ({_source_table(envelope, topic)}); icesink does not empty tables on its "
            "own. Leave truncates out at the source (skipped.operations=t), or empty the table on purpose"
        )
    if op not in ("c", "r", "u", "d"):
        raise DecodeError(f"{where}: {op!r} is not a Debezium operation (c, r, u, d); is this a Debezium topic?")
    key_payload, key_schema = _unwrap(_json(key, "key", where)) if key is not None else (None, None)
    if not isinstance(key_payload, dict) or not key_payload:
        raise DecodeError(
            f"{where}: the event of {_source_table(envelope, topic)} has no key (a struct of the primary key "
            "columns); icesink applies changes by primary key: give the table one, or set Debezium's "
            "message.key.columns"
        )
    row_schema = _field_schema(value_schema, "after") if isinstance(value_schema, dict) else None
    fields = {f["field"]: f for f in row_schema.get("fields", [])} if row_schema else {}
    key_names = tuple(key_payload)
    if op == "d":
        row = _deleted_key(envelope.get("before"), key_payload, key_schema, fields, where)
        change_op = DELETE
    else:
        after = envelope.get("after")
        if not isinstance(after, dict):
            raise DecodeError(f"{where}: a {op!r} event without an 'after' row")
        _refuse_unavailable(after, where)
        row = {name: _canonical(value, fields.get(name), where, name) for name, value in after.items()}
        change_op = UPSERT
    source = envelope.get("source")
    return Change(
        source_table=_source_table(envelope, topic),
        op=change_op,
        key_names=key_names,
        row=row,
        position=_position(source if isinstance(source, dict) else {}, partition, offset),
        row_schema=row_schema,
    )


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


def _deleted_key(
    before: Any,
    key_payload: dict[str, Any],
    key_schema: dict[str, Any] | None,
    fields: dict[str, dict[str, Any]],
    where: str,
) -> dict[str, Any]:
    """The deleted row's key, typed by the key's schema, else by the row's (a key written without a schema
    holds a timestamp or a decimal in its raw form, which only the row's schema can read)."""
    if key_schema is None and fields and isinstance(before, dict) and all(k in before for k in key_payload):
        return {name: _canonical(before[name], fields.get(name), where, name) for name in key_payload}
    key_fields = {f["field"]: f for f in key_schema.get("fields", [])} if isinstance(key_schema, dict) else fields
    return {name: _canonical(value, key_fields.get(name), where, name) for name, value in key_payload.items()}


def _json(data: str | bytes, what: str, where: str) -> Any:
    try:
        # Numbers with a fraction stay exact: a decimal written as a JSON number keeps every digit.
        return json.loads(data, parse_float=decimal.Decimal)
    except (ValueError, UnicodeDecodeError) as e:
        raise DecodeError(f"{where}: the record's {what} is not JSON ({e})") from e


def _unwrap(message: Any) -> tuple[Any, dict[str, Any] | None]:
    """The payload and its schema (None when the converter wrote no schema)."""
    if isinstance(message, dict) and set(message) == {"schema", "payload"}:
        return message["payload"], message["schema"]
    return message, None


def _field_schema(schema: dict[str, Any], name: str) -> dict[str, Any] | None:
    for field in schema.get("fields", []):
        if field.get("field") == name:
            return dict(field)
    return None


def _where(topic: str | None, partition: int | None, offset: int | None) -> str:
    parts = [f"topic {topic}" if topic is not None else "a record"]
    if partition is not None:
        parts.append(f"partition {partition}")
    if offset is not None:
        parts.append(f"offset {offset}")
    return ", ".join(parts)


def _source_table(envelope: dict[str, Any], topic: str | None) -> str:
    """``schema.table`` (PostgreSQL) or ``database.table`` (MySQL); from the topic when the source says nothing."""
    source = envelope.get("source") or {}
    table = source.get("table")
    container = source.get("schema") or source.get("db")
    if table:
        return f"{container}.{table}" if container else str(table)
    if topic:
        return ".".join(topic.split(".")[-2:])
    raise DecodeError("an event whose source names no table, outside any topic")


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


def _canonical(value: Any, schema: dict[str, Any] | None, where: str, column: str) -> Any:
    """``value`` as Spark's from_json reads it into the column's type (:mod:`icesink.debezium_events.connect_types`)."""
    if value is None:
        return None
    if schema is None:
        return _floats(value)
    name = schema.get("name")
    kind = schema.get("type")
    try:
        if name == DECIMAL:
            return _decimal_text(value, int(schema.get("parameters", {}).get("scale", 0)))
        if name == VARIABLE_DECIMAL:
            return _decimal_text(value["value"], int(value["scale"]))
        if name in DATES:
            return (_EPOCH_DATE + datetime.timedelta(days=int(value))).isoformat()
        if name in TIME_MILLIS:
            return int(value) * 1000
        if name == TIME_NANOS:
            return _micros_of_nanos(int(value))
        if name in TIMESTAMP_MILLIS:
            return _timestamp(int(value) * 1000)
        if name == TIMESTAMP_MICROS:
            return _timestamp(int(value))
        if name == TIMESTAMP_NANOS:
            return _timestamp(_micros_of_nanos(int(value)))
        if name == ZONED_TIMESTAMP:
            return _zoned(str(value))
    except (ValueError, TypeError, OverflowError, KeyError, decimal.InvalidOperation) as e:
        raise DecodeError(f"{where}: column {column!r} ({name}) holds {value!r}, which cannot be read: {e}") from e
    if isinstance(value, decimal.Decimal):
        return float(value)  # a float or double column: the nearest double, as any JSON reader gives
    if kind == "struct" and isinstance(value, dict):
        fields = {f["field"]: f for f in schema.get("fields", [])}
        return {k: _canonical(v, fields.get(k), where, f"{column}.{k}") for k, v in value.items()}
    if kind == "array" and isinstance(value, list):
        return [_canonical(v, schema.get("items"), where, f"{column}[]") for v in value]
    if kind == "map":
        values = schema.get("values")
        if isinstance(value, dict):
            return {k: _canonical(v, values, where, f"{column}.value") for k, v in value.items()}
        # A map whose keys are not strings: JsonConverter writes [key, value] pairs.
        return [
            {
                "key": _canonical(k, schema.get("keys"), where, f"{column}.key"),
                "value": _canonical(v, values, where, column),
            }
            for k, v in value
        ]
    return value


def _floats(value: Any) -> Any:
    """Without a schema a number with a fraction is a double (Spark infers one), whatever its digits."""
    if isinstance(value, decimal.Decimal):
        return float(value)
    if isinstance(value, dict):
        return {k: _floats(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_floats(v) for v in value]
    return value


def _decimal_text(value: Any, scale: int) -> str:
    if isinstance(value, int | decimal.Decimal):  # decimal.format=NUMERIC writes a JSON number
        return format(decimal.Decimal(value), "f")
    unscaled = int.from_bytes(base64.b64decode(value, validate=True), "big", signed=True)
    return format(decimal.Decimal(unscaled).scaleb(-scale, _WIDE), "f")


def _micros_of_nanos(nanos: int) -> int:
    if nanos % 1000:
        raise ValueError("finer than microseconds, which Iceberg 2 tables cannot hold (nothing is rounded away)")
    return nanos // 1000


def _timestamp(micros: int) -> str:
    moment = _EPOCH + datetime.timedelta(microseconds=micros)
    return moment.isoformat(timespec="microseconds")


def _zoned(text: str) -> str:
    """An ISO 8601 time with an offset, as UTC with at most microseconds (PostgreSQL pads to its precision)."""
    if text in ("infinity", "-infinity"):
        raise ValueError("PostgreSQL's infinity has no timestamp value")
    match = re.fullmatch(r"(.*T\d\d:\d\d:\d\d)(?:\.(\d+))?(Z|[+-]\d\d:\d\d)", text)
    if match is None:
        raise ValueError("not an ISO 8601 time with an offset")
    head, fraction, zone = match.groups()
    moment = datetime.datetime.fromisoformat(f"{head}{'+00:00' if zone == 'Z' else zone}")
    if fraction and len(fraction) > 6 and int(fraction[6:]) != 0:
        raise ValueError("finer than microseconds, which Iceberg's timestamptz cannot hold")
    moment = moment.replace(microsecond=int((fraction or "0")[:6].ljust(6, "0")))
    return moment.astimezone(datetime.UTC).replace(tzinfo=None).isoformat(timespec="microseconds") + "Z"
