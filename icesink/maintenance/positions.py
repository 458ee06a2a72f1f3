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
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from icesink.arrays import FIELD_ID, repeated
from icesink.iceberg.deletes import EqualityDeletes, PartitionKey, partition_scope

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


def candidates(table: Table, data: Sequence[LiveFile], deletes: EqualityDeletes) -> list[LiveFile]:
    """Data files some delete may remove rows from (same scope, lower data sequence number)."""
    return [d for d in data if deletes.may_delete_from(partition_scope(table, d.file), d.sequence_number)]


def read_key_columns(table: Table, schema: Schema, data: LiveFile, field_ids: set[int]) -> pa.Table:
    """The key fields of a data file as flat columns named as in ``schema`` (``key.id`` for a field inside a
    struct), every row in file order.

    Fields are found by Parquet field id (a column or struct field renamed since keeps its id); a file
    written without field ids is read by the schema's names. Flat columns keep files written before and
    after a rename inside a struct apart from their struct's shape, so they concatenate.
    """
    from icesink.arrays import nested_column
    from icesink.iceberg.schemas import field_path

    paths = {i: field_path(schema, i) for i in sorted(field_ids)}
    top_ids = sorted({path[0][0] for path in paths.values()})
    with table.io.new_input(str(data.file.file_path)).open() as stream:
        parquet = pq.ParquetFile(stream)
        by_id: dict[int, str] = {}
        for field in parquet.schema_arrow:
            raw = (field.metadata or {}).get(FIELD_ID)
            if raw is not None:
                by_id[int(raw)] = field.name
        names = set(parquet.schema_arrow.names)
        found = {i: by_id.get(i) or (None if by_id else schema.find_column_name(i)) for i in top_ids}
        present = [i for i in top_ids if found[i] in names]
        read = parquet.read(columns=[found[i] for i in present])
    # A key column added to the table after the file was written is null in every row of it.
    by_field = {i: read.column(found[i]) for i in present}
    for i in top_ids:
        if i not in by_field:
            by_field[i] = pa.nulls(read.num_rows, _arrow_type(schema, i))
    read = pa.table([by_field[i] for i in top_ids], names=[schema.find_column_name(i) or "" for i in top_ids])
    # Top-level columns now carry the schema's names, so the first step matches by name; deeper ones by id.
    columns = [nested_column(read, path) for path in paths.values()]
    return pa.table(columns, names=[schema.find_column_name(i) or "" for i in paths])


def _arrow_type(schema: Schema, field_id: int) -> pa.DataType:
    from pyiceberg.io.pyarrow import schema_to_pyarrow
    from pyiceberg.schema import Schema as IcebergSchema

    return schema_to_pyarrow(IcebergSchema(schema.find_field(field_id)), include_field_ids=False).field(0).type


def deleted_rows(
    table: Table, schema: Schema, data: Sequence[LiveFile], deletes: EqualityDeletes, threads: int = 4
) -> list[DeletedRows]:
    """For every data file with rows the deletes remove: those rows' positions (files without any are left out).

    ``data`` are the :func:`candidates`. Key columns are read in parallel; then
    one join per partition scope serves all its files (a join per file would
    cost more than the reads).
    """
    deletes.preload()
    field_ids = deletes.key_field_ids()
    files = list(data)
    with ThreadPoolExecutor(max_workers=threads) as pool:
        keys = list(pool.map(lambda live: read_key_columns(table, schema, live, field_ids), files))
    by_scope: dict[PartitionKey, list[int]] = defaultdict(list)
    for number, live in enumerate(files):
        by_scope[partition_scope(table, live.file)].append(number)
    found: list[DeletedRows] = []
    for scope, numbers in by_scope.items():
        rows = pa.concat_tables([keys[n] for n in numbers], promote_options="permissive")
        sizes = [keys[n].num_rows for n in numbers]
        sequences = {files[n].sequence_number for n in numbers}
        sequence: pa.Array | pa.Scalar = (
            pa.scalar(sequences.pop(), pa.int64())
            if len(sequences) == 1  # the common case: one number for all, no array of it
            else pa.concat_arrays(
                [repeated(files[n].sequence_number, size) for n, size in zip(numbers, sizes, strict=True)]
            )
        )
        removed = deletes.deleted(rows, sequence, scope)
        start = 0
        for n, size in zip(numbers, sizes, strict=True):
            positions = pc.indices_nonzero(removed.slice(start, size))
            if len(positions):
                found.append(DeletedRows(files[n], scope, positions))
            start += size
    return found
