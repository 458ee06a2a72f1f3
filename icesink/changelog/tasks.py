"""The Spark tasks of a change stream: which snapshot parts each reads, and what it hands Spark.

The stream readers (:mod:`icesink.changelog.source`, :mod:`icesink.changelog.tables_source`) plan on the
driver; a task's value travels to an executor, which reads it here.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pyarrow as pa
    from pyiceberg.schema import Schema
    from pyiceberg.table import Table

    from icesink.changelog.plan import SnapshotChanges

# Parts are grouped into one Spark task until it reads about this many rows.
ROWS_PER_TASK = 2_000_000


@dataclass(frozen=True)
class ChangeTask:
    """One Spark task (the value of its ``InputPartition``): snapshot parts read in order on one executor."""

    metadata_location: str
    io_properties: tuple[tuple[str, str], ...]
    schema: Schema
    parts: tuple[SnapshotChanges, ...]
    mode: str
    net_changes: bool
    with_watermark: bool = False


def pairs_across_partitions(table: Table, mode: str) -> bool:
    """Whether a snapshot's deletes and inserts must be paired across its partitions: a changelog of a keyed table
    whose keys may move from one partition to another (see :func:`keys_stay_in_partitions`)."""
    keyed = bool(table.metadata.schema().identifier_field_ids)
    return mode != "append" and keyed and not keys_stay_in_partitions(table)


def keys_stay_in_partitions(table: Table) -> bool:
    """Whether a key's rows are always in one partition: the table only ever had one partition spec, and it
    derives the partition from identifier fields alone (or there is none). Otherwise an update may move a key."""
    metadata = table.metadata
    keys = set(metadata.schema().identifier_field_ids)
    specs = metadata.partition_specs
    return len(specs) == 1 and all(f.source_id in keys for f in specs[0].fields)


def group_parts(
    parts: list[SnapshotChanges],
    net_changes: bool,
    tasks: int | None = None,
    keys_stay: bool = False,
    pair_across: bool = False,
) -> list[list[SnapshotChanges]]:
    """The parts of one table's changes, in order, grouped into Spark tasks.

    Net changes need every change of a key in one task: each partition's in one task when ``keys_stay`` in their
    partitions (:func:`keys_stay_in_partitions`), all in one task when a key may move from one to another (its
    delete in one partition and its insert in another are one update). For the same reason, with ``pair_across``
    (:func:`pairs_across_partitions`), a snapshot that deletes rows is read whole by one task.

    Snapshots of a keyed table change rows of the same files over and over, and a task reads each file it
    touches once (a worker keeps the row groups it decoded), so the number of tasks follows the distinct rows
    read: about ``ROWS_PER_TASK`` a task, and at least ``tasks`` (default: this machine's cores) while there
    are parts to share. Each task costs Spark a round trip to a Python worker, which a task per snapshot
    would pay again and again on a catch-up read.
    """
    if net_changes and not keys_stay:
        return [parts] if parts else []
    if net_changes:
        by_scope: dict[Any, list[SnapshotChanges]] = {}
        for part in parts:
            by_scope.setdefault(part.scope, []).append(part)
        return list(by_scope.values())
    if not parts:
        return []
    distinct: dict[str, int] = {}
    for part in parts:
        distinct.update(part.data_files)
    units = _units(parts, pair_across)
    wanted = max(tasks if tasks is not None else os.cpu_count() or 1, -(-sum(distinct.values()) // ROWS_PER_TASK))
    count = min(wanted, len(units))
    total = sum(part.rows for part in parts)
    groups: list[list[SnapshotChanges]] = [[] for _ in range(count)]
    done = 0
    for index, unit in enumerate(units):
        # The group whose share of the rows (or of the units, when none has rows) the unit's middle falls in.
        rows = sum(part.rows for part in unit)
        share = (done + rows / 2) / total if total else (index + 0.5) / len(units)
        groups[min(count - 1, int(share * count))].extend(unit)
        done += rows
    return [group for group in groups if group]


def _units(parts: list[SnapshotChanges], pair_across: bool) -> list[list[SnapshotChanges]]:
    """The parts that must be read in one task: a snapshot's partitions together where it deletes rows and its
    pairs are made across them (a key's delete in one and its insert in another are one update), else each alone."""
    from icesink.changelog.plan import by_snapshot

    units: list[list[SnapshotChanges]] = []
    for snapshot in by_snapshot(parts):
        if pair_across and len(snapshot) > 1 and any(part.deletes_rows for part in snapshot):
            units.append(snapshot)
        else:
            units.extend([part] for part in snapshot)
    return units


def task_changes(task: ChangeTask) -> Iterator[pa.Table]:
    """A task's changes, in pieces as its files are read (whole, for net changes: they need every change)."""
    from pyiceberg.table import StaticTable

    from icesink.changelog.compute import change_pieces, compute_changes

    table = StaticTable.from_metadata(task.metadata_location, properties=dict(task.io_properties))
    if task.net_changes:
        yield compute_changes(table, task.schema, task.parts, task.mode, True, task.with_watermark)
    else:
        yield from change_pieces(table, task.schema, task.parts, task.mode, task.with_watermark)


def conformed(rows: pa.Table, schema: pa.Schema) -> pa.Table:
    """The columns of ``schema`` (Spark's declared schema, in Arrow) in exactly its types and nullability, as
    Spark checks them."""
    import pyarrow as pa

    columns = [_as_spark_value(rows.column(f.name), f.type) for f in schema]
    return pa.Table.from_arrays(columns, schema=schema)


def _as_spark_value(column: pa.ChunkedArray, wanted: pa.DataType) -> pa.ChunkedArray:
    """A column in the Arrow type Spark declared; uuids (which Spark reads as strings) in their text form."""
    import uuid

    import pyarrow as pa

    if isinstance(column.type, pa.UuidType):
        text = [None if b is None else str(uuid.UUID(bytes=b)) for b in column.combine_chunks().storage.to_pylist()]
        return pa.chunked_array([pa.array(text, wanted)])
    return column.cast(wanted)
