"""Scan planning that keeps equality deletes (pyiceberg's refuses them), and file reads."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import pyarrow as pa
from pyiceberg.expressions import BooleanExpression
from pyiceberg.io import FileIO
from pyiceberg.manifest import DataFile, DataFileContent, ManifestEntry, ManifestFile
from pyiceberg.schema import Schema
from pyiceberg.table import Table

from icesink.arrays import empty_table
from icesink.iceberg.manifest_lists import manifests_of
from icesink.iceberg.manifests import fetch_entries


@dataclass(frozen=True)
class PlannedDataFile:
    """A live data file, its data sequence number and the position deletes that apply to it."""

    file: DataFile
    sequence_number: int
    position_deletes: frozenset[DataFile]


@dataclass(frozen=True)
class PlannedDelete:
    """A live equality delete file and its data sequence number."""

    file: DataFile
    sequence_number: int


@dataclass(frozen=True)
class PlannedScan:
    """Live files of a snapshot that may hold rows matching the filter."""

    schema: Schema
    data: list[PlannedDataFile]
    equality_deletes: list[PlannedDelete]


def _with_live_entries(manifests: list[ManifestFile]) -> list[ManifestFile]:
    """Manifests that list a live file: one of only DELETED entries (what a rewrite leaves for one
    snapshot, so that history can be checked) need not be read."""
    return [m for m in manifests if m.has_added_files() or m.has_existing_files()]


def scan_schema(table: Table, snapshot_id: int | None) -> Schema:
    """The schema a read of ``snapshot_id`` returns rows in: the snapshot's own for time travel, as Iceberg
    readers do; the table's current schema for a read of the table as it is (None), so that a column
    renamed, added or dropped since the last commit reads as the table now says."""
    metadata = table.metadata
    if snapshot_id is None:
        return metadata.schema()
    snapshot = metadata.snapshot_by_id(snapshot_id)
    if snapshot is not None and snapshot.schema_id is not None:
        return metadata.schema_by_id(snapshot.schema_id) or metadata.schema()
    return metadata.schema()


def plan_scan(
    table: Table, snapshot_id: int | None, row_filter: str | BooleanExpression, schema: Schema | None = None
) -> PlannedScan:
    """Plan a read the way pyiceberg does (manifests pruned by partition summaries, files by partition
    and column bounds), but keep equality delete files instead of refusing them.

    ``snapshot_id`` must be one of the table's snapshots (the caller checks); None reads the current one.
    ``schema`` is the one rows are read in (default: :func:`scan_schema`'s).
    """
    from pyiceberg.table import ManifestGroupPlanner
    from pyiceberg.table.delete_file_index import DeleteFileIndex

    metadata = table.metadata
    snapshot = metadata.snapshot_by_id(snapshot_id) if snapshot_id is not None else metadata.current_snapshot()
    schema = schema if schema is not None else scan_schema(table, snapshot_id)
    if snapshot is None:
        return PlannedScan(schema, [], [])
    planner = ManifestGroupPlanner(metadata, table.io, row_filter)
    data_entries: list[ManifestEntry] = []
    positions = DeleteFileIndex()
    equality: list[PlannedDelete] = []
    for entries in planner.plan_manifest_entries(_with_live_entries(manifests_of(table.io, snapshot))):
        for entry in entries:
            content = entry.data_file.content
            if content == DataFileContent.DATA:
                data_entries.append(entry)
            elif content == DataFileContent.POSITION_DELETES:
                positions.add_delete_file(entry, partition_key=entry.data_file.partition)
            else:
                equality.append(PlannedDelete(entry.data_file, entry.sequence_number or 0))
    data = [
        PlannedDataFile(
            e.data_file,
            e.sequence_number or 0,
            frozenset(
                positions.for_data_file(e.sequence_number or 0, e.data_file, partition_key=e.data_file.partition)
            ),
        )
        for e in data_entries
    ]
    return PlannedScan(schema, data, equality)


def parse_row_filter(row_filter: str | BooleanExpression) -> BooleanExpression:
    """pyiceberg's parser for filter strings; raises its own errors for text it cannot parse."""
    from pyiceberg.table import _parse_row_filter

    return _parse_row_filter(row_filter)


def position_deletes_of(
    table: Table, delete_files: Iterable[DataFile], threads: int = 8
) -> dict[str, dict[str, pa.Array]]:
    """Per position delete file: the positions it names, by data file location (each file read once)."""
    return position_deletes_read(table.io, delete_files, threads)


def position_deletes_read(
    io: FileIO, delete_files: Iterable[DataFile], threads: int = 8
) -> dict[str, dict[str, pa.Array]]:
    """:func:`position_deletes_of` with the table's ``io``.

    pyiceberg's own reader splits a delete file with one filter per data file
    it names (quadratic for delete files that name many); one group-by does it
    in a single pass.
    """
    import pyarrow.parquet as pq

    def read(delete_file: DataFile) -> dict[str, pa.Array]:
        with io.new_input(str(delete_file.file_path)).open() as stream:
            rows = pq.ParquetFile(stream).read(columns=["file_path", "pos"])
        grouped = rows.group_by("file_path", use_threads=False).aggregate([("pos", "list")])
        lists = grouped.column("pos_list").combine_chunks()
        return {path: lists[i].values for i, path in enumerate(grouped.column("file_path").to_pylist())}

    unique = list({str(f.file_path): f for f in delete_files}.values())
    with ThreadPoolExecutor(max_workers=threads) as pool:
        return dict(zip((str(f.file_path) for f in unique), pool.map(read, unique), strict=True))


def position_deletes_by_file(
    table: Table, delete_files: Iterable[DataFile], threads: int = 8
) -> dict[str, list[pa.ChunkedArray]]:
    """The positions every position delete file names, merged by data file location."""
    found: dict[str, list[pa.ChunkedArray]] = {}
    for by_data_file in position_deletes_of(table, delete_files, threads).values():
        for path, positions in by_data_file.items():
            found.setdefault(path, []).append(pa.chunked_array([positions]))
    return found


def read_files(
    table: Table,
    schema: Schema,
    files: Sequence[tuple[DataFile, frozenset[DataFile]]],
    row_filter: str | BooleanExpression | None,
    positions: dict[str, list[pa.ChunkedArray]] | None = None,
) -> pa.Table:
    """Rows of data files (position deletes applied) projected onto ``schema`` by field id.

    ``positions`` (from :func:`position_deletes_by_file`) lets callers that
    read many files one by one read the delete files once.
    """
    from pyiceberg.expressions import AlwaysTrue
    from pyiceberg.expressions.visitors import bind
    from pyiceberg.io.pyarrow import schema_to_pyarrow

    from icesink.iceberg.file_reads import read_data_file

    expression = parse_row_filter(row_filter) if row_filter is not None else AlwaysTrue()
    bound = bind(table.metadata.schema(), expression, case_sensitive=True)
    if positions is None:
        positions = position_deletes_by_file(table, [d for _, deletes in files for d in deletes])
    batches = [
        batch
        for data_file, deletes in files
        for batch in read_data_file(
            table.metadata, table.io, schema, data_file, bound, positions.get(str(data_file.file_path))
        )
    ]
    if not batches:
        return empty_table(schema_to_pyarrow(schema, include_field_ids=False))
    return pa.concat_tables([pa.Table.from_batches([b]) for b in batches], promote_options="permissive")


class ManifestCache:
    """Live entries of manifests already read (manifest files never change).

    A committer keeps one across its commits, so each commit reads only the
    manifests added since the last one.
    """

    def __init__(self) -> None:
        self._entries: dict[str, list[ManifestEntry]] = {}

    def retain(self, manifests: Iterable[ManifestFile]) -> None:
        """Forget every manifest but these (those of the current snapshot)."""
        keep = {m.manifest_path for m in manifests}
        for path in [p for p in self._entries if p not in keep]:
            del self._entries[path]

    def live_entries(self, io: FileIO, manifest: ManifestFile) -> list[ManifestEntry]:
        return self.entries_of(io, [manifest])[0]

    def entries_of(self, io: FileIO, manifests: Sequence[ManifestFile]) -> list[list[ManifestEntry]]:
        """Each manifest's live entries, reading those not read before (one at a time: decoding them is most
        of the work, and threads contend for it)."""
        for manifest in manifests:
            if manifest.manifest_path not in self._entries:
                self._entries[manifest.manifest_path] = fetch_entries(io, manifest)
        return [self._entries[m.manifest_path] for m in manifests]


@dataclass(frozen=True)
class LiveFile:
    """A live data or delete file of a snapshot, with its data sequence number."""

    file: DataFile
    sequence_number: int

    @property
    def path(self) -> str:
        return str(self.file.file_path)

    @property
    def content(self) -> DataFileContent:
        return self.file.content


@dataclass(frozen=True)
class LiveFiles:
    """Every live file of a snapshot, by content (no pruning: maintenance looks at all of them)."""

    snapshot_id: int | None
    sequence_number: int
    data: list[LiveFile]
    position_deletes: list[LiveFile]
    equality_deletes: list[LiveFile]


def live_files(
    table: Table,
    snapshot_id: int | None = None,
    cache: ManifestCache | None = None,
    reading: Callable[[ManifestFile], bool] | None = None,
) -> LiveFiles:
    """The live files of ``snapshot_id`` (default: the current snapshot), of the manifests ``reading``
    keeps (default: all)."""
    metadata = table.metadata
    snapshot = metadata.snapshot_by_id(snapshot_id) if snapshot_id is not None else metadata.current_snapshot()
    if snapshot is None:
        return LiveFiles(None, 0, [], [], [])
    data: list[LiveFile] = []
    positions: list[LiveFile] = []
    equality: list[LiveFile] = []
    manifests = _with_live_entries(manifests_of(table.io, snapshot))
    read = [m for m in manifests if reading is None or reading(m)]
    for entries in (cache or ManifestCache()).entries_of(table.io, read):
        for entry in entries:
            live = LiveFile(entry.data_file, entry.sequence_number or 0)
            kind = entry.data_file.content
            (
                data
                if kind == DataFileContent.DATA
                else positions
                if kind == DataFileContent.POSITION_DELETES
                else equality
            ).append(live)
    if cache is not None:
        cache.retain(manifests)
    return LiveFiles(snapshot.snapshot_id, snapshot.sequence_number or 0, data, positions, equality)


def planned_files(table: Table, snapshot_id: int | None, cache: ManifestCache | None = None) -> PlannedScan:
    """Every live data file of a snapshot with the position deletes that apply to it, and its equality deletes.

    Unlike :func:`plan_scan`, nothing is pruned, and manifests already read (``cache``) are not read again.
    """
    from icesink.iceberg.delete_index import PositionDeleteIndex

    live = live_files(table, snapshot_id, cache)
    index = PositionDeleteIndex(live.position_deletes)
    data = [
        PlannedDataFile(d.file, d.sequence_number, index.for_data_file(d.sequence_number, d.file)) for d in live.data
    ]
    equality = [PlannedDelete(e.file, e.sequence_number) for e in live.equality_deletes]
    return PlannedScan(scan_schema(table, snapshot_id), data, equality)
