"""Collapsing a task's change rows to the last change per key.

Rows arrive distributed by key, so every change of a key within a checkpoint
is in the same task. The last one wins: ordered by the ``sequence_by``
column, ties (and streams without one) broken by input position.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from icesink.arrays import nested_column, one_array
from icesink.errors import BadRowError
from icesink.writer.spec import ColumnSpec, WriterSpec, arrow_type

INSERT, UPDATE, DELETE = "insert", "update", "delete"
SKIP = "skip"  # a change that changes nothing here (a changelog's update_before)


@dataclass(frozen=True)
class CollapsedChanges:
    """The last change of every key: rows to insert (table columns) and keys to delete.

    Every key gets a delete (insert and update replace whatever the key held
    before; a delete of an absent key is harmless), and inserts and updates
    also get their row.
    """

    upserts: pa.Table
    keys_to_delete: pa.Table


def _describe_row(table: pa.Table, index: int) -> str:
    row = table.slice(index, 1).to_pylist()[0]
    return ", ".join(f"{k}={v!r}" for k, v in list(row.items())[:6])


def check_keys(spec: WriterSpec, table: pa.Table, task_id: int) -> None:
    """Refuse rows without a full key, naming one of them."""
    for leaf in spec.equality_leaves:
        array = nested_column(table, leaf.steps)
        if array.null_count:
            index = pc.index(pc.is_null(array), True).as_py()
            raise BadRowError(
                f"table {spec.table_name}, checkpoint {spec.checkpoint_id}, task {task_id}: equality field "
                f"{leaf.dotted!r} is null in {array.null_count} row(s), e.g. ({_describe_row(table, index)}); "
                "a change needs its full key: fix the input and restart the stream"
            )


def _kinds(spec: WriterSpec, table: pa.Table, task_id: int) -> pa.Array:
    assert spec.changes is not None
    if spec.changes.op_column is None:
        return pa.array([UPDATE] * table.num_rows, pa.string())
    raw = table.column(spec.changes.op_column).cast(pa.string()).combine_chunks()
    known = dict(spec.changes.op_kinds)
    values = pa.array(list(known), pa.string())
    positions = pc.index_in(raw, value_set=values)
    if positions.null_count:
        index = pc.index(pc.is_null(positions), True).as_py()
        bad = raw[index].as_py()
        raise BadRowError(
            f"table {spec.table_name}, checkpoint {spec.checkpoint_id}, task {task_id}: column "
            f"{spec.changes.op_column!r} has the unknown operation {bad!r} ({_describe_row(table, index)}); "
            f"known operations: {', '.join(f'{k!r}={v}' for k, v in known.items())}. Fix the input, or pass op_values="
        )
    return pc.take(pa.array(list(known.values()), pa.string()), positions)


def collapse(spec: WriterSpec, table: pa.Table, task_id: int) -> CollapsedChanges:
    """The last change per key of all rows of one task."""
    assert spec.changes is not None
    changes = spec.changes
    kinds = _kinds(spec, table, task_id)
    # Keys as flat columns: a key field may sit inside a struct.
    keys = [f"__icesink_key{i}" for i in range(len(spec.equality_leaves))]
    for name, leaf in zip(keys, spec.equality_leaves, strict=True):
        key = nested_column(table, leaf.steps)
        if isinstance(key.type, pa.BaseExtensionType):  # uuid: Arrow sorts and compares the stored bytes only
            key = pa.chunked_array([chunk.storage for chunk in key.chunks], key.type.storage_type)
        table = table.append_column(name, key)
    # A change without a sequence value counts as the oldest of its key.
    order = [(name, "ascending", "at_start") for name in keys]
    if changes.sequence_column is not None:
        order.append((changes.sequence_column, "ascending", "at_start"))
    order.append((changes.order_column, "ascending", "at_start"))
    table = table.append_column("__icesink_kind", kinds)
    table = table.filter(pc.not_equal(kinds, SKIP))
    # Sorted on the sort columns alone: Arrow refuses to sort a table holding extension (uuid) columns.
    table = table.take(pc.sort_indices(table.select([name for name, _, _ in order]), sort_keys=order))
    # After sorting, a row is its key's last change when the next row has another key.
    last = _last_of_each_key(table, keys)
    latest = table.filter(last)
    upserts = latest.filter(pc.not_equal(latest.column("__icesink_kind"), DELETE))
    table_columns = [c.name for c in spec.columns]
    return CollapsedChanges(upserts=upserts.select(table_columns), keys_to_delete=_key_rows(spec, latest))


def _key_rows(spec: WriterSpec, rows: pa.Table) -> pa.Table:
    """The columns of an equality delete file: each key field, inside its structs if it has any."""
    columns = []
    for pruned in spec.delete_columns:
        full = spec.column_by_id(pruned.field_id)
        columns.append(_prune(one_array(rows.column(full.name)), full, pruned))
    return pa.table(columns, schema=spec.arrow_schema(spec.delete_columns))


def _prune(array: pa.Array, full: ColumnSpec, pruned: ColumnSpec) -> pa.Array:
    if not pruned.is_nested:
        return array
    wanted = arrow_type(pruned.iceberg_type, pruned.children)
    children = []
    for child in pruned.children:
        index = next(i for i, c in enumerate(full.children) if c.field_id == child.field_id)
        children.append(_prune(array.field(index), full.children[index], child))
    mask = pc.is_null(array) if array.null_count else None
    return pa.StructArray.from_arrays(children, fields=list(wanted), mask=mask)


def _last_of_each_key(table: pa.Table, keys: list[str]) -> pa.Array:
    rows = table.num_rows
    if rows == 0:
        return pa.array([], pa.bool_())
    differs = None
    for name in keys:
        column = table.column(name).combine_chunks()
        step = pc.not_equal(column.slice(0, rows - 1), column.slice(1))
        differs = step if differs is None else pc.or_(differs, step)
    assert differs is not None
    return pa.concat_arrays([differs, pa.array([True])])
