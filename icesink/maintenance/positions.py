"""Which rows of which data files equality deletes remove: their positions.

An equality delete removes, from data files of its partition (or of every
partition, for an unpartitioned delete file) whose data sequence number is
strictly lower than its own, the rows whose key columns equal one of its
keys. Reading only the key columns of the candidate files, in file order,
turns that into row positions: the content of position delete files, which
every Iceberg reader applies (pyiceberg included) and which cost a reader no
join.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyiceberg.io.pyarrow import schema_to_pyarrow
from pyiceberg.schema import Schema as IcebergSchema

from icesink.arrays import FIELD_ID, nested_column, repeated
from icesink.iceberg.deletes import EqualityDeletes, PartitionKey, partition_scope
from icesink.iceberg.key_pruning import KeyPruning, PruningCounts
from icesink.iceberg.schemas import field_path
from icesink.maintenance.kept_files import FileName, KeptFile, KeptFooter, file_name
from icesink.maintenance.packing import packed
from icesink.reading_threads import READING_THREADS, in_parallel

if TYPE_CHECKING:
    from pyiceberg.schema import Schema
    from pyiceberg.table import Table

    from icesink.iceberg.scan import LiveFile


@dataclass(frozen=True)
class DeletedRows:
    """The positions equality deletes remove from one data file."""

    data: LiveFile
    scope: PartitionKey
    positions: pa.Array


@dataclass(frozen=True)
class KeyRead:
    """The row groups of one data file whose keys are to be read, with its footer (read once)."""

    data: LiveFile
    name: FileName
    footer: KeptFooter
    row_groups: tuple[int, ...]

    @property
    def metadata(self) -> pq.FileMetaData:
        return self.footer.metadata

    @property
    def rows(self) -> int:
        return sum(self.metadata.row_group(i).num_rows for i in self.row_groups)


def plan_key_reads(table: Table, data: Sequence[LiveFile], pruning: KeyPruning | None = None) -> list[KeyRead]:
    """The files and row groups whose keys are to be read: with ``pruning``, those whose statistics and bloom
    filters may hold a deleted key (footers and filters read in parallel, and kept: see ``kept_files``), else
    all."""

    def plan(live: LiveFile) -> tuple[KeyRead, PruningCounts]:
        with KeptFile(table.io, file_name(table, live)) as file:
            everything = tuple(range(file.footer.metadata.num_row_groups))
            if pruning is None:
                return KeyRead(live, file.name, file.footer, everything), PruningCounts()
            groups, counts = pruning.row_groups(live, file)
            return KeyRead(live, file.name, file.footer, tuple(groups)), counts

    planned = in_parallel(plan, data, alone_below=PARALLEL_FILES)
    if pruning is not None:
        for _, counts in planned:
            pruning.counts.add(counts)
    return [read for read, _ in planned if read.row_groups]


def _by_names(table: Table, schema: Schema, field_ids: list[int], names: set[str]) -> dict[int, str | None]:
    """The columns of a file written without field ids, as readers find them: by the table's name mapping
    (which keeps a column's names from before a rename; a field it does not map is absent), or without one
    by the schema's current names."""
    mapping = table.metadata.name_mapping()
    if mapping is None:
        return {i: schema.find_column_name(i) for i in field_ids}
    mapped = {f.field_id: f.names for f in mapping}
    return {i: next((n for n in mapped.get(i, []) if n in names), None) for i in field_ids}


def read_key_columns(
    table: Table, schema: Schema, read: KeyRead, field_ids: set[int]
) -> tuple[pa.Table, pa.Array | None]:
    """The key fields of the planned row groups as flat columns named as in ``schema`` (``key.id`` for a field
    inside a struct), in file order, and the rows' positions in the file (None: every row, in order).

    Fields are found by Parquet field id (a column or struct field renamed since keeps its id); a file
    written without field ids is read by the table's name mapping, or the schema's names. Flat columns keep files
    written before and after a rename inside a struct apart from their struct's shape, so they concatenate.
    """

    paths = {i: field_path(schema, i) for i in sorted(field_ids)}
    top_ids = sorted({path[0][0] for path in paths.values()})
    arrow_schema = read.footer.arrow_schema
    by_id: dict[int, str] = {}
    for field in arrow_schema:
        raw = (field.metadata or {}).get(FIELD_ID)
        if raw is not None:
            by_id[int(raw)] = field.name
    names = set(arrow_schema.names)
    found = {i: by_id.get(i) for i in top_ids} if by_id else _by_names(table, schema, top_ids, names)
    present = [i for i in top_ids if found[i] in names]
    with KeptFile(table.io, read.name) as file:
        rows = file.columns(read.row_groups, [str(found[i]) for i in present])
    everything = len(read.row_groups) == read.metadata.num_row_groups
    positions = None if everything else _row_group_positions(read.metadata, read.row_groups)
    # A key column added to the table after the file was written is null in every row of it.
    by_field = {i: rows.column(found[i]) for i in present}
    for i in top_ids:
        if i not in by_field:
            by_field[i] = pa.nulls(rows.num_rows, _arrow_type(schema, i))
    rows = pa.table([by_field[i] for i in top_ids], names=[schema.find_column_name(i) or "" for i in top_ids])
    # Top-level columns now carry the schema's names, so the first step matches by name; deeper ones by id.
    keys = [nested_column(rows, path) for path in paths.values()]
    return pa.table(keys, names=[schema.find_column_name(i) or "" for i in paths]), positions


def _row_group_positions(metadata: pq.FileMetaData, groups: Sequence[int]) -> pa.Array:
    """The file positions of the rows of these row groups, in order."""

    starts = np.cumsum([0] + [metadata.row_group(i).num_rows for i in range(metadata.num_row_groups)])
    if not groups:
        return pa.array([], pa.int64())
    return pa.array(np.concatenate([np.arange(starts[g], starts[g + 1], dtype=np.int64) for g in groups]))


def _arrow_type(schema: Schema, field_id: int) -> pa.DataType:
    return schema_to_pyarrow(IcebergSchema(schema.find_field(field_id)), include_field_ids=False).field(0).type


# Keys are read a piece at a time (a file, or a run of its row groups) and matched a batch of pieces at a
# time: the committer holds at most MATCH_ROWS keys, and the row groups of one large file are read by
# several threads at once.
PIECE_ROWS = 1_000_000
MATCH_ROWS = 8_000_000
# Below these, reading on threads costs more than it saves (measured over many small tables' commits).
PARALLEL_ROWS = 200_000
PARALLEL_FILES = 8


def deleted_rows(table: Table, schema: Schema, reads: Sequence[KeyRead], deletes: EqualityDeletes) -> list[DeletedRows]:
    """For every data file with rows the deletes remove: those rows' positions (files without any are left out).

    ``reads`` are from :func:`plan_key_reads`. Key columns are read and
    matched in batches of at most :data:`MATCH_ROWS` rows, each thread a share
    of a batch; one join per partition scope serves all the files of a share
    (a join per file would cost more than the reads).
    """
    deletes.preload()
    field_ids = deletes.key_field_ids()
    positions: dict[str, list[pa.Array]] = defaultdict(list)
    data: dict[str, tuple[LiveFile, PartitionKey]] = {}

    def read_and_match(pieces: list[KeyRead]) -> list[tuple[KeyRead, PartitionKey, pa.Array]]:
        return _match(table, pieces, [read_key_columns(table, schema, p, field_ids) for p in pieces], deletes)

    for batch in packed(_pieces(reads, PIECE_ROWS), lambda p: p.rows, MATCH_ROWS):
        # Each thread reads and matches a share of the batch: Arrow's lookups release the GIL too. A small batch
        # is one share, read here.
        rows = sum(p.rows for p in batch)
        shares = packed(batch, lambda p: p.rows, -(-rows // READING_THREADS) if rows >= PARALLEL_ROWS else rows)
        for found_in_share in in_parallel(read_and_match, shares):
            for piece, scope, found in found_in_share:
                positions[piece.data.path].append(found)
                data[piece.data.path] = (piece.data, scope)
    return [
        DeletedRows(live, scope, pa.concat_arrays(positions[path]) if len(positions[path]) > 1 else positions[path][0])
        for path, (live, scope) in data.items()
    ]


def _pieces(reads: Sequence[KeyRead], rows: int) -> list[KeyRead]:
    """Each read cut into runs of consecutive row groups of at most ``rows`` rows (a larger group alone)."""
    pieces = []
    for read in reads:
        run: list[int] = []
        size = 0
        for group in read.row_groups:
            group_rows = read.metadata.row_group(group).num_rows
            if run and size + group_rows > rows:
                pieces.append(KeyRead(read.data, read.name, read.footer, tuple(run)))
                run, size = [], 0
            run.append(group)
            size += group_rows
        if run:
            pieces.append(KeyRead(read.data, read.name, read.footer, tuple(run)))
    return pieces


def _match(
    table: Table, pieces: list[KeyRead], read: list[tuple[pa.Table, pa.Array | None]], deletes: EqualityDeletes
) -> list[tuple[KeyRead, PartitionKey, pa.Array]]:
    """Per piece with rows the deletes remove: its scope and those rows' positions in its file."""
    keys = [part[0] for part in read]
    by_scope: dict[PartitionKey, list[int]] = defaultdict(list)
    for number, piece in enumerate(pieces):
        by_scope[partition_scope(table, piece.data.file)].append(number)
    found = []
    for scope, numbers in by_scope.items():
        rows = pa.concat_tables([keys[n] for n in numbers], promote_options="permissive")
        sizes = [keys[n].num_rows for n in numbers]
        sequences = {pieces[n].data.sequence_number for n in numbers}
        sequence: pa.Array | pa.Scalar = (
            pa.scalar(sequences.pop(), pa.int64())
            if len(sequences) == 1  # the common case: one number for all, no array of it
            else pa.concat_arrays(
                [repeated(pieces[n].data.sequence_number, size) for n, size in zip(numbers, sizes, strict=True)]
            )
        )
        removed = deletes.deleted(rows, sequence, scope)
        start = 0
        for n, size in zip(numbers, sizes, strict=True):
            positions = pc.indices_nonzero(removed.slice(start, size))
            if read[n][1] is not None:
                positions = pc.take(read[n][1], positions)
            if len(positions):
                found.append((pieces[n], scope, positions))
            start += size
    return found
