"""Read-only views of tables and snapshots for the CLI."""

from __future__ import annotations

import datetime
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from icesink.iceberg.manifest_lists import manifests_of
from icesink.iceberg.pending_tables import pending_tables
from icesink.properties import COMMIT_ID_PROPERTY, JOB_ID_PROPERTY, MAX_CHECKPOINT_PROPERTY

if TYPE_CHECKING:
    from pyiceberg.catalog.sql import SqlCatalog
    from pyiceberg.table import Table
    from pyiceberg.table.snapshots import Snapshot


def table_names(catalog: SqlCatalog, pending: bool = False) -> list[str]:
    """Every table of the catalog, in namespaces at any depth; with ``pending``, also the tables streams
    created that wait for their first commit."""

    names: list[str] = []
    todo = list(catalog.list_namespaces())
    while todo:
        namespace = todo.pop()
        names += [".".join(identifier) for identifier in catalog.list_tables(namespace)]
        todo += catalog.list_namespaces(namespace)
    if pending:
        names += [name for name, _, _ in pending_tables(catalog.engine, catalog.name) if name not in names]
    return sorted(names)


@dataclass(frozen=True)
class SnapshotInfo:
    """One row of ``icesink snapshots list``."""

    snapshot_id: int
    parent_id: int | None
    committed_at: str
    operation: str
    job_id: str | None
    checkpoint_id: int | None
    added_records: int
    deleted_records: int
    added_files: int
    deleted_files: int
    summary: dict[str, str] = field(default_factory=dict)
    commit_id: str | None = None  # shared with other tables' snapshots of one atomic commit

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _int(summary: dict[str, str], key: str) -> int:
    return int(summary.get(key, 0) or 0)


def snapshot_info(snapshot: Snapshot) -> SnapshotInfo:
    summary: dict[str, str] = {}
    operation = ""
    if snapshot.summary is not None:
        operation = snapshot.summary.operation.value
        summary = {"operation": operation, **snapshot.summary.additional_properties}
    committed = datetime.datetime.fromtimestamp(snapshot.timestamp_ms / 1000, datetime.UTC)
    checkpoint = summary.get(MAX_CHECKPOINT_PROPERTY)
    return SnapshotInfo(
        snapshot_id=snapshot.snapshot_id,
        parent_id=snapshot.parent_snapshot_id,
        committed_at=committed.isoformat(timespec="milliseconds"),
        operation=operation,
        job_id=summary.get(JOB_ID_PROPERTY),
        checkpoint_id=int(checkpoint) if checkpoint is not None else None,
        added_records=_int(summary, "added-records"),
        deleted_records=_int(summary, "deleted-records"),
        added_files=_int(summary, "added-data-files") + _int(summary, "added-delete-files"),
        deleted_files=_int(summary, "deleted-data-files") + _int(summary, "removed-delete-files"),
        summary=summary,
        commit_id=summary.get(COMMIT_ID_PROPERTY),
    )


def list_snapshots(table: Table) -> list[SnapshotInfo]:
    """Snapshots oldest first."""
    return [
        snapshot_info(s)
        for s in sorted(table.metadata.snapshots, key=lambda s: (s.timestamp_ms, s.sequence_number or 0))
    ]


def show_snapshot(table: Table, snapshot_id: int) -> dict[str, Any] | None:
    """Summary and manifests of one snapshot, or None if the table has no such snapshot."""
    snapshot = table.metadata.snapshot_by_id(snapshot_id)
    if snapshot is None:
        return None
    info = snapshot_info(snapshot).to_json()
    info["sequence_number"] = snapshot.sequence_number
    info["manifest_list"] = snapshot.manifest_list
    info["manifests"] = [
        {
            "path": m.manifest_path,
            "content": m.content.name.lower(),
            "added_snapshot_id": m.added_snapshot_id,
            "sequence_number": m.sequence_number,
            "added_files": m.added_files_count,
            "existing_files": m.existing_files_count,
            "deleted_files": m.deleted_files_count,
            "added_rows": m.added_rows_count,
        }
        for m in manifests_of(table.io, snapshot)
    ]
    return info
