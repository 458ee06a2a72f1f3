"""Swapping a maintenance snapshot in: built on the head, checked against what changed since planning.

Maintenance plans on one snapshot (the base) and writes its files, which may
take a while; a stream may commit meanwhile. Rather than planning again (which
a busy stream would never let finish), the change is rebuilt on the new head
after checking the commits in between, the way Iceberg's ``RewriteFiles``
validates: only what truly conflicts sends the work back.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from pyiceberg.exceptions import CommitFailedException
from pyiceberg.table.refs import MAIN_BRANCH

from icesink.catalog.config import CatalogConfig
from icesink.catalog.database import database_errors
from icesink.catalog.loader import load_table
from icesink.errors import CommitConflictError
from icesink.failpoints import failpoint
from icesink.iceberg.history import HistoryLostError, changes_since, remember_own_changes
from icesink.iceberg.references import delete_quietly
from icesink.iceberg.scan import ManifestCache
from icesink.iceberg.snapshots import RemovedFileMissingError, commit_prepared, head_snapshot_id, prepare_change
from icesink.iceberg.watermarks import watermark_carried
from icesink.properties import WATERMARK_PROPERTY

if TYPE_CHECKING:
    from pyiceberg.catalog.sql import SqlCatalog
    from pyiceberg.table import Table

    from icesink.iceberg.history import ChangesSince
    from icesink.iceberg.scan import ManifestCache
    from icesink.iceberg.snapshots import PreparedSnapshot, SnapshotChange

log = logging.getLogger("icesink.maintenance")


class ConflictError(Exception):
    """Raised by a change's validation when a commit since its base makes the work invalid."""


@dataclass(frozen=True)
class MaintenanceTarget:
    """Where maintenance commits: the catalog, the table and its branch, and what to check right before each swap.

    Maintenance reads and rewrites the branch's head and commits to that branch: a stream into a branch keeps
    ``main`` an ancestor of it, so ``main`` can still be fast-forwarded to the maintained snapshots.
    """

    catalog: SqlCatalog
    config: CatalogConfig
    identifier: str
    before_commit: Callable[[], None] | None = None
    branch: str = MAIN_BRANCH

    def head_id(self, table: Table) -> int | None:
        """The snapshot at the head of the branch (None: the branch has no snapshot)."""
        return head_snapshot_id(table.metadata, self.branch)


def _prepare_on_head(
    target: MaintenanceTarget,
    table: Table,
    base_snapshot_id: int | None,
    build: Callable[[Table, ChangesSince], SnapshotChange],
    cache: ManifestCache,
) -> tuple[PreparedSnapshot, SnapshotChange]:
    """The change built and written on the table's head; a :class:`ConflictError` when it no longer applies."""

    try:
        since = changes_since(table, base_snapshot_id, target.branch)
    except HistoryLostError as e:
        raise ConflictError(str(e)) from e
    change = build(table, since)
    # A reader of the head's summary keeps seeing the watermark.
    watermark = watermark_carried(table.metadata, target.branch, None)
    if watermark is not None:
        change = replace(change, properties={**change.properties, WATERMARK_PROPERTY: watermark})
    try:
        return prepare_change(table, change, target.branch, cache=cache), change
    except RemovedFileMissingError as e:
        raise ConflictError(str(e)) from e


def commit_change(
    target: MaintenanceTarget,
    table: Table,
    base_snapshot_id: int | None,
    build: Callable[[Table, ChangesSince], SnapshotChange],
    written: Sequence[str] = (),
    attempts: int = 10,
) -> Table:
    """Build the change on the head, validate it against the commits since the base, swap it in.

    ``build`` raises :class:`ConflictError` when the commits since the base
    conflict with the change; a lost compare-and-swap rebuilds on the new
    head. ``written`` are the files the change adds: they are deleted when the
    change is refused or fails before its swap, and kept when the swap itself
    failed with an unknown outcome (the table may name them; gc removes them
    if it does not).
    """

    cache = ManifestCache()
    outcome_unknown = False
    try:
        for _ in range(attempts):
            prepared, change = _prepare_on_head(target, table, base_snapshot_id, build, cache)
            try:
                if target.before_commit is not None:
                    target.before_commit()
                failpoint("maintain.before-commit")
            except BaseException:
                delete_quietly(table.io, prepared.written_paths)
                raise
            try:
                with database_errors(target.config):
                    committed = commit_prepared(table, prepared)
            except CommitFailedException:
                log.info("table=%s: head moved during a maintenance commit; checking what changed", target.identifier)
                delete_quietly(table.io, prepared.written_paths)
                table = load_table(target.catalog, target.config, target.identifier)
                continue
            except BaseException:
                outcome_unknown = True
                raise
            remember_own_changes(committed, prepared.snapshot_id, change.added, change.removed)
            failpoint("maintain.after-commit")
            return committed
        raise CommitConflictError(
            f"table {target.identifier}: {attempts} maintenance commits in a row lost to other writers; retry later"
        )
    except BaseException:
        if not outcome_unknown:
            delete_quietly(table.io, written)
        raise
