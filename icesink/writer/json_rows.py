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
import decimal
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from icesink.writer import values as special
from icesink.writer.json_values import AMBIGUOUS_DECIMAL, DECIMAL_TYPE, FIXED_TYPE, INT_RANGES, Refusal, exact_value
from icesink.writer.spec import ColumnSpec, arrow_type

_NONE = type(None)


class RefusedValue(ValueError):
    """Raised when a value is not one its field's type holds exactly; ``row`` indexes the rows converted."""

    def __init__(self, row: int, path: str, value: Any, problem: str) -> None:
        super().__init__(f"row {row}: field {path!r} holds {_shown(value)}, {problem}")
        self.row = row
        self.path = path
        self.value = value
        self.problem = problem


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
        except (pa.ArrowException, ArithmeticError, ValueError, TypeError, special.BadValues):
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
    if kind in INT_RANGES:
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
    if DECIMAL_TYPE.fullmatch(kind):
        if not present <= {str, int, decimal.Decimal}:
            return None
        return pa.array([_as_decimal(v) if type(v) is str else v for v in column_values], wanted)
    if kind == "binary" or FIXED_TYPE.fullmatch(kind):
        if present != {str}:
            return None
        return pa.array([None if v is None else base64.b64decode(v, validate=True) for v in column_values], wanted)
    return None


def _as_decimal(text: str) -> decimal.Decimal:
    if AMBIGUOUS_DECIMAL.fullmatch(text):
        raise Refusal("which may be a number or base64")  # the value-by-value path says more
    number = decimal.Decimal(text)
    if not number.is_finite():
        raise Refusal("which is not a finite number")
    return number


# --- primitives: one value at a time, to name the one that does not fit ------------------------------------------


def _slow_primitive(kind: str, column_values: list[Any], wanted: pa.DataType, path: str) -> pa.Array:
    exact = exact_value(kind)
    converted: list[Any] = []
    for row, value in enumerate(column_values):
        if value is None:
            converted.append(None)
            continue
        try:
            converted.append(exact(value))
        except Refusal as e:
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
    """A value as its JSON spelling shows it: a number's digits (a Decimal's too), a string quoted."""
    text = value if isinstance(value, str) else str(value) if isinstance(value, decimal.Decimal) else repr(value)
    return repr(text[:80] + "…") if len(text) > 80 else repr(text) if isinstance(value, str) else text
