"""The rows a check is given, read as checks need them: a column or nested field by its path, the indices where
a condition holds, and a few offending rows shown with the table's key."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pyarrow as pa

    from icesink.audit.inputs import AuditInput

EXAMPLES = 3  # offending rows shown per problem


class MissingColumn(Exception):
    pass


def column_values(rows: pa.Table, path: str) -> pa.ChunkedArray:
    """A column or nested field of the rows; a parent struct that is null makes its fields null."""
    import pyarrow.compute as pc

    names = _split(rows.schema, path.split("."))
    if names is None:
        raise MissingColumn(path)
    values = rows.column(names[0])
    for name in names[1:]:
        values = pc.struct_field(values, name)
    return values


def _split(fields: Any, parts: list[str]) -> list[str] | None:
    """The field names along ``parts`` joined by dots, where names may hold dots themselves (longest first)."""
    import pyarrow as pa

    names = [f.name for f in fields]
    for end in range(len(parts), 0, -1):
        name = ".".join(parts[:end])
        if name not in names:
            continue
        if end == len(parts):
            return [name]
        kind = fields[names.index(name)].type
        if pa.types.is_struct(kind):
            rest = _split([kind.field(i) for i in range(kind.num_fields)], parts[end:])
            if rest is not None:
                return [name, *rest]
    return None


def missing_column(rows: pa.Table, path: str, check: str) -> str:
    within = _inside_collection(rows.schema, path.split("."))
    if within is not None:
        name, kind = within
        return (
            f"{check}: {path!r} is inside {name!r}, a {kind}; the built-in checks read columns and fields of "
            f"structs, one value a row. Check the elements with a check of your own (a function given the rows, "
            "see docs/write-audit-publish.md)"
        )
    return (
        f"{check}: the rows have no column {path!r} (columns: {', '.join(rows.column_names)}); fix the check, or "
        "name the column as the table does"
    )


def _inside_collection(fields: Any, parts: list[str]) -> tuple[str, str] | None:
    """The list or map (its path, and which) that ``parts`` lead into, through structs; None when they do not."""
    import pyarrow as pa

    names = [f.name for f in fields]
    for end in range(len(parts) - 1, 0, -1):
        name = ".".join(parts[:end])
        if name not in names:
            continue
        kind = fields[names.index(name)].type
        if pa.types.is_list(kind) or pa.types.is_large_list(kind) or pa.types.is_map(kind):
            return name, "map" if pa.types.is_map(kind) else "list"
        if pa.types.is_struct(kind):
            inner = _inside_collection([kind.field(i) for i in range(kind.num_fields)], parts[end:])
            if inner is not None:
                return f"{name}.{inner[0]}", inner[1]
    return None


def short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def examples(audit: AuditInput, rows: pa.Table, indices: Sequence[int], columns: Sequence[str]) -> str:
    """A few offending rows, with the table's key columns and the check's own."""
    keys = [k for k in _keys(audit) if k in rows.column_names] or rows.column_names[:2]  # what tells rows apart
    own = [c if c in rows.column_names else c.split(".")[0] for c in columns]
    shown = [c for c in dict.fromkeys([*keys, *own]) if c in rows.column_names] or rows.column_names[:4]
    picked = rows.select(shown).take(list(indices[:EXAMPLES])).to_pylist()
    return "; ".join("{" + ", ".join(f"{k}: {short(v)}" for k, v in row.items()) + "}" for row in picked)


def _keys(audit: AuditInput) -> list[str]:
    try:
        return list(audit.table.schema().identifier_field_names())
    except Exception:  # a check must say what it found, whatever table it is given
        return []


def indices_of(mask: pa.ChunkedArray | pa.Array) -> list[int]:
    import pyarrow as pa
    import pyarrow.compute as pc

    flat = mask.combine_chunks() if isinstance(mask, pa.ChunkedArray) else mask
    found: list[int] = pc.indices_nonzero(pc.fill_null(flat, False)).to_pylist()
    return found
