"""The check that a rewrite wrote exactly the values it read.

Column metrics cannot tell a null list from an empty one (Parquet counts both
as a null leaf), so the check profiles every node of the nested values
instead: for each field id (struct fields, list elements, map keys and
values, at any depth), how many values it holds and how many of them are
null. A rewrite is committed only when

* each input file, read as raw Parquet by pyarrow (its deleted positions left
  out), has the profile of the rows icesink's own read produced from it, and
* the files written, read back as raw Parquet, have the profile of the rows
  handed to the writer.

Between the two, equality deletes remove whole rows, which the writer's side
accounts for.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from icesink.arrays import FIELD_ID
from icesink.errors import TerminalError

if TYPE_CHECKING:
    from pyiceberg.io import FileIO

    from icesink.iceberg.scan import PlannedDataFile
    from icesink.results import FileRecord

# field id -> (values, nulls)
Profile = Counter[tuple[int, str]]


class RewriteCheckError(TerminalError):
    """Raised when a rewrite would change a value: what it read or wrote differs from its input."""


def profile(table: pa.Table) -> Profile:
    """Values and nulls at every field id of ``table`` (whose fields carry Parquet field ids)."""
    found: Profile = Counter()
    for column_field, column in zip(table.schema, table.columns, strict=True):
        for chunk in column.chunks:
            _visit(column_field, chunk, found, None)
    return found


def _field_id(field: pa.Field) -> int | None:
    raw = (field.metadata or {}).get(FIELD_ID)
    return int(raw) if raw is not None else None


def _visit(field: pa.Field, array: pa.Array, found: Profile, selected: pa.Array | None) -> None:
    """Count ``array``'s slots that ``selected`` keeps (None: all), then its children under its kept values.

    Nothing is flattened or filtered (Arrow cannot build lists of uuids): a child slot is kept when the
    parent slot it belongs to is kept and holds a value, so whatever lies under a null is never counted.
    """
    valid = pc.is_valid(array)
    kept = valid if selected is None else pc.and_(selected, valid)
    field_id = _field_id(field)
    if field_id is not None:
        counted = len(array) if selected is None else _count(selected)
        found[(field_id, "values")] += counted
        found[(field_id, "nulls")] += counted - _count(kept)
    kind = field.type
    if pa.types.is_struct(kind):
        for index, child_field in enumerate(kind):
            _visit(child_field, array.field(index), found, kept)
    elif pa.types.is_list(kind) or pa.types.is_large_list(kind) or pa.types.is_map(kind):
        offsets = array.offsets
        start, end = offsets[0].as_py(), offsets[-1].as_py()
        entries = array.values.slice(start, end - start)
        # Which slot each entry belongs to, from the offsets alone (on stand-in int8 entries).
        build = pa.LargeListArray if pa.types.is_large_list(kind) else pa.ListArray
        shape = build.from_arrays(pc.subtract(offsets, offsets[0]), pa.nulls(end - start, pa.int8()))
        child_kept = pc.take(kept, pc.list_parent_indices(shape))
        if pa.types.is_map(kind):
            _visit(kind.key_field, entries.field(0), found, child_kept)
            _visit(kind.item_field, entries.field(1), found, child_kept)
        else:
            _visit(kind.value_field, entries, found, child_kept)


def _count(flags: pa.Array) -> int:
    return int(pc.sum(flags).as_py() or 0)


def differences(expected: Profile, actual: Profile, ids: Iterable[int] | None = None) -> list[str]:
    """Field ids whose counts differ, as ``id N: values/nulls expected X, found Y`` (only ``ids`` if given)."""
    keys = set(expected) | set(actual)
    if ids is not None:
        wanted = set(ids)
        keys = {k for k in keys if k[0] in wanted}
    return [
        f"field id {field_id}: {what} expected {expected[(field_id, what)]}, found {actual[(field_id, what)]}"
        for field_id, what in sorted(keys)
        if expected[(field_id, what)] != actual[(field_id, what)]
    ]


def field_ids(profile_: Profile) -> set[int]:
    return {field_id for field_id, _ in profile_}


def check_read(
    io: FileIO,
    identifier: str,
    data: PlannedDataFile,
    rows: pa.Table,
    positions: dict[str, list[pa.ChunkedArray]],
) -> None:
    """Refuse rows read from ``data`` that differ from the file's raw Parquet (deleted positions left out)."""
    path = str(data.file.file_path)
    raw = _raw(io, path)
    if data.position_deletes and positions.get(path):
        deleted = pa.chunked_array([c for chunked in positions[path] for c in chunked.chunks], pa.int64())
        everything = pa.array(range(raw.num_rows), pa.int64())
        raw = raw.take(pc.filter(everything, pc.invert(pc.is_in(everything, value_set=deleted))))
    expected, actual = profile(raw), profile(rows)
    found = differences(expected, actual, field_ids(expected) & field_ids(actual))
    if found:
        raise RewriteCheckError(
            f"table {identifier}: reading {path} for a rewrite changed values ({'; '.join(found[:5])}); "
            "nothing was committed. Please report this with the file"
        )


def check_written(io: FileIO, identifier: str, rows: pa.Table, records: Sequence[FileRecord]) -> None:
    """Refuse files whose raw Parquet does not hold exactly ``rows`` (their values and nulls at every depth)."""
    written: Profile = Counter()
    for record in records:
        written.update(profile(_raw(io, record.path)))
    expected = profile(rows)
    found = differences(expected, written)
    if sum(r.record_count for r in records) != rows.num_rows:
        found.insert(0, f"rows: expected {rows.num_rows}, written {sum(r.record_count for r in records)}")
    if found:
        raise RewriteCheckError(
            f"table {identifier}: the rewritten files do not hold the rows read ({'; '.join(found[:5])}); "
            "they were removed and nothing was committed. Please report this"
        )


def _raw(io: FileIO, path: str) -> pa.Table:
    with io.new_input(path).open() as stream:
        return pq.read_table(stream)
