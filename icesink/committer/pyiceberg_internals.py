"""Every use of pyiceberg internals, in one module.

pyiceberg 0.12.0 (pinned exactly in pyproject.toml) has no public API for
what icesink needs:

* committing a snapshot exactly once: ``Transaction.commit_transaction``
  retries a failed compare-and-swap by rebuilding the snapshot on the new
  head without re-checking icesink's committed-checkpoint marker, so icesink
  builds the snapshot itself and calls ``Catalog.commit_table`` exactly once
  per attempt;
* writing and reading the per-checkpoint delta manifests.

``tests/test_pyiceberg_internals.py`` exercises each of these names so that a
pyiceberg upgrade that moves or changes them fails loudly there.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import cast

from pyiceberg.avro.codecs import AvroCompressionCodec
from pyiceberg.io import FileIO
from pyiceberg.manifest import (
    DataFile,
    DataFileContent,
    FileFormat,
    ManifestContent,
    ManifestEntry,
    ManifestEntryStatus,
    ManifestFile,
    write_manifest,
    write_manifest_list,
)
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
    AssertRefSnapshotId,
    AssertTableUUID,
    SetSnapshotRefUpdate,
    TableRequirement,
    TableUpdate,
)
from pyiceberg.typedef import Record, TableVersion

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


@dataclass(frozen=True)
class DeltaManifest:
    """A staged manifest: where it is and which partition spec its entries use."""

    path: str
    spec_id: int
    length: int


def write_delta_manifest(table: Table, path: str, spec_id: int, files: Sequence[DataFile]) -> DeltaManifest:
    """Write the files of one checkpoint as an Avro manifest that pyiceberg's reader accepts."""
    metadata = table.metadata
    writer = write_manifest(
        format_version=metadata.format_version,
        spec=metadata.specs()[spec_id],
        schema=metadata.schema(),
        output_file=table.io.new_output(path),
        snapshot_id=STAGING_SNAPSHOT_ID,
        avro_compression=_compression(metadata),
    )
    with writer:
        for data_file in files:
            writer.add(
                ManifestEntry.from_args(
                    status=ManifestEntryStatus.ADDED,
                    snapshot_id=STAGING_SNAPSHOT_ID,
                    sequence_number=None,
                    file_sequence_number=None,
                    data_file=data_file,
                )
            )
    manifest = writer.to_manifest_file()
    return DeltaManifest(path=path, spec_id=spec_id, length=manifest.manifest_length)


def read_delta_manifest(io: FileIO, manifest: DeltaManifest) -> list[DataFile]:
    """The files of a staged manifest; raises the reader's own error if it is missing or corrupt."""
    handle = ManifestFile.from_args(
        manifest_path=manifest.path,
        manifest_length=manifest.length,
        partition_spec_id=manifest.spec_id,
        content=ManifestContent.DATA,
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


def prepare_append(
    table: Table,
    data_files: Iterable[DataFile],
    properties: Mapping[str, str],
    branch: str = MAIN_BRANCH,
) -> PreparedSnapshot:
    """Write the manifest and manifest list of an append on top of the branch head.

    The requirements assert the head this was built on, so the catalog's
    compare-and-swap rejects it if anyone committed in between.
    """
    metadata = table.metadata
    files = list(data_files)
    snapshot_id = metadata.new_snapshot_id()
    parent_id = head_snapshot_id(metadata, branch)
    commit_uuid = uuid.uuid4()
    compression = _compression(metadata)
    locations = table.location_provider()
    written: list[str] = []

    new_manifests: list[ManifestFile] = []
    by_spec: dict[int, list[DataFile]] = {}
    for data_file in files:
        by_spec.setdefault(data_file.spec_id, []).append(data_file)
    for number, (spec_id, spec_files) in enumerate(sorted(by_spec.items())):
        path = locations.new_metadata_location(f"{commit_uuid}-m{number}.avro")
        written.append(path)
        with write_manifest(
            format_version=metadata.format_version,
            spec=metadata.specs()[spec_id],
            schema=metadata.schema(),
            output_file=table.io.new_output(path),
            snapshot_id=snapshot_id,
            avro_compression=compression,
        ) as writer:
            for data_file in spec_files:
                writer.add(
                    ManifestEntry.from_args(
                        status=ManifestEntryStatus.ADDED,
                        snapshot_id=snapshot_id,
                        sequence_number=None,
                        file_sequence_number=None,
                        data_file=data_file,
                    )
                )
        new_manifests.append(writer.to_manifest_file())

    existing: list[ManifestFile] = []
    if parent_id is not None:
        parent = metadata.snapshot_by_id(parent_id)
        assert parent is not None
        existing = [m for m in parent.manifests(table.io) if m.has_added_files() or m.has_existing_files()]

    collector = SnapshotSummaryCollector(
        partition_summary_limit=int(
            metadata.properties.get(
                TableProperties.WRITE_PARTITION_SUMMARY_LIMIT, TableProperties.WRITE_PARTITION_SUMMARY_LIMIT_DEFAULT
            )
        )
    )
    specs = metadata.specs()
    schema = metadata.schema()
    for data_file in files:
        collector.add_file(data_file, schema=schema, partition_spec=specs[data_file.spec_id])
    parent_snapshot = metadata.snapshot_by_id(parent_id) if parent_id is not None else None
    summary = update_snapshot_summaries(
        Summary(operation=Operation.APPEND, **collector.build(), **properties),
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
        avro_compression=compression,
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
    requirements: tuple[TableRequirement, ...] = (
        AssertTableUUID(uuid=metadata.table_uuid),
        AssertRefSnapshotId(snapshot_id=parent_id, ref=branch),
    )
    return PreparedSnapshot(snapshot_id, parent_id, updates, requirements, tuple(written))


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
