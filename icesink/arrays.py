"""Arrow arrays icesink builds often, built in C++ rather than from Python lists (millions of rows); and set
operations on sorted positions."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc


def repeated(value: int | bool, length: int) -> pa.Array:
    """``value`` ``length`` times (int64 or bool)."""
    kind = pa.bool_() if isinstance(value, bool) else pa.int64()
    return pa.repeat(pa.scalar(value, kind), length)


def positions(length: int) -> pa.Array:
    """0, 1, …, length - 1 as int64."""
    if length == 0:
        return pa.array([], pa.int64())
    return pc.subtract(pc.cumulative_sum(repeated(1, length)), 1)


FIELD_ID = b"PARQUET:field_id"
FieldStep = tuple[int, str]  # (Iceberg field id, name): one step of a path into nested structs


def nested_column(table: pa.Table | pa.RecordBatch, path: tuple[FieldStep, ...]) -> pa.ChunkedArray:
    """The values of a primitive field inside structs (a struct's null makes its fields null).

    Each step matches a field by its Parquet field id where the Arrow field
    carries one (a file written before a rename), else by name.
    """
    if isinstance(table, pa.RecordBatch):
        table = pa.Table.from_batches([table])
    (top_id, top_name), *rest = path
    index = _child_index(list(table.schema), top_id, top_name)
    column = table.column(index)
    for field_id, name in rest:
        child = _child_index(list(column.type), field_id, name)
        chunks = [chunk.flatten()[child] for chunk in column.chunks]  # flatten: the parent's nulls too
        column = pa.chunked_array(chunks, column.type.field(child).type)
    return column


def _child_index(fields: list[pa.Field], field_id: int, name: str) -> int:
    """By field id where the fields carry ids (a name may since belong to another field), else by name."""
    by_id = any(f.metadata and FIELD_ID in f.metadata for f in fields)
    for index, field in enumerate(fields):
        if (by_id and (field.metadata or {}).get(FIELD_ID) == str(field_id).encode()) or (
            not by_id and field.name == name
        ):
            return index
    raise KeyError(f"no field {name!r} (id {field_id}) among {[f.name for f in fields]}")


def offsets_for_mask(original: pa.ListArray | pa.LargeListArray | pa.MapArray) -> tuple[pa.Array, int, int]:
    """``original``'s offsets in a form Arrow accepts beside a null mask, and the child range they cover.

    Arrow's ``from_arrays`` takes a null mask only with offsets that are not a
    slice: a sliced array's offsets are rebased to 0, and its children must be
    cut to ``(start, length)`` to match.
    """
    offsets = original.offsets
    first, last = offsets[0].as_py(), offsets[-1].as_py()
    if original.offset == 0 and first == 0:
        return offsets, 0, len(original.values)
    return pc.subtract(offsets, pa.scalar(first, offsets.type)), first, last - first


def null_mask(array: pa.Array) -> pa.Array | None:
    """``array``'s nulls as a mask for ``from_arrays``, or None when it has none."""
    return array.is_null() if array.null_count else None


def empty_table(schema: pa.Schema) -> pa.Table:
    """A table of no rows, one empty chunk a column.

    ``schema.empty_table()`` and ``combine_chunks()`` of a column without chunks fail on extension types (uuid)
    inside lists, maps and structs; ``pa.nulls(0, …)`` builds those.
    """
    return pa.table([pa.chunked_array([pa.nulls(0, f.type)], type=f.type) for f in schema], schema=schema)


def one_array(column: pa.ChunkedArray) -> pa.Array:
    """A column as one array, also when it has no chunks at all (see :func:`empty_table`)."""
    if column.num_chunks == 1:
        return column.chunk(0)
    return column.combine_chunks() if column.num_chunks else pa.nulls(0, column.type)


def sorted_union(first: np.ndarray, second: np.ndarray) -> np.ndarray:
    """The distinct values of two sorted arrays of distinct values, in order: a merge of the two runs, in linear
    time (``np.union1d`` sorts them again)."""
    if not len(first) or not len(second):
        return second if not len(first) else first
    both = np.concatenate([first, second])
    both.sort(kind="stable")  # two sorted runs: merged, not sorted anew
    fresh = np.empty(len(both), dtype=bool)
    fresh[0] = True
    np.not_equal(both[1:], both[:-1], out=fresh[1:])
    return both[fresh]


def in_sorted(values: np.ndarray, sorted_values: np.ndarray) -> np.ndarray:
    """Which of ``values`` are in ``sorted_values`` (sorted and distinct): by bisection, without sorting both as
    ``np.isin`` does."""
    if not len(sorted_values):
        return np.zeros(len(values), dtype=bool)
    at = np.minimum(np.searchsorted(sorted_values, values), len(sorted_values) - 1)
    found: np.ndarray = sorted_values[at] == values
    return found
