"""Committing staged checkpoints of one table, exactly once.

For every job with pending checkpoints: read the job's marker from the
table, mark what is already in the table as committed, build the remaining
snapshots on the current head and compare-and-swap them into the catalog.
When the swap loses to another writer, the table is re-read and the marker
checked again before anything is rebuilt: a checkpoint the other writer (or
an earlier incarnation of this committer) already committed is never applied
twice.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from pyiceberg.exceptions import CommitFailedException

from icesink.catalog.checkpoints import CheckpointRow
from icesink.catalog.config import CatalogConfig
from icesink.catalog.database import database_errors
from icesink.catalog.ledger import Ledger
from icesink.catalog.loader import load_table, open_catalog
from icesink.committer.build import (
    CheckpointFailed,
    CommitOutcome,
    PreparedCommit,
    SnapshotBuilder,
    checkpoint_range,
    commit_failure,
    refuse_other_streams,
)
from icesink.committer.cleanup import clean_staged
from icesink.committer.commit_policy import plan_snapshots
from icesink.committer.group import GroupCommitter
from icesink.errors import CommitConflictError, IcesinkError
from icesink.failpoints import failpoint
from icesink.iceberg.marker import CommittedMarker, KnownMarker, committed_marker
from icesink.iceberg.snapshots import commit_prepared

if TYPE_CHECKING:
    from pyiceberg.catalog.sql import SqlCatalog
    from pyiceberg.table import Table

log = logging.getLogger("icesink.committer")


class TableCommitter:
    """Commits the ledger's pending checkpoints into their tables."""

    def __init__(
        self,
        catalog: SqlCatalog,
        config: CatalogConfig,
        ledger: Ledger,
        max_conflicts: int = 20,
        before_commit: Callable[[], None] | None = None,
        expire_snapshots: bool = False,
        scope: Sequence[str] = (),
        on_partition_done: Callable[[dict[str, object]], None] | None = None,
    ) -> None:
        """``before_commit`` runs right before every catalog commit; the daemon checks its lease there.
        ``scope`` limits the tables a job committed atomically across tables may touch (the daemon's --table).
        ``on_partition_done`` is called after a commit with each partition it (or an earlier commit whose actions
        failed) made done (see :mod:`icesink.committer.done_actions`).

        With ``expire_snapshots`` every commit also drops the snapshots past the
        table's ``history.expire.*`` retention, in the same metadata commit.
        """
        self._catalog = catalog
        self._config = config
        self._ledger = ledger
        self._max_conflicts = max_conflicts
        self._before_commit = before_commit
        self._builder = SnapshotBuilder(catalog, config, ledger, expire_snapshots, on_partition_done)
        # (table uuid, job, branch) -> marker as of this committer's last commit: later walks stop there.
        self._markers: dict[tuple[str, str, str], KnownMarker] = {}
        self._tables: dict[str, Table] = {}
        self._group = GroupCommitter(
            catalog, config, ledger, self._builder, self._tables, self._markers, max_conflicts, before_commit, scope
        )

    def table(self, identifier: str) -> Table:
        """The table as this committer's last commit left it (read from the catalog if it has none)."""
        return self._tables.get(identifier) or load_table(self._catalog, self._config, identifier)

    @classmethod
    def of(cls, config: CatalogConfig, **options: Any) -> TableCommitter:
        """A committer of ``config``'s catalog, with a catalog handle and a ledger of its own."""

        return cls(open_catalog(config, pending_tables=True), config, Ledger(config), **options)

    def take_actions_waiting(self) -> set[str]:
        """The tables whose done actions failed after this committer's commits since the last call."""
        waiting, self._builder.actions_waiting = self._builder.actions_waiting, set()
        return waiting

    def forget(self, identifier: str) -> None:
        """Read the table from the catalog next time (someone else, maintenance say, committed)."""
        self._tables.pop(identifier, None)

    def commit_pending(
        self, identifier: str, job_id: str | None = None, outcomes: list[CommitOutcome] | None = None
    ) -> list[CommitOutcome]:
        """Commit every pending checkpoint of the table (or of one job of it), in checkpoint order.

        A job that commits atomically across tables commits all its tables here, together. ``outcomes``
        receives each commit's outcome as it is made, so that a caller knows what was committed before an
        error stopped the rest.
        """
        outcomes = [] if outcomes is None else outcomes
        rows = self._ledger.pending(identifier, job_id, with_files=True)
        if not rows:
            return outcomes
        atomic_jobs = sorted({r.job_id for r in rows if r.atomic})
        for job in atomic_jobs:
            self.commit_atomic(job, outcomes)
        if atomic_jobs:  # those jobs' older checkpoints of one table were committed on the way
            rows = self._ledger.pending(identifier, job_id, with_files=True, atomic=False)
        self._commit_table(identifier, rows, outcomes)
        return outcomes

    def commit_atomic(self, job_id: str, outcomes: list[CommitOutcome] | None = None) -> list[CommitOutcome]:
        """Commit every pending checkpoint of a job that commits atomically across its tables.

        Checkpoints the job staged table by table before (a stream that wrote one table, restarted to write
        several with the same job) commit first, table by table: the group's marker would pass over them.
        """
        outcomes = [] if outcomes is None else outcomes
        single = self._ledger.pending(job_id=job_id, with_files=True, atomic=False)
        for identifier in sorted({r.identifier for r in single}):
            self._commit_table(identifier, [r for r in single if r.identifier == identifier], outcomes)
        outcomes += self._group.commit_job(job_id)
        return outcomes

    def _commit_table(self, identifier: str, rows: list[CheckpointRow], outcomes: list[CommitOutcome]) -> None:
        """Commit one table's pending checkpoints that are not part of a group, job by job."""
        if not rows:
            return
        # The table as this committer's last commit left it, if it has one. Safe even when someone
        # committed since: the snapshot is built on that head, the catalog refuses it, and the
        # table and its marker are read again before anything is rebuilt.
        table = self._tables.pop(identifier, None) or load_table(self._catalog, self._config, identifier)
        # Manifests left by a committer that died between its ledger update and its cleanup.
        self._cleanup(table, self._ledger.uncleaned(identifier))
        # A job commits to one branch; one restarted onto another commits what it staged before to the first.
        for (job, _), job_rows in itertools.groupby(rows, key=lambda r: (r.job_id, r.branch)):
            table = self._commit_job(table, identifier, job, list(job_rows), outcomes)
        self._tables[identifier] = table  # only after every job went through without an error

    def _commit_job(
        self, table: Table, identifier: str, job_id: str, rows: list[CheckpointRow], outcomes: list[CommitOutcome]
    ) -> Table:
        conflicts = 0
        branch = rows[0].branch
        while rows:
            cache_key = (str(table.metadata.table_uuid), job_id, branch)
            marker = committed_marker(table.metadata, job_id, branch, known=self._markers.get(cache_key))
            done = [r for r in rows if marker is not None and r.checkpoint_id <= marker.checkpoint_id]
            if marker is not None:
                refuse_other_streams(self._ledger, identifier, job_id, marker, done)
            if done:
                self._already_committed(table, identifier, job_id, done, marker, outcomes)
                rows = [r for r in rows if r not in done]
                continue
            started = time.monotonic()
            try:
                committed, group, unfinished = self._try_commit(table, identifier, job_id, plan_snapshots(rows)[0])
            except CheckpointFailed as failed:
                if not failed.error.transient:  # shown as failed until a commit succeeds; they stay staged
                    with contextlib.suppress(IcesinkError):  # best effort: the error itself is what matters
                        self._ledger.mark_failed([r.id for r in failed.rows], str(failed.error))
                raise failed.error from failed.error.__cause__
            if committed is None:
                conflicts += 1
                if conflicts > self._max_conflicts:
                    raise CommitConflictError(
                        f"table {identifier}: {conflicts} commit conflicts in a row while committing checkpoints "
                        f"{checkpoint_range(group or rows)} of job {job_id}; another writer commits too often, "
                        "retry later",
                        table=identifier,
                        checkpoint_id=(group or rows)[0].checkpoint_id,
                        job_id=job_id,
                    )
                table = load_table(self._catalog, self._config, identifier)
                continue
            conflicts = 0
            snapshot = committed.metadata.snapshot_by_name(branch) if committed is not table else None
            table = committed
            snapshot_id = snapshot.snapshot_id if snapshot else None  # None: nothing to commit
            if snapshot_id is not None:
                self._markers[cache_key] = KnownMarker(
                    snapshot_id, CommittedMarker(group[-1].checkpoint_id, group[-1].stream_id)
                )
            failpoint("committer.after-catalog-commit")
            self._ledger.mark_committed([r.id for r in group], snapshot_id)
            failpoint("committer.after-ledger-update")
            if unfinished is not None:
                self._builder.committed(unfinished, table)
            summary = snapshot.summary if snapshot is not None else None
            kept = int(summary.get("added-equality-delete-files") or 0) if summary is not None else 0
            outcomes.append(self._logged(identifier, job_id, group, snapshot_id, time.monotonic() - started, kept))
            self._cleanup(table, group)
            rows = rows[len(group) :]
        return table

    def _already_committed(
        self,
        table: Table,
        identifier: str,
        job_id: str,
        done: list[CheckpointRow],
        marker: CommittedMarker | None,
        outcomes: list[CommitOutcome],
    ) -> None:
        """Committed before the ledger heard of it (a crash after the catalog commit): recorded, not redone."""
        self._ledger.mark_committed([r.id for r in done], None)
        outcomes.append(CommitOutcome.of(identifier, job_id, done, None, 0.0, already=True))
        log.info(
            "table=%s job=%s checkpoints=%s already committed (marker %s); skipped",
            identifier,
            job_id,
            checkpoint_range(done),
            marker,
        )
        self._cleanup(table, done)

    @staticmethod
    def _logged(
        identifier: str,
        job_id: str,
        group: list[CheckpointRow],
        snapshot_id: int | None,
        seconds: float,
        equality_delete_files: int = 0,
    ) -> CommitOutcome:
        outcome = CommitOutcome.of(identifier, job_id, group, snapshot_id, seconds, False, equality_delete_files)
        log.info(
            "table=%s job=%s checkpoints=%s snapshot=%s files=%d records=%d seconds=%.3f",
            identifier,
            job_id,
            checkpoint_range(group),
            snapshot_id,
            outcome.data_files,
            outcome.records,
            outcome.seconds,
        )
        return outcome

    def _try_commit(
        self, table: Table, identifier: str, job_id: str, group: Sequence[CheckpointRow]
    ) -> tuple[Table | None, list[CheckpointRow], PreparedCommit | None]:
        """Build and swap in one snapshot of the longest committable start of ``group``; None if the head moved.

        Returns the new table (the same one when there was nothing to commit), the checkpoints it holds, and
        what was prepared (to finish once the ledger has the checkpoints as committed).
        """

        prepared = self._builder.try_prepare(table, identifier, job_id, group)
        if prepared is None:
            return None, [], None
        if prepared.snapshot is None:
            return table, prepared.rows, prepared
        try:
            if self._before_commit is not None:
                self._before_commit()
            failpoint("committer.before-catalog-commit")  # manifests written, nothing committed
        except Exception as e:
            self._builder.abandon(prepared)
            raise commit_failure(e, identifier, job_id, prepared.rows) from e
        try:
            with database_errors(self._config):
                committed = commit_prepared(table, prepared.snapshot)
        except CommitFailedException:
            self._builder.abandon(prepared)  # the swap was refused, so nothing references what was written
            log.info("table=%s job=%s: head moved during commit; re-reading the marker", identifier, job_id)
            return None, prepared.rows, None
        except Exception as e:
            # Any other error leaves the swap's outcome unknown (a connection lost during COMMIT): what was
            # written stays, since the table may name it; the marker decides on the retry, gc removes orphans.
            raise commit_failure(e, identifier, job_id, prepared.rows) from e
        self._builder.committed(prepared, committed)
        return committed, prepared.rows, None

    def clean_committed(self) -> int:
        """Clean up after every committed checkpoint a committer left (see :mod:`icesink.committer.cleanup`);
        returns how many were cleaned."""
        rows = sorted(self._ledger.uncleaned(), key=lambda r: r.identifier)
        without_files: list[int] = []  # rows whose files are listed in them: no table needed to let go of them
        cleaned = 0
        for identifier, grouped in itertools.groupby(rows, key=lambda r: r.identifier):
            table_rows = list(grouped)
            if not any(r.manifest_paths for r in table_rows):
                without_files.extend(r.id for r in table_rows)
                continue
            try:  # delta manifests staged before 0018 are deleted through the table's file IO
                table = load_table(self._catalog, self._config, identifier)
            except IcesinkError as e:  # a dropped table holds back its own rows, not the others'
                log.warning(
                    "table=%s: cannot clean up after %d committed checkpoint(s) of it (%s); the other tables are "
                    "cleaned up",
                    identifier,
                    len(table_rows),
                    e,
                )
                continue
            self._cleanup(table, table_rows)
            cleaned += len(table_rows)
        self._ledger.mark_cleaned(without_files)
        return cleaned + len(without_files)

    def _cleanup(self, table: Table, rows: Sequence[CheckpointRow]) -> None:
        clean_staged(self._ledger, table, rows)
