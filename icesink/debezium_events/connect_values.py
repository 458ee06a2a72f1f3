"""Values of Kafka Connect types, as Debezium's JSON holds them, read into one canonical spelling each and
checked against their own type (a decimal's precision and scale, an integer's range, a float's width).

The spellings are those :mod:`icesink.writer.json_rows` reads exactly into the column types
:mod:`icesink.debezium_events.connect_types` gives them: a decimal as its exact digits, a timestamp in ISO 8601,
a date as ``YYYY-MM-DD``, a time as microseconds, a ``float`` as the double equal to it; bytes stay base64.
"""

from __future__ import annotations

import base64
import binascii
import datetime
import decimal
import hashlib
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from icesink.writer.json_values import Refusal, float_of

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


class BadValue(ValueError):
    """A value its own schema says it cannot be; the message says why (the caller names the column)."""


class FieldError(ValueError):
    def __init__(self, column: str, value: Any, cause: BaseException) -> None:
        super().__init__(column)
        self.column = column
        self.value = value
        self.cause = cause

    def describe(self) -> str:
        if isinstance(self.cause, BadValue):
            return f"column {self.column!r} holds {shown(self.value)}, {self.cause}"
        return f"column {self.column!r} holds {shown(self.value)}, which cannot be read: {self.cause}"


READ_ERRORS = (BadValue, ValueError, TypeError, OverflowError, KeyError, AttributeError, decimal.InvalidOperation)


@dataclass(frozen=True)
class RowSchema:
    """A Connect schema of ``after`` with what reading rows of it needs (built once per schema)."""

    schema: dict[str, Any]
    schema_id: str
    readers: dict[str, Callable[[Any], Any]]  # every field's
    converting: tuple[tuple[str, Callable[[Any], Any]], ...]  # the fields whose values change or need a check
    decimals: bool  # some field is a decimal, which may come as a JSON number: read numbers exactly
    doubles: frozenset[str]  # the fields of type double, whose values read alike as floats or as exact digits

    @classmethod
    def of(cls, row: dict[str, Any], text: str) -> RowSchema:
        fields = {f["field"]: f for f in row.get("fields", []) if isinstance(f, dict) and "field" in f}
        readers = {name: reader(field) for name, field in fields.items()}
        converting = tuple((name, reader) for name, reader in readers.items() if reader is not as_is)
        digest = hashlib.sha1(text.encode(), usedforsecurity=False).hexdigest()
        doubles = frozenset(name for name, reader in readers.items() if reader is _double)
        return cls(row, digest, readers, converting, DECIMAL in text or VARIABLE_DECIMAL in text, doubles)

    def read(self, after: dict[str, Any]) -> dict[str, Any]:
        """The row with every value in its canonical spelling, or FieldError naming the field."""
        if not self.converting:
            return after
        row = dict(after)
        for name, reader in self.converting:
            value = row.get(name)
            if value is not None:
                try:
                    row[name] = reader(value)
                except READ_ERRORS as e:
                    raise FieldError(name, value, e) from None
        return row


def read_fields(values: dict[str, Any], readers: dict[str, Callable[[Any], Any]]) -> dict[str, Any]:
    read = {}
    for name, value in values.items():
        reader = readers.get(name)
        if value is None or reader is None:
            read[name] = value
            continue
        try:
            read[name] = reader(value)
        except READ_ERRORS as e:
            raise FieldError(name, value, e) from None
    return read


def reader(schema: dict[str, Any]) -> Callable[[Any], Any]:
    """A function from a JSON value of this Connect schema to its canonical value (raises BadValue or ValueError)."""
    name = schema.get("name")
    kind = schema.get("type")
    if name == DECIMAL:
        parameters = schema.get("parameters") or {}
        scale = int(parameters.get("scale", 0))
        precision = int(parameters.get("connect.decimal.precision", DEFAULT_DECIMAL_PRECISION))
        limit = 10**precision

        def read_decimal(value: Any) -> str:
            if isinstance(value, str):  # base64 of the unscaled value, as JsonConverter writes it: integers only
                unscaled = int.from_bytes(base64.b64decode(value, validate=True), "big", signed=True)
                if -limit < unscaled < limit:
                    return _scaled_text(unscaled, scale)
            text = _decimal_text(value, precision, scale)
            return text if "." in text else f"{text}.0"  # see _scaled_text

        return read_decimal
    if name == VARIABLE_DECIMAL:
        return lambda value: _decimal_text(value["value"], None, int(value["scale"]))
    if name in DATES:
        return lambda value: (_EPOCH_DATE + datetime.timedelta(days=_whole(value, "int32", "Date"))).isoformat()
    if name in TIME_MILLIS:
        return lambda value: _whole(value, "int32", "Time") * 1000
    if name == TIME_MICROS:
        return lambda value: _whole(value, "int64", "MicroTime")
    if name == TIME_NANOS:
        return lambda value: _micros_of_nanos(_whole(value, "int64", "NanoTime"))
    if name in TIMESTAMP_MILLIS:
        return lambda value: _timestamp(_whole(value, "int64", "Timestamp") * 1000)
    if name == TIMESTAMP_MICROS:
        return lambda value: _timestamp(_whole(value, "int64", "MicroTimestamp"))
    if name == TIMESTAMP_NANOS:
        return lambda value: _timestamp(_micros_of_nanos(_whole(value, "int64", "NanoTimestamp")))
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
        fields = {f["field"]: reader(f) for f in schema.get("fields", []) if isinstance(f, dict) and "field" in f}
        return lambda value: _struct(value, fields)
    if kind == "array":
        items = reader(schema["items"]) if isinstance(schema.get("items"), dict) else as_is
        return lambda value: [None if v is None else items(v) for v in _array(value)]
    if kind == "map":
        keys = reader(schema["keys"]) if isinstance(schema.get("keys"), dict) else as_is
        values = reader(schema["values"]) if isinstance(schema.get("values"), dict) else as_is
        return lambda value: _map(value, keys, values)
    return as_is


def as_is(value: Any) -> Any:
    return value


def _whole(value: Any, kind: str, logical: str | None = None) -> int:
    """An integer of Connect type ``kind`` (``logical``: the logical type it carries, for messages)."""
    low, high = _INTEGER_RANGES[kind]
    if type(value) is int and low <= value <= high:  # nearly every value: no message is built for it
        return value
    named = f"{logical} ({kind})" if logical else kind
    if isinstance(value, bool) or not isinstance(value, int):
        raise BadValue(f"which is not a whole number, as its type {named} says")
    if not low <= value <= high:
        raise BadValue(f"which is out of the range of its type {named}")
    return value


def _double(value: Any) -> float:
    if isinstance(value, str) and value in _NON_FINITE:
        return _NON_FINITE[value]
    if isinstance(value, bool) or not isinstance(value, int | float | decimal.Decimal):
        raise BadValue("which is not a number, as its type double says")
    return float(value)  # correctly rounded from the digits, as any JSON reader gives


def _single(value: Any) -> float:
    """A 32-bit float's value, as the double equal to it (what Iceberg gives when a float column is widened):
    the value written, if it is a float's, or the float whose shortest digits it is; else refused."""
    number = _double(value)
    if math.isnan(number) or math.isinf(number):
        return number
    try:
        return float_of(value if not isinstance(value, str) else number)
    except Refusal as e:
        raise BadValue(f"{e}, as its type float says".replace("; make the column a double", "")) from None


def _boolean(value: Any) -> bool:
    if not isinstance(value, bool):
        raise BadValue("which is not true or false, as its type boolean says")
    return value


def _string(value: Any) -> str:
    if not isinstance(value, str):
        raise BadValue("which is not a string, as its type says")
    return value


def _base64(value: Any) -> str:
    if not isinstance(value, str):
        raise BadValue("which is not base64 text, as its type bytes is written")
    try:
        base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise BadValue("which is not base64 text, as its type bytes is written") from None
    return value


def _struct(value: Any, fields: dict[str, Callable[[Any], Any]]) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise BadValue("which is not an object, as its type struct says")
    return {k: None if v is None else fields.get(k, as_is)(v) for k, v in value.items()}


def _array(value: Any) -> list[Any]:
    if not isinstance(value, list):
        raise BadValue("which is not an array, as its type says")
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
        raise BadValue("which is not a decimal (base64 of its unscaled value, or a number)")
    if precision is not None:
        unscaled_value = number.scaleb(scale, _WIDE)
        if unscaled_value != unscaled_value.to_integral_value():
            raise BadValue(
                f"which is {format(number, 'f')}, more digits after the point than its type decimal({precision}, "
                f"{scale}) holds"
            )
        if abs(unscaled_value) >= decimal.Decimal(10) ** precision:
            raise BadValue(
                f"which is {format(number, 'f')}, more digits than its type decimal({precision}, {scale}) holds"
            )
    return format(number, "f")


def _scaled_text(unscaled: int, scale: int) -> str:
    """``unscaled`` × 10^-scale in plain digits, always with a point (``1234.0``): text of digits alone may be
    base64 in a record without a schema, which a column refuses as ambiguous (:mod:`icesink.writer.json_values`)."""
    if scale <= 0:
        return f"{unscaled * 10**-scale}.0"
    digits = str(abs(unscaled)).rjust(scale + 1, "0")
    return f"{'-' if unscaled < 0 else ''}{digits[:-scale]}.{digits[-scale:]}"


def _micros_of_nanos(nanos: int) -> int:
    if nanos % 1000:
        raise BadValue("which is finer than microseconds, which Iceberg 2 tables cannot hold (nothing is rounded away)")
    return nanos // 1000


def _timestamp(micros: int) -> str:
    try:
        moment = _EPOCH + datetime.timedelta(0, 0, micros)  # positional: the keyword costs a third more
    except OverflowError:
        raise BadValue("which is outside the years 1 to 9999 that icesink writes") from None
    # isoformat() leaves out a zero fraction, which timespec would keep; asking for it costs a third more
    text = moment.isoformat()
    return text if moment.microsecond else f"{text}.000000"


def _zoned(text: str) -> str:
    """An ISO 8601 time with an offset, as UTC with at most microseconds (PostgreSQL pads to its precision)."""
    if text in ("infinity", "-infinity"):
        raise BadValue("PostgreSQL's infinity, which has no timestamp value")
    match = re.fullmatch(r"(.*T\d\d:\d\d:\d\d)(?:\.(\d+))?(Z|[+-]\d\d:\d\d)", text)
    if match is None:
        raise BadValue("which is not an ISO 8601 time with an offset")
    head, fraction, zone = match.groups()
    moment = datetime.datetime.fromisoformat(f"{head}{'+00:00' if zone == 'Z' else zone}")
    if fraction and len(fraction) > 6 and int(fraction[6:]) != 0:
        raise BadValue("which is finer than microseconds, which Iceberg's timestamptz cannot hold")
    moment = moment.replace(microsecond=int((fraction or "0")[:6].ljust(6, "0")))
    return moment.astimezone(datetime.UTC).replace(tzinfo=None).isoformat(timespec="microseconds") + "Z"


def shown(value: Any) -> str:
    """A value as its JSON spelling shows it (a number's digits, a string quoted)."""
    text = str(value) if isinstance(value, decimal.Decimal) else repr(value)
    return text if len(text) <= 80 else text[:80] + "…"
