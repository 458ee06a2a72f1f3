"""Which rows one snapshot deleted and inserted in one partition, read from its data files.

A task's reader reads each position delete file once, and keeps what a catch-up read over many snapshots
asks of the same files again: each file's read plan and the positions its delete files name. A row-delta
snapshot's changed files are read only at the positions it newly deleted, from the row groups holding them.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from icesink.arrays import empty_table, in_sorted, positions, repeated, sorted_union
from icesink.changelog.reach import unreached
from icesink.iceberg.deletes import EqualityDeletes, PartitionKey
from icesink.iceberg.schemas import with_dropped_keys

if TYPE_CHECKING:
    from pyiceberg.manifest import DataFile
    from pyiceberg.schema import Schema
    from pyiceberg.table import Table

    from icesink.changelog.plan import NewFile, SnapshotChanges
    from icesink.iceberg.file_reads import FilePlan
    from icesink.iceberg.scan import LiveFile


class SnapshotReader:
    """Reads a task's data files and the position deletes they need, each delete file once."""

    def __init__(self, table: Table, schema: Schema, parts: Sequence[SnapshotChanges]) -> None:
        from icesink.iceberg.scan import position_deletes_of

        self.table = table
        self.columns = [f.name for f in schema.fields]  # what changes hold
        # Read with the columns equality deletes are keyed on, even one dropped since.
        keys = (
            i
            for part in parts
            for d in (*part.equality_before, *part.equality_after)
            for i in d.file.equality_ids or ()
        )
        self.schema = with_dropped_keys(table, schema, keys)
        files: dict[str, DataFile] = {}
        for part in parts:
            for changed in part.changed:
                for f in changed.before | (changed.after or frozenset()):
                    files[str(f.file_path)] = f
            for added in part.added:
                for f in added.after:
                    files[str(f.file_path)] = f
        self._positions = position_deletes_of(table, files.values())
        # Per data file, the positions the delete files applying before a snapshot name, and which files those
        # were: the next snapshot's are these and its own, so a catch-up read adds one file's positions a
        # snapshot instead of uniting every earlier one again (which grew with the snapshots read).
        self._named_before: dict[str, tuple[frozenset[str], np.ndarray]] = {}
        # How each file is read at positions (``read_data_file``'s plans): a base file is read in every snapshot.
        self._plans: dict[tuple[object, ...], FilePlan] = {}
        self._distinct_positions: dict[tuple[str, str], np.ndarray] = {}

    def rows(self, live: LiveFile) -> pa.Table:
        """Every row of the file, in file order (no delete applied)."""
        from icesink.iceberg.scan import read_files

        return read_files(self.table, self.schema, [(live.file, frozenset())], None, {})

    def new_rows(self, added: NewFile) -> Iterator[pa.RecordBatch]:
        """The rows of an added file that its position deletes leave, batch by batch as the file is read."""
        from pyiceberg.expressions import AlwaysTrue

        from icesink.iceberg.file_reads import read_data_file

        live = added.data
        named = [
            pa.chunked_array([self._positions[str(f.file_path)][live.path]])
            for f in added.after
            if live.path in self._positions.get(str(f.file_path), {})
        ]
        metadata = self.table.metadata
        yield from read_data_file(metadata, self.table.io, self.schema, live.file, AlwaysTrue(), named or None)

    def all_deleted(self, added: NewFile) -> bool:
        """Whether the position deletes applying to an added file name every row it has (nothing to read)."""
        return len(self.named(added.data, added.after)) >= int(added.data.file.record_count)

    def rows_at(self, live: LiveFile, at: np.ndarray) -> pa.Table:
        """The file's rows at positions ``at`` (sorted, distinct), read from the row groups holding them only."""
        from pyiceberg.expressions import AlwaysTrue

        from icesink.iceberg.file_reads import read_data_file

        metadata = self.table.metadata
        # Kept by the worker under the table and the file's data sequence number as well as its location: a
        # location can be reused (add_files of a regenerated file), a table's sequence numbers cannot.
        kept_as = (str(metadata.table_uuid), live.path, int(live.file.file_size_in_bytes), live.sequence_number)
        batches = list(
            read_data_file(
                metadata, self.table.io, self.schema, live.file, AlwaysTrue(), None, at, kept_as, self._plans
            )
        )
        if not batches:
            return empty_table(self.schema.as_arrow())
        return pa.Table.from_batches(batches)

    def named(self, live: LiveFile, position_deletes: frozenset[DataFile]) -> np.ndarray:
        """The distinct positions of the file that these position delete files name, in order."""
        return self._named(live.path, self._naming(live, position_deletes))

    def _naming(self, live: LiveFile, position_deletes: frozenset[DataFile]) -> frozenset[str]:
        """Which of these position delete files name positions of the file."""
        return frozenset(
            str(f.file_path) for f in position_deletes if live.path in self._positions.get(str(f.file_path), {})
        )

    def _named(self, path: str, naming: frozenset[str]) -> np.ndarray:
        arrays = [self._distinct(d, path) for d in naming]
        if len(arrays) == 1:
            return arrays[0]
        return np.unique(np.concatenate(arrays)) if arrays else np.empty(0, np.int64)

    def _distinct(self, delete_path: str, path: str) -> np.ndarray:
        """The distinct positions one delete file names in a data file, in order: worked out once, as a file's
        delete files are named again in every later snapshot's reads."""
        found = self._distinct_positions.get((delete_path, path))
        if found is None:
            values = np.asarray(self._positions[delete_path][path], dtype=np.int64)
            # In order already, as the spec writes position deletes: nothing to sort.
            found = values if bool(np.all(values[1:] > values[:-1])) else np.unique(values)
            self._distinct_positions[(delete_path, path)] = found
        return found

    def named_before(self, live: LiveFile, position_deletes: frozenset[DataFile]) -> np.ndarray:
        """:meth:`named`, for the delete files that applied before a snapshot: what the previous snapshot's
        read left for the file, with the positions of the files added since."""
        naming = self._naming(live, position_deletes)
        known = self._named_before.get(live.path)
        if known is not None and known[0] == naming:
            return known[1]
        if known is not None and known[0] < naming:
            found = sorted_union(known[1], self._named(live.path, naming - known[0]))
        else:
            found = self._named(live.path, naming)
        self._named_before[live.path] = (naming, found)
        return found

    def alive(
        self,
        rows: pa.Table,
        live: LiveFile,
        position_deletes: frozenset[DataFile],
        equality: EqualityDeletes,
        scope: PartitionKey,
    ) -> pa.Array:
        removed = repeated(False, rows.num_rows)
        named = [
            self._positions[str(f.file_path)][live.path]
            for f in position_deletes
            if live.path in self._positions.get(str(f.file_path), {})
        ]
        if named:
            removed = pc.is_in(positions(rows.num_rows), value_set=pa.concat_arrays(named))
        if equality and rows.num_rows:
            sequence = repeated(live.sequence_number, rows.num_rows)
            removed = pc.or_(removed, equality.deleted(rows, sequence, scope))
        return pc.invert(removed)


def deleted_and_inserted(reader: SnapshotReader, part: SnapshotChanges) -> tuple[pa.Table, pa.Table]:
    """The rows one snapshot deleted and inserted in one partition."""
    table, schema = reader.table, reader.schema
    before = EqualityDeletes(table, schema, part.equality_before)
    after = EqualityDeletes(table, schema, part.equality_after)
    empty = empty_table(schema.as_arrow())
    deleted = [empty]
    untouched = unreached(table, reader.schema, part) if after else frozenset()
    for changed in part.changed:
        if changed.data.path in untouched:
            continue  # no delete of the snapshot can remove one of its rows: not read
        if changed.after is not None and not before and not after:
            # Only position deletes changed: the rows newly named, read from their row groups alone, so a large
            # file a few rows of which changed costs those row groups, not the file.
            newly = reader.named(changed.data, changed.after - changed.before)
            if len(newly) and changed.before:  # a position named again (a key updated twice) was deleted before
                newly = newly[~in_sorted(newly, reader.named_before(changed.data, changed.before))]
            if len(newly):
                deleted.append(reader.rows_at(changed.data, newly))
            continue
        rows = reader.rows(changed.data)
        was = reader.alive(rows, changed.data, changed.before, before, part.scope)
        if changed.after is None:
            deleted.append(rows.filter(was))
            continue
        still = reader.alive(rows, changed.data, changed.after, after, part.scope)
        deleted.append(rows.filter(pc.and_(was, pc.invert(still))))
    inserted = [empty]
    for added in part.added:
        if reader.all_deleted(added):
            continue
        rows = reader.rows(added.data)
        inserted.append(rows.filter(reader.alive(rows, added.data, added.after, after, part.scope)))
    return (
        pa.concat_tables(deleted, promote_options="permissive").select(reader.columns),
        pa.concat_tables(inserted, promote_options="permissive").select(reader.columns),
    )
