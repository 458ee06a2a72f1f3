"""Every use of pyiceberg internals, in one module.

pyiceberg 0.12.0 (pinned exactly in pyproject.toml) has no public API for
what icesink needs:

* committing a snapshot exactly once: ``Transaction.commit_transaction``
  retries a failed compare-and-swap by rebuilding the snapshot on the new
  head without re-checking icesink's committed-checkpoint marker, so icesink
  builds the snapshot itself and calls ``Catalog.commit_table`` exactly once
  per attempt;
* writing and reading the per-checkpoint delta manifests;
* delete manifests and row-delta snapshots: pyiceberg's manifest writers
  always write ``content: data``, and they declare ``equality_ids`` as
  ``list<long>`` where the spec (and Iceberg Java) wants ``list<int>``
  (apache/iceberg-python#3840).

``tests/test_pyiceberg_internals.py`` exercises each of these names so that a
pyiceberg upgrade that moves or changes them fails loudly there.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import cast

import pyarrow as pa
from pyiceberg.avro.codecs import AvroCompressionCodec
from pyiceberg.avro.file import AvroOutputFile
from pyiceberg.expressions import BooleanExpression
from pyiceberg.io import FileIO, OutputFile
from pyiceberg.manifest import (
    DataFile,
    DataFileContent,
    FileFormat,
    ManifestContent,
    ManifestEntry,
    ManifestEntryStatus,
    ManifestFile,
    ManifestWriter,
    ManifestWriterV2,
    write_manifest,
    write_manifest_list,
)
from pyiceberg.partitioning import PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table import Table, TableProperties
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.refs import MAIN_BRANCH, SnapshotRefType
from pyiceberg.table.snapshots import (
    Operation,
    Snapshot,
    SnapshotSummaryCollector,
    Summary,
    update_snapshot_summaries,
)
from pyiceberg.table.update import (
    AddSnapshotUpdate,
    AssertCurrentSchemaId,
    AssertRefSnapshotId,
    AssertTableUUID,
    RemoveSnapshotsUpdate,
    SetPropertiesUpdate,
    SetSnapshotRefUpdate,
    TableRequirement,
    TableUpdate,
)
from pyiceberg.typedef import Record, TableVersion
from pyiceberg.types import IntegerType, ListType, NestedField, StructType

from icesink.results import FileContent, FileRecord

PYICEBERG_VERSION = "0.12.0"

# Delta manifests are a hand-off format: their entries are re-added under the
# real snapshot id when the checkpoint is committed, as in Iceberg's Flink sink.
STAGING_SNAPSHOT_ID = 0

_CONTENT = {
    FileContent.DATA: DataFileContent.DATA,
    FileContent.POSITION_DELETES: DataFileContent.POSITION_DELETES,
    FileContent.EQUALITY_DELETES: DataFileContent.EQUALITY_DELETES,
}


def check_pyiceberg_version() -> None:
    import pyiceberg

    if pyiceberg.__version__ != PYICEBERG_VERSION:
        raise ImportError(
            f"icesink extends pyiceberg {PYICEBERG_VERSION} internals but pyiceberg {pyiceberg.__version__} "
            f"is installed; install pyiceberg=={PYICEBERG_VERSION}"
        )


check_pyiceberg_version()


def to_data_file(record: FileRecord, format_version: int) -> DataFile:
    """The manifest entry payload of a file written by an executor."""
    data_file = DataFile.from_args(
        _table_format_version=cast(TableVersion, format_version),
        content=_CONTENT[record.content],
        file_path=record.path,
        file_format=FileFormat.PARQUET,
        partition=Record(*record.partition),
        record_count=record.record_count,
        file_size_in_bytes=record.file_size_bytes,
        column_sizes=record.column_sizes,
        value_counts=record.value_counts,
        null_value_counts=record.null_value_counts,
        nan_value_counts=record.nan_value_counts,
        lower_bounds=record.lower_bounds,
        upper_bounds=record.upper_bounds,
        split_offsets=list(record.split_offsets),
        equality_ids=None if record.equality_ids is None else list(record.equality_ids),
        sort_order_id=None,
    )
    data_file.spec_id = record.spec_id
    return data_file


EQUALITY_IDS_FIELD_ID = 135
EQUALITY_IDS_ELEMENT_ID = 136


def _with_int_equality_ids(schema: Schema) -> Schema:
    """The manifest entry schema with ``equality_ids`` declared as ``list<int>``, as the spec says."""

    def fix_data_file(struct: StructType) -> StructType:
        return StructType(
            *[
                NestedField(
                    field_id=f.field_id,
                    name=f.name,
                    field_type=ListType(EQUALITY_IDS_ELEMENT_ID, IntegerType(), element_required=True),
                    required=f.required,
                    doc=f.doc,
                )
                if f.field_id == EQUALITY_IDS_FIELD_ID
                else f
                for f in struct.fields
            ]
        )

    return Schema(
        *[
            NestedField(f.field_id, f.name, fix_data_file(f.field_type), required=f.required, doc=f.doc)
            if f.field_id == 2 and isinstance(f.field_type, StructType)
            else f
            for f in schema.fields
        ]
    )


class DeleteManifestWriter(ManifestWriterV2):
    """A v2 manifest of delete files: ``content: deletes`` and spec-conformant ``equality_ids``."""

    def content(self) -> ManifestContent:
        return ManifestContent.DELETES

    @property
    def _meta(self) -> dict[str, str]:
        return {**super()._meta, "content": "deletes"}

    def new_writer(self) -> AvroOutputFile[ManifestEntry]:
        return AvroOutputFile[ManifestEntry](
            output_file=self._output_file,
            file_schema=_with_int_equality_ids(self._with_partition(self.version)),
            record_schema=_with_int_equality_ids(self._with_partition(2)),
            schema_name="manifest_entry",
            metadata=self._meta,
        )


def _manifest_writer(
    metadata: TableMetadata, spec: PartitionSpec, output: OutputFile, snapshot_id: int, deletes: bool
) -> ManifestWriter:
    if not deletes:
        return write_manifest(
            format_version=metadata.format_version,
            spec=spec,
            schema=metadata.schema(),
            output_file=output,
            snapshot_id=snapshot_id,
            avro_compression=_compression(metadata),
        )
    if metadata.format_version < 2:
        raise ValueError("delete files need an Iceberg format version 2 table")
    return DeleteManifestWriter(spec, metadata.schema(), output, snapshot_id, _compression(metadata))


def _write_added(
    metadata: TableMetadata,
    spec_id: int,
    output: OutputFile,
    snapshot_id: int,
    files: Sequence[DataFile],
    deletes: bool,
) -> ManifestFile:
    writer = _manifest_writer(metadata, metadata.specs()[spec_id], output, snapshot_id, deletes)
    with writer:
        for data_file in files:
            writer.add(
                ManifestEntry.from_args(
                    status=ManifestEntryStatus.ADDED,
                    snapshot_id=snapshot_id,
                    sequence_number=None,
                    file_sequence_number=None,
                    data_file=data_file,
                )
            )
    return writer.to_manifest_file()


@dataclass(frozen=True)
class DeltaManifest:
    """A staged manifest: where it is and which partition spec its entries use."""

    path: str
    spec_id: int
    length: int
    deletes: bool = False


def write_delta_manifest(
    table: Table, path: str, spec_id: int, files: Sequence[DataFile], deletes: bool = False
) -> DeltaManifest:
    """Write the data (or delete) files of one checkpoint as an Avro manifest pyiceberg's reader accepts."""
    manifest = _write_added(table.metadata, spec_id, table.io.new_output(path), STAGING_SNAPSHOT_ID, files, deletes)
    return DeltaManifest(path=path, spec_id=spec_id, length=manifest.manifest_length, deletes=deletes)


def read_delta_manifest(io: FileIO, manifest: DeltaManifest) -> list[DataFile]:
    """The files of a staged manifest; raises the reader's own error if it is missing or corrupt."""
    handle = ManifestFile.from_args(
        manifest_path=manifest.path,
        manifest_length=manifest.length,
        partition_spec_id=manifest.spec_id,
        content=ManifestContent.DELETES if manifest.deletes else ManifestContent.DATA,
        added_snapshot_id=STAGING_SNAPSHOT_ID,
    )
    return [entry.data_file for entry in handle.fetch_manifest_entry(io, discard_deleted=True)]


def _compression(metadata: TableMetadata) -> AvroCompressionCodec:
    value = metadata.properties.get(
        TableProperties.WRITE_AVRO_COMPRESSION, TableProperties.WRITE_AVRO_COMPRESSION_DEFAULT
    )
    return cast(AvroCompressionCodec, value)


@dataclass(frozen=True)
class PreparedSnapshot:
    """A snapshot written to storage but not yet committed to the catalog."""

    snapshot_id: int
    parent_id: int | None
    updates: tuple[TableUpdate, ...]
    requirements: tuple[TableRequirement, ...]
    written_paths: tuple[str, ...]


def head_snapshot_id(metadata: TableMetadata, branch: str = MAIN_BRANCH) -> int | None:
    snapshot = metadata.snapshot_by_name(branch)
    return snapshot.snapshot_id if snapshot else None


def prepare_snapshot(
    table: Table,
    data_files: Iterable[DataFile],
    properties: Mapping[str, str],
    delete_files: Iterable[DataFile] = (),
    branch: str = MAIN_BRANCH,
    table_properties: Mapping[str, str] | None = None,
    expire_snapshots: bool = False,
) -> PreparedSnapshot:
    """Write the manifests and manifest list of an append or row delta on top of the branch head.

    Data and delete files added together get the snapshot's sequence number,
    so the new equality deletes apply to older data only, never to the rows
    added beside them. The requirements assert the head this was built on,
    so the catalog's compare-and-swap rejects it if anyone committed in between.

    Small manifests are merged as Iceberg's merging appends do, so the
    manifest list stays short however many commits came before. With
    ``expire_snapshots``, snapshots past the table's retention are removed in
    the same metadata commit, which keeps the metadata file (rewritten on every
    commit) from growing with the table's age.
    """
    metadata = table.metadata
    files = list(data_files)
    deletes = list(delete_files)
    snapshot_id = metadata.new_snapshot_id()
    parent_id = head_snapshot_id(metadata, branch)
    commit_uuid = uuid.uuid4()
    locations = table.location_provider()
    written: list[str] = []

    new_manifests: list[ManifestFile] = []
    for kind, group in (("m", files), ("d", deletes)):
        by_spec: dict[int, list[DataFile]] = {}
        for data_file in group:
            by_spec.setdefault(data_file.spec_id, []).append(data_file)
        for spec_id, spec_files in sorted(by_spec.items()):
            path = locations.new_metadata_location(f"{commit_uuid}-{kind}{len(new_manifests)}.avro")
            written.append(path)
            output = table.io.new_output(path)
            new_manifests.append(_write_added(metadata, spec_id, output, snapshot_id, spec_files, kind == "d"))

    existing: list[ManifestFile] = []
    if parent_id is not None:
        parent = metadata.snapshot_by_id(parent_id)
        assert parent is not None
        existing = [m for m in parent.manifests(table.io) if m.has_added_files() or m.has_existing_files()]
    merge = ManifestMergePolicy.of(metadata.properties)
    existing, merged_paths = _merge_manifests(table, existing, new_manifests, snapshot_id, merge, commit_uuid)
    written.extend(merged_paths)

    collector = SnapshotSummaryCollector(
        partition_summary_limit=int(
            metadata.properties.get(
                TableProperties.WRITE_PARTITION_SUMMARY_LIMIT, TableProperties.WRITE_PARTITION_SUMMARY_LIMIT_DEFAULT
            )
        )
    )
    specs = metadata.specs()
    schema = metadata.schema()
    for data_file in files + deletes:
        collector.add_file(data_file, schema=schema, partition_spec=specs[data_file.spec_id])
    parent_snapshot = metadata.snapshot_by_id(parent_id) if parent_id is not None else None
    # Iceberg's RowDelta: deletes only → delete, deletes and data → overwrite, data only → append.
    operation = Operation.APPEND if not deletes else (Operation.OVERWRITE if files else Operation.DELETE)
    summary = update_snapshot_summaries(
        Summary(operation=operation, **collector.build(), **properties),
        previous_summary=parent_snapshot.summary if parent_snapshot else None,
    )

    sequence_number = metadata.next_sequence_number()
    list_path = locations.new_metadata_location(f"snap-{snapshot_id}-0-{commit_uuid}.avro")
    written.append(list_path)
    with write_manifest_list(
        format_version=metadata.format_version,
        output_file=table.io.new_output(list_path),
        snapshot_id=snapshot_id,
        parent_snapshot_id=parent_id,
        sequence_number=sequence_number,
        avro_compression=_compression(metadata),
    ) as list_writer:
        list_writer.add_manifests(new_manifests + existing)

    snapshot = Snapshot(
        snapshot_id=snapshot_id,
        parent_snapshot_id=parent_id,
        manifest_list=list_path,
        sequence_number=sequence_number,
        summary=summary,
        schema_id=metadata.current_schema_id,
        first_row_id=getattr(metadata, "next_row_id", None) if metadata.format_version >= 3 else None,
    )
    updates: tuple[TableUpdate, ...] = (
        AddSnapshotUpdate(snapshot=snapshot),
        SetSnapshotRefUpdate(
            snapshot_id=snapshot_id,
            parent_snapshot_id=parent_id,
            ref_name=branch,
            type=SnapshotRefType.BRANCH,
            max_ref_age_ms=None,
            max_snapshot_age_ms=None,
            min_snapshots_to_keep=None,
        ),
    )
    if table_properties:
        # Same metadata commit as the snapshot: both land or neither does.
        updates += (SetPropertiesUpdate(updates=dict(table_properties)),)
    if expire_snapshots:
        expired = expired_snapshot_ids(metadata, snapshot, branch)
        if expired:
            updates += (RemoveSnapshotsUpdate(snapshot_ids=expired),)
    requirements: tuple[TableRequirement, ...] = (
        AssertTableUUID(uuid=metadata.table_uuid),
        AssertRefSnapshotId(snapshot_id=parent_id, ref=branch),
        # A schema change since the table was read also sends the committer back to read it again.
        AssertCurrentSchemaId(current_schema_id=metadata.current_schema_id),
    )
    return PreparedSnapshot(snapshot_id, parent_id, updates, requirements, tuple(written))


@dataclass(frozen=True)
class ManifestMergePolicy:
    """Iceberg's manifest merging table properties, with Iceberg Java's defaults (merging on)."""

    enabled: bool
    min_count: int
    target_bytes: int

    @classmethod
    def of(cls, properties: Mapping[str, str]) -> ManifestMergePolicy:
        return cls(
            enabled=properties.get(TableProperties.MANIFEST_MERGE_ENABLED, "true").lower() == "true",
            min_count=int(
                properties.get(
                    TableProperties.MANIFEST_MIN_MERGE_COUNT, TableProperties.MANIFEST_MIN_MERGE_COUNT_DEFAULT
                )
            ),
            target_bytes=int(
                properties.get(
                    TableProperties.MANIFEST_TARGET_SIZE_BYTES, TableProperties.MANIFEST_TARGET_SIZE_BYTES_DEFAULT
                )
            ),
        )


def _merge_manifests(
    table: Table,
    existing: list[ManifestFile],
    new: list[ManifestFile],
    snapshot_id: int,
    policy: ManifestMergePolicy,
    commit_uuid: uuid.UUID,
) -> tuple[list[ManifestFile], list[str]]:
    """The parent's manifests, with small ones of the same content and spec rewritten as one.

    A group is merged once it and the new manifests of its kind reach
    ``min_count``; manifests at the target size stay as they are. Live entries
    are rewritten as EXISTING with their snapshot id and sequence numbers, so
    equality deletes keep applying exactly to the rows they applied to before.
    """
    if not policy.enabled:
        return existing, []
    groups: dict[tuple[ManifestContent, int], list[ManifestFile]] = {}
    for manifest in existing:
        if manifest.manifest_length < policy.target_bytes:
            groups.setdefault((manifest.content, manifest.partition_spec_id), []).append(manifest)
    new_counts: dict[tuple[ManifestContent, int], int] = {}
    for manifest in new:
        key = (manifest.content, manifest.partition_spec_id)
        new_counts[key] = new_counts.get(key, 0) + 1
    metadata = table.metadata
    merged: list[ManifestFile] = []
    replaced: set[str] = set()
    written: list[str] = []
    for (content, spec_id), group in groups.items():
        if len(group) < 2 or len(group) + new_counts.get((content, spec_id), 0) < policy.min_count:
            continue
        path = table.location_provider().new_metadata_location(f"{commit_uuid}-merged{len(written)}.avro")
        written.append(path)
        deletes = content == ManifestContent.DELETES
        writer = _manifest_writer(metadata, metadata.specs()[spec_id], table.io.new_output(path), snapshot_id, deletes)
        with writer:
            for manifest in group:
                for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=True):
                    writer.existing(entry)
        merged.append(writer.to_manifest_file())
        replaced.update(m.manifest_path for m in group)
    return merged + [m for m in existing if m.manifest_path not in replaced], written


def expired_snapshot_ids(metadata: TableMetadata, new_head: Snapshot, branch: str = MAIN_BRANCH) -> list[int]:
    """Snapshots past the table's retention once ``new_head`` is the head of ``branch``.

    Iceberg's rules: every ref keeps its snapshot; a branch also keeps its
    ``min-snapshots-to-keep`` newest ancestors and every ancestor younger than
    ``max-snapshot-age-ms`` (the ref's own settings first, then the table's
    ``history.expire.*`` properties). Snapshots no ref reaches go once they
    are older than the table's maximum age.
    """
    properties = metadata.properties
    table_max_age = int(
        properties.get(TableProperties.MAX_SNAPSHOT_AGE_MS, TableProperties.MAX_SNAPSHOT_AGE_MS_DEFAULT)
    )
    table_min_keep = int(
        properties.get(TableProperties.MIN_SNAPSHOTS_TO_KEEP, TableProperties.MIN_SNAPSHOTS_TO_KEEP_DEFAULT)
    )
    now_ms = new_head.timestamp_ms
    retained: set[int] = set()
    for name, ref in metadata.refs.items():
        head_id = new_head.snapshot_id if name == branch else ref.snapshot_id
        retained.add(head_id)
        if ref.snapshot_ref_type != SnapshotRefType.BRANCH:
            continue
        max_age = ref.max_snapshot_age_ms if ref.max_snapshot_age_ms is not None else table_max_age
        min_keep = ref.min_snapshots_to_keep if ref.min_snapshots_to_keep is not None else table_min_keep
        kept = 1
        parent_id = new_head.parent_snapshot_id if name == branch else _parent_of(metadata, head_id)
        while parent_id is not None:
            parent = metadata.snapshot_by_id(parent_id)
            if parent is None or (kept >= min_keep and parent.timestamp_ms < now_ms - max_age):
                break
            retained.add(parent_id)
            kept += 1
            parent_id = parent.parent_snapshot_id
    return [
        s.snapshot_id
        for s in metadata.snapshots
        if s.snapshot_id not in retained and s.timestamp_ms < now_ms - table_max_age
    ]


def _parent_of(metadata: TableMetadata, snapshot_id: int) -> int | None:
    snapshot = metadata.snapshot_by_id(snapshot_id)
    return snapshot.parent_snapshot_id if snapshot else None


def commit_prepared(table: Table, prepared: PreparedSnapshot) -> Table:
    """One compare-and-swap in the catalog; raises ``CommitFailedException`` if the head moved.

    Deliberately no retry here: the caller must re-read the committed marker
    before building the snapshot again.
    """
    response = table.catalog.commit_table(table, prepared.requirements, prepared.updates)
    return Table(
        identifier=table._identifier,
        metadata=response.metadata,
        metadata_location=response.metadata_location,
        io=table.io,
        catalog=table.catalog,
    )


# --- Garbage collection: what a table references, what its location holds -------------------------


def referenced_paths(table: Table) -> set[str]:
    """Every file any snapshot, metadata log entry or statistics entry of the table points at."""
    metadata = table.metadata
    found = {table.metadata_location, *(entry.metadata_file for entry in metadata.metadata_log)}
    found.update(s.statistics_path for s in metadata.statistics)
    found.update(s.statistics_path for s in metadata.partition_statistics)
    seen_manifests: set[str] = set()
    for snapshot in metadata.snapshots:
        found.add(snapshot.manifest_list)
        for manifest in snapshot.manifests(table.io):
            if manifest.manifest_path in seen_manifests:
                continue
            seen_manifests.add(manifest.manifest_path)
            found.add(manifest.manifest_path)
            # Deleted entries too: an older snapshot may still read the file they name.
            found.update(e.data_file.file_path for e in manifest.fetch_manifest_entry(table.io, discard_deleted=False))
    return found


@dataclass(frozen=True)
class StoredFile:
    uri: str
    modified_ms: int


def list_files(table: Table, location: str) -> list[StoredFile]:
    """Every file under ``location``, with the table's own file system (local, S3, ...)."""
    from pyarrow.fs import FileSelector, FileType
    from pyiceberg.io.pyarrow import PyArrowFileIO

    if not isinstance(table.io, PyArrowFileIO):
        raise TypeError(f"listing files needs pyiceberg's PyArrowFileIO, the table uses {type(table.io).__name__}")
    scheme, netloc, path = PyArrowFileIO.parse_location(location)
    filesystem = table.io.fs_by_scheme(scheme, netloc)
    infos = filesystem.get_file_info(FileSelector(path.rstrip("/"), recursive=True, allow_not_found=True))
    prefix = "file://" if scheme == "file" else f"{scheme}://"
    return [
        StoredFile(uri=f"{prefix}{info.path}", modified_ms=int(info.mtime_ns // 1_000_000) if info.mtime_ns else 0)
        for info in infos
        if info.type == FileType.File
    ]


def normalized_path(uri: str) -> str:
    """A file's location without scheme, so ``file:///x`` and ``/x`` compare equal."""
    from pyiceberg.io.pyarrow import PyArrowFileIO

    scheme, _, path = PyArrowFileIO.parse_location(uri)
    return f"{scheme}:{path}"


# --- Reading: scan planning and file reads for icesink.read -----------------------------------------


@dataclass(frozen=True)
class PlannedScan:
    """Live files of a snapshot that may hold rows matching the filter, with their data sequence numbers."""

    schema: Schema
    data: list[tuple[DataFile, int, set[DataFile]]]  # (data file, sequence number, position deletes)
    equality_deletes: list[tuple[DataFile, int]]


def plan_scan(table: Table, snapshot_id: int | None, row_filter: str | BooleanExpression) -> PlannedScan:
    """Plan a read the way pyiceberg does (manifests pruned by partition summaries, files by partition
    and column bounds), but keep equality delete files instead of refusing them."""
    from pyiceberg.table import ManifestGroupPlanner
    from pyiceberg.table.delete_file_index import DeleteFileIndex

    metadata = table.metadata
    snapshot = metadata.snapshot_by_id(snapshot_id) if snapshot_id is not None else metadata.current_snapshot()
    if snapshot_id is not None and snapshot is None:
        raise KeyError(snapshot_id)
    schema = metadata.schema()
    if snapshot is not None and snapshot.schema_id is not None:
        schema = metadata.schema_by_id(snapshot.schema_id) or schema
    if snapshot is None:
        return PlannedScan(schema, [], [])
    planner = ManifestGroupPlanner(metadata, table.io, row_filter)
    data_entries: list[ManifestEntry] = []
    positions = DeleteFileIndex()
    equality: list[tuple[DataFile, int]] = []
    for entries in planner.plan_manifest_entries(snapshot.manifests(table.io)):
        for entry in entries:
            content = entry.data_file.content
            if content == DataFileContent.DATA:
                data_entries.append(entry)
            elif content == DataFileContent.POSITION_DELETES:
                positions.add_delete_file(entry, partition_key=entry.data_file.partition)
            else:
                equality.append((entry.data_file, entry.sequence_number or 0))
    data = [
        (
            e.data_file,
            e.sequence_number or 0,
            positions.for_data_file(e.sequence_number or 0, e.data_file, partition_key=e.data_file.partition),
        )
        for e in data_entries
    ]
    return PlannedScan(schema, data, equality)


def read_files(
    table: Table,
    schema: Schema,
    files: Sequence[tuple[DataFile, set[DataFile]]],
    row_filter: str | BooleanExpression | None,
) -> pa.Table:
    """Rows of data files (position deletes applied) projected onto ``schema`` by field id."""
    from pyiceberg.expressions import AlwaysTrue
    from pyiceberg.io.pyarrow import ArrowScan
    from pyiceberg.table import FileScanTask, _parse_row_filter

    expression = _parse_row_filter(row_filter) if row_filter is not None else AlwaysTrue()
    scan = ArrowScan(table.metadata, table.io, schema, expression)
    return scan.to_table([FileScanTask(data_file, delete_files=deletes) for data_file, deletes in files])
