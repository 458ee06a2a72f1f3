"""Reading one data file into a table schema without losing a value.

pyiceberg 0.12's ``ArrowProjectionVisitor`` rebuilds lists and maps whose
elements are structs from their offsets alone, which drops their validity: a
null ``array<struct>`` or ``map<_, struct>`` comes back as ``[]``; and a list
of lists is cast as it was read, ignoring its projected children. Everything
icesink reads (``icesink.read``, the changelog, conversion, compaction) goes
through :func:`read_data_file`, which follows pyiceberg's per-file read
(``_task_to_record_batches``) but projects with :class:`_ValueKeepingProjection`.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pyarrow as pa
from pyiceberg.expressions import AlwaysTrue, BooleanExpression
from pyiceberg.io import FileIO
from pyiceberg.io.pyarrow import ArrowProjectionVisitor
from pyiceberg.manifest import DataFile
from pyiceberg.schema import Schema
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.types import ListType, MapType

from icesink.arrays import null_mask, offsets_for_mask


class _ValueKeepingProjection(ArrowProjectionVisitor):
    """pyiceberg's projection, with lists and maps rebuilt from their projected children and their own validity."""

    def list(self, list_type: ListType, list_array: pa.Array | None, value_array: pa.Array | None) -> pa.Array | None:
        if not isinstance(list_array, (pa.ListArray, pa.LargeListArray)) or value_array is None:
            return super().list(list_type, list_array, value_array)
        values = self._cast_if_needed(list_type.element_field, value_array)
        element = self._construct_field(list_type.element_field, values.type)
        large = isinstance(list_array, pa.LargeListArray)
        offsets, start, length = offsets_for_mask(list_array)
        return (pa.LargeListArray if large else pa.ListArray).from_arrays(
            offsets,
            values.slice(start, length),
            type=pa.large_list(element) if large else pa.list_(element),
            mask=null_mask(list_array),
        )

    def map(
        self, map_type: MapType, map_array: pa.Array | None, key_result: pa.Array | None, value_result: pa.Array | None
    ) -> pa.Array | None:
        if not isinstance(map_array, pa.MapArray) or key_result is None or value_result is None:
            return super().map(map_type, map_array, key_result, value_result)
        keys = self._cast_if_needed(map_type.key_field, key_result)
        items = self._cast_if_needed(map_type.value_field, value_result)
        map_type_arrow = pa.map_(
            self._construct_field(map_type.key_field, keys.type),
            self._construct_field(map_type.value_field, items.type),
        )
        offsets, start, length = offsets_for_mask(map_array)
        return pa.MapArray.from_arrays(
            offsets,
            keys.slice(start, length),
            items.slice(start, length),
            type=map_type_arrow,
            mask=null_mask(map_array),
        )


def project_batch(
    requested: Schema, file_schema: Schema, batch: pa.RecordBatch, missing_fields: dict[int, Any]
) -> pa.RecordBatch:
    """``batch`` (columns of ``file_schema``) as rows of ``requested``, matched by field id."""
    from pyiceberg.io.pyarrow import ArrowAccessor
    from pyiceberg.schema import visit_with_partner

    visitor = _ValueKeepingProjection(
        file_schema,
        downcast_ns_timestamp_to_us=True,
        projected_missing_fields=missing_fields,
        allow_timestamp_tz_mismatch=True,
    )
    struct_array = visit_with_partner(requested, batch, visitor, ArrowAccessor(file_schema))
    return pa.RecordBatch.from_struct_array(struct_array)


def read_data_file(
    metadata: TableMetadata,
    io: FileIO,
    requested: Schema,
    data_file: DataFile,
    row_filter: BooleanExpression,
    positions: list[pa.ChunkedArray] | None,
    only_at: np.ndarray | None = None,
) -> Iterator[pa.RecordBatch]:
    """Rows of one data file, its deleted positions left out, filtered, as rows of ``requested``.

    ``row_filter`` is bound to the table's current schema (as pyiceberg's scan binds it). ``only_at`` (sorted,
    distinct file positions; no ``positions`` nor filter with it) reads those rows alone, in order, and only the
    row groups holding them: what a change reader needs of a large file a few rows of which changed.
    """
    import pyarrow.dataset as ds
    from pyiceberg.expressions.visitors import bind, extract_field_ids, translate_column_names
    from pyiceberg.io.pyarrow import (
        _get_column_projection_values,
        expression_to_pyarrow,
        pyarrow_to_schema,
    )
    from pyiceberg.schema import prune_columns

    with io.new_input(str(data_file.file_path)).open() as stream:
        fragment = ds.ParquetFileFormat(pre_buffer=True).make_fragment(stream)
        physical = fragment.physical_schema
        file_schema = pyarrow_to_schema(
            physical,
            metadata.name_mapping(),
            downcast_ns_timestamp_to_us=metadata.format_version <= 2,
            format_version=metadata.format_version,
        )
        missing = _get_column_projection_values(
            data_file, requested, metadata.schema(), metadata.specs().get(data_file.spec_id), file_schema.field_ids
        )
        arrow_filter = None
        if row_filter is not AlwaysTrue():
            translated = translate_column_names(
                row_filter, file_schema, case_sensitive=True, projected_field_values=missing
            )
            arrow_filter = expression_to_pyarrow(bind(file_schema, translated, case_sensitive=True), file_schema)
        wanted = {
            i for i in requested.field_ids if not isinstance(requested.find_type(i), (MapType, ListType))
        } | extract_field_ids(row_filter)
        file_projection = prune_columns(file_schema, wanted, select_full_types=False)
        scanned_rows = None  # with only_at: the file position of each row the scanner gives
        if only_at is not None:
            fragment, scanned_rows = _row_groups_holding(fragment, only_at)
        scanner = ds.Scanner.from_fragment(
            fragment=fragment,
            schema=physical,
            # Deleted positions count rows of the whole file: filter only after they are left out.
            filter=arrow_filter if not positions else None,
            columns=[column.name for column in file_projection.columns],
        )
        deleted = _sorted_positions(positions) if positions else None
        for kept in _kept(scanner.to_batches(), deleted, arrow_filter, only_at, scanned_rows):
            yield project_batch(requested, file_projection, kept, missing)


def _kept(
    batches: Iterator[pa.RecordBatch],
    deleted: np.ndarray | None,
    arrow_filter: Any,
    only_at: np.ndarray | None,
    scanned_rows: np.ndarray | None,
) -> Iterator[pa.RecordBatch]:
    """What is left of each batch: the rows at ``only_at``, or those no position names that pass the filter."""
    start = 0
    for batch in batches:
        if scanned_rows is not None and only_at is not None:
            kept = batch.filter(pa.array(_found(only_at, scanned_rows[start : start + len(batch)])))
        elif deleted is not None:
            kept = _without_deleted(batch, deleted, start, arrow_filter)
        else:
            kept = batch
        start += len(batch)
        if kept.num_rows:
            yield kept


def _row_groups_holding(fragment: Any, only_at: np.ndarray) -> tuple[Any, np.ndarray]:
    """The fragment narrowed to the row groups holding ``only_at``, and the file position of each of their rows."""
    metadata = fragment.metadata
    counts = [metadata.row_group(i).num_rows for i in range(metadata.num_row_groups)]
    starts = np.concatenate([[0], np.cumsum(counts, dtype=np.int64)])
    groups = np.unique(np.searchsorted(starts, only_at, side="right") - 1)
    groups = groups[(groups >= 0) & (groups < len(counts))]
    rows = [np.arange(starts[g], starts[g + 1], dtype=np.int64) for g in groups]
    return fragment.subset(row_group_ids=groups.tolist()), (np.concatenate(rows) if rows else np.empty(0, np.int64))


def _found(wanted: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """Which of ``rows`` (file positions) are among ``wanted`` (sorted)."""
    if not len(wanted):
        return np.zeros(len(rows), dtype=bool)
    at = np.searchsorted(wanted, rows)
    found: np.ndarray = (at < len(wanted)) & (wanted[np.minimum(at, len(wanted) - 1)] == rows)
    return found


def _sorted_positions(positions: list[pa.ChunkedArray]) -> np.ndarray:
    """Every deleted position of the file, once, in order: looked up per batch by bisection."""
    arrays = [np.asarray(chunk, dtype=np.int64) for p in positions for chunk in p.chunks]
    return np.unique(np.concatenate(arrays)) if arrays else np.empty(0, np.int64)


def _without_deleted(batch: pa.RecordBatch, deleted: np.ndarray, start: int, arrow_filter: Any) -> pa.RecordBatch:
    """Rows of ``batch`` (starting at file row ``start``) that no position names and that pass the filter.

    A batch no position falls in is passed on as it is, without a copy: a large file with a few deletes reads
    at the speed of one without (pyiceberg's own combination walks every position for every batch and copies
    every batch)."""
    low, high = np.searchsorted(deleted, [start, start + len(batch)])
    if low == high:
        kept = batch
    else:
        mask = np.ones(len(batch), dtype=bool)
        mask[deleted[low:high] - start] = False
        kept = batch.filter(pa.array(mask))
    if arrow_filter is None or not kept.num_rows:
        return kept
    filtered = pa.Table.from_batches([kept]).filter(arrow_filter)
    return filtered.combine_chunks().to_batches()[0] if filtered.num_rows else kept.slice(0, 0)
