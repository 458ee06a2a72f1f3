"""Snapshots built on a known head and swapped into the catalog exactly once per attempt."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from pyiceberg.manifest import (
    DataFile,
    DataFileContent,
    ManifestContent,
    ManifestFile,
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
from icesink.iceberg.manifests import AddedFile, compression, manifest_writer, write_added
from icesink.iceberg.merging import ManifestMergePolicy, merge_manifests
from icesink.iceberg.metadata_cache import remember
from icesink.iceberg.scan import ManifestCache


@dataclass(frozen=True)
class PreparedSnapshot:
    """A snapshot written to storage but not yet committed to the catalog."""

    snapshot_id: int
    parent_id: int | None
    updates: tuple[TableUpdate, ...]
    requirements: tuple[TableRequirement, ...]
    written_paths: tuple[str, ...]


@dataclass(frozen=True)
class SnapshotChange:
    """What a snapshot does to the head of its branch.

    Attributes:
        added: files to add.
        removed: locations of live files (data or delete) to remove; each must be live on the head.
        operation: ``append``, ``overwrite``, ``delete`` or ``replace``.
        properties: extra snapshot summary entries.
        table_properties: table properties set in the same metadata commit.
    """

    added: tuple[AddedFile, ...] = ()
    removed: frozenset[str] = frozenset()
    operation: Operation = Operation.APPEND
    properties: Mapping[str, str] = field(default_factory=dict)
    table_properties: Mapping[str, str] = field(default_factory=dict)


class RemovedFileMissingError(Exception):
    """Raised when a file a change removes is no longer live on the head (someone else removed it)."""

    def __init__(self, paths: frozenset[str]) -> None:
        super().__init__(f"{len(paths)} file(s) to remove are no longer live, e.g. {sorted(paths)[0]}")
        self.paths = paths


def head_snapshot_id(metadata: TableMetadata, branch: str = MAIN_BRANCH) -> int | None:
    snapshot = metadata.snapshot_by_name(branch)
    return snapshot.snapshot_id if snapshot else None


def row_delta_operation(has_data: bool, has_deletes: bool) -> Operation:
    """Iceberg's RowDelta names: data only → append, deletes only → delete, both → overwrite."""
    if not has_deletes:
        return Operation.APPEND
    return Operation.OVERWRITE if has_data else Operation.DELETE


def prepare_snapshot(
    table: Table,
    data_files: Iterable[DataFile],
    properties: Mapping[str, str],
    delete_files: Iterable[DataFile] = (),
    branch: str = MAIN_BRANCH,
    table_properties: Mapping[str, str] | None = None,
    expire_snapshots: bool = False,
) -> PreparedSnapshot:
    """An append or row delta of files written for this snapshot, on top of the branch head.

    Data and delete files added together get the snapshot's sequence number,
    so the new equality deletes apply to older data only, never to the rows
    added beside them.
    """
    files = [AddedFile(f) for f in data_files]
    deletes = [AddedFile(f) for f in delete_files]
    change = SnapshotChange(
        added=tuple(files + deletes),
        operation=row_delta_operation(bool(files), bool(deletes)),
        properties=properties,
        table_properties=table_properties or {},
    )
    return prepare_change(table, change, branch, expire_snapshots)


def prepare_change(
    table: Table,
    change: SnapshotChange,
    branch: str = MAIN_BRANCH,
    expire_snapshots: bool = False,
    cache: ManifestCache | None = None,
) -> PreparedSnapshot:
    """Write the manifests and manifest list of ``change`` on top of the branch head.

    Manifests holding a removed file are rewritten as Iceberg does: the file
    as DELETED by this snapshot (keeping its sequence numbers), the rest as
    EXISTING; such a manifest is listed even when nothing in it is live any
    more, so that readers of this snapshot's history see the removal. The
    requirements assert the head this was built on, so the catalog's
    compare-and-swap rejects it if anyone committed in between.

    Small manifests are merged as Iceberg's merging appends do, so the
    manifest list stays short however many commits came before. With
    ``expire_snapshots``, snapshots past the table's retention are removed in
    the same metadata commit, which keeps the metadata file (rewritten on every
    commit) from growing with the table's age.

    Raises :class:`RemovedFileMissingError` when a removed file is not live on the head.
    """
    metadata = table.metadata
    snapshot_id = metadata.new_snapshot_id()
    parent_id = head_snapshot_id(metadata, branch)
    commit_uuid = uuid.uuid4()
    locations = table.location_provider()
    written: list[str] = []

    def new_path(kind: str) -> str:
        path = locations.new_metadata_location(f"{commit_uuid}-{kind}{len(written)}.avro")
        written.append(path)
        return path

    new_manifests = _write_added(table, change.added, snapshot_id, new_path)
    existing = _live_manifests(table, parent_id)
    removed_files: list[DataFile] = []
    if change.removed:
        existing, rewritten, removed_files = _remove_files(
            table, existing, change.removed, snapshot_id, new_path, cache or ManifestCache()
        )
        new_manifests += rewritten  # never merged away in this commit: they record the removal
    merge = ManifestMergePolicy.of(metadata.properties)
    existing, merged_paths = merge_manifests(table, existing, new_manifests, snapshot_id, merge, commit_uuid)
    written.extend(merged_paths)

    summary = _summary(
        metadata, parent_id, change.operation, [a.file for a in change.added], removed_files, change.properties
    )
    sequence_number = metadata.next_sequence_number()
    list_path = locations.new_metadata_location(f"snap-{snapshot_id}-0-{commit_uuid}.avro")
    written.append(list_path)
    _write_manifest_list(table, list_path, snapshot_id, parent_id, sequence_number, new_manifests + existing)
    snapshot = _new_snapshot(metadata, snapshot_id, parent_id, list_path, sequence_number, summary)
    updates = _updates(metadata, snapshot, branch, change, expire_snapshots)
    return PreparedSnapshot(snapshot_id, parent_id, updates, _requirements(metadata, parent_id, branch), tuple(written))


def _new_snapshot(
    metadata: TableMetadata,
    snapshot_id: int,
    parent_id: int | None,
    manifest_list: str,
    sequence_number: int,
    summary: Summary,
) -> Snapshot:
    return Snapshot(
        snapshot_id=snapshot_id,
        parent_snapshot_id=parent_id,
        manifest_list=manifest_list,
        sequence_number=sequence_number,
        summary=summary,
        schema_id=metadata.current_schema_id,
        first_row_id=getattr(metadata, "next_row_id", None) if metadata.format_version >= 3 else None,
    )


def _live_manifests(table: Table, parent_id: int | None) -> list[ManifestFile]:
    """The head's manifests that still list live files."""
    if parent_id is None:
        return []
    parent = table.metadata.snapshot_by_id(parent_id)
    assert parent is not None
    return [m for m in parent.manifests(table.io) if m.has_added_files() or m.has_existing_files()]


def _write_manifest_list(
    table: Table,
    path: str,
    snapshot_id: int,
    parent_id: int | None,
    sequence_number: int,
    manifests: list[ManifestFile],
) -> None:
    metadata = table.metadata
    with write_manifest_list(
        format_version=metadata.format_version,
        output_file=table.io.new_output(path),
        snapshot_id=snapshot_id,
        parent_snapshot_id=parent_id,
        sequence_number=sequence_number,
        avro_compression=compression(metadata),
    ) as list_writer:
        list_writer.add_manifests(manifests)


def _write_added(
    table: Table, added: Sequence[AddedFile], snapshot_id: int, new_path: Callable[[str], str]
) -> list[ManifestFile]:
    """The manifests of the files a change adds: one per kind (data, deletes) and partition spec."""
    groups: dict[tuple[bool, int], list[AddedFile]] = {}
    for file in added:
        deletes = file.file.content != DataFileContent.DATA
        groups.setdefault((deletes, file.file.spec_id), []).append(file)
    manifests = []
    for (deletes, spec_id), group in sorted(groups.items()):
        output = table.io.new_output(new_path("d" if deletes else "m"))
        manifests.append(write_added(table.metadata, spec_id, output, snapshot_id, group, deletes))
    return manifests


def _updates(
    metadata: TableMetadata, snapshot: Snapshot, branch: str, change: SnapshotChange, expire_snapshots: bool
) -> tuple[TableUpdate, ...]:
    """The metadata changes that put ``snapshot`` at the head of ``branch``, in one commit."""
    updates: tuple[TableUpdate, ...] = (
        AddSnapshotUpdate(snapshot=snapshot),
        SetSnapshotRefUpdate(
            snapshot_id=snapshot.snapshot_id,
            parent_snapshot_id=snapshot.parent_snapshot_id,
            ref_name=branch,
            type=SnapshotRefType.BRANCH,
            max_ref_age_ms=None,
            max_snapshot_age_ms=None,
            min_snapshots_to_keep=None,
        ),
    )
    if change.table_properties:
        # Same metadata commit as the snapshot: both land or neither does.
        updates += (SetPropertiesUpdate(updates=dict(change.table_properties)),)
    if expire_snapshots:
        expired = expired_snapshot_ids(metadata, snapshot, branch)
        if expired:
            updates += (RemoveSnapshotsUpdate(snapshot_ids=expired),)
    return updates


def _remove_files(
    table: Table,
    manifests: list[ManifestFile],
    removed: frozenset[str],
    snapshot_id: int,
    new_path: Callable[[str], str],
    cache: ManifestCache,
) -> tuple[list[ManifestFile], list[ManifestFile], list[DataFile]]:
    """(untouched manifests, rewritten manifests, removed files).

    All manifests of one content and spec that hold a removed file are
    rewritten as one: a compaction that replaces most of a table leaves a
    reader one manifest of DELETED entries to skip, not one per earlier commit.
    """
    metadata = table.metadata
    kept: list[ManifestFile] = []
    affected: dict[tuple[ManifestContent, int], list[ManifestFile]] = {}
    for manifest in manifests:
        entries = cache.live_entries(table.io, manifest)
        if any(e.data_file.file_path in removed for e in entries):
            affected.setdefault((manifest.content, manifest.partition_spec_id), []).append(manifest)
        else:
            kept.append(manifest)
    rewritten: list[ManifestFile] = []
    removed_files: list[DataFile] = []
    for (content, spec_id), group in affected.items():
        deletes = content == ManifestContent.DELETES
        output = table.io.new_output(new_path("r"))
        with manifest_writer(metadata, metadata.specs()[spec_id], output, snapshot_id, deletes) as writer:
            for manifest in group:
                for entry in cache.live_entries(table.io, manifest):
                    if entry.data_file.file_path in removed:
                        writer.delete(entry)
                        removed_files.append(entry.data_file)
                    else:
                        writer.existing(entry)
        rewritten.append(writer.to_manifest_file())
    missing = removed - {f.file_path for f in removed_files}
    if missing:
        raise RemovedFileMissingError(frozenset(missing))
    return kept, rewritten, removed_files


# The summary fields Iceberg computes for a snapshot (its counts and totals, the operation).
_COMPUTED_PREFIXES = ("added-", "deleted-", "removed-", "total-", "partitions.")
_COMPUTED = frozenset({"operation", "changed-partition-count", "partition-summaries-included"})


def computed_by_iceberg(name: str) -> bool:
    """Whether Iceberg's writers compute a snapshot summary field of this name (``added-records``,
    ``total-data-files``, ``partitions.<path>``, ``operation``, …): a value given for it would contradict them."""
    return name in _COMPUTED or name.startswith(_COMPUTED_PREFIXES)


def _summary(
    metadata: TableMetadata,
    parent_id: int | None,
    operation: Operation,
    added: list[DataFile],
    removed: list[DataFile],
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
    for data_file in removed:
        collector.remove_file(data_file, schema=schema, partition_spec=specs[data_file.spec_id])
    parent = metadata.snapshot_by_id(parent_id) if parent_id is not None else None
    # pyiceberg computes totals for append/overwrite/delete only; a replace changes totals the same way.
    computed = Operation.OVERWRITE if operation == Operation.REPLACE else operation
    # What Iceberg computes (file and record counts, totals) is never taken from the properties given.
    given = {name: value for name, value in properties.items() if not computed_by_iceberg(name)}
    summary = update_snapshot_summaries(
        Summary(operation=computed, **{**given, **collector.build()}),
        previous_summary=parent.summary if parent else None,
    )
    if operation == Operation.REPLACE:
        summary = Summary(operation=operation, **summary.additional_properties)
    return summary


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
    remember(response.metadata_location, response.metadata)
    return Table(
        identifier=table._identifier,
        metadata=response.metadata,
        metadata_location=response.metadata_location,
        io=table.io,
        catalog=table.catalog,
    )
