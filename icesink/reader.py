"""Reading a table's current (or a past) state with equality and position deletes applied.

pyiceberg 0.12 refuses to scan tables with equality delete files. This reader
plans the scan with pyiceberg's pruning (partition summaries, partition
values, column bounds), reads data files with pyiceberg's Arrow reader (which
applies position deletes) and applies equality deletes by the Iceberg rules:
a delete removes rows with equal key values from data files of the same
partition (or from every partition, for an unpartitioned delete file) whose
data sequence number is strictly lower than its own.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from icesink.arrays import positions, repeated
from icesink.errors import BadFilterError, SnapshotNotFoundError

if TYPE_CHECKING:
    from pyiceberg.expressions import BooleanExpression
    from pyiceberg.manifest import DataFile
    from pyiceberg.schema import Schema
    from pyiceberg.table import Table

    from icesink.catalog.config import CatalogConfig
    from icesink.iceberg.scan import LiveFile, PlannedDataFile, PlannedDelete

_SEQ = "__icesink_delete_seq"
_DATA_SEQ = "__icesink_data_seq"
_ROW = "__icesink_row"
PartitionKey = tuple[int, tuple[Any, ...]]  # (spec id, partition values)
GLOBAL: PartitionKey = (-1, ())  # the scope of an unpartitioned delete file: every partition


def _comparable_keys(table: pa.Table) -> pa.Table:
    """Key columns in one physical type: Arrow joins refuse string against large_string, and
    pyiceberg's reader returns either, depending on the file and the filter."""
    widened = {pa.string(): pa.large_string(), pa.binary(): pa.large_binary()}
    schema = pa.schema([f.with_type(widened.get(f.type, f.type)) for f in table.schema])
    return table.cast(schema) if schema != table.schema else table


def _values(partition: Any) -> tuple[Any, ...]:
    return tuple(partition[i] for i in range(len(partition)))


def partition_scope(table: Table, data_file: DataFile) -> PartitionKey:
    """Where an equality delete file applies: its partition, or everywhere for an unpartitioned spec."""
    spec = table.metadata.specs()[data_file.spec_id]
    return GLOBAL if spec.is_unpartitioned() else (spec.spec_id, _values(data_file.partition))


class EqualityDeletes:
    """The equality delete files of a scan, loaded once, grouped by key columns and partition."""

    def __init__(self, table: Table, schema: Schema, files: Sequence[PlannedDelete | LiveFile]) -> None:
        self._table = table
        self._schema = schema
        self._groups: dict[tuple[tuple[int, ...], PartitionKey], list[PlannedDelete | LiveFile]] = defaultdict(list)
        self._newest: dict[tuple[tuple[int, ...], PartitionKey], int] = {}
        for planned in files:
            group = (tuple(planned.file.equality_ids or ()), partition_scope(table, planned.file))
            self._groups[group].append(planned)
            self._newest[group] = max(self._newest.get(group, 0), planned.sequence_number)
        self._loaded: dict[tuple[tuple[int, ...], PartitionKey], pa.Table] = {}

    def __bool__(self) -> bool:
        return bool(self._groups)

    def preload(self) -> None:
        """Load every group once, before data files are read in parallel."""
        for group in self._groups:
            self._keys(group)

    def files_applying(self, scope: PartitionKey, data_sequence: int) -> int:
        """How many delete files may remove rows of a data file of ``scope`` with this sequence number."""
        return sum(
            1
            for (_, group_scope), files in self._groups.items()
            if group_scope in (GLOBAL, scope)
            for planned in files
            if planned.sequence_number > data_sequence
        )

    def key_field_ids(self) -> set[int]:
        return {i for ids, _ in self._groups for i in ids}

    def may_delete_from(self, scope: PartitionKey, data_sequence: int) -> bool:
        """Whether any delete could remove rows of a data file of ``scope`` with this sequence number."""
        return any(newest > data_sequence and group[1] in (GLOBAL, scope) for group, newest in self._newest.items())

    def _names(self, ids: tuple[int, ...]) -> list[str]:
        return [self._schema.find_column_name(i) or "" for i in ids]

    def _keys(self, group: tuple[tuple[int, ...], PartitionKey]) -> pa.Table:
        """Every deleted key of the group with the highest sequence number that deletes it."""
        if group not in self._loaded:
            from icesink.iceberg.scan import read_files

            ids, _ = group
            names = self._names(ids)
            key_schema = self._schema.select(*names)
            parts = []
            for planned in self._groups[group]:
                keys = read_files(self._table, key_schema, [(planned.file, frozenset())], None)
                parts.append(keys.append_column(_SEQ, repeated(planned.sequence_number, keys.num_rows)))
            combined = _comparable_keys(pa.concat_tables(parts, promote_options="permissive"))
            self._loaded[group] = combined.group_by(names, use_threads=False).aggregate([(_SEQ, "max")])
        return self._loaded[group]

    def deleted(self, keys: pa.Table, data_sequence: pa.Array, scope: PartitionKey) -> pa.Array:
        """Which rows (given by their key columns, named as in the schema) a newer equality delete removes.

        ``data_sequence`` holds each row's data sequence number; one join per
        delete group serves every data file of a partition at once.
        """
        mask = repeated(False, keys.num_rows)
        for group in self._groups:
            ids, delete_scope = group
            if delete_scope not in (GLOBAL, scope) or keys.num_rows == 0:
                continue
            names = self._names(ids)
            # Join only the key columns (with row positions), then map the result back to row order.
            narrow = _comparable_keys(keys.select(names))
            narrow = narrow.append_column(_ROW, positions(keys.num_rows))
            joined = narrow.join(self._keys(group), keys=names, join_type="left outer")
            newest_delete = pc.take(joined.column(f"{_SEQ}_max"), pc.sort_indices(joined.column(_ROW)))
            removed = pc.fill_null(pc.greater(newest_delete, data_sequence), False)
            mask = pc.or_(mask, removed)
        return mask

    def apply(self, rows: pa.Table, scope: PartitionKey) -> pa.Table:
        """Drop rows of one partition that a newer equality delete removes (``rows`` carry their sequence)."""
        if rows.num_rows == 0:
            return rows
        return rows.filter(pc.invert(self.deleted(rows, rows.column(_DATA_SEQ), scope)))


def read_table(
    table: Table, snapshot_id: int | None = None, row_filter: str | BooleanExpression | None = None
) -> pa.Table:
    """The rows of ``table`` at ``snapshot_id`` (default: current), deletes applied, matching ``row_filter``.

    Raises :class:`SnapshotNotFoundError` for a snapshot the table does not have and
    :class:`BadFilterError` for a filter that does not parse or names no column of the table.
    """
    from icesink.iceberg.scan import plan_scan, position_deletes_by_file, read_files

    identifier = ".".join(table.name())
    if snapshot_id is not None and table.metadata.snapshot_by_id(snapshot_id) is None:
        raise SnapshotNotFoundError(
            f"table {identifier} has no snapshot {snapshot_id}; `icesink snapshots list {identifier}` lists them"
        )
    expression = bound_filter(table, identifier, snapshot_id, row_filter)
    plan = plan_scan(table, snapshot_id, expression)
    deletes = EqualityDeletes(table, plan.schema, plan.equality_deletes)
    deletes.preload()
    positions = position_deletes_by_file(table, [d for item in plan.data for d in item.position_deletes])
    columns = plan.schema.as_arrow().names

    def read_one(item: PlannedDataFile) -> pa.Table:
        rows = read_files(table, plan.schema, [(item.file, item.position_deletes)], expression, positions)
        if deletes:
            rows = rows.append_column(_DATA_SEQ, repeated(item.sequence_number, rows.num_rows))
        return rows

    with ThreadPoolExecutor(max_workers=8) as pool:
        parts = list(pool.map(read_one, plan.data))
    if not parts:
        return plan.schema.as_arrow().empty_table()
    if not deletes:
        return pa.concat_tables(parts, promote_options="permissive").select(columns)
    by_scope: dict[PartitionKey, list[pa.Table]] = defaultdict(list)
    for item, rows in zip(plan.data, parts, strict=True):
        by_scope[(item.file.spec_id, _values(item.file.partition))].append(rows)
    alive = [
        deletes.apply(pa.concat_tables(group, promote_options="permissive"), scope) for scope, group in by_scope.items()
    ]
    return pa.concat_tables(alive, promote_options="permissive").select(columns)


def bound_filter(
    table: Table, identifier: str, snapshot_id: int | None, row_filter: str | BooleanExpression | None
) -> BooleanExpression:
    """``row_filter`` parsed and checked against the schema it will be applied to, or a clear error."""
    from pyiceberg.expressions import AlwaysTrue
    from pyiceberg.expressions.visitors import bind

    from icesink.iceberg.scan import parse_row_filter, scan_schema

    if row_filter is None:
        return AlwaysTrue()
    try:
        expression = parse_row_filter(row_filter)
    except Exception as e:  # pyparsing's ParseException and friends: the text is not a filter
        raise BadFilterError(
            f"table {identifier}: row filter {row_filter!r} cannot be parsed ({_first_line(e)}); "
            "write it as in pyiceberg, e.g. \"order_id > 100 and status = 'open'\""
        ) from e
    schema = scan_schema(table, snapshot_id)
    try:
        bind(schema, expression, case_sensitive=True)
    except (ValueError, TypeError) as e:
        raise BadFilterError(
            f"table {identifier}: row filter {row_filter!r} does not fit the table ({_first_line(e)}); "
            f"its columns are {', '.join(schema.column_names)}"
        ) from e
    return expression


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


def read(
    table: str | Table,
    snapshot_id: int | None = None,
    row_filter: str | BooleanExpression | None = None,
    catalog: str | CatalogConfig | dict[str, str] | None = None,
) -> pa.Table:
    """Read an Iceberg table into Arrow, applying equality and position deletes.

    Args:
        table: ``namespace.table`` (looked up in ``catalog``) or a pyiceberg ``Table``.
        snapshot_id: a past snapshot to read; default the current one.
        row_filter: a pyiceberg expression or its string form, e.g. ``"order_id > 100"``;
            used to prune files by partition and column bounds, then to filter rows.
        catalog: as for :func:`icesink.stream`.
    """
    if isinstance(table, str):
        from icesink.catalog.config import resolve_catalog
        from icesink.catalog.loader import load_table, open_catalog

        config = resolve_catalog(catalog)
        table = load_table(open_catalog(config), config, table)
    return read_table(table, snapshot_id, row_filter)
