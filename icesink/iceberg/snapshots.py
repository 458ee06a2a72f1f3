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
)
from pyiceberg.table import Table
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.refs import MAIN_BRANCH, SnapshotRefType
from pyiceberg.table.snapshots import (
    Operation,
    Snapshot,
    Summary,
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

from icesink.errors import ConfigError
from icesink.iceberg.expiry import expired_snapshot_ids
from icesink.iceberg.manifest_lists import manifests_of, remember_list, write_manifest_list
from icesink.iceberg.manifests import AddedFile, compression, manifest_writer, write_added
from icesink.iceberg.merging import ManifestMergePolicy, merge_manifests
from icesink.iceberg.metadata_cache import remember
from icesink.iceberg.scan import ManifestCache
from icesink.iceberg.summaries import snapshot_summary


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


def base_snapshot_id(metadata: TableMetadata, branch: str) -> int | None:
    """The snapshot a commit to ``branch`` builds on: its head, or, for a branch that does not exist yet, the
    head of main (a branch starts with main's rows, never empty)."""
    return head_snapshot_id(metadata, branch if branch in metadata.refs else MAIN_BRANCH)


def _branch_head(table: Table, branch: str) -> int | None:
    """The head of ``branch`` (None: the branch does not exist yet); a tag of that name is refused, since a
    commit would turn it into a branch."""
    ref = table.metadata.refs.get(branch)
    if ref is not None and ref.snapshot_ref_type != SnapshotRefType.BRANCH:
        raise ConfigError(
            f"table {'.'.join(table.name())}: {branch!r} is a {ref.snapshot_ref_type.value}, not a branch; icesink "
            "commits to branches only. Name another branch, or remove the tag"
        )
    return ref.snapshot_id if ref is not None else None


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
    head_id = _branch_head(table, branch)
    parent_id = base_snapshot_id(metadata, branch)
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

    summary = snapshot_summary(
        metadata, parent_id, change.operation, [a.file for a in change.added], removed_files, change.properties
    )
    sequence_number = metadata.next_sequence_number()
    list_path = locations.new_metadata_location(f"snap-{snapshot_id}-0-{commit_uuid}.avro")
    written.append(list_path)
    _write_manifest_list(table, list_path, snapshot_id, parent_id, sequence_number, new_manifests + existing)
    snapshot = _new_snapshot(metadata, snapshot_id, parent_id, list_path, sequence_number, summary)
    updates = _updates(metadata, snapshot, branch, change, expire_snapshots)
    return PreparedSnapshot(snapshot_id, parent_id, updates, _requirements(metadata, head_id, branch), tuple(written))


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
    return [m for m in manifests_of(table.io, parent) if m.has_added_files() or m.has_existing_files()]


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
    if metadata.format_version >= 2:  # format 1 lists hold no sequence numbers: a reader gets 0, not -1 as written
        # What the file holds, for the next commit: the manifests as the writer prepared them (sequence numbers
        # given to new ones, in these very objects: doing it again changes nothing).
        remember_list(path, [list_writer.prepare_manifest(m) for m in manifests])


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


class AssertSchemaAndSequence(AssertCurrentSchemaId):
    """The table's current schema and its last sequence number are those the snapshot was built on. A commit on
    any branch (or maintenance) in between takes the sequence number this snapshot would take, which the
    catalog would refuse as an error (an older sequence number); this makes it a conflict, built again."""

    next_sequence_number: int  # format 1 has none: always 0

    def validate(self, base_metadata: TableMetadata | None) -> None:  # type: ignore[override]  # as pyiceberg's
        from pyiceberg.exceptions import CommitFailedException

        super().validate(base_metadata)
        assert base_metadata is not None
        if base_metadata.next_sequence_number() != self.next_sequence_number:
            raise CommitFailedException(
                f"Requirement failed: the table's sequence number has changed: expected next "
                f"{self.next_sequence_number}, found {base_metadata.next_sequence_number()}"
            )


class AssertBranchAbsent(AssertRefSnapshotId):
    """The branch does not exist yet (a commit creates it). pyiceberg's own check refuses every branch but main of
    a table without snapshots, although Iceberg allows one (its first commit is the table's first snapshot);
    this one refuses only a branch that exists, created concurrently."""

    def validate(self, base_metadata: TableMetadata | None) -> None:  # type: ignore[override]  # as pyiceberg's
        from pyiceberg.exceptions import CommitFailedException

        if base_metadata is None:
            raise CommitFailedException("Requirement failed: current table metadata is missing")
        if self.ref in base_metadata.refs:
            raise CommitFailedException(f"Requirement failed: branch {self.ref} was created concurrently")


def _requirements(metadata: TableMetadata, head_id: int | None, branch: str) -> tuple[TableRequirement, ...]:
    on_head = (
        AssertBranchAbsent(ref=branch)
        if head_id is None and branch != MAIN_BRANCH
        else AssertRefSnapshotId(snapshot_id=head_id, ref=branch)
    )
    return (
        AssertTableUUID(uuid=metadata.table_uuid),
        on_head,
        # A schema change since the table was read also sends the committer back to read it again.
        AssertSchemaAndSequence(
            current_schema_id=metadata.current_schema_id, next_sequence_number=metadata.next_sequence_number()
        ),
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
