"""One spelling of every Iceberg value, whichever reader produced it, so that readers can be compared."""

from __future__ import annotations

import base64
import datetime
import decimal
import json
import uuid
from typing import Any

UTC = datetime.UTC
WIDE = decimal.Context(prec=80)


def canon(kind: Any, value: Any) -> Any:
    """``value`` of Iceberg type ``kind`` as plain, comparable Python, from any reader's spelling.

    Structs become dicts by field name, maps sorted lists of (key, value) pairs; null stays apart from empty.
    """
    from pyiceberg.types import ListType, MapType, StructType

    if value is None:
        return None
    if isinstance(kind, StructType):
        found = {f.name: canon(f.field_type, value.get(f.name)) for f in kind.fields}
        unknown = sorted(set(value) - {f.name for f in kind.fields})
        return {**found, "<members the schema does not have>": unknown} if unknown else found
    if isinstance(kind, ListType):
        return [canon(kind.element_type, v) for v in value]
    if isinstance(kind, MapType):
        pairs = value.items() if isinstance(value, dict) else [tuple(p) for p in value]
        canonical = [(canon(kind.key_type, k), canon(kind.value_type, v)) for k, v in pairs]
        return sorted(canonical, key=lambda p: json.dumps(p[0], default=str))
    return canon_primitive(str(kind), value)


def canon_primitive(kind: str, value: Any) -> Any:
    if kind == "binary" or kind.startswith("fixed"):
        if isinstance(value, dict):  # the DuckDB and Java readers print bytes as {"base64": …}
            return value["base64"]
        if isinstance(value, str):
            return value
        return base64.b64encode(bytes(value)).decode("ascii")
    if kind == "uuid":
        if isinstance(value, bytes | bytearray):
            return uuid.UUID(bytes=bytes(value)).hex
        if isinstance(value, dict):
            return uuid.UUID(bytes=base64.b64decode(value["base64"])).hex
        return uuid.UUID(str(value)).hex
    if kind.startswith("decimal"):
        scale = int(kind.rstrip(")").split(",")[1])
        # A context wide enough for 38 digits (the default one keeps 28).
        return str(decimal.Decimal(str(value)).quantize(decimal.Decimal(1).scaleb(-scale), context=WIDE))
    if kind == "date":
        return (
            value.isoformat()
            if isinstance(value, datetime.date)
            else datetime.date.fromisoformat(str(value)).isoformat()
        )
    if kind == "time":
        return (
            value.isoformat()
            if isinstance(value, datetime.time)
            else datetime.time.fromisoformat(str(value)).isoformat()
        )
    if kind in ("timestamp", "timestamptz"):
        at = value if isinstance(value, datetime.datetime) else datetime.datetime.fromisoformat(str(value))
        if at.tzinfo is not None:
            at = at.astimezone(UTC).replace(tzinfo=None)
        return at.isoformat()
    if kind in ("int", "long"):
        return int(value)
    if kind in ("float", "double"):
        number = float(value)
        return "NaN" if number != number else number  # NaN equals itself here, as in a table
    if kind == "boolean":
        return value if isinstance(value, bool) else str(value).lower() == "true"
    return value


def canon_rows(schema: Any, rows: list[dict[str, Any]], columns: list[str] | None = None) -> list[dict[str, Any]]:
    """Rows of ``schema`` (only ``columns``), canonical, in a stable order."""
    names = columns or [f.name for f in schema.fields]
    fields = {f.name: f.field_type for f in schema.fields}
    out = [{name: canon(fields[name], row.get(name)) for name in names} for row in rows]
    return sorted(out, key=lambda r: json.dumps(r, sort_keys=True, default=str))


def first_difference(actual: list[dict[str, Any]], expected: list[dict[str, Any]], reader: str) -> str | None:
    """How two canonical row lists differ, in words (a row the reader made up, a row it lost); None when equal."""
    if actual == expected:
        return None
    remaining = list(expected)
    extra = []
    for row in actual:
        if row in remaining:
            remaining.remove(row)
        else:
            extra.append(row)
    if extra and remaining:  # the same row with a value changed, most likely: name the columns
        got, want = extra[0], min(remaining, key=lambda r: sum(r.get(k) != v for k, v in extra[0].items()))
        changed = {k: (got.get(k), v) for k, v in want.items() if got.get(k) != v}
        return f"{reader}: {len(extra)} row(s) differ; e.g. {changed} (read, expected) in {want}"
    if extra:
        return f"{reader}: {len(extra)} row(s) more than expected, e.g. {extra[0]}"
    return f"{reader}: {len(remaining)} row(s) missing, e.g. {remaining[0]}"


# --- the model's spelling: structs by field id, so that renames at any depth cannot fool it ------------------------


def by_id(kind: Any, value: Any) -> Any:
    """``canon`` of ``value``, with every struct (at any depth) a dict by field id instead of by name."""
    from pyiceberg.types import ListType, MapType, StructType

    if value is None:
        return None
    if isinstance(kind, StructType):
        return {f.field_id: by_id(f.field_type, value.get(f.name)) for f in kind.fields}
    if isinstance(kind, ListType):
        return [by_id(kind.element_type, v) for v in value]
    if isinstance(kind, MapType):
        pairs = value.items() if isinstance(value, dict) else [tuple(p) for p in value]
        by_key = [(canon(kind.key_type, k), by_id(kind.value_type, v)) for k, v in pairs]
        return sorted(by_key, key=lambda p: json.dumps(p[0], default=str))
    return canon(kind, value)


def by_name(kind: Any, value: Any) -> Any:
    """A model value under the current schema's names; a field the value predates reads as null."""
    from pyiceberg.types import ListType, MapType, StructType

    if value is None:
        return None
    if isinstance(kind, StructType):
        return {f.name: by_name(f.field_type, value.get(f.field_id)) for f in kind.fields}
    if isinstance(kind, ListType):
        return [by_name(kind.element_type, v) for v in value]
    if isinstance(kind, MapType):
        return [(k, by_name(kind.value_type, v)) for k, v in value]
    return value


def drop_id(value: Any, field_id: int) -> Any:
    """A model value without field ``field_id`` wherever it is nested."""
    if isinstance(value, dict):
        return {k: drop_id(v, field_id) for k, v in value.items() if k != field_id}
    if isinstance(value, list | tuple):
        return type(value)(drop_id(v, field_id) for v in value)
    return value


def widen_id(value: Any, field_id: int, wider: Any) -> Any:
    """A model value with field ``field_id``'s values as type ``wider`` wherever it is nested."""
    if isinstance(value, dict):
        return {
            k: (canon(wider, v) if k == field_id and v is not None else widen_id(v, field_id, wider))
            for k, v in value.items()
        }
    if isinstance(value, list | tuple):
        return type(value)(widen_id(v, field_id, wider) for v in value)
    return value
