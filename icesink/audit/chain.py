"""A branch's snapshots after ``main``, each with its audit, and which of them ``main`` may move to.

A snapshot is publishable when its audit passed on the rows it added over a base that is publishable itself:
its parent, when the parent is ``main``'s head or publishable, else ``main``'s head (after a failure the next
snapshots are audited on everything they add over ``main``, so a fix is audited together with what it fixes).
A snapshot of icesink's maintenance on the branch (compaction, conversion of deletes) changes no row: it is not
audited, and is publishable when its parent is.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from pyiceberg.table.snapshots import Operation

from icesink.iceberg.publish import BranchLine, branch_line
from icesink.properties import (
    CHECKPOINT_RANGE_PROPERTY,
    JOB_ID_PROPERTY,
    MAINTENANCE_COMPACT,
    MAINTENANCE_CONVERT,
    MAINTENANCE_KINDS,
    MAINTENANCE_MERGE_DELETES,
    MAINTENANCE_PROPERTY,
    MAX_CHECKPOINT_PROPERTY,
    MERGE_DROPPED_PROPERTY,
    PARTITIONS_DONE_PROPERTY,
)

if TYPE_CHECKING:
    from pyiceberg.table import Table
    from pyiceberg.table.snapshots import Snapshot

    from icesink.catalog.audit_record import AuditEntry, AuditRecord


@dataclass(frozen=True)
class Link:
    """One branch snapshot after main's head."""

    snapshot: Snapshot
    job_id: str | None  # the icesink job whose checkpoints it holds (None: another tool's snapshot)
    checkpoint_id: int | None
    first_checkpoint_id: int | None
    entry: AuditEntry | None  # its recorded audit (None: not audited yet)
    publishable: bool
    makes_partitions_done: bool
    maintenance: bool = False  # icesink's maintenance: rows unchanged, publishable when its parent is

    @property
    def snapshot_id(self) -> int:
        return self.snapshot.snapshot_id


@dataclass(frozen=True)
class Chain:
    """A table's branch as publishing sees it."""

    identifier: str
    branch: str
    table: Table
    line: BranchLine
    links: tuple[Link, ...]

    def base_for(self, index: int) -> int | None:
        """What the snapshot at ``index`` is audited against: its parent if that is main or publishable, else
        main's head."""
        if index == 0 or self.links[index - 1].publishable:
            parent = self.links[index - 1].snapshot_id if index > 0 else self.line.main_id
            return parent
        return self.line.main_id

    def newest_publishable(self, made_partitions_done: bool = False) -> Link | None:
        """The newest snapshot main may move to (with ``made_partitions_done``: of those whose commit made a time
        partition done)."""
        found = (link for link in reversed(self.links) if link.publishable)
        return next((link for link in found if link.makes_partitions_done or not made_partitions_done), None)


def changes_no_row(snapshot: Snapshot) -> bool:
    """Whether the snapshot is icesink's maintenance: its summary says so, and what it did cannot add a row (a
    ``replace`` that adds no more rows than it removes, or a ``delete``). The summary alone would let any writer
    skip the audit."""
    summary = snapshot.summary
    if summary is None or summary.get(MAINTENANCE_PROPERTY) not in MAINTENANCE_KINDS:
        return False
    if summary.operation == Operation.DELETE:
        return summary.get(MAINTENANCE_PROPERTY) == MAINTENANCE_CONVERT and not int(summary.get("added-records") or 0)
    if summary.operation != Operation.REPLACE:
        return False
    if summary.get(MAINTENANCE_PROPERTY) == MAINTENANCE_MERGE_DELETES:
        # Delete files only, every position accounted for: written again, or dropped as deleting nothing.
        touched = (int(summary.get(k) or 0) for k in ("added-data-files", "deleted-data-files", "added-records"))
        added = int(summary.get("added-position-deletes") or 0) + int(summary.get(MERGE_DROPPED_PROPERTY) or 0)
        return added == int(summary.get("removed-position-deletes") or 0) and not any(touched)
    if summary.get(MAINTENANCE_PROPERTY) != MAINTENANCE_COMPACT:
        return False
    return int(summary.get("added-records") or 0) <= int(summary.get("deleted-records") or 0)


def _int(text: str | None) -> int | None:
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


def read_chain(table: Table, identifier: str, branch: str, record: AuditRecord) -> Chain:
    """The branch's snapshots after main with their audits as recorded; ``line.diverged`` when main's head is not
    an ancestor of the branch's."""
    line = branch_line(table, branch)
    if line.ahead is None:
        return Chain(identifier, branch, table, line, ())
    ahead_ids = {s.snapshot_id for s in line.ahead}
    entries = {e.snapshot_id: e for e in record.of_snapshots(identifier, list(ahead_ids), branch)}
    publishable: set[int] = set()
    links = []
    for snapshot in line.ahead:
        summary = snapshot.summary
        entry = entries.get(snapshot.snapshot_id)
        maintenance = changes_no_row(snapshot)
        if maintenance and entry is None:
            parent = snapshot.parent_snapshot_id
            ok = parent == line.main_id or parent in publishable
        else:
            base_ok = entry is not None and (
                entry.base_snapshot_id not in ahead_ids or entry.base_snapshot_id in publishable
            )
            ok = entry is not None and entry.passed and base_ok
        if ok:
            publishable.add(snapshot.snapshot_id)
        job = summary.get(JOB_ID_PROPERTY) if summary is not None else None
        checkpoints = summary.get(CHECKPOINT_RANGE_PROPERTY) if summary is not None else None
        first = _int(checkpoints.split("-")[0]) if checkpoints else None
        links.append(
            Link(
                snapshot=snapshot,
                job_id=job,
                checkpoint_id=_int(summary.get(MAX_CHECKPOINT_PROPERTY)) if summary is not None and job else None,
                first_checkpoint_id=first if job else None,
                entry=entry,
                publishable=ok,
                makes_partitions_done=bool(summary is not None and summary.get(PARTITIONS_DONE_PROPERTY)),
                maintenance=maintenance and entry is None,
            )
        )
    return Chain(identifier, branch, table, line, tuple(links))
