"""What happened on a branch since a snapshot: the files added and removed by the commits in between.

Maintenance plans against one snapshot and commits on a later head; before it
swaps its snapshot in, it checks what the commits in between did (Iceberg's
``RewriteFiles`` validation does the same). Only the manifests each snapshot
wrote are read, and only the entries it wrote: every snapshot's own changes.
"""

from __future__ import annotations

from dataclasses import dataclass

from pyiceberg.manifest import ManifestEntryStatus
from pyiceberg.table import Table
from pyiceberg.table.refs import MAIN_BRANCH

from icesink.iceberg.manifest_lists import manifests_of
from icesink.iceberg.scan import LiveFile


@dataclass(frozen=True)
class ChangesSince:
    """Files added (with their data sequence numbers) and locations removed since the base snapshot."""

    base_snapshot_id: int | None
    snapshots: int
    added: list[LiveFile]
    removed: frozenset[str]


class HistoryLostError(Exception):
    """Raised when the base snapshot is no longer an ancestor of the head (expired, or rolled back)."""


def changes_since(table: Table, base_snapshot_id: int | None, branch: str = MAIN_BRANCH) -> ChangesSince:
    """The changes of every snapshot after ``base_snapshot_id`` up to the head of ``branch``."""
    metadata = table.metadata
    ref = metadata.refs.get(branch)
    snapshot_id = ref.snapshot_id if ref else None
    added: list[LiveFile] = []
    removed: set[str] = set()
    count = 0
    while snapshot_id != base_snapshot_id:
        if snapshot_id is None:
            raise HistoryLostError(f"snapshot {base_snapshot_id} is not an ancestor of the head of {branch}")
        snapshot = metadata.snapshot_by_id(snapshot_id)
        if snapshot is None:
            raise HistoryLostError(f"snapshot {snapshot_id} between the head and {base_snapshot_id} has expired")
        count += 1
        for manifest in manifests_of(table.io, snapshot):
            if manifest.added_snapshot_id != snapshot_id:
                continue
            for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=False):
                if entry.snapshot_id != snapshot_id:
                    continue
                if entry.status == ManifestEntryStatus.ADDED:
                    added.append(LiveFile(entry.data_file, entry.sequence_number or 0))
                elif entry.status == ManifestEntryStatus.DELETED:
                    removed.add(str(entry.data_file.file_path))
        snapshot_id = snapshot.parent_snapshot_id
    return ChangesSince(base_snapshot_id, count, added, frozenset(removed))
