"""Committing a job's checkpoints into several tables at once: every table moves, or none does.

A stream writing several tables stages each checkpoint as one ledger row per
table, in one transaction, marked ``atomic``. This committer takes the job's
pending checkpoints in order and commits the longest start that every table
can commit, as one snapshot per table, swapped into the catalog in one database
transaction together with the ledger's update (:mod:`icesink.iceberg.catalog_commit`).
A reader of the catalog's pointers thus sees every table at the same
checkpoint of the job. A table whose checkpoint cannot be committed holds the
whole group; the error names it.

Each table's snapshot carries the job's marker as a single-table commit does,
and ``icesink.commit-id``, shared by the snapshots of one transaction.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from pyiceberg.exceptions import CommitFailedException

from icesink.catalog.checkpoints import CheckpointRow, StagedFiles
from icesink.catalog.config import CatalogConfig
from icesink.catalog.database import database_errors
from icesink.catalog.ledger import Ledger
from icesink.catalog.loader import load_table
from icesink.committer.build import (
    CheckpointFailed,
    CommitOutcome,
    PreparedCommit,
    SnapshotBuilder,
    commit_failure,
    refuse_other_streams,
)
from icesink.committer.cleanup import clean_staged, clean_staged_of
from icesink.committer.commit_policy import plan_snapshots
from icesink.errors import CommitConflictError, ConfigError, IcesinkError
from icesink.iceberg.catalog_commit import TableSwap, commit_tables
from icesink.iceberg.marker import CommittedMarker, KnownMarker, committed_marker
from icesink.properties import COMMIT_ID_PROPERTY
from icesink.side_by_side import SideBySide, side_by_side

if TYPE_CHECKING:
    from pyiceberg.catalog.sql import SqlCatalog
    from pyiceberg.table import Table

log = logging.getLogger("icesink.committer")


class GroupCommitter:
    """Commits the pending atomic checkpoints of one job across its tables.

    Shares the table committer's cache of tables and markers (``tables``, ``markers``), so that either
    one's next commit builds on what the other committed.
    """

    def __init__(
        self,
        catalog: SqlCatalog,
        config: CatalogConfig,
        ledger: Ledger,
        builder: SnapshotBuilder,
        tables: dict[str, Table],
        markers: dict[tuple[str, str, str], KnownMarker],
        max_conflicts: int,
        before_commit: Callable[[], None] | None,
        scope: Sequence[str] = (),
    ) -> None:
        self._catalog = catalog
        self._config = config
        self._ledger = ledger
        self._builder = builder
        self._tables = tables
        self._markers = markers
        self._max_conflicts = max_conflicts
        self._before_commit = before_commit
        self._scope = frozenset(scope)  # the only tables this committer may commit (empty: all)

    def commit_job(self, job_id: str) -> list[CommitOutcome]:
        """Commit every pending atomic checkpoint of the job, in order; one transaction per commit."""
        outcomes: list[CommitOutcome] = []
        # Manifests left by a committer that died between its commit and its cleanup.
        for identifier, leftovers in itertools.groupby(self._ledger.uncleaned(job_id=job_id), key=_table_of):
            clean_staged(self._ledger, self._table(identifier), list(leftovers))
        conflicts = 0
        known: dict[int, StagedFiles | None] = {}  # each row's files, decoded once however many commits a backlog takes
        while rows := self._pending(job_id, known):
            by_table = {t: list(r) for t, r in itertools.groupby(sorted(rows, key=_by_table), key=_table_of)}
            outside = sorted(set(by_table) - self._scope) if self._scope else []
            if outside:
                raise ConfigError(
                    f"job {job_id} commits tables {', '.join(sorted(by_table))} together, but this committer only "
                    f"commits {', '.join(sorted(self._scope))}: nothing was committed. Run a committer whose --table "
                    f"list also has {', '.join(outside)} (or no --table)"
                )
            tables = {t: self._table(t) for t in by_table}
            if self._skip_committed(job_id, tables, by_table, outcomes):
                continue
            started = time.monotonic()
            try:
                cut = self._prepare_cut(job_id, tables, by_table)
                swapped = cut is not None and self._swap(job_id, *cut, outcomes, started)
            except BaseException:
                for identifier in by_table:  # whatever went wrong, the next attempt reads the tables again
                    self._tables.pop(identifier, None)
                raise
            if swapped:
                conflicts = 0
            else:
                conflicts += 1
                if conflicts > self._max_conflicts:
                    raise CommitConflictError(
                        f"tables {', '.join(sorted(by_table))}: {conflicts} commit conflicts in a row while "
                        f"committing job {job_id} across them; another writer commits too often, retry later"
                    )
                for identifier in by_table:
                    self._tables.pop(identifier, None)
        return outcomes

    def _pending(self, job_id: str, known: dict[int, StagedFiles | None]) -> list[CheckpointRow]:
        """The job's pending rows with their files: read with them the first time; after a commit, only the rows
        not read before (staged meanwhile) are, the others keep what was read."""
        rows = self._ledger.pending_atomic(job_id, with_files=not known)
        if known:
            fresh = {
                r.id: r for r in self._ledger.with_files([r for r in rows if r.id not in known], unreadable_too=False)
            }
            rows = [fresh[r.id] if r.id in fresh else replace(r, files=known[r.id]) for r in rows]
        known.update((r.id, r.files) for r in rows)
        return rows

    def _table(self, identifier: str) -> Table:
        return self._tables.get(identifier) or load_table(self._catalog, self._config, identifier)

    def _skip_committed(
        self,
        job_id: str,
        tables: dict[str, Table],
        by_table: dict[str, list[CheckpointRow]],
        outcomes: list[CommitOutcome],
    ) -> bool:
        """Mark checkpoints a table's marker already holds (another committer's work) as committed."""
        skipped = False
        for identifier, table_rows in by_table.items():
            table = tables[identifier]
            branch = table_rows[0].branch
            known = self._markers.get((str(table.metadata.table_uuid), job_id, branch))
            marker = committed_marker(table.metadata, job_id, branch, known=known)
            done = [
                r
                for r in table_rows
                if marker is not None and r.checkpoint_id <= marker.checkpoint_id and r.branch == branch
            ]
            if not done or marker is None:
                continue
            refuse_other_streams(self._ledger, identifier, job_id, marker, done)
            self._ledger.mark_committed([r.id for r in done], None)
            outcomes.append(CommitOutcome.of(identifier, job_id, done, None, 0.0, already=True))
            log.info("table=%s job=%s checkpoints=%s already committed; skipped", identifier, job_id, done)
            clean_staged(self._ledger, table, done)
            skipped = True
        return skipped

    def _prepare_cut(
        self, job_id: str, tables: dict[str, Table], by_table: dict[str, list[CheckpointRow]]
    ) -> tuple[list[PreparedCommit], str] | None:
        """Each table's snapshot of the job's checkpoints up to one cut that every table can commit, and
        the commit id they share.

        The cut starts at the last pending checkpoint, or the end of a table's first snapshot when its
        checkpoints take several (a checkpoint with deletes is a snapshot of its own), and comes down to
        before a checkpoint some table cannot commit: what comes before it still commits. When that is
        the job's first pending checkpoint, its error is raised. None when a table must be read again
        (its schema changed since staging).
        """
        lowest = min(r.checkpoint_id for table_rows in by_table.values() for r in table_rows)
        # A table whose pending checkpoints take several snapshots (deletes) limits the cut to its first one.
        limits = [plan[0][-1].checkpoint_id for plan in map(plan_snapshots, by_table.values()) if len(plan) > 1]
        cut = min(limits, default=max(r.checkpoint_id for table_rows in by_table.values() for r in table_rows))
        commit_id = uuid.uuid4().hex
        properties = {COMMIT_ID_PROPERTY: commit_id}
        discarded = self._ledger.unrecorded_discards_of(sorted(by_table), job_id)  # one query, not one a table
        while True:
            prepared: list[PreparedCommit] = []
            groups = [(i, [r for r in rows if r.checkpoint_id <= cut]) for i, rows in sorted(by_table.items())]
            groups = [(identifier, group) for identifier, group in groups if group]
            each = SideBySide(
                lambda one: self._builder.try_prepare(
                    tables[one[0]], one[0], job_id, one[1], properties, discarded.get(one[0], [])
                ),
                groups,
                side_by_side(tables.values(), self._catalog.engine),
            )
            try:
                try:
                    for (_, group), one in zip(groups, each, strict=True):
                        if one is None:
                            self._abandon(prepared)
                            return None
                        prepared.append(one)
                        if len(one.rows) < len(group):  # a later checkpoint of this table cannot commit yet
                            break
                finally:  # the tables after where the loop stopped, prepared side by side: no snapshot of theirs
                    self._abandon_quietly([one for one in each.unused() if one is not None])
            except CheckpointFailed as failed:
                self._abandon(prepared)
                self._record_failure(failed, job_id, by_table)
                if failed.rows[0].checkpoint_id <= lowest:
                    raise failed.error from failed.error.__cause__
                cut = failed.rows[0].checkpoint_id - 1
                continue
            except BaseException:
                self._abandon(prepared)
                raise
            if len(prepared[-1].rows) == len([r for r in by_table[prepared[-1].identifier] if r.checkpoint_id <= cut]):
                return prepared, commit_id
            self._abandon(prepared)
            cut = prepared[-1].rows[-1].checkpoint_id

    def _record_failure(self, failed: CheckpointFailed, job_id: str, by_table: dict[str, list[CheckpointRow]]) -> None:
        """The failing table's checkpoints show the error; the tables it holds back are named in the log."""
        first = failed.rows[0]
        held = sorted(t for t in by_table if t != first.identifier)
        if held:
            log.warning(
                "job=%s: checkpoint %d of table %s cannot be committed, which holds back %s (committed "
                "atomically with it): %s",
                job_id,
                first.checkpoint_id,
                first.identifier,
                ", ".join(held),
                failed.error,
            )
        if not failed.error.transient:
            with contextlib.suppress(IcesinkError):  # best effort: the error itself is what matters
                self._ledger.mark_failed([r.id for r in failed.rows], str(failed.error))

    def _swap(
        self, job_id: str, prepared: list[PreparedCommit], commit_id: str, outcomes: list[CommitOutcome], started: float
    ) -> bool:
        """One transaction: every table's pointer and the ledger rows; False if a table's head moved."""

        swapping = [p for p in prepared if p.snapshot is not None]
        snapshots = {r.id: (p.snapshot.snapshot_id if p.snapshot else None) for p in prepared for r in p.rows}
        try:
            if self._before_commit is not None:
                self._before_commit()
        except Exception as e:
            self._abandon(prepared)
            first = prepared[0]
            raise commit_failure(e, first.identifier, job_id, first.rows).error from e
        try:
            with database_errors(self._config):
                committed = commit_tables(
                    self._catalog,
                    [TableSwap(p.table, p.snapshot) for p in swapping if p.snapshot is not None],
                    within=lambda connection: self._ledger.mark_committed_in(connection, snapshots, commit_id),
                )
        except CommitFailedException as e:
            self._abandon(prepared)
            log.info("job=%s: a table's head moved during the group commit (%s); re-reading the markers", job_id, e)
            return False
        seconds = time.monotonic() - started
        for one in prepared:
            if one.snapshot is None:  # its checkpoints are committed in the ledger now: its delete files can go
                self._builder.committed(one, one.table)
        for one, table in zip(swapping, committed, strict=True):
            self._builder.committed(one, table)
            self._tables[one.identifier] = table
            last = one.rows[-1]
            snapshot_id = one.snapshot.snapshot_id if one.snapshot else None
            if snapshot_id is not None:
                self._markers[(str(table.metadata.table_uuid), job_id, last.branch)] = KnownMarker(
                    snapshot_id, CommittedMarker(last.checkpoint_id, last.stream_id)
                )
        for one in prepared:
            snapshot_id = one.snapshot.snapshot_id if one.snapshot else None
            outcomes.append(CommitOutcome.of(one.identifier, job_id, one.rows, snapshot_id, seconds))
        clean_staged_of(self._ledger, [(self._tables.get(p.identifier, p.table), p.rows) for p in prepared])
        log.info(
            "job=%s commit=%s up to checkpoint %d: tables=%s seconds=%.3f",
            job_id,
            commit_id,
            max(p.rows[-1].checkpoint_id for p in prepared),
            ",".join(p.identifier for p in prepared),
            seconds,
        )
        return True

    def _abandon(self, prepared: Sequence[PreparedCommit]) -> None:
        for one in prepared:
            self._builder.abandon(one)

    def _abandon_quietly(self, prepared: Sequence[PreparedCommit]) -> None:
        """Best effort, beside an outcome that matters more (a table's error, a lower cut): what cannot be deleted
        is said and left to gc."""
        for one in prepared:
            try:
                self._builder.abandon(one)
            except Exception as e:
                log.warning(
                    "table=%s: files written for a commit that will not happen are left to gc: %s", one.identifier, e
                )


def _table_of(row: CheckpointRow) -> str:
    return row.identifier


def _by_table(row: CheckpointRow) -> tuple[str, int]:
    return row.identifier, row.checkpoint_id
