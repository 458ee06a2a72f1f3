"""What happened on a branch since a snapshot: the files added and removed by the commits in between.

Maintenance plans against one snapshot and commits on a later head; before it
swaps its snapshot in, it checks what the commits in between did (Iceberg's
``RewriteFiles`` validation does the same). Only the manifests each snapshot
wrote are read, and only the entries it wrote: every snapshot's own changes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pyiceberg.manifest import ManifestEntryStatus
from pyiceberg.table import Table
from pyiceberg.table.refs import MAIN_BRANCH
from pyiceberg.table.snapshots import Snapshot

from icesink.iceberg.manifest_lists import manifests_of
from icesink.iceberg.read_caches import Kept
from icesink.iceberg.scan import LiveFile

if TYPE_CHECKING:
    from icesink.iceberg.manifests import AddedFile

# What each snapshot added and removed, by (table uuid, snapshot id): it never changes once committed. The
# commits of one maintenance pass each check the commits since the pass's base, the pass's own included, whose
# rewritten manifests list the whole table; kept, each is read once. Counted in files, about 1 KiB each.
SNAPSHOT_CHANGE_FILES = 200_000
_CHANGES: Kept[tuple[tuple[LiveFile, ...], frozenset[str]]] = Kept(
    SNAPSHOT_CHANGE_FILES, lambda changes: 1 + len(changes[0]) + len(changes[1])
)


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
        own_added, own_removed = _own_changes(table, snapshot)
        added += own_added
        removed |= own_removed
        snapshot_id = snapshot.parent_snapshot_id
    return ChangesSince(base_snapshot_id, count, added, frozenset(removed))


def _own_changes(table: Table, snapshot: Snapshot) -> tuple[tuple[LiveFile, ...], frozenset[str]]:
    """The files ``snapshot`` added (with their data sequence numbers) and the locations it removed."""
    key = (table.metadata.table_uuid, snapshot.snapshot_id)
    kept = _CHANGES.get(key)
    if kept is not None:
        return kept
    added: list[LiveFile] = []
    removed: set[str] = set()
    for manifest in manifests_of(table.io, snapshot):
        if manifest.added_snapshot_id != snapshot.snapshot_id:
            continue
        for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=False):
            if entry.snapshot_id != snapshot.snapshot_id:
                continue
            if entry.status == ManifestEntryStatus.ADDED:
                added.append(LiveFile(entry.data_file, entry.sequence_number or 0))
            elif entry.status == ManifestEntryStatus.DELETED:
                removed.add(str(entry.data_file.file_path))
    changes = (tuple(added), frozenset(removed))
    _CHANGES.put(key, changes)
    return changes


def remember_own_changes(table: Table, snapshot_id: int, added: Sequence[AddedFile], removed: frozenset[str]) -> None:
    """What the snapshot ``snapshot_id`` of ``table`` (as committed) was written to add and remove, kept so that
    checking the commits since a base does not read back a snapshot this process wrote."""
    snapshot = table.metadata.snapshot_by_id(snapshot_id)
    if snapshot is None or table.metadata.format_version < 2:  # format 1 keeps no data sequence numbers
        return
    own = snapshot.sequence_number or 0
    files = tuple(LiveFile(a.file, own if a.sequence_number is None else a.sequence_number) for a in added)
    _CHANGES.put((table.metadata.table_uuid, snapshot_id), (files, removed))
