"""Equality deletes by the Iceberg rules, for reading and for maintenance.

An equality delete removes, from data files of its partition (or of every
partition, for an unpartitioned delete file) whose data sequence number is
strictly lower than its own, the rows whose key columns equal one of its keys,
``null`` equal to ``null``. Keys are matched with Arrow joins: one per delete
group and partition, whatever the number of data files.
"""

from __future__ import annotations

import decimal
from collections import defaultdict
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyiceberg.schema import Schema

from icesink.arrays import FIELD_ID, FieldStep, nested_column, positions, repeated
from icesink.iceberg.manifest_lists import manifests_of
from icesink.reading_threads import in_parallel

if TYPE_CHECKING:
    from pyiceberg.manifest import DataFile
    from pyiceberg.table import Table

    from icesink.iceberg.scan import LiveFile, PlannedDelete

_SEQ = "__icesink_delete_seq"
_ROW = "__icesink_row"
NULL_FLAG = "__icesink_null_"  # a key column's flag column: which of its rows were null
PartitionKey = tuple[int, tuple[Any, ...]]  # (spec id, partition values)
GLOBAL: PartitionKey = (-1, ())  # the scope of an unpartitioned delete file: every partition
PARALLEL_GROUPS = 8  # below, groups are loaded on the caller's thread (threads would cost more than they save)


def nested_key_fields(schema: Schema, equality_ids: Sequence[int]) -> list[str]:
    """The equality fields among ``equality_ids`` that sit inside a struct, by their dotted names.

    Iceberg Java 1.9 ignores equality deletes keyed on such fields (apache/iceberg#16280), so
    icesink never leaves them in a table: they are converted to position deletes at commit.
    """
    top_level = {f.field_id for f in schema.fields}
    return [schema.find_column_name(i) or str(i) for i in equality_ids if i not in top_level]


def _zero(kind: pa.DataType) -> pa.Scalar:
    """Any valid value of ``kind``: the stand-in for null in a join key (a flag column tells them apart)."""
    if pa.types.is_string(kind) or pa.types.is_large_string(kind):
        return pa.scalar("", kind)
    if pa.types.is_binary(kind) or pa.types.is_large_binary(kind) or pa.types.is_fixed_size_binary(kind):
        width = kind.byte_width if pa.types.is_fixed_size_binary(kind) else 0  # byte_width raises for the others
        return pa.array([b"\0" * width], kind)[0]
    if pa.types.is_boolean(kind):
        return pa.scalar(False)
    if pa.types.is_date32(kind) or pa.types.is_time32(kind):
        return pa.array([0], pa.int32()).cast(kind)[0]
    if pa.types.is_decimal(kind):
        return pa.scalar(decimal.Decimal(0), kind)
    return pa.array([0], pa.int64()).cast(kind)[0]


def comparable_keys(
    table: pa.Table, names: Sequence[str], paths: Mapping[str, tuple[FieldStep, ...]] | None = None
) -> tuple[pa.Table, list[str]]:
    """Key columns ready for a null-safe join, and the join's key names.

    Arrow joins refuse string against large_string (pyiceberg's reader returns
    either) and never match nulls, where Iceberg's equality does: each key
    column is widened, its nulls replaced by a stand-in, and a flag column
    says which rows were null.
    """
    widened = {pa.string(): pa.large_string(), pa.binary(): pa.large_binary()}
    columns: list[pa.ChunkedArray | pa.Array] = []
    keys: list[str] = []
    for name in names:
        column = _storage(nested_column(table, paths[name]) if paths and name in paths else table.column(name))
        kind = widened.get(column.type, column.type)
        if kind != column.type:
            column = column.cast(kind)
        keys.append(name)
        if column.null_count:
            columns.append(pc.fill_null(column, _zero(kind)))
            columns.append(pc.is_null(column))
        else:
            columns.append(column)
            columns.append(repeated(False, len(column)))
        keys.append(f"{NULL_FLAG}{name}")
    labels = [label for name in names for label in (name, f"{NULL_FLAG}{name}")]
    return pa.table(columns, names=labels), keys


def _storage(column: pa.ChunkedArray) -> pa.ChunkedArray:
    """Extension columns (uuid) as their stored values: Arrow hashes, sorts and joins only those."""
    if isinstance(column.type, pa.BaseExtensionType):
        return pa.chunked_array([chunk.storage for chunk in column.chunks], column.type.storage_type)
    return column


def _values(partition: Any) -> tuple[Any, ...]:
    return tuple(partition[i] for i in range(len(partition)))


def partition_scope(table: Table, data_file: DataFile) -> PartitionKey:
    """Where an equality delete file applies: its partition, or everywhere for an unpartitioned spec."""
    spec = table.metadata.specs()[data_file.spec_id]
    return GLOBAL if spec.is_unpartitioned() else (spec.spec_id, _values(data_file.partition))


def data_in_other_specs(table: Table, deletes: Sequence[DataFile], snapshot_id: int | None = None) -> list[int]:
    """The partition specs of live data files (of ``snapshot_id``, default the current snapshot) that some of
    these partitioned deletes were not written in: a reader applies a delete to none of those files (the
    table's spec changed between the files and it)."""
    from pyiceberg.manifest import ManifestContent

    specs = table.metadata.specs()
    partitioned = {d.spec_id for d in deletes if not specs[d.spec_id].is_unpartitioned()}
    metadata = table.metadata
    snapshot = metadata.snapshot_by_id(snapshot_id) if snapshot_id is not None else metadata.current_snapshot()
    if not partitioned or snapshot is None:
        return []
    data_specs = {
        m.partition_spec_id
        for m in manifests_of(table.io, snapshot)
        if m.content == ManifestContent.DATA and (m.has_added_files() or m.has_existing_files())
    }
    # Deletes of one spec reach the files of that spec; deletes of several each miss the others' files.
    return sorted(data_specs - partitioned if len(partitioned) == 1 else data_specs)


class EqualityDeletes:
    """The equality delete files of a scan, loaded once, grouped by key columns and partition."""

    def __init__(
        self, table: Table, schema: Schema, files: Sequence[PlannedDelete | LiveFile], everywhere: bool = False
    ) -> None:
        """``everywhere``: each delete removes its keys from every partition of every spec, as a keyed stream
        means them to (a reader applies them within their partition only); for conversions only."""
        self._table = table
        self._schema = schema
        self._groups: dict[tuple[tuple[int, ...], PartitionKey], list[PlannedDelete | LiveFile]] = defaultdict(list)
        self._newest: dict[tuple[tuple[int, ...], PartitionKey], int] = {}
        for planned in files:
            scope = GLOBAL if everywhere else partition_scope(table, planned.file)
            group = (tuple(planned.file.equality_ids or ()), scope)
            self._groups[group].append(planned)
            self._newest[group] = max(self._newest.get(group, 0), planned.sequence_number)
        self._loaded: dict[tuple[tuple[int, ...], PartitionKey], pa.Table] = {}
        self._key_schemas: dict[tuple[int, ...], Schema] = {}

    @property
    def schema(self) -> Schema:
        """The schema keys are named by."""
        return self._schema

    def __bool__(self) -> bool:
        return bool(self._groups)

    def preload(self) -> None:
        """Load every group once, before data files are read in parallel (many groups, on several threads: a
        partitioned table's checkpoint has a delete file per partition)."""
        in_parallel(self._keys, [g for g in self._groups if g not in self._loaded], alone_below=PARALLEL_GROUPS)

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

    def key_groups(self) -> Iterator[tuple[tuple[int, ...], list[str], PartitionKey, int, pa.Table]]:
        """Per group: key field ids, their names, scope, newest sequence number, and the deleted keys (each
        key column beside its :data:`NULL_FLAG` column)."""
        for group, newest in self._newest.items():
            ids, scope = group
            yield ids, self._names(ids), scope, newest, self._keys(group)

    def may_delete_from(self, scope: PartitionKey, data_sequence: int) -> bool:
        """Whether any delete could remove rows of a data file of ``scope`` with this sequence number."""
        return any(newest > data_sequence and group[1] in (GLOBAL, scope) for group, newest in self._newest.items())

    def _names(self, ids: tuple[int, ...]) -> list[str]:
        return [self._schema.find_column_name(i) or "" for i in ids]

    def key_columns(self, rows: pa.Table, ids: tuple[int, ...]) -> pa.Table:
        """The key fields of ``rows`` as flat columns named as in the schema (``customer.id`` for a field
        inside a struct)."""
        from icesink.iceberg.schemas import field_path

        paths = [field_path(self._schema, i) for i in ids]
        names = self._names(ids)
        if all(len(path) == 1 for path in paths) or all(n in rows.column_names for n in names):
            return rows  # top-level keys, or keys read out of their structs already
        return pa.table([nested_column(rows, path) for path in paths], names=names)

    def _keys(self, group: tuple[tuple[int, ...], PartitionKey]) -> pa.Table:
        """Every deleted key of the group with the highest sequence number that deletes it."""
        if group not in self._loaded:
            from icesink.iceberg.scan import read_files

            ids, _ = group
            names = self._names(ids)
            key_schema = self._key_schema(ids)
            parts = []
            for planned in self._groups[group]:
                keys = _plain_keys(self._table, key_schema, planned.file)
                if keys is None:
                    keys = read_files(self._table, key_schema, [(planned.file, frozenset())], None)
                keys = self.key_columns(keys, ids)
                parts.append(keys.append_column(_SEQ, repeated(planned.sequence_number, keys.num_rows)))
            combined = pa.concat_tables(parts, promote_options="permissive")
            keys, join_names = comparable_keys(combined, names)
            if len(parts) == 1 and len(names) == 1:
                # One file, one sequence number: a key's lookup finds it whichever of its copies it hits, so
                # there is nothing to aggregate (a join, for keys of several columns, needs them distinct).
                self._loaded[group] = keys.append_column(f"{_SEQ}_max", combined.column(_SEQ))
            else:
                keys = keys.append_column(_SEQ, combined.column(_SEQ))
                self._loaded[group] = keys.group_by(join_names, use_threads=False).aggregate([(_SEQ, "max")])
        return self._loaded[group]

    def _key_schema(self, ids: tuple[int, ...]) -> Schema:
        """The schema of the key fields alone (once per key: pruning a schema costs more than reading a file)."""
        if ids not in self._key_schemas:
            distinct = dict.fromkeys(ids)  # a file may name a field twice; select() takes it once
            top_level = [next((f for f in self._schema.fields if f.field_id == i), None) for i in distinct]
            if all(field is not None for field in top_level):  # the common case, without pruning's schema walks
                fields = sorted((f for f in top_level if f is not None), key=self._schema.fields.index)
                # The same schema select() gives, identifier fields in its order too.
                identifiers = list(set(distinct).intersection(self._schema.identifier_field_ids))
                self._key_schemas[ids] = Schema(
                    *fields, schema_id=self._schema.schema_id, identifier_field_ids=identifiers
                )
            else:
                self._key_schemas[ids] = self._schema.select(*self._names(ids))
        return self._key_schemas[ids]

    def deleted(self, keys: pa.Table, data_sequence: pa.Array | pa.Scalar, scope: PartitionKey) -> pa.Array:
        """Which rows (given by their key columns, named as in the schema) a newer equality delete removes.

        ``data_sequence`` holds each row's data sequence number (or one for all
        rows); one hash lookup (one join, for a key of several columns) per
        delete group serves every data file of a partition at once.
        """
        mask = repeated(False, keys.num_rows)
        for group in self._groups:
            ids, delete_scope = group
            if delete_scope not in (GLOBAL, scope) or keys.num_rows == 0:
                continue
            names = self._names(ids)
            flat = self.key_columns(keys, ids)
            newest_delete = (
                self._newest_delete_of_one_column(flat, names[0], group)
                if len(names) == 1
                else self._newest_delete_by_join(flat, names, group)
            )
            removed = pc.fill_null(pc.greater(newest_delete, data_sequence), False)
            mask = pc.or_(mask, removed)
        return mask

    def _newest_delete_of_one_column(
        self, keys: pa.Table, name: str, group: tuple[tuple[int, ...], PartitionKey]
    ) -> pa.Array:
        """Per row, the sequence number of the newest delete of its key (null: none), by hash lookup."""
        loaded = self._keys(group)
        stored = loaded.column(name).combine_chunks()
        # The loaded keys stand in a value for null and flag it; a lookup matches nulls itself.
        value_set = pc.if_else(
            loaded.column(f"{NULL_FLAG}{name}").combine_chunks(), pa.scalar(None, stored.type), stored
        )
        column = _storage(keys.column(name))
        if column.type != stored.type:
            column = column.cast(stored.type)
        index = pc.index_in(column, value_set=value_set, skip_nulls=False)
        return pc.take(loaded.column(f"{_SEQ}_max"), index)

    def _newest_delete_by_join(
        self, keys: pa.Table, names: list[str], group: tuple[tuple[int, ...], PartitionKey]
    ) -> pa.Array:
        """The same for a key of several columns: join the key columns (with row positions), back in row order."""
        narrow, join_names = comparable_keys(keys, names)
        narrow = narrow.append_column(_ROW, positions(keys.num_rows))
        joined = narrow.join(self._keys(group), keys=join_names, join_type="left outer")
        return pc.take(joined.column(f"{_SEQ}_max"), pc.sort_indices(joined.column(_ROW)))

    def apply(self, rows: pa.Table, data_sequence: pa.Array | pa.Scalar, scope: PartitionKey) -> pa.Table:
        """Drop the rows of one partition that a newer equality delete removes."""
        if rows.num_rows == 0:
            return rows
        return rows.filter(pc.invert(self.deleted(rows, data_sequence, scope)))


def _plain_keys(table: Table, key_schema: Schema, delete_file: DataFile) -> pa.Table | None:
    """A delete file's key columns read as they are stored, where that is what the table's reader would return:
    top-level keys found by field id, of the type the schema gives them (strings of either width). None for
    anything else (nested keys, files without field ids, a type promoted since), which the reader projects.

    Every keyed commit reads its checkpoint's delete files; the reader's projection costs far more than reading
    a few thousand keys.
    """
    from pyiceberg.io.pyarrow import schema_to_pyarrow

    wanted = schema_to_pyarrow(key_schema, include_field_ids=False)
    if any(pa.types.is_struct(f.type) for f in wanted):
        return None
    with table.io.new_input(str(delete_file.file_path)).open() as stream:
        parquet = pq.ParquetFile(stream)
        stored = {int(f.metadata[FIELD_ID]): f for f in parquet.schema_arrow if f.metadata and FIELD_ID in f.metadata}
        found = [stored.get(field.field_id) for field in key_schema.fields]
        if any(f is None or _widened(f.type) != _widened(w.type) for f, w in zip(found, wanted, strict=True)):
            return None
        rows = parquet.read(columns=[f.name for f in found if f is not None])
    return pa.table(rows.columns, names=wanted.names)


def _widened(kind: pa.DataType) -> pa.DataType:
    return {pa.string(): pa.large_string(), pa.binary(): pa.large_binary()}.get(kind, kind)
