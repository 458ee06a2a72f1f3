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
from dataclasses import replace
from typing import TYPE_CHECKING

import pyarrow as pa

from icesink.arrays import empty_table, repeated
from icesink.errors import BadFilterError, ConfigError, SnapshotNotFoundError
from icesink.iceberg.deletes import EqualityDeletes, PartitionKey, partition_scope

if TYPE_CHECKING:
    from pyiceberg.expressions import BooleanExpression
    from pyiceberg.table import Table

    from icesink.catalog.config import CatalogConfig
    from icesink.iceberg.scan import PlannedDataFile, PlannedScan


def read_table(
    table: Table,
    snapshot_id: int | None = None,
    row_filter: str | BooleanExpression | None = None,
    *,
    added_after: int | None = None,
    current_schema: bool = False,
    columns: Sequence[str] | None = None,
) -> pa.Table:
    """The rows of ``table`` at ``snapshot_id`` (default: current), deletes applied, matching ``row_filter``.

    With ``added_after`` (a snapshot the read one descends from), only the rows of data files added after it, as
    ``snapshot_id`` has them (the deletes since applied): the cost follows those files. A past snapshot reads in
    its own schema, as time travel does in Iceberg; with ``current_schema`` in the table's, as Iceberg reads a
    branch's head. ``columns`` (top-level names) reads only those.

    Raises :class:`SnapshotNotFoundError` for a snapshot the table does not have and
    :class:`BadFilterError` for a filter that does not parse or names no column of the table.
    """
    from icesink.iceberg.scan import plan_scan, position_deletes_by_file, read_files
    from icesink.iceberg.schemas import with_dropped_keys

    identifier = ".".join(table.name())
    if snapshot_id is not None and table.metadata.snapshot_by_id(snapshot_id) is None:
        raise SnapshotNotFoundError(
            f"table {identifier} has no snapshot {snapshot_id}; `icesink snapshots list {identifier}` lists them"
        )
    schema_of = None if current_schema else snapshot_id
    expression = bound_filter(table, identifier, schema_of, row_filter)
    plan = plan_scan(table, snapshot_id, expression, schema=table.metadata.schema() if current_schema else None)
    plan = _narrowed(table, plan, columns, added_after)
    # Read with the columns deletes are keyed on, even one dropped since; return the schema's columns.
    schema = with_dropped_keys(
        table, plan.schema, (i for d in plan.equality_deletes for i in d.file.equality_ids or ())
    )
    deletes = EqualityDeletes(table, schema, plan.equality_deletes)
    deletes.preload()
    positions = position_deletes_by_file(table, [d for item in plan.data for d in item.position_deletes])
    columns = plan.schema.as_arrow().names

    def read_one(item: PlannedDataFile) -> pa.Table:
        return read_files(table, schema, [(item.file, item.position_deletes)], expression, positions)

    with ThreadPoolExecutor(max_workers=8) as pool:
        parts = list(pool.map(read_one, plan.data))
    if not parts:
        return empty_table(plan.schema.as_arrow())
    if not deletes:
        return pa.concat_tables(parts, promote_options="permissive").select(columns)
    # One join per partition serves all its files: rows carry their file's data sequence number.
    by_scope: dict[PartitionKey, list[tuple[pa.Table, int]]] = defaultdict(list)
    for item, rows in zip(plan.data, parts, strict=True):
        by_scope[partition_scope(table, item.file)].append((rows, item.sequence_number))
    alive = []
    for scope, group in by_scope.items():
        rows = pa.concat_tables([r for r, _ in group], promote_options="permissive")
        sequence = pa.concat_arrays([repeated(seq, r.num_rows) for r, seq in group])
        alive.append(deletes.apply(rows, sequence, scope))
    return pa.concat_tables(alive, promote_options="permissive").select(columns)


def _narrowed(table: Table, plan: PlannedScan, columns: Sequence[str] | None, added_after: int | None) -> PlannedScan:
    """The plan with only ``columns`` (top-level names), and only the data files added after ``added_after``."""
    from pyiceberg.schema import Schema

    if columns is not None:  # by top-level field, not by name lookup: a name may hold a dot
        kept = [f for f in plan.schema.fields if f.name in set(columns)]
        plan = replace(plan, schema=Schema(*kept, schema_id=plan.schema.schema_id))
    if added_after is not None:
        base = table.metadata.snapshot_by_id(added_after)
        after = base.sequence_number if base is not None and base.sequence_number is not None else 0
        plan = replace(plan, data=[item for item in plan.data if item.sequence_number > after])
    return plan


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
    branch: str | None = None,
) -> pa.Table:
    """Read an Iceberg table into Arrow, applying equality and position deletes.

    Args:
        table: ``namespace.table`` (looked up in ``catalog``) or a pyiceberg ``Table``.
        snapshot_id: a past snapshot to read; default the current one.
        row_filter: a pyiceberg expression or its string form, e.g. ``"order_id > 100"``;
            used to prune files by partition and column bounds, then to filter rows.
        catalog: as for :func:`icesink.stream`.
        branch: read the head of this branch (or tag) instead of ``main`` (a stream's ``branch=``, say).
    """
    if isinstance(table, str):
        from icesink.catalog.config import resolve_catalog
        from icesink.catalog.loader import load_table, open_catalog

        config = resolve_catalog(catalog)
        table = load_table(open_catalog(config), config, table)
    if branch is not None:
        if snapshot_id is not None:
            raise ConfigError(f"table {'.'.join(table.name())}: give snapshot_id or branch, not both")
        head = table.metadata.snapshot_by_name(branch)
        if head is None:
            refs = ", ".join(sorted(table.metadata.refs)) or "none"
            raise ConfigError(f"table {'.'.join(table.name())} has no branch or tag {branch!r} (it has: {refs})")
        # A branch reads in the table's current schema, a tag in its snapshot's, as Iceberg Java reads them.
        is_branch = table.metadata.refs[branch].snapshot_ref_type.value == "branch"
        return read_table(table, head.snapshot_id, row_filter, current_schema=is_branch)
    return read_table(table, snapshot_id, row_filter)
