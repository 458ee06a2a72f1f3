"""Giving incoming Arrow rows the table's types, nullability and field ids, at any depth.

Spark hands rows over with its own names for nested fields (``element``,
``entries``, a struct's fields as the DataFrame named them) and none of
Iceberg's field ids; the Parquet writer takes the schema from the table. Each
nested array is rebuilt around its (converted) children without copying
their buffers, and every required field, however deep, is checked: a null
where the table forbids one names the field's path and the row count.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from icesink.arrays import one_array
from icesink.errors import BadRowError
from icesink.writer import values
from icesink.writer.spec import ColumnSpec, WriterSpec

_SAME_FAMILY = {
    pa.string(): (pa.string(), pa.large_string(), pa.string_view()),
    pa.binary(): (pa.binary(), pa.large_binary(), pa.binary_view()),
}


@dataclass(frozen=True)
class _Where:
    """Names the rows being conformed in errors."""

    spec: WriterSpec
    task_id: int

    def fail(self, path: str, column: ColumnSpec | None, problem: str, hint: str) -> BadRowError:
        """``column``: the field whose type the problem is about (None when the type does not matter)."""
        kind = f" ({column.iceberg_type})" if column is not None else ""
        return BadRowError(
            f"table {self.spec.table_name}, checkpoint {self.spec.checkpoint_id}, task {self.task_id}: "
            f"{'column' if '.' not in path else 'field'} {path!r}{kind}{problem}; {hint}"
        )


def conform(spec: WriterSpec, batch: pa.RecordBatch | pa.Table, task_id: int) -> pa.Table:
    """The rows with the table's column types, nullability and field ids, or a :class:`BadRowError`.

    Columns beyond the table's (a change stream's operation, sequence and
    input position) are kept after the table's columns.
    """
    table = batch if isinstance(batch, pa.Table) else pa.Table.from_batches([batch])
    where = _Where(spec, task_id)
    arrays = []
    fields = []
    for column, target in zip(spec.columns, spec.arrow_schema(), strict=True):
        array = table.column(column.name)
        if array.null_count and not spec.may_hold_nulls(column):
            raise _required_error(where, column.name, column, array.null_count)
        if column.is_nested or array.type != target.type:
            # Rebuilding or converting works on one array; a column already in the table's type stays
            # as it is, chunks and all (no copy on the append path).
            array = one_array(array)
            array = _conform(where, column, target, array, column.name)
        arrays.append(array)
        fields.append(target.with_type(array.type))
    table_names = {c.name for c in spec.columns}
    for name in table.column_names:
        if name not in table_names:
            arrays.append(table.column(name))
            fields.append(table.schema.field(name))
    return pa.Table.from_arrays(arrays, schema=pa.schema(fields))


def _required_error(where: _Where, path: str, column: ColumnSpec, nulls: int, evolvable: bool = True) -> BadRowError:
    evolve = (
        " (or pass evolve_schema=True)" if evolvable and column.field_id not in where.spec.equality_field_ids else ""
    )
    return where.fail(
        path, None, f" is required but {nulls} row(s) have no value", f"fix the input and restart the stream{evolve}"
    )


def _check_required(
    where: _Where, column: ColumnSpec, path: str, child: pa.Array, parent_valid: pa.Array | None
) -> None:
    """A required nested field may be null only where its parent is (evolve_schema makes top-level columns
    optional, never nested fields)."""
    if not child.null_count or not column.required:
        return
    missing = pc.is_null(child) if parent_valid is None else pc.and_(pc.is_null(child), parent_valid)
    nulls = pc.sum(missing).as_py() or 0
    if nulls:
        raise _required_error(where, path, column, nulls, evolvable=False)


def _conform(where: _Where, column: ColumnSpec, target: pa.Field, array: pa.Array, path: str) -> pa.Array:
    kind = column.iceberg_type
    if kind == "struct":
        return _conform_struct(where, column, target, array, path)
    if kind in ("list", "map"):
        return _conform_repeated(where, column, target, array, path)
    wanted = target.type
    if array.type == wanted or array.type in _SAME_FAMILY.get(wanted, ()):
        return array
    try:
        return values.convert(array, kind, wanted)
    except values.BadValues as e:
        raise where.fail(path, column, f": {e}", "fix the input and restart the stream") from e


def _conform_struct(where: _Where, column: ColumnSpec, target: pa.Field, array: pa.Array, path: str) -> pa.Array:
    if not pa.types.is_struct(array.type) or array.type.num_fields != len(column.children):
        raise where.fail(path, column, f" arrived as {array.type}", "this is a bug in icesink's projection")
    valid = pc.is_valid(array) if array.null_count else None
    children = []
    for index, (child, child_target) in enumerate(zip(column.children, target.type, strict=True)):
        child_path = f"{path}.{child.name}"
        values_ = array.field(index)
        if valid is not None and values.needs_conversion(child.iceberg_type) and values_.type != child_target.type:
            values_ = _no_value_under_nulls(values_, valid, child)
        _check_required(where, child, child_path, values_, valid)
        children.append(_conform(where, child, child_target, values_, child_path))
    wanted = pa.struct([f.with_type(c.type) for f, c in zip(target.type, children, strict=True)])
    return pa.StructArray.from_arrays(
        children, fields=list(wanted), mask=pc.is_null(array) if valid is not None else None
    )


def _no_value_under_nulls(values_: pa.Array, valid: pa.Array, column: ColumnSpec) -> pa.Array:
    """A struct field's values with whatever the producer left under null structs (pyarrow leaves "" or 0)
    made null, or, for a required field, a value its conversion accepts: nothing is refused where there is none."""
    if column.required:
        return pc.if_else(valid, values_, values.placeholder(column.iceberg_type, values_.type))
    return pc.if_else(valid, values_, pa.scalar(None, values_.type))


def _conform_repeated(where: _Where, column: ColumnSpec, target: pa.Field, array: pa.Array, path: str) -> pa.Array:
    """A list or map, rebuilt on offsets that start at zero around its conformed entries."""
    if pa.types.is_large_list(array.type):
        array = array.cast(pa.list_(array.type.value_field))
    offsets = array.offsets
    start, end = offsets[0].as_py(), offsets[-1].as_py()
    if start:
        offsets = pc.subtract(offsets, pa.scalar(start, offsets.type))
    mask = pc.is_null(array) if array.null_count else None
    if column.iceberg_type == "list":
        (element,) = column.children
        element_path = f"{path}.element"
        items = array.values.slice(start, end - start)
        _check_required(where, element, element_path, items, None)
        items = _conform(where, element, target.type.value_field, items, element_path)
        wanted = pa.list_(target.type.value_field.with_type(items.type))
        return pa.ListArray.from_arrays(offsets, items, type=wanted, mask=mask)
    key, value = column.children
    keys = _conform(where, key, target.type.key_field, array.keys.slice(start, end - start), f"{path}.key")
    items = array.items.slice(start, end - start)
    _check_required(where, value, f"{path}.value", items, None)
    items = _conform(where, value, target.type.item_field, items, f"{path}.value")
    wanted = pa.map_(target.type.key_field.with_type(keys.type), target.type.item_field.with_type(items.type))
    return pa.MapArray.from_arrays(offsets, keys, items, type=wanted, mask=mask)
