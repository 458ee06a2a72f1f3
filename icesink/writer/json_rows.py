"""Rows of JSON values (a change event's row, decoded) as Arrow columns of a table's types: exactly, or refused.

Runs on the executors. A row is a ``dict`` as ``json.loads`` gives it; a value is taken as the table's type
only if that type holds it exactly, whatever its JSON spelling:

==================  ==========================================================================================
table type          JSON values taken
==================  ==========================================================================================
``int``, ``long``   integers in range; a number with a fraction only when it is whole (``2.0``)
``float``           numbers whose nearest float is the number itself, or whose shortest float spelling is the
                    number's own digits (``1.1``); ``"NaN"``, ``"Infinity"``, ``"-Infinity"``
``double``          numbers (an integer only where a double holds it exactly); the same three strings
``decimal(p, s)``   numbers and strings of digits with at most ``s`` digits after the point (trailing zeros
                    aside) and at most ``p`` in all
``string``          strings; a number, ``true``/``false`` or a nested value as its JSON text (as Spark's
                    ``from_json`` reads them)
``boolean``         ``true`` and ``false``
``binary``          base64 text; ``fixed[n]`` the same, of exactly ``n`` bytes
``date``            ``YYYY-MM-DD``
``timestamp``       ISO 8601 without an offset; ``timestamptz`` with one (``Z``, ``+02:00``)
``time``            microseconds since midnight (an integer)
``uuid``            ``8-4-4-4-12`` hex digits
struct, list, map   an object (fields by name), an array, an object or an array of ``{"key", "value"}``
==================  ==========================================================================================

Anything else is a :class:`RefusedValue` naming the row, the field's path, the value and why: nothing is
rounded, truncated or guessed. Whole columns go through Arrow at once; a value goes through Python on its own
only in a column that holds something unusual (to find and name it).
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
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from icesink.writer import values as special
from icesink.writer.spec import ColumnSpec, arrow_type

_DECIMAL = re.compile(r"decimal\((\d+),\s*(\d+)\)")
_FIXED = re.compile(r"fixed\[(\d+)\]")
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
_INT_RANGES = {"int": (-(2**31), 2**31 - 1), "long": (-(2**63), 2**63 - 1)}
_NONE = type(None)
_EXACT = decimal.Context(prec=200, traps=[decimal.Inexact, decimal.InvalidOperation])


class RefusedValue(ValueError):
    """Raised when a value is not one its field's type holds exactly; ``row`` indexes the rows converted."""

    def __init__(self, row: int, path: str, value: Any, problem: str) -> None:
        super().__init__(f"row {row}: field {path!r} holds {_shown(value)}, {problem}")
        self.row = row
        self.path = path
        self.value = value
        self.problem = problem


class _Refusal(ValueError):
    """A value's problem, before the row and path are known."""


@dataclass(frozen=True)
class JsonNames:
    """Where each table field's values are in a row: the JSON key of every field whose key is not its name.

    ``keys`` maps a field id to its JSON key, or to None for a field no row has (always null). List elements
    and map keys and values have no key of their own.
    """

    keys: tuple[tuple[int, str | None], ...] = ()

    def key_of(self, column: ColumnSpec) -> str | None:
        return dict(self.keys).get(column.field_id, column.name)


def rows_to_arrow(
    columns: Sequence[ColumnSpec], rows: Sequence[Mapping[str, Any] | None], names: JsonNames = JsonNames()
) -> list[pa.Array]:
    """One array per column of ``columns``, typed as the table types it, from ``rows``; or a RefusedValue."""
    keys = dict(names.keys)
    arrays = []
    for column in columns:
        key = keys.get(column.field_id, column.name)
        column_values = [None] * len(rows) if key is None else [r.get(key) if r is not None else None for r in rows]
        arrays.append(_array(column, column_values, column.name, keys))
    return arrays


def _array(column: ColumnSpec, column_values: list[Any], path: str, keys: Mapping[int, str | None]) -> pa.Array:
    wanted = arrow_type(column.iceberg_type, column.children)
    if not column.is_nested:
        try:
            fast = _fast_primitive(column.iceberg_type, column_values, wanted)
        except (pa.ArrowException, ValueError, TypeError, OverflowError, special.BadValues):
            fast = None
        if fast is not None:
            return fast
        return _slow_primitive(column.iceberg_type, column_values, wanted, path)
    if column.iceberg_type == "struct":
        return _struct(column, column_values, path, keys, wanted)
    if column.iceberg_type == "list":
        return _list(column, column_values, path, keys, wanted)
    return _map(column, column_values, path, keys, wanted)


# --- primitives: whole columns through Arrow ----------------------------------------------------------------------


def _fast_primitive(kind: str, column_values: list[Any], wanted: pa.DataType) -> pa.Array | None:
    """The column in one pass of Arrow, or None when it holds a value Arrow could take inexactly (or refuse)."""
    present = set(map(type, column_values)) - {_NONE}
    if not present:
        return pa.nulls(len(column_values), wanted)
    if kind in _INT_RANGES:
        return pa.array(column_values, wanted) if present == {int} else None  # overflow raises: the slow path names it
    if kind == "double":
        return pa.array(column_values, wanted) if present == {float} else None
    if kind == "float":
        if present != {float}:
            return None
        doubles = pa.array(column_values, pa.float64())
        floats = doubles.cast(pa.float32(), safe=False)
        same = pc.or_kleene(pc.equal(floats.cast(pa.float64()), doubles), pc.is_nan(doubles))
        return floats if pc.all(same).as_py() is not False else None  # digits a float lacks: judged one by one
    if kind == "string":
        return pa.array(column_values, wanted) if present == {str} else None
    if kind == "boolean":
        return pa.array(column_values, wanted) if present == {bool} else None
    if kind in ("date", "timestamp", "timestamptz"):
        return pa.array(column_values, pa.string()).cast(wanted) if present == {str} else None
    if kind == "time":
        return pa.array(column_values, pa.int64()).cast(wanted) if present == {int} else None
    if kind == "uuid":
        return special.convert(pa.array(column_values, pa.string()), kind, wanted) if present == {str} else None
    if _DECIMAL.fullmatch(kind):
        if not present <= {str, int, decimal.Decimal}:
            return None
        return pa.array([_as_decimal(v) if type(v) is str else v for v in column_values], wanted)
    if kind == "binary" or _FIXED.fullmatch(kind):
        if present != {str}:
            return None
        return pa.array([None if v is None else base64.b64decode(v, validate=True) for v in column_values], wanted)
    return None


def _as_decimal(text: str) -> decimal.Decimal:
    number = decimal.Decimal(text)
    if not number.is_finite():
        raise _Refusal("which is not a finite number")
    return number


# --- primitives: one value at a time, to name the one that does not fit ------------------------------------------


def _slow_primitive(kind: str, column_values: list[Any], wanted: pa.DataType, path: str) -> pa.Array:
    exact = _exact_value(kind)
    converted: list[Any] = []
    for row, value in enumerate(column_values):
        if value is None:
            converted.append(None)
            continue
        try:
            converted.append(exact(value))
        except _Refusal as e:
            raise RefusedValue(row, path, value, str(e)) from None
    if kind == "uuid":
        return special.convert(pa.array(converted, pa.string()), kind, wanted)
    if kind in ("date", "timestamp", "timestamptz"):
        return pa.array(converted, pa.string()).cast(wanted)
    if kind == "time":
        return pa.array(converted, pa.int64()).cast(wanted)
    if kind == "float":
        return pa.array(converted, pa.float64()).cast(pa.float32(), safe=False)  # each one checked exact above
    return pa.array(converted, wanted)


def _exact_value(kind: str) -> Callable[[Any], Any]:
    """The function that gives a JSON value as Arrow takes it for ``kind``, or raises a _Refusal."""
    if kind in _INT_RANGES:
        low, high = _INT_RANGES[kind]
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
    match = _DECIMAL.fullmatch(kind)
    if match:
        precision, scale = int(match.group(1)), int(match.group(2))
        return lambda value: _decimal(value, precision, scale)
    match = _FIXED.fullmatch(kind)
    if match:
        return lambda value: _bytes(value, int(match.group(1)))
    if kind == "binary":
        return lambda value: _bytes(value, None)
    raise _Refusal(f"which icesink cannot write as {kind}")


def _integer(value: Any, low: int, high: int, kind: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int | float | decimal.Decimal):
        raise _Refusal(f"which is not a number, as {kind} needs")
    if isinstance(value, float | decimal.Decimal):
        if not (math.isfinite(value) if isinstance(value, float) else value.is_finite()) or value != int(value):
            raise _Refusal(f"which {kind} cannot hold: it is not a whole number")
        value = int(value)
    if not low <= value <= high:
        raise _Refusal(f"which is out of {kind}'s range [{low}, {high}]")
    return int(value)


def _double(value: Any) -> float:
    if isinstance(value, str) and value in _NON_FINITE:
        return _NON_FINITE[value]
    if isinstance(value, bool) or not isinstance(value, int | float | decimal.Decimal):
        raise _Refusal("which is not a number, as double needs")
    if isinstance(value, int) and abs(value) > _DOUBLE_EXACT_INTEGERS and float(value) != value:
        raise _Refusal("which a double cannot hold exactly (an integer beyond 2^53); make the column a long")
    return float(value)


def _float(value: Any) -> float:
    number = _double(value)
    single = struct.unpack("f", struct.pack("f", number))[0] if math.isfinite(number) or math.isnan(number) else number
    if math.isnan(number) or single == number:
        return single
    if math.isinf(single):
        raise _Refusal("which is beyond a float's range; make the column a double")
    # The digits as written (1.1) are what the source held when they are the float's own shortest spelling.
    written = decimal.Decimal(value) if isinstance(value, int | decimal.Decimal) else decimal.Decimal(repr(value))
    if decimal.Decimal(_shortest_float(single)) == written:
        return single
    raise _Refusal(
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
        raise _Refusal("which is not true or false, as boolean needs")
    return value


def _temporal(value: Any, check: Callable[[str], str], what: str) -> str:
    if not isinstance(value, str):
        raise _Refusal(f"which is not {what}")
    try:
        return check(value)
    except ValueError as e:
        raise _Refusal(f"which is not {what} ({e})") from None


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
        raise _Refusal("which is not a UUID written as 8-4-4-4-12 hex digits")
    return value


def _decimal(value: Any, precision: int, scale: int) -> decimal.Decimal:
    if isinstance(value, bool) or not isinstance(value, str | int | decimal.Decimal | float):
        raise _Refusal(f"which is not a number, as decimal({precision}, {scale}) needs")
    try:
        number = decimal.Decimal(value if not isinstance(value, float) else repr(value))
    except decimal.InvalidOperation:
        raise _Refusal(f"which is not a number, as decimal({precision}, {scale}) needs") from None
    if not number.is_finite():
        raise _Refusal(f"which decimal({precision}, {scale}) cannot hold")
    try:
        fitted = number.quantize(decimal.Decimal(1).scaleb(-scale), context=_EXACT)
    except (decimal.Inexact, decimal.InvalidOperation):
        raise _Refusal(
            f"which has more than {scale} digit(s) after the point: decimal({precision}, {scale}) would round it"
        ) from None
    if len(fitted.as_tuple().digits) > precision and fitted != 0:
        raise _Refusal(f"which has more than {precision} digit(s): decimal({precision}, {scale}) cannot hold it")
    return fitted


def _bytes(value: Any, width: int | None) -> bytes:
    if not isinstance(value, str):
        raise _Refusal("which is not base64 text, as binary values are written in JSON")
    try:
        raw = base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise _Refusal("which is not base64 text, as binary values are written in JSON") from None
    if width is not None and len(raw) != width:
        raise _Refusal(f"which is {len(raw)} bytes long, where fixed[{width}] needs exactly {width}")
    return raw


# --- nested values --------------------------------------------------------------------------------------------------


def _struct(
    column: ColumnSpec, column_values: list[Any], path: str, keys: Mapping[int, str | None], wanted: pa.DataType
) -> pa.Array:
    for row, value in enumerate(column_values):
        if value is not None and not isinstance(value, dict):
            raise RefusedValue(row, path, value, "which is not an object, as a struct needs")
    children = []
    for child in column.children:
        key = keys.get(child.field_id, child.name)
        child_values = [None if v is None or key is None else v.get(key) for v in column_values]
        children.append(_array(child, child_values, f"{path}.{child.name}", keys))
    return pa.StructArray.from_arrays(children, fields=list(wanted), mask=_nulls(column_values))


def _list(
    column: ColumnSpec, column_values: list[Any], path: str, keys: Mapping[int, str | None], wanted: pa.DataType
) -> pa.Array:
    (element,) = column.children
    rows = []
    for row, value in enumerate(column_values):
        if value is not None and not isinstance(value, list):
            raise RefusedValue(row, path, value, "which is not an array, as a list needs")
        rows.append(value or [])
    flat, owners, offsets = _flatten(rows)
    items = _owned(element, flat, f"{path}[]", keys, owners)
    return pa.ListArray.from_arrays(offsets, items, type=wanted, mask=_nulls(column_values))


def _map(
    column: ColumnSpec, column_values: list[Any], path: str, keys: Mapping[int, str | None], wanted: pa.DataType
) -> pa.Array:
    key_column, value_column = column.children
    rows = []
    for row, value in enumerate(column_values):
        entries = _entries(value)
        if entries is None:
            raise RefusedValue(
                row, path, value, 'which is not an object (or an array of {"key", "value"}), as a map needs'
            )
        rows.append(entries)
    flat, owners, offsets = _flatten(rows)
    map_keys = _owned(key_column, [k for k, _ in flat], f"{path}.key", keys, owners)
    if map_keys.null_count:
        row = owners[map_keys.is_null().index(True).as_py()]
        raise RefusedValue(row, f"{path}.key", None, "and a map's key cannot be null")
    map_values = _owned(value_column, [v for _, v in flat], f"{path}.value", keys, owners)
    return pa.MapArray.from_arrays(offsets, map_keys, map_values, type=wanted, mask=_nulls(column_values))


def _entries(value: Any) -> list[tuple[Any, Any]] | None:
    """A map's entries: an object's, or those of an array of {"key", "value"} (keys that are not strings)."""
    if value is None:
        return []
    if isinstance(value, dict):
        return list(value.items())
    if isinstance(value, list) and all(isinstance(e, dict) and set(e) <= {"key", "value"} for e in value):
        return [(e.get("key"), e.get("value")) for e in value]
    return None


def _flatten(rows: list[list[Any]]) -> tuple[list[Any], list[int], pa.Array]:
    """Every row's items in one list, the row each came from, and the rows' offsets into it."""
    flat: list[Any] = []
    owners: list[int] = []
    offsets = [0]
    for row, items in enumerate(rows):
        flat.extend(items)
        owners.extend([row] * len(items))
        offsets.append(len(flat))
    return flat, owners, pa.array(offsets, pa.int32())


def _owned(
    column: ColumnSpec, column_values: list[Any], path: str, keys: Mapping[int, str | None], owners: list[int]
) -> pa.Array:
    """The items' array; a refusal names the row the item belongs to, not the item's place among all items."""
    try:
        return _array(column, column_values, path, keys)
    except RefusedValue as e:
        raise RefusedValue(owners[e.row], e.path, e.value, e.problem) from None


def _nulls(column_values: list[Any]) -> pa.Array | None:
    return pa.array([v is None for v in column_values], pa.bool_()) if None in column_values else None


def _shown(value: Any) -> str:
    text = value if isinstance(value, str) else repr(value)
    return repr(text[:80] + "…") if len(text) > 80 else repr(text) if isinstance(value, str) else text
