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

from icesink.arrays import null_mask, offsets_for_mask, one_array
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


def _conform(
    where: _Where, column: ColumnSpec, target: pa.Field, array: pa.Array, path: str, above: pa.Array | None = None
) -> pa.Array:
    """``above``: where the structs holding this field have a value (None: everywhere)."""
    kind = column.iceberg_type
    if kind == "struct":
        return _conform_struct(where, column, target, array, path, above)
    if kind in ("list", "map"):
        return _conform_repeated(where, column, target, array, path)
    wanted = target.type
    if array.type == wanted or array.type in _SAME_FAMILY.get(wanted, ()):
        return array
    try:
        return values.convert(array, kind, wanted)
    except values.BadValues as e:
        raise where.fail(path, column, f": {e}", "fix the input and restart the stream") from e


def _conform_struct(
    where: _Where, column: ColumnSpec, target: pa.Field, array: pa.Array, path: str, above: pa.Array | None
) -> pa.Array:
    if not pa.types.is_struct(array.type) or array.type.num_fields != len(column.children):
        raise where.fail(path, column, f" arrived as {array.type}", "this is a bug in icesink's projection")
    own = pc.is_valid(array) if array.null_count else None
    valid = own if above is None else above if own is None else pc.and_(own, above)
    children = []
    for index, (child, child_target) in enumerate(zip(column.children, target.type, strict=True)):
        child_path = f"{path}.{child.name}"
        values_ = array.field(index)
        child_above = None
        if valid is not None:
            values_, child_above = _no_value_under_nulls(values_, valid, child, child_target)
        _check_required(where, child, child_path, values_, valid)
        children.append(_conform(where, child, child_target, values_, child_path, child_above))
    wanted = pa.struct([f.with_type(c.type) for f, c in zip(target.type, children, strict=True)])
    # A required struct's nulls are all under null structs above (checked): it holds a value wherever Parquet looks.
    mask = pc.is_null(array) if own is not None and not column.required else None
    return pa.StructArray.from_arrays(children, fields=list(wanted), mask=mask)


def _no_value_under_nulls(
    values_: pa.Array, valid: pa.Array, column: ColumnSpec, target: pa.Field
) -> tuple[pa.Array, pa.Array | None]:
    """A struct field's values where no struct above holds a value, made harmless, and what its own fields
    must still be told of (for a struct field).

    Producers leave anything there: pyarrow leaves "" or 0, Spark leaves nulls, at any depth. Nothing is
    converted or refused where there is no value, and a required field gets a stand-in value there (Parquet
    refuses a null in a required field even under a null struct; readers never see it).
    """
    if column.iceberg_type == "struct":
        return values_, valid
    if not column.required:
        return _rebuilt(values_, pc.and_(valid, pc.is_valid(values_)), None), None
    if values.needs_conversion(column.iceberg_type) and values_.type != target.type:
        return _rebuilt(values_, valid, values.placeholder(column.iceberg_type, values_.type)), None
    if values_.null_count:
        return _rebuilt(values_, valid, values.stand_in(values_.type)), None
    return values_, None


def _rebuilt(values_: pa.Array, valid: pa.Array, otherwise: pa.Scalar | None) -> pa.Array:
    """``values_`` where ``valid``; elsewhere ``otherwise`` (a primitive), or null (None).

    Lists and maps are rebuilt around their entries with a new null mask (Arrow's ``if_else`` cannot build
    lists of extension types such as uuid); without a mask, a slot that held no value becomes an empty one.
    """
    kind = values_.type
    if pa.types.is_list(kind) or pa.types.is_map(kind):
        mask = pc.invert(valid) if otherwise is None else None
        offsets, start, length = offsets_for_mask(values_)
        if pa.types.is_map(kind):
            keys, items = values_.keys.slice(start, length), values_.items.slice(start, length)
            return pa.MapArray.from_arrays(offsets, keys, items, type=kind, mask=mask)
        return pa.ListArray.from_arrays(offsets, values_.values.slice(start, length), type=kind, mask=mask)
    fill = otherwise if otherwise is not None else pa.scalar(None, kind)
    if isinstance(kind, pa.BaseExtensionType):  # uuid: through its storage
        storage = fill.value if fill.is_valid else pa.scalar(None, kind.storage_type)
        return pa.ExtensionArray.from_storage(kind, pc.if_else(valid, values_.storage, storage))
    return pc.if_else(valid, values_, fill)


def _conform_repeated(where: _Where, column: ColumnSpec, target: pa.Field, array: pa.Array, path: str) -> pa.Array:
    """A list or map, rebuilt on offsets that start at zero around its conformed entries."""
    if pa.types.is_large_list(array.type):
        array = array.cast(pa.list_(array.type.value_field))
    offsets, start, length = offsets_for_mask(array)
    end = start + length
    mask = null_mask(array)
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
