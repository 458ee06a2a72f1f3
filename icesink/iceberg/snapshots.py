"""Snapshots built on a known head and swapped into the catalog exactly once per attempt."""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from pyiceberg.manifest import DataFile, ManifestFile, write_manifest_list
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

from icesink.iceberg.expiry import expired_snapshot_ids
from icesink.iceberg.manifests import compression, write_added
from icesink.iceberg.merging import ManifestMergePolicy, merge_manifests


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
            new_manifests.append(write_added(metadata, spec_id, output, snapshot_id, spec_files, kind == "d"))

    existing: list[ManifestFile] = []
    if parent_id is not None:
        parent = metadata.snapshot_by_id(parent_id)
        assert parent is not None
        existing = [m for m in parent.manifests(table.io) if m.has_added_files() or m.has_existing_files()]
    merge = ManifestMergePolicy.of(metadata.properties)
    existing, merged_paths = merge_manifests(table, existing, new_manifests, snapshot_id, merge, commit_uuid)
    written.extend(merged_paths)

    # Iceberg's RowDelta: deletes only → delete, deletes and data → overwrite, data only → append.
    operation = Operation.APPEND if not deletes else (Operation.OVERWRITE if files else Operation.DELETE)
    summary = _summary(metadata, parent_id, operation, files + deletes, properties)

    sequence_number = metadata.next_sequence_number()
    list_path = locations.new_metadata_location(f"snap-{snapshot_id}-0-{commit_uuid}.avro")
    written.append(list_path)
    with write_manifest_list(
        format_version=metadata.format_version,
        output_file=table.io.new_output(list_path),
        snapshot_id=snapshot_id,
        parent_snapshot_id=parent_id,
        sequence_number=sequence_number,
        avro_compression=compression(metadata),
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
    return PreparedSnapshot(snapshot_id, parent_id, updates, _requirements(metadata, parent_id, branch), tuple(written))


def _summary(
    metadata: TableMetadata,
    parent_id: int | None,
    operation: Operation,
    added: list[DataFile],
    properties: Mapping[str, str],
) -> Summary:
    collector = SnapshotSummaryCollector(
        partition_summary_limit=int(
            metadata.properties.get(
                TableProperties.WRITE_PARTITION_SUMMARY_LIMIT, TableProperties.WRITE_PARTITION_SUMMARY_LIMIT_DEFAULT
            )
        )
    )
    specs = metadata.specs()
    schema = metadata.schema()
    for data_file in added:
        collector.add_file(data_file, schema=schema, partition_spec=specs[data_file.spec_id])
    parent = metadata.snapshot_by_id(parent_id) if parent_id is not None else None
    return update_snapshot_summaries(
        Summary(operation=operation, **collector.build(), **properties),
        previous_summary=parent.summary if parent else None,
    )


def _requirements(metadata: TableMetadata, parent_id: int | None, branch: str) -> tuple[TableRequirement, ...]:
    return (
        AssertTableUUID(uuid=metadata.table_uuid),
        AssertRefSnapshotId(snapshot_id=parent_id, ref=branch),
        # A schema change since the table was read also sends the committer back to read it again.
        AssertCurrentSchemaId(current_schema_id=metadata.current_schema_id),
    )


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
