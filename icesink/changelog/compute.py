"""Computing changes from planned files: which rows were alive before a snapshot and after it.

Runs wherever the rows are needed (a Spark executor for a stream, the driver
for ``icesink.changes``). For every data file a snapshot may have changed, all
its rows are read in file order, and two masks say which were alive before
and after: position deletes by position, equality deletes by key and data
sequence number. Rows alive before and not after were deleted; rows of added
files alive after were inserted. Within a snapshot, a deleted and an inserted
row with the same identifier fields are an update (``update_before`` /
``update_after``); identical deleted and inserted rows (a copy-on-write
rewrite) are no change at all.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from icesink.arrays import empty_table, positions, repeated
from icesink.changelog.change_columns import (
    CHANGE_FIELDS,
    DELETE,
    INSERT,
    JOIN_ROW,
    JOIN_SIDE,
    UPDATE_AFTER,
    UPDATE_BEFORE,
    WATERMARK_FIELD,
    KeyPaths,
)
from icesink.changelog.net import net, without_passing_rows
from icesink.changelog.plan import by_snapshot
from icesink.changelog.same_rows import joinable, same_rows
from icesink.changelog.snapshot_reads import SnapshotReader, deleted_and_inserted
from icesink.iceberg.deletes import comparable_keys
from icesink.iceberg.schemas import field_path

if TYPE_CHECKING:
    from pyiceberg.schema import Schema
    from pyiceberg.table import Table

    from icesink.changelog.plan import SnapshotChanges


def _joined(left: pa.Table, right: pa.Table, names: list[str], paths: KeyPaths | None) -> tuple[np.ndarray, np.ndarray]:
    """Every pair of row indices of ``left`` and ``right`` equal on ``names`` (null equal to null), in order."""
    left_keys, join_names = comparable_keys(left, names, paths)
    right_keys, _ = comparable_keys(right, names, paths)
    left_keys = left_keys.append_column(JOIN_ROW, positions(left.num_rows))
    right_keys = right_keys.append_column(JOIN_SIDE, positions(right.num_rows))
    joined = left_keys.join(right_keys, keys=join_names, join_type="inner")
    if joined.num_rows == 0:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    joined = joined.sort_by([(JOIN_ROW, "ascending"), (JOIN_SIDE, "ascending")])
    return joined.column(JOIN_ROW).to_numpy(), joined.column(JOIN_SIDE).to_numpy()


def _one_each(lefts: np.ndarray, rights: np.ndarray) -> bool:
    """Whether no row is in two of these pairs."""
    return len(np.unique(lefts)) == len(lefts) and len(np.unique(rights)) == len(rights)


def _matches(
    left: pa.Table, right: pa.Table, names: list[str], paths: KeyPaths | None = None
) -> tuple[pa.Array, pa.Array]:
    """Row indices of ``left`` and ``right`` equal on ``names`` (null equal to null), each row used once."""
    lefts, rights = _joined(left, right, names, paths)
    if _one_each(lefts, rights):
        return pa.array(lefts, pa.int64()), pa.array(rights, pa.int64())
    # One partner per row on either side, in a stable order.
    used_left: set[int] = set()
    used_right: set[int] = set()
    pairs_left, pairs_right = [], []
    for a, b in zip(lefts.tolist(), rights.tolist(), strict=True):
        if a in used_left or b in used_right:
            continue
        used_left.add(a)
        used_right.add(b)
        pairs_left.append(a)
        pairs_right.append(b)
    return pa.array(pairs_left, pa.int64()), pa.array(pairs_right, pa.int64())


def _without(table: pa.Table, indices: pa.Array) -> pa.Table:
    if len(indices) == 0:
        return table
    return table.filter(pc.invert(pc.is_in(positions(table.num_rows), value_set=indices)))


def _labelled(rows: pa.Table, kind: str, part: SnapshotChanges) -> pa.Table:
    commit = part.commit
    count = rows.num_rows
    return pa.table(
        [
            *rows.columns,
            pa.repeat(pa.scalar(kind, pa.string()), count),
            repeated(commit.sequence_number, count),
            repeated(commit.snapshot_id, count),
            repeated(commit.timestamp_ms * 1000, count).cast(pa.timestamp("us", tz="UTC")),
        ],
        names=[*rows.column_names, *CHANGE_FIELDS.names],
    )


def changelog(
    deleted: pa.Table, inserted: pa.Table, keys: list[str], part: SnapshotChanges, paths: KeyPaths | None = None
) -> pa.Table:
    """One snapshot's changes in one partition, labelled; updates paired by ``keys`` (none: no pairing).

    ``paths`` locates keys inside structs."""
    pairs = None
    if keys and deleted.num_rows and inserted.num_rows:
        pairs = _joined(deleted, inserted, keys, paths)
        if not _one_each(*pairs):
            pairs = None
    parts = []
    if pairs is not None:
        # No row has two partners by key, so a row rewritten unchanged can only be its own key's partner: the
        # pairs are compared value by value, with no join on every column.
        old, new = pa.array(pairs[0], pa.int64()), pa.array(pairs[1], pa.int64())
        changed = pc.invert(same_rows(deleted.take(old), inserted.take(new)))
        if len(old):
            parts.append(_updates(deleted, inserted, old.filter(changed), new.filter(changed), part))
        deleted, inserted = _without(deleted, old), _without(inserted, new)
    elif deleted.num_rows and inserted.num_rows:
        # Rows rewritten unchanged (copy-on-write) are not changes.
        same_left, same_right = _matches(joinable(deleted), joinable(inserted), list(deleted.column_names))
        deleted, inserted = _without(deleted, same_left), _without(inserted, same_right)
        if keys and deleted.num_rows and inserted.num_rows:
            old, new = _matches(deleted, inserted, keys, paths)
            parts.append(_updates(deleted, inserted, old, new, part))
            deleted, inserted = _without(deleted, old), _without(inserted, new)
    parts.append(_labelled(deleted, DELETE, part))
    parts.append(_labelled(inserted, INSERT, part))
    return pa.concat_tables(parts, promote_options="permissive")


def _updates(deleted: pa.Table, inserted: pa.Table, old: pa.Array, new: pa.Array, part: SnapshotChanges) -> pa.Table:
    """The pairs as updates: each update_before right before its update_after."""
    befores = _labelled(deleted.take(old), UPDATE_BEFORE, part)
    afters = _labelled(inserted.take(new), UPDATE_AFTER, part)
    order = pc.sort_indices(
        pa.table(
            {
                "i": pa.concat_arrays([positions(len(old)), positions(len(new))]),
                "s": pa.concat_arrays([repeated(0, len(old)), repeated(1, len(new))]),
            }
        ),
        sort_keys=[("i", "ascending"), ("s", "ascending")],
    )
    return pa.concat_tables([befores, afters]).take(order)


def compute_changes(
    table: Table,
    schema: Schema,
    parts: Sequence[SnapshotChanges],
    mode: str,
    net_changes: bool,
    with_watermark: bool = False,
) -> pa.Table:
    """The changes of ``parts`` (one or more snapshots, oldest first) as one Arrow table.

    ``mode`` ``"changelog"``: every change with the change columns; ``"append"``:
    the rows each snapshot added, table columns only. With ``net_changes``,
    the changes of one key across all parts collapse to the net change. ``with_watermark`` adds
    ``_commit_watermark`` last.
    """
    if net_changes and mode != "append":
        parts = without_passing_rows(parts)
    pieces = list(change_pieces(table, schema, parts, mode, with_watermark))
    if not pieces:
        if mode == "append":
            return empty_table(pa.schema([*schema.as_arrow(), *([WATERMARK_FIELD] if with_watermark else [])]))
        return empty_changelog(schema, with_watermark)
    changes = pa.concat_tables(pieces, promote_options="permissive")
    if net_changes and mode != "append":
        keys = [schema.find_column_name(i) or "" for i in schema.identifier_field_ids]
        return net(changes, keys, _key_paths(schema, keys))
    return changes


def change_pieces(
    table: Table, schema: Schema, parts: Sequence[SnapshotChanges], mode: str, with_watermark: bool = False
) -> Iterator[pa.Table]:
    """The changes of ``parts``, oldest first, in pieces as they are read (:func:`compute_changes` without
    ``net_changes``).

    Rows a snapshot only added (no row of it deleted, no equality delete after it) come batch by batch as the
    file is read, so that a task hands rows on while it reads rather than after its last file.
    """
    reader = SnapshotReader(table, schema, parts)
    keys = [schema.find_column_name(i) or "" for i in schema.identifier_field_ids]
    paths = _key_paths(schema, keys)

    def marked(rows: pa.Table, part: SnapshotChanges) -> pa.Table:
        return _watermarked(rows, part) if with_watermark else rows

    for snapshot in by_snapshot(parts):
        if keys and mode != "append" and len(snapshot) > 1 and any(p.deletes_rows for p in snapshot):
            # A key moved from one partition to another: its delete and its insert are one update. Pairs are
            # made across the snapshot's partitions (a key that stays in its partition pairs the same way).
            read = [deleted_and_inserted(reader, part) for part in snapshot]
            deleted = pa.concat_tables([d for d, _ in read], promote_options="permissive")
            inserted = pa.concat_tables([i for _, i in read], promote_options="permissive")
            yield marked(changelog(deleted, inserted, keys, snapshot[0], paths), snapshot[0])
            continue
        for part in snapshot:
            if mode == "append" and not part.added:
                continue
            if not part.equality_after and (mode == "append" or not (part.changed or part.equality_before)):
                for added in part.added:
                    for batch in [] if reader.all_deleted(added) else reader.new_rows(added):
                        rows = pa.Table.from_batches([batch]).select(reader.columns)
                        yield marked(rows if mode == "append" else _labelled(rows, INSERT, part), part)
                continue
            deleted, inserted = deleted_and_inserted(reader, part)
            yield marked(inserted if mode == "append" else changelog(deleted, inserted, keys, part, paths), part)


def _key_paths(schema: Schema, keys: list[str]) -> KeyPaths:
    return {name: field_path(schema, i) for name, i in zip(keys, schema.identifier_field_ids, strict=True)}


def _watermarked(rows: pa.Table, part: SnapshotChanges) -> pa.Table:
    micros = part.commit.watermark
    values = repeated(micros, rows.num_rows) if micros is not None else pa.nulls(rows.num_rows, pa.int64())
    return rows.append_column(WATERMARK_FIELD, values.cast(WATERMARK_FIELD.type))


def empty_changelog(schema: Schema, with_watermark: bool = False) -> pa.Table:
    fields = [*schema.as_arrow(), *CHANGE_FIELDS, *([WATERMARK_FIELD] if with_watermark else [])]
    return empty_table(pa.schema(fields))
