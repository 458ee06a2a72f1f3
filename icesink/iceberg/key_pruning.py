"""Which data files, and which row groups of them, may hold a key that equality deletes remove.

Converting equality deletes reads the key columns of the data files they may
reach; these tests leave out the files and row groups that cannot hold a
deleted key, so that the cost follows the change rather than the table. Each
test can only rule out, never rule in, and anything it cannot judge (a
missing bound, a type without an order it trusts, a header it does not know)
counts as "may hold". Cheapest first:

0. a manifest's partition summaries (the lowest and highest value of each
   partition field among its files), against the partitions the deletes
   apply to: a manifest that cannot list a file of those is not read;
1. a data file's column bounds and null counts, from its manifest entry
   (nothing read; bounds of integer-like keys only, see :func:`_file_may_hold`);
2. a row group's Parquet statistics (from the footer, which reading the keys
   reads anyway);
3. a row group's Parquet bloom filter on the key column (a few KB; both of
   icesink's writers write one for key columns).

For a key of several fields each field is tested on its own: a removed row
holds, in every key field, a value some delete holds in that field.
"""

from __future__ import annotations

import bisect
import json
import struct
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg import types as t
from pyiceberg.conversions import from_bytes
from pyiceberg.manifest import ManifestContent
from pyiceberg.types import PrimitiveType

from icesink.arrays import FIELD_ID
from icesink.iceberg.bloom_filters import hashes, may_hold_any
from icesink.iceberg.deletes import GLOBAL, NULL_FLAG, EqualityDeletes, PartitionKey, partition_scope
from icesink.iceberg.key_values import INTEGERS, bound_form, decode_bound, order_of, plain_encodings

if TYPE_CHECKING:
    import numpy as np
    import pyarrow.parquet as pq
    from pyiceberg.manifest import ManifestFile, PartitionFieldSummary
    from pyiceberg.schema import Schema
    from pyiceberg.table import Table
    from pyiceberg.types import IcebergType, StructType

    from icesink.iceberg.scan import LiveFile
    from icesink.maintenance.kept_files import KeptFile


@dataclass
class PruningCounts:
    """What the tests left out, for logs, metrics and benchmarks."""

    manifests_read: int = 0
    manifests_skipped_by_partition: int = 0
    files_in_scope: int = 0
    files_skipped_by_bounds: int = 0
    row_groups_read: int = 0
    row_groups_skipped_by_statistics: int = 0
    row_groups_skipped_by_bloom_filter: int = 0
    rows_read: int = 0

    def add(self, other: PruningCounts) -> None:
        for name in self.__dataclass_fields__:
            setattr(self, name, getattr(self, name) + getattr(other, name))


@dataclass
class FieldValues:
    """The values one key field is deleted with."""

    field_id: int
    iceberg_type: IcebergType
    order: str | None  # INTEGERS, BYTES, or None: bounds are not used
    sorted_values: list[Any]  # distinct non-null values in bound form (empty when order is None)
    has_null: bool
    arrow_values: pa.Array  # the distinct non-null values, for bloom filters
    _hashes: dict[tuple[str, int, str], np.ndarray | None] = field(default_factory=dict)

    def may_match(self, lower: Any, upper: Any, may_hold_null: bool, may_hold_values: bool = True) -> bool:
        """Whether a file or row group with these bounds (None: unknown) may hold one of the values."""
        if self.has_null and may_hold_null:
            return True
        if not may_hold_values or not len(self.arrow_values):
            return False
        if self.order is None:
            return True
        start = bisect.bisect_left(self.sorted_values, lower) if lower is not None else 0
        return start < len(self.sorted_values) and (upper is None or self.sorted_values[start] <= upper)

    def hashes(self, column: Any) -> np.ndarray | None:
        """xxHash64 of the values in the plain encoding of a Parquet column (None: no encoding known)."""
        shape = (column.physical_type, column.length or 0, column.logical_type.to_json())
        if shape not in self._hashes:
            encoded = plain_encodings(self.iceberg_type, self.arrow_values, column)
            self._hashes[shape] = None if encoded is None else hashes(encoded)
        return self._hashes[shape]


@dataclass(frozen=True)
class KeyGroup:
    """Deletes of one key and scope: which data files they reach, and their keys' values field by field."""

    scope: PartitionKey
    newest_sequence: int
    fields: tuple[FieldValues, ...]

    def reaches(self, scope: PartitionKey, sequence: int) -> bool:
        return self.newest_sequence > sequence and self.scope in (GLOBAL, scope)


class KeyPruning:
    """The pruning tests for one set of equality deletes."""

    def __init__(self, table: Table, schema: Schema, deletes: EqualityDeletes) -> None:
        self._table = table
        deletes.preload()
        self.groups = [
            KeyGroup(
                scope, newest, tuple(_field_values(schema, i, keys, name) for i, name in zip(ids, names, strict=True))
            )
            for ids, names, scope, newest, keys in deletes.key_groups()
        ]
        self.counts = PruningCounts()

    def reads(self, manifest: ManifestFile) -> bool:
        """Whether a manifest may list a data file some delete reaches, by its partition summaries (counted)."""

        if manifest.content == ManifestContent.DELETES:
            return False  # conversion looks at data files only
        spec_id = manifest.partition_spec_id
        scopes = [g.scope for g in self.groups if g.scope == GLOBAL or g.scope[0] == spec_id]
        reads = any(
            scope == GLOBAL or _partitions_may_hold(self._partition_type(spec_id), manifest.partitions, scope[1])
            for scope in scopes
        )
        if reads:
            self.counts.manifests_read += 1
        else:
            self.counts.manifests_skipped_by_partition += 1
        return reads

    def _partition_type(self, spec_id: int) -> StructType | None:
        """The partition tuple's type of a spec (a field whose source column was dropped is of unknown type, and
        not judged; None: pyiceberg could not build it)."""
        try:
            return self._table.metadata.specs()[spec_id].partition_type(self._table.schema())
        except (KeyError, ValueError):
            return None

    def files(self, data: Iterable[LiveFile]) -> list[LiveFile]:
        """The data files some delete reaches (scope and sequence) and whose bounds may hold a deleted key."""
        kept = []
        for live in data:
            scope = partition_scope(self._table, live.file)
            reaching = [g for g in self.groups if g.reaches(scope, live.sequence_number)]
            if not reaching:
                continue
            self.counts.files_in_scope += 1
            if any(_file_may_hold(live.file, g) for g in reaching):
                kept.append(live)
            else:
                self.counts.files_skipped_by_bounds += 1
        return kept

    def row_groups(self, live: LiveFile, file: KeptFile) -> tuple[list[int], PruningCounts]:
        """The row groups of a data file that may hold a deleted key, by statistics then bloom filters."""
        scope = partition_scope(self._table, live.file)
        reaching = [g for g in self.groups if g.reaches(scope, live.sequence_number)]
        metadata = file.footer.metadata
        leaves = _leaf_columns(file.footer.arrow_schema)
        counts = PruningCounts()
        kept = []
        for number in range(metadata.num_row_groups):
            row_group = metadata.row_group(number)
            by_statistics = [g for g in reaching if _row_group_may_hold(row_group, metadata, leaves, g)]
            if not by_statistics:
                counts.row_groups_skipped_by_statistics += 1
            elif not any(_bloom_may_hold(number, file, leaves, g) for g in by_statistics):
                counts.row_groups_skipped_by_bloom_filter += 1
            else:
                kept.append(number)
                counts.row_groups_read += 1
                counts.rows_read += row_group.num_rows
        return kept, counts


def _partitions_may_hold(
    partition_type: StructType | None, summaries: list[PartitionFieldSummary] | None, values: tuple[Any, ...]
) -> bool:
    """Whether a manifest with these partition summaries may list a file of the partition ``values``."""

    if partition_type is None or summaries is None or not len(summaries) == len(values) == len(partition_type.fields):
        return True
    for field_type, summary, value in zip(
        (f.field_type for f in partition_type.fields), summaries, values, strict=True
    ):
        if value is None:
            if summary.contains_null is False:
                return False
            continue
        lower, upper = summary.lower_bound, summary.upper_bound
        if not isinstance(field_type, PrimitiveType) or order_of(field_type) is None or lower is None or upper is None:
            continue
        try:
            if not from_bytes(field_type, lower) <= value <= from_bytes(field_type, upper):
                return False
        except (TypeError, ValueError, struct.error):
            continue  # a bound of a length its type cannot have: not judged
    return True


def _field_values(schema: Schema, field_id: int, keys: pa.Table, name: str) -> FieldValues:
    kind = schema.find_field(field_id).field_type
    column = keys.column(name).combine_chunks()
    nulls = keys.column(f"{NULL_FLAG}{name}").combine_chunks()
    has_null = bool(pc.any(nulls).as_py())
    values = pc.unique(column.filter(pc.invert(nulls)))
    order = order_of(kind)
    return FieldValues(
        field_id=field_id,
        iceberg_type=kind,
        order=order,
        sorted_values=sorted(bound_form(kind, values)) if order else [],
        has_null=has_null,
        arrow_values=values,
    )


def _file_may_hold(data: Any, group: KeyGroup) -> bool:
    for values in group.fields:
        i = values.field_id
        nulls = (data.null_value_counts or {}).get(i)
        count = (data.value_counts or {}).get(i)
        # String and binary bounds are not trusted at the file level: pyiceberg (0.12) builds them from the
        # row groups' Parquet statistics and leaves out a row group that has none (Parquet keeps none for a
        # value over 4 KiB), so they can exclude values the file holds. Row-group statistics judge those.
        trusted = values.order == INTEGERS
        lower = decode_bound(values.iceberg_type, (data.lower_bounds or {}).get(i)) if trusted else None
        upper = decode_bound(values.iceberg_type, (data.upper_bounds or {}).get(i)) if trusted else None
        may_hold_null = nulls is None or nulls > 0
        may_hold_values = not (nulls is not None and count is not None and nulls >= count)
        if not values.may_match(lower, upper, may_hold_null, may_hold_values):
            return False
    return True


def _leaf_columns(schema: pa.Schema) -> dict[int, int]:
    """Parquet column index of each primitive field reached through structs only, by field id."""
    found: dict[int, int] = {}
    position = 0

    def visit(field: pa.Field, through_structs: bool) -> None:
        nonlocal position
        kind = field.type
        if pa.types.is_struct(kind):
            for child in kind:
                visit(child, through_structs)
        elif pa.types.is_list(kind) or pa.types.is_large_list(kind) or pa.types.is_fixed_size_list(kind):
            visit(kind.value_field, False)
        elif pa.types.is_map(kind):
            visit(kind.key_field, False)
            visit(kind.item_field, False)
        else:
            raw = (field.metadata or {}).get(FIELD_ID)
            if through_structs and raw is not None:
                found[int(raw)] = position
            position += 1

    for top in schema:
        visit(top, True)
    return found


def _row_group_may_hold(row_group: Any, metadata: pq.FileMetaData, leaves: dict[int, int], group: KeyGroup) -> bool:
    for values in group.fields:
        column = leaves.get(values.field_id)
        if column is None:
            continue  # a file without field ids, or a key added since: no statistics to judge by
        statistics = row_group.column(column).statistics
        if statistics is None:
            continue
        may_hold_null = not (statistics.has_null_count and statistics.null_count == 0)
        lower = upper = None
        if values.order and statistics.has_min_max:
            parquet_type = metadata.schema.column(column)
            lower = _statistic(values, parquet_type, statistics.min_raw)
            upper = _statistic(values, parquet_type, statistics.max_raw) if lower is not None else None
            lower = lower if upper is not None else None
        if not values.may_match(lower, upper, may_hold_null):
            return False
    return True


def _statistic(values: FieldValues, column: Any, raw: Any) -> Any:
    """A Parquet min or max in bound form, or None where the column's encoding is not the one expected."""

    kind = values.iceberg_type
    physical = column.physical_type
    if isinstance(kind, (t.TimeType, t.TimestampType, t.TimestamptzType)):
        unit = json.loads(column.logical_type.to_json()).get("timeUnit")
        return raw if physical == "INT64" and unit == "microseconds" else None
    if isinstance(kind, t.DecimalType):
        if physical in ("INT32", "INT64"):
            return raw
        return int.from_bytes(raw, "big", signed=True) if physical in ("FIXED_LEN_BYTE_ARRAY", "BYTE_ARRAY") else None
    if isinstance(kind, t.BooleanType):
        return int(raw) if physical == "BOOLEAN" else None
    if values.order == INTEGERS:
        return raw if physical in ("INT32", "INT64") else None
    return bytes(raw) if physical in ("BYTE_ARRAY", "FIXED_LEN_BYTE_ARRAY") else None


def _bloom_may_hold(number: int, file: KeptFile, leaves: dict[int, int], group: KeyGroup) -> bool:
    metadata = file.footer.metadata
    for values in group.fields:
        column = leaves.get(values.field_id)
        if column is None:
            continue
        hashes = values.hashes(metadata.schema.column(column))
        if hashes is None:
            continue
        blocks = file.bitset(number, column)
        chunk = metadata.row_group(number).column(column)
        if blocks is not None and not may_hold_any(blocks, hashes) and not (values.has_null and _has_nulls(chunk)):
            return False
    return True


def _has_nulls(chunk: Any) -> bool:
    statistics = chunk.statistics
    return statistics is None or not statistics.has_null_count or statistics.null_count > 0
