"""Moving ``main`` to a snapshot of another branch: a fast-forward, compare-and-swapped in the catalog.

pyiceberg 0.12 cannot fast-forward a branch. Iceberg's own ``fast_forward`` moves ``main`` to a branch's head;
write-audit-publish needs ``main`` moved to one audited snapshot of a branch that keeps growing, so this moves
it to any snapshot that descends from ``main``'s head, and only if ``main`` is still where it was read.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pyiceberg.table import Table
from pyiceberg.table.refs import MAIN_BRANCH, SnapshotRefType
from pyiceberg.table.snapshots import Snapshot
from pyiceberg.table.update import (
    AssertRefSnapshotId,
    AssertTableUUID,
    SetSnapshotRefUpdate,
    TableRequirement,
    TableUpdate,
)


@dataclass(frozen=True)
class RefMove:
    """A metadata change that moves a branch and nothing else, with the requirements that make it a swap."""

    requirements: tuple[TableRequirement, ...]
    updates: tuple[TableUpdate, ...]


@dataclass(frozen=True)
class BranchLine:
    """A branch as seen from ``main``: main's head, the branch's head, and the snapshots between them.

    ``ahead`` lists the branch's snapshots after main's head, oldest first; None when main's head is not an
    ancestor of the branch head (main moved on its own, or the branch was rolled back below it): nothing
    of the branch can be fast-forwarded then.
    """

    main_id: int | None
    head_id: int | None
    ahead: tuple[Snapshot, ...] | None

    @property
    def diverged(self) -> bool:
        return self.ahead is None


def branch_line(table: Table, branch: str) -> BranchLine:
    """The branch's snapshots after ``main``'s head (see :class:`BranchLine`)."""
    metadata = table.metadata
    main = metadata.refs.get(MAIN_BRANCH)
    main_id = main.snapshot_id if main is not None else None
    ref = metadata.refs.get(branch)
    if ref is None:
        return BranchLine(main_id, None, ())
    ahead: list[Snapshot] = []
    snapshot = metadata.snapshot_by_id(ref.snapshot_id)
    while snapshot is not None and snapshot.snapshot_id != main_id:
        ahead.append(snapshot)
        parent = snapshot.parent_snapshot_id
        snapshot = metadata.snapshot_by_id(parent) if parent is not None else None
    if snapshot is None and main_id is not None:
        return BranchLine(main_id, ref.snapshot_id, None)  # walked past the start without meeting main's head
    return BranchLine(main_id, ref.snapshot_id, tuple(reversed(ahead)))


def branches_following_main(table: Table) -> list[str]:
    """The branches main can still be fast-forwarded along: those whose head is main's head or descends from it.
    A commit to main that is not on such a branch (maintenance of main, say) would make them diverge."""
    metadata = table.metadata
    if MAIN_BRANCH not in metadata.refs:
        return []
    return sorted(
        name
        for name, ref in metadata.refs.items()
        if name != MAIN_BRANCH
        and ref.snapshot_ref_type == SnapshotRefType.BRANCH
        and not branch_line(table, name).diverged
    )


def descends_from_main(table: Table, snapshot_id: int) -> bool:
    """Whether ``snapshot_id`` is main's head or one of its descendants (so main can be fast-forwarded to it)."""
    metadata = table.metadata
    main = metadata.refs.get(MAIN_BRANCH)
    if main is None:
        return metadata.snapshot_by_id(snapshot_id) is not None
    snapshot = metadata.snapshot_by_id(snapshot_id)
    while snapshot is not None:
        if snapshot.snapshot_id == main.snapshot_id:
            return True
        parent = snapshot.parent_snapshot_id
        snapshot = metadata.snapshot_by_id(parent) if parent is not None else None
    return False


def move_main(table: Table, snapshot_id: int, main_id: int | None) -> RefMove:
    """Main moved to ``snapshot_id``, provided it is still at ``main_id`` (None: main does not exist yet).

    Main's own retention settings are kept. The caller checks that the snapshot descends from ``main_id``
    (:func:`descends_from_main`), unless it means to replace main's line (``--force``).
    """
    main = table.metadata.refs.get(MAIN_BRANCH)
    update = SetSnapshotRefUpdate(
        ref_name=MAIN_BRANCH,
        type=SnapshotRefType.BRANCH,
        snapshot_id=snapshot_id,
        max_ref_age_ms=main.max_ref_age_ms if main is not None else None,
        max_snapshot_age_ms=main.max_snapshot_age_ms if main is not None else None,
        min_snapshots_to_keep=main.min_snapshots_to_keep if main is not None else None,
    )
    requirements: Sequence[TableRequirement] = (
        AssertTableUUID(uuid=table.metadata.table_uuid),
        AssertRefSnapshotId(ref=MAIN_BRANCH, snapshot_id=main_id),
    )
    return RefMove(tuple(requirements), (update,))
