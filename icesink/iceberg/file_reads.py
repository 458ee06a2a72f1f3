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

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
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
from icesink.iceberg.read_caches import FOOTER_CACHE, LAYOUT_CACHE, ROW_GROUP_CACHE, Footer, Layout


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


@dataclass(frozen=True)
class FilePlan:
    """How one data file is read into a requested schema with a row filter: worked out once per file for a
    caller that reads the same file again and again (a change reader, snapshot after snapshot)."""

    layout: Layout
    missing: dict[int, Any]
    arrow_filter: Any
    columns: list[str]
    in_order: bool  # the projection is the file's own columns, in order: batches are only renamed


def _plan(
    metadata: TableMetadata, requested: Schema, data_file: DataFile, row_filter: BooleanExpression, footer: Footer
) -> FilePlan:
    from pyiceberg.expressions.visitors import extract_field_ids
    from pyiceberg.io.pyarrow import _get_column_projection_values

    wanted = frozenset(
        {i for i in requested.field_ids if not isinstance(requested.find_type(i), (MapType, ListType))}
        | extract_field_ids(row_filter)
    )
    layout = _layout(metadata, requested, footer, wanted)
    file_schema, file_projection = layout.file_schema, layout.projection
    missing = _get_column_projection_values(
        data_file, requested, metadata.schema(), metadata.specs().get(data_file.spec_id), file_schema.field_ids
    )
    in_order = not missing and [f.field_id for f in file_projection.fields] == [f.field_id for f in requested.fields]
    columns = [column.name for column in file_projection.columns]
    return FilePlan(layout, missing, _arrow_filter(row_filter, file_schema, missing), columns, in_order)


def read_data_file(
    metadata: TableMetadata,
    io: FileIO,
    requested: Schema,
    data_file: DataFile,
    row_filter: BooleanExpression,
    positions: list[pa.ChunkedArray] | None,
    only_at: np.ndarray | None = None,
    kept_as: tuple[object, ...] | None = None,
    plans: dict[tuple[object, ...], FilePlan] | None = None,
) -> Iterator[pa.RecordBatch]:
    """Rows of one data file, its deleted positions left out, filtered, as rows of ``requested``.

    ``row_filter`` is bound to the table's current schema (as pyiceberg's scan binds it). ``only_at`` (sorted,
    distinct file positions; no ``positions`` nor filter with it) reads those rows alone, in order, and only the
    row groups holding them: what a change reader needs of a large file a few rows of which changed.
    ``kept_as`` names the file for the process's footer and row-group caches (``read_caches``); without it
    the file is read as it is now. A location alone does not name a file's contents: ``add_files`` can attach a
    regenerated file at a location an earlier one had, so the name must tell those apart (the table's uuid and
    the file's data sequence number do). ``plans``: the caller's plans by file (``kept_as``, else its location),
    kept across its reads of one ``requested`` schema and ``row_filter`` of one table version (a file read at a
    few positions in every snapshot costs its plan once, not per read).
    """
    import pyarrow.dataset as ds

    with _File(io, data_file, kept_as) as file:
        # By the file's name for the caches where it has one: a location alone may be reused by another file.
        name = kept_as if kept_as is not None else (file.path,)
        plan = plans.get(name) if plans is not None else None
        if plan is None:
            plan = _plan(metadata, requested, data_file, row_filter, file.footer())
            if plans is not None:
                plans[name] = plan
        if only_at is not None:
            kept_batches = _rows_at(file, plan.columns, only_at)
        else:
            scanner = ds.Scanner.from_fragment(
                fragment=file.fragment(),
                schema=file.footer().physical,
                # Deleted positions count rows of the whole file: filter only after they are left out.
                filter=plan.arrow_filter if not positions else None,
                columns=plan.columns,
            )
            deleted = _sorted_positions(positions) if positions else None
            kept_batches = _kept(scanner.to_batches(), deleted, plan.arrow_filter)
        projection = plan.layout.projection
        for kept in kept_batches:
            if plan.in_order:
                yield LAYOUT_CACHE.project(
                    plan.layout, kept, lambda batch: project_batch(requested, projection, batch, plan.missing)
                )
            else:
                yield project_batch(requested, projection, kept, plan.missing)


def _arrow_filter(row_filter: BooleanExpression, file_schema: Schema, missing: dict[int, Any]) -> Any:
    """The row filter in pyarrow's terms for this file's columns (None: every row)."""
    from pyiceberg.expressions.visitors import bind, translate_column_names
    from pyiceberg.io.pyarrow import expression_to_pyarrow

    if row_filter is AlwaysTrue():
        return None
    translated = translate_column_names(row_filter, file_schema, case_sensitive=True, projected_field_values=missing)
    return expression_to_pyarrow(bind(file_schema, translated, case_sensitive=True), file_schema)


class _File:
    """A data file, opened when first needed: a read that kept row groups serve whole never opens it."""

    def __init__(self, io: FileIO, data_file: DataFile, kept_as: tuple[object, ...] | None) -> None:
        self._io = io
        self.path = str(data_file.file_path)
        self.kept_as = kept_as  # None: nothing of it is kept or taken from the caches
        self._opened = contextlib.ExitStack()
        self._fragment: Any = None
        self._footer = FOOTER_CACHE.get(kept_as) if kept_as is not None else None

    def __enter__(self) -> _File:
        return self

    def __exit__(self, *exc: object) -> None:
        self._opened.close()

    def fragment(self) -> Any:
        import pyarrow.dataset as ds

        if self._fragment is None:
            stream = self._opened.enter_context(self._io.new_input(self.path).open())
            self._fragment = ds.ParquetFileFormat(pre_buffer=True).make_fragment(stream)
        return self._fragment

    def footer(self) -> Footer:
        if self._footer is None:
            fragment = self.fragment()
            metadata = fragment.metadata
            counts = [metadata.row_group(i).num_rows for i in range(metadata.num_row_groups)]
            starts = tuple(int(s) for s in np.concatenate([[0], np.cumsum(counts, dtype=np.int64)]))
            self._footer = Footer.of(fragment.physical_schema, starts)
            if self.kept_as is not None:
                FOOTER_CACHE.put(self.kept_as, self._footer)
        return self._footer


def _layout(metadata: TableMetadata, requested: Schema, footer: Footer, wanted: frozenset[int]) -> Layout:
    """The file's schema as pyiceberg converts it, and the part of it read: once per layout, not per file."""
    from pyiceberg.io.pyarrow import pyarrow_to_schema
    from pyiceberg.schema import prune_columns

    mapping = metadata.properties.get("schema.name-mapping.default")
    physical = footer.physical
    key = (footer.schema_bytes, mapping, metadata.format_version, wanted, str(requested))

    def make() -> tuple[Schema, Schema]:
        file_schema = pyarrow_to_schema(
            physical,
            metadata.name_mapping(),
            downcast_ns_timestamp_to_us=metadata.format_version <= 2,
            format_version=metadata.format_version,
        )
        return file_schema, prune_columns(file_schema, set(wanted), select_full_types=False)

    return LAYOUT_CACHE.of(key, make)


def _kept(batches: Iterator[pa.RecordBatch], deleted: np.ndarray | None, arrow_filter: Any) -> Iterator[pa.RecordBatch]:
    """What is left of each batch: the rows no position names that pass the filter."""
    start = 0
    for batch in batches:
        kept = _without_deleted(batch, deleted, start, arrow_filter) if deleted is not None else batch
        start += len(batch)
        if kept.num_rows:
            yield kept


def _rows_at(file: _File, columns: list[str], only_at: np.ndarray) -> Iterator[pa.RecordBatch]:
    """The rows at ``only_at``, from the row groups holding them; a file with a name for the caches has each
    decoded once per process while it is kept (:data:`~icesink.iceberg.read_caches.ROW_GROUP_CACHE`)."""
    import pyarrow.dataset as ds

    starts = np.asarray(file.footer().starts, dtype=np.int64)
    if len(starts) == 2:  # one row group, as most files a stream writes have
        groups: Any = (0,) if len(only_at) else ()
    else:
        at = np.searchsorted(starts, only_at, side="right") - 1
        groups = at[np.concatenate(([True], at[1:] != at[:-1]))] if len(at) else ()  # ``only_at`` is sorted
    for group in (int(g) for g in groups if 0 <= g < len(starts) - 1):
        key = None if file.kept_as is None else (*file.kept_as, group, tuple(columns))
        batches = ROW_GROUP_CACHE.get(key) if key is not None else None
        if batches is None:
            part = file.fragment().subset(row_group_ids=[group])
            scanner = ds.Scanner.from_fragment(fragment=part, schema=file.footer().physical, columns=columns)
            batches = [b for b in scanner.to_batches() if b.num_rows]
            if key is not None:
                ROW_GROUP_CACHE.put(key, batches)
        first = int(starts[group])
        for batch in batches:
            low, high = np.searchsorted(only_at, [first, first + len(batch)])
            if low < high:  # the batch holds some of the positions: take those rows alone
                yield batch.take(pa.array(only_at[low:high] - first))
            first += len(batch)


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
