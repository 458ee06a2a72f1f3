"""One JSON value as the Arrow value of an Iceberg type, taken only where the type holds it exactly.

The rules of :mod:`icesink.writer.json_rows`, one value at a time: what it falls back to in a column that holds
something unusual, to find and name the value that does not fit.
"""

from __future__ import annotations

import base64
import binascii
import datetime
import decimal
import json
import math
import re
import struct
from collections.abc import Callable
from typing import Any

DECIMAL_TYPE = re.compile(r"decimal\((\d+),\s*(\d+)\)")
FIXED_TYPE = re.compile(r"fixed\[(\d+)\]")
_NON_FINITE = {
    "NaN": math.nan,
    "Infinity": math.inf,
    "+Infinity": math.inf,
    "-Infinity": -math.inf,
    "INF": math.inf,
    "+INF": math.inf,
    "-INF": -math.inf,
}


_DOUBLE_EXACT_INTEGERS = 2**53


INT_RANGES = {"int": (-(2**31), 2**31 - 1), "long": (-(2**63), 2**63 - 1)}


_EXACT = decimal.Context(prec=200, traps=[decimal.Inexact, decimal.InvalidOperation])


class Refusal(ValueError):
    """A value's problem, before the row and path are known."""


def exact_value(kind: str) -> Callable[[Any], Any]:
    """The function that gives a JSON value as Arrow takes it for ``kind``, or raises a Refusal."""
    if kind in INT_RANGES:
        low, high = INT_RANGES[kind]
        return lambda value: _integer(value, low, high, kind)
    if kind == "double":
        return _double
    if kind == "float":
        return _float
    if kind == "string":
        return _string
    if kind == "boolean":
        return _boolean
    if kind == "date":
        return lambda value: _temporal(value, _date_text, "a date written YYYY-MM-DD")
    if kind == "timestamp":
        return lambda value: _temporal(value, _timestamp_text, "an ISO 8601 time without an offset")
    if kind == "timestamptz":
        return lambda value: _temporal(value, _zoned_text, "an ISO 8601 time with an offset")
    if kind == "time":
        return lambda value: _integer(value, 0, 86_400 * 10**6 - 1, "time (microseconds since midnight)")
    if kind == "uuid":
        return _uuid
    match = DECIMAL_TYPE.fullmatch(kind)
    if match:
        precision, scale = int(match.group(1)), int(match.group(2))
        return lambda value: _decimal(value, precision, scale)
    match = FIXED_TYPE.fullmatch(kind)
    if match:
        return lambda value: _bytes(value, int(match.group(1)))
    if kind == "binary":
        return lambda value: _bytes(value, None)
    raise Refusal(f"which icesink cannot write as {kind}")


def _integer(value: Any, low: int, high: int, kind: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int | float | decimal.Decimal):
        raise Refusal(f"which is not a number, as {kind} needs")
    if isinstance(value, float | decimal.Decimal):
        if not (math.isfinite(value) if isinstance(value, float) else value.is_finite()) or value != int(value):
            raise Refusal(f"which {kind} cannot hold: it is not a whole number")
        value = int(value)
    if not low <= value <= high:
        raise Refusal(f"which is out of {kind}'s range [{low}, {high}]")
    return int(value)


def _double(value: Any) -> float:
    if isinstance(value, str) and value in _NON_FINITE:
        return _NON_FINITE[value]
    if isinstance(value, bool) or not isinstance(value, int | float | decimal.Decimal):
        raise Refusal("which is not a number, as double needs")
    if isinstance(value, int) and abs(value) > _DOUBLE_EXACT_INTEGERS and float(value) != value:
        raise Refusal("which a double cannot hold exactly (an integer beyond 2^53); make the column a long")
    return float(value)


def float_of(value: Any) -> float:
    """A 32-bit float's value (as the double equal to it) that a JSON number spells: the float itself, or the
    digits Java prints for one (``1.1``); anything a float only comes near is a :class:`Refusal`."""
    return _float(value)


def _float(value: Any) -> float:
    number = _double(value)
    single = struct.unpack("f", struct.pack("f", number))[0] if math.isfinite(number) or math.isnan(number) else number
    if math.isnan(number) or single == number:
        return single
    if math.isinf(single):
        raise Refusal("which is beyond a float's range; make the column a double")
    # The digits as written (1.1) are what the source held when they are the float's own shortest spelling.
    written = decimal.Decimal(value) if isinstance(value, int | decimal.Decimal) else decimal.Decimal(repr(value))
    if decimal.Decimal(_shortest_float(single)) == written:
        return single
    raise Refusal(
        f"whose digits a float cannot hold (the nearest float is {_shortest_float(single)}); make the column a double"
    )


def _shortest_float(single: float) -> str:
    """The fewest digits that read back as this 32-bit float (as Java's Float.toString and numpy print it)."""
    for digits in range(1, 10):
        text = f"{single:.{digits}g}"
        if struct.unpack("f", struct.pack("f", float(text)))[0] == single:
            return text
    return repr(single)


def _string(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, decimal.Decimal):
        return str(value)  # the number's digits as written
    return json.dumps(value, separators=(",", ":"), allow_nan=True, default=str)


def _boolean(value: Any) -> bool:
    if not isinstance(value, bool):
        raise Refusal("which is not true or false, as boolean needs")
    return value


def _temporal(value: Any, check: Callable[[str], str], what: str) -> str:
    if not isinstance(value, str):
        raise Refusal(f"which is not {what}")
    try:
        return check(value)
    except ValueError as e:
        raise Refusal(f"which is not {what} ({e})") from None


def _date_text(text: str) -> str:
    if not re.fullmatch(r"\d{4}-\d\d-\d\d", text):
        raise ValueError("expected YYYY-MM-DD")
    datetime.date.fromisoformat(text)
    return text


def _timestamp_text(text: str) -> str:
    moment = datetime.datetime.fromisoformat(_microseconds(text))
    if moment.tzinfo is not None:
        raise ValueError("it has an offset; the column is a timestamp without time zone")
    return moment.isoformat(timespec="microseconds")


def _zoned_text(text: str) -> str:
    moment = datetime.datetime.fromisoformat(_microseconds(text))
    if moment.tzinfo is None:
        raise ValueError("it has no offset; the column is a timestamp with time zone")
    return moment.astimezone(datetime.UTC).replace(tzinfo=None).isoformat(timespec="microseconds") + "Z"


def _microseconds(text: str) -> str:
    """``text`` with at most six digits of a second (Python would drop the seventh on): finer is refused."""
    match = re.search(r"\.(\d{7,})", text)
    if match is None:
        return text
    if int(match.group(1)[6:]) != 0:
        raise ValueError("it is finer than a microsecond, which Iceberg's timestamps cannot hold")
    return text[: match.start(1) + 6] + text[match.end(1) :]


def _uuid(value: Any) -> str:
    if not isinstance(value, str) or not re.fullmatch(r"[0-9a-fA-F]{8}(-[0-9a-fA-F]{4}){3}-[0-9a-fA-F]{12}", value):
        raise Refusal("which is not a UUID written as 8-4-4-4-12 hex digits")
    return value


# Digits alone, in a multiple of four: both a number and Debezium's base64 of a decimal's unscaled bytes
# (decimal.handling.mode=precise), which only the record's schema tells apart.
AMBIGUOUS_DECIMAL = re.compile(r"(?:[0-9]{4})+")


def _decimal(value: Any, precision: int, scale: int) -> decimal.Decimal:
    if isinstance(value, bool) or not isinstance(value, str | int | decimal.Decimal | float):
        raise Refusal(f"which is not a number, as decimal({precision}, {scale}) needs")
    if isinstance(value, str) and AMBIGUOUS_DECIMAL.fullmatch(value):
        raise Refusal(
            "which may be a number or Debezium's base64 of a decimal (decimal.handling.mode=precise); without the "
            "record's schema icesink cannot tell: keep the connector's schemas on, or send decimals as text with "
            "a point (decimal.handling.mode=string)"
        )
    try:
        number = decimal.Decimal(value if not isinstance(value, float) else repr(value))
    except decimal.InvalidOperation:
        raise Refusal(
            f"which is not a number, as decimal({precision}, {scale}) needs (Debezium's base64 of a decimal can "
            "only be read with the record's schema: keep the connector's schemas on)"
        ) from None
    if not number.is_finite():
        raise Refusal(f"which decimal({precision}, {scale}) cannot hold")
    try:
        fitted = number.quantize(decimal.Decimal(1).scaleb(-scale), context=_EXACT)
    except (decimal.Inexact, decimal.InvalidOperation):
        raise Refusal(
            f"which has more than {scale} digit(s) after the point: decimal({precision}, {scale}) would round it"
        ) from None
    if len(fitted.as_tuple().digits) > precision and fitted != 0:
        raise Refusal(f"which has more than {precision} digit(s): decimal({precision}, {scale}) cannot hold it")
    return fitted


def _bytes(value: Any, width: int | None) -> bytes:
    if not isinstance(value, str):
        raise Refusal("which is not base64 text, as binary values are written in JSON")
    try:
        raw = base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise Refusal("which is not base64 text, as binary values are written in JSON") from None
    if width is not None and len(raw) != width:
        raise Refusal(f"which is {len(raw)} bytes long, where fixed[{width}] needs exactly {width}")
    return raw
