"""Snapshot expiry by Iceberg's retention rules, applied in the same metadata commit as a new snapshot."""

from __future__ import annotations

from pyiceberg.table import TableProperties
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.refs import MAIN_BRANCH, SnapshotRefType
from pyiceberg.table.snapshots import Snapshot


def expired_snapshot_ids(metadata: TableMetadata, new_head: Snapshot, branch: str = MAIN_BRANCH) -> list[int]:
    """Snapshots past the table's retention once ``new_head`` is the head of ``branch``.

    Iceberg's rules: every ref keeps its snapshot; a branch also keeps its
    ``min-snapshots-to-keep`` newest ancestors and every ancestor younger than
    ``max-snapshot-age-ms`` (the ref's own settings first, then the table's
    ``history.expire.*`` properties). Snapshots no ref reaches go once they
    are older than the table's maximum age.

    And one of icesink's: every snapshot between ``main``'s head and the head of another branch is kept, however
    old, so that ``main`` can still be moved forward along the branch (write-audit-publish audits and publishes
    those snapshots; a cut in that line would leave ``main`` unable to follow). Where ``main`` does not exist yet,
    the branch's whole line is kept.
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
    retained |= _unpublished(metadata, new_head, branch)
    return [
        s.snapshot_id
        for s in metadata.snapshots
        if s.snapshot_id not in retained and s.timestamp_ms < now_ms - table_max_age
    ]


def _unpublished(metadata: TableMetadata, new_head: Snapshot, branch: str) -> set[int]:
    """The snapshots of every branch but main that main's head does not reach yet (up to main's head)."""
    main = metadata.refs.get(MAIN_BRANCH)
    main_id = new_head.snapshot_id if branch == MAIN_BRANCH else main.snapshot_id if main is not None else None
    kept: set[int] = set()
    for name, ref in metadata.refs.items():
        if name == MAIN_BRANCH or ref.snapshot_ref_type != SnapshotRefType.BRANCH:
            continue
        line: list[int] = []
        current: int | None = new_head.snapshot_id if name == branch else ref.snapshot_id
        while current is not None and current != main_id:
            line.append(current)
            current = new_head.parent_snapshot_id if current == new_head.snapshot_id else _parent_of(metadata, current)
        if current == main_id:  # main is behind this branch (or does not exist): its line to main stays
            kept.update(line)
    return kept


def _parent_of(metadata: TableMetadata, snapshot_id: int) -> int | None:
    snapshot = metadata.snapshot_by_id(snapshot_id)
    return snapshot.parent_snapshot_id if snapshot else None
