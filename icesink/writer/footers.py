"""Manifest metadata of a Parquet file someone else wrote, read from its footer.

Spark's own Parquet writer (see ``icesink.sink.spark_writer``) leaves icesink
nothing but finished files; their footers hold what a manifest entry needs:
row and null counts, min/max per row group, column sizes and row-group
offsets. The bounds are serialised exactly as for icesink's own files
(``truncate(16)`` for strings and binary).

Two things a footer cannot say are left out rather than guessed:

* NaN counts of float and double columns (Parquet keeps none): an absent
  count means "unknown" to Iceberg readers, never "zero".
* Bounds of a float or double column whose footer min or max is NaN: a
  writer that let a NaN into its statistics may have bounds that are not
  bounds. When neither is NaN, the NaNs (if any) were left out of the
  comparison, which is what Iceberg's bounds mean.
"""

from __future__ import annotations

import math
from typing import Any

import pyarrow.parquet as pq

from icesink.arrays import FIELD_ID
from icesink.errors import ManifestError
from icesink.results import FileContent, FileRecord
from icesink.writer.files import column_sizes, split_offsets
from icesink.writer.metrics import ColumnStats, FileMetrics
from icesink.writer.spec import ColumnSpec, WriterSpec

# Temporal bounds are the stored integers; pyarrow's "logical" min/max would be datetime objects.
_RAW_BOUNDS = frozenset({"date", "timestamp", "timestamptz"})


def check_field_ids(metadata: pq.FileMetaData, spec: WriterSpec, uri: str) -> None:
    """The file must hold the table's columns, in the table's order, under the table's field ids."""
    schema = metadata.schema.to_arrow_schema()
    found = [(f.name, int((f.metadata or {}).get(FIELD_ID, b"-1"))) for f in schema]
    wanted = [(c.name, c.field_id) for c in spec.columns]
    if found != wanted:
        raise ManifestError(
            f"table {spec.table_name}, checkpoint {spec.checkpoint_id}: data file {uri} has columns {found}, "
            f"expected (name, field id) {wanted}; nothing of this checkpoint was staged. Spark must write "
            "Parquet field ids (spark.sql.parquet.fieldId.write.enabled=true); or pass writer='arrow'"
        )


def _column_stats(metadata: pq.FileMetaData, index: int, column: ColumnSpec) -> ColumnStats | None:
    """The column's null count and bounds over all row groups, or None when a row group has no statistics."""
    stats = ColumnStats(column)
    bounded = True
    raw = column.iceberg_type in _RAW_BOUNDS
    for group in range(metadata.num_row_groups):
        chunk = metadata.row_group(group).column(index)
        statistics = chunk.statistics
        if statistics is None or not statistics.has_null_count:
            return None
        stats.null_count += statistics.null_count
        non_null = metadata.row_group(group).num_rows - statistics.null_count
        if non_null == 0:
            continue
        if not statistics.has_min_max:
            # Parquet writers drop min/max of long values: no bound can be claimed for the file.
            bounded = False
            continue
        low: Any = statistics.min_raw if raw else statistics.min
        high: Any = statistics.max_raw if raw else statistics.max
        if isinstance(low, float) and (math.isnan(low) or math.isnan(high)):
            bounded = False
            continue
        if stats.lower is None or low < stats.lower:
            stats.lower = low
        if stats.upper is None or high > stats.upper:
            stats.upper = high
    if not bounded:
        stats.lower = stats.upper = None
    return stats


def file_record_from_footer(spec: WriterSpec, uri: str, size: int, metadata: pq.FileMetaData) -> FileRecord:
    """A data file's manifest metadata, from its footer alone."""
    check_field_ids(metadata, spec, uri)
    records = metadata.num_rows
    # The Arrow writer's metrics, fed from the footer; columns without statistics get no counts or bounds.
    metrics = FileMetrics(spec.columns, record_count=records)
    metrics.stats = {
        column.field_id: stats
        for index, column in enumerate(spec.columns)
        if (stats := _column_stats(metadata, index, column)) is not None
    }
    lowers, uppers = metrics.bounds()
    return FileRecord(
        path=uri,
        content=FileContent.DATA,
        record_count=records,
        file_size_bytes=size,
        spec_id=spec.spec_id,
        partition=(),
        column_sizes=column_sizes(metadata, spec.columns),
        value_counts={c.field_id: records for c in spec.columns},
        null_value_counts=metrics.null_value_counts(),
        lower_bounds=lowers,
        upper_bounds=uppers,
        split_offsets=split_offsets(metadata),
    )
