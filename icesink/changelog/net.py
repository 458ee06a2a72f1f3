"""Net changes: what a reader of only the end state of a range of snapshots would see change, per key."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc

from icesink.arrays import positions, repeated
from icesink.changelog.change_columns import (
    CHANGE_FIELDS,
    CHANGE_ORDINAL,
    CHANGE_TYPE,
    DELETE,
    INSERT,
    JOIN_ROW,
    JOIN_SIDE,
    UPDATE_AFTER,
    UPDATE_BEFORE,
    KeyPaths,
)
from icesink.changelog.same_rows import same_rows
from icesink.iceberg.deletes import comparable_keys

if TYPE_CHECKING:
    from pyiceberg.manifest import DataFile

    from icesink.changelog.plan import SnapshotChanges
    from icesink.iceberg.scan import LiveFile


def without_passing_rows(parts: Sequence[SnapshotChanges]) -> list[SnapshotChanges]:
    """The parts with the rows that only passed through the range left out: rows a part added and a later part
    deleted, by position or with their whole file. They are read neither as inserted nor as deleted.

    A key's net change is decided by its first change (a row deleted: it existed before) and its last (a row
    inserted: it exists after), and a row that came and went is neither: its key's first change is then the
    deletion of an older row, or the insertion of a newer one, and its last change likewise (a key has one live row
    at a time). A file added within the range is read once, for the rows it still holds at the range's end; one
    whose rows all went is not read at all. Equality deletes are matched by key as the rows are read, so parts
    with any are read whole, as they are.
    """
    if any(part.equality_before or part.equality_after for part in parts):
        return list(parts)
    # Each file added within the range: the position deletes applying to it at the range's end (None: removed).
    at_end: dict[tuple[str, int], frozenset[DataFile] | None] = {}
    for part in parts:
        for added in part.added:
            at_end[_named(added.data)] = added.after
        for changed in part.changed:
            if _named(changed.data) in at_end:
                at_end[_named(changed.data)] = changed.after
    kept = []
    for part in parts:
        still_there = tuple(
            replace(one, after=after) for one in part.added if (after := at_end[_named(one.data)]) is not None
        )
        older = tuple(one for one in part.changed if _named(one.data) not in at_end)
        if still_there or older:
            kept.append(replace(part, added=still_there, changed=older))
    return kept


def _named(live: LiveFile) -> tuple[str, int]:
    """A data file as the range knows it: a location may be reused by a later file (add_files of a regenerated
    one), a data sequence number may not."""
    return (live.path, live.sequence_number)


def net(changes: pa.Table, keys: list[str], paths: KeyPaths | None = None) -> pa.Table:
    """Per key, the net change over all the changes (oldest first): what a reader of just the end state sees.

    A key whose row existed before the first change and after the last is one
    update (nothing, if the row is unchanged); one that existed only before is
    a delete; only after, an insert; neither, nothing.
    """
    if changes.num_rows == 0:
        return changes
    kinds = changes.column(CHANGE_TYPE)
    side = pc.if_else(pc.is_in(kinds, value_set=pa.array([DELETE, UPDATE_BEFORE])), 0, 1)
    ordered = changes.append_column(JOIN_SIDE, side).append_column(JOIN_ROW, positions(changes.num_rows))
    key_table, join_names = comparable_keys(ordered, keys, paths)
    sort = [(name, "ascending") for name in join_names]
    sort += [(CHANGE_ORDINAL, "ascending"), (JOIN_SIDE, "ascending"), (JOIN_ROW, "ascending")]
    combined = pa.table(
        [*key_table.columns, ordered.column(CHANGE_ORDINAL), ordered.column(JOIN_SIDE), ordered.column(JOIN_ROW)],
        names=[*join_names, CHANGE_ORDINAL, JOIN_SIDE, JOIN_ROW],
    )
    order = pc.sort_indices(combined, sort_keys=sort)
    sorted_keys = key_table.take(order)
    rows = sorted_keys.num_rows
    differs = repeated(False, max(rows - 1, 0))
    for name in join_names:
        column = sorted_keys.column(name).combine_chunks()
        differs = pc.or_(differs, pc.not_equal(column.slice(0, rows - 1), column.slice(1)))
    first = pa.concat_arrays([pa.array([True]), differs])
    last = pa.concat_arrays([differs, pa.array([True])])
    ordered_rows = ordered.take(order)
    firsts, lasts = ordered_rows.filter(first), ordered_rows.filter(last)  # aligned: one row per key each
    existed = pc.equal(firsts.column(JOIN_SIDE), 0)
    exists = pc.equal(lasts.column(JOIN_SIDE), 1)
    data_names = [n for n in changes.column_names if n not in CHANGE_FIELDS.names]
    # Compared as the changelog compares a rewrite's rows (floats by their bits: a NaN kept is no change, 0.0 to
    # -0.0 is one), column by column rather than row by row in Python.
    unchanged = same_rows(firsts.select(data_names), lasts.select(data_names))
    updated = pc.and_(pc.and_(existed, exists), pc.invert(unchanged))
    out = [
        _relabel(firsts.filter(updated), UPDATE_BEFORE),
        _relabel(lasts.filter(updated), UPDATE_AFTER),
        _relabel(firsts.filter(pc.and_(existed, pc.invert(exists))), DELETE),
        _relabel(lasts.filter(pc.and_(pc.invert(existed), exists)), INSERT),
    ]
    return pa.concat_tables(out).select(changes.column_names)


def _relabel(rows: pa.Table, kind: str) -> pa.Table:
    index = rows.column_names.index(CHANGE_TYPE)
    return rows.set_column(index, CHANGE_TYPE, pa.repeat(pa.scalar(kind, pa.string()), rows.num_rows))
