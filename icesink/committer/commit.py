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
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pyiceberg.table.refs import MAIN_BRANCH

from icesink.catalog.config import CatalogConfig
from icesink.catalog.database import database_errors
from icesink.catalog.loader import load_table
from icesink.committer.ledger import CheckpointRow, Ledger
from icesink.committer.policy import plan_snapshots
from icesink.errors import (
    CommitConflictError,
    ConfigError,
    DeleteConversionError,
    IcesinkError,
    JobIdConflictError,
    ManifestError,
    SchemaMismatchError,
    UnexpectedCommitError,
)
from icesink.failpoints import failpoint
from icesink.iceberg.describe import check_format_version
from icesink.iceberg.marker import (
    CommittedMarker,
    KnownMarker,
    committed_marker,
    marker_properties,
    marker_table_properties,
)
from icesink.properties import CHECKPOINT_RANGE_PROPERTY, CONVERTED_PROPERTY, DISCARDED_PROPERTY

if TYPE_CHECKING:
    from pyiceberg.catalog.sql import SqlCatalog
    from pyiceberg.manifest import DataFile
    from pyiceberg.table import Table

    from icesink.iceberg.scan import ManifestCache
    from icesink.maintenance.convert import CommitConversion

log = logging.getLogger("icesink.committer")


class _CheckpointFailed(Exception):
    """Carries a commit error and the checkpoints it belongs to (not the ones after them) to the job loop."""

    def __init__(self, error: IcesinkError, rows: Sequence[CheckpointRow]) -> None:
        super().__init__(str(error))
        self.error = error
        self.rows = list(rows)


@dataclass(frozen=True)
class CommitOutcome:
    """One snapshot committed, or checkpoints found already committed."""

    table_identifier: str
    job_id: str
    checkpoint_ids: tuple[int, ...]
    snapshot_id: int | None
    data_files: int
    records: int
    seconds: float
    already_committed: bool = False


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
    ) -> None:
        """``before_commit`` runs right before every catalog commit; the daemon checks its lease there.

        With ``expire_snapshots`` every commit also drops the snapshots past the
        table's ``history.expire.*`` retention, in the same metadata commit.
        """
        self._catalog = catalog
        self._config = config
        self._ledger = ledger
        self._max_conflicts = max_conflicts
        self._before_commit = before_commit
        self._expire_snapshots = expire_snapshots
        # (table uuid, job) -> marker as of this committer's last commit: later walks stop there.
        self._markers: dict[tuple[str, str], KnownMarker] = {}
        self._tables: dict[str, Table] = {}
        self._manifests: dict[str, ManifestCache] = {}  # per table: entries read for converting deletes

    def table(self, table_identifier: str) -> Table:
        """The table as this committer's last commit left it (read from the catalog if it has none)."""
        return self._tables.get(table_identifier) or load_table(self._catalog, self._config, table_identifier)

    @classmethod
    def of(cls, config: CatalogConfig, **options: Any) -> TableCommitter:
        """A committer of ``config``'s catalog, with a catalog handle and a ledger of its own."""
        from icesink.catalog.loader import open_catalog

        return cls(open_catalog(config), config, Ledger(config), **options)

    def forget(self, table_identifier: str) -> None:
        """Read the table from the catalog next time (someone else, maintenance say, committed)."""
        self._tables.pop(table_identifier, None)

    def commit_pending(self, table_identifier: str, job_id: str | None = None) -> list[CommitOutcome]:
        """Commit every pending checkpoint of the table (or of one job of it), in checkpoint order."""
        rows = self._ledger.pending(table_identifier, job_id)
        if not rows:
            return []
        # The table as this committer's last commit left it, if it has one. Safe even when someone
        # committed since: the snapshot is built on that head, the catalog refuses it, and the
        # table and its marker are read again before anything is rebuilt.
        table = self._tables.pop(table_identifier, None) or load_table(self._catalog, self._config, table_identifier)
        # Manifests left by a committer that died between its ledger update and its cleanup.
        self._cleanup(table, self._ledger.uncleaned(table_identifier))
        outcomes: list[CommitOutcome] = []
        for job, job_rows in itertools.groupby(rows, key=lambda r: r.job_id):
            table = self._commit_job(table, table_identifier, job, list(job_rows), outcomes)
        self._tables[table_identifier] = table  # only after every job went through without an error
        return outcomes

    def _commit_job(
        self, table: Table, identifier: str, job_id: str, rows: list[CheckpointRow], outcomes: list[CommitOutcome]
    ) -> Table:
        conflicts = 0
        while rows:
            cache_key = (str(table.metadata.table_uuid), job_id)
            marker = committed_marker(table.metadata, job_id, known=self._markers.get(cache_key))
            done = [r for r in rows if marker is not None and r.checkpoint_id <= marker.checkpoint_id]
            if marker is not None:
                self._refuse_other_streams(identifier, job_id, marker, done)
            if done:
                # Committed before the ledger heard of it (a crash after the catalog commit).
                self._ledger.mark_committed([r.id for r in done], None)
                outcomes.append(self._outcome(identifier, job_id, done, None, 0.0, already=True))
                log.info(
                    "table=%s job=%s checkpoints=%s already committed (marker %s); skipped",
                    identifier,
                    job_id,
                    _range(done),
                    marker,
                )
                self._cleanup(table, done)
                rows = [r for r in rows if r not in done]
                continue
            started = time.monotonic()
            try:
                committed, group = self._try_commit(table, identifier, job_id, plan_snapshots(rows)[0])
            except _CheckpointFailed as failed:
                if not failed.error.transient:  # shown as failed until a commit succeeds; they stay staged
                    with contextlib.suppress(IcesinkError):  # best effort: the error itself is what matters
                        self._ledger.mark_failed([r.id for r in failed.rows], str(failed.error))
                raise failed.error from failed.error.__cause__
            if committed is None:
                conflicts += 1
                if conflicts > self._max_conflicts:
                    raise CommitConflictError(
                        f"table {identifier}: {conflicts} commit conflicts in a row while committing checkpoints "
                        f"{_range(group or rows)} of job {job_id}; another writer commits too often, retry later"
                    )
                table = load_table(self._catalog, self._config, identifier)
                continue
            snapshot = committed.metadata.snapshot_by_name(MAIN_BRANCH) if committed is not table else None
            table = committed
            snapshot_id = snapshot.snapshot_id if snapshot else None  # None: nothing to commit
            if snapshot_id is not None:
                self._markers[cache_key] = KnownMarker(
                    snapshot_id, CommittedMarker(group[-1].checkpoint_id, group[-1].stream_id)
                )
            failpoint("committer.after-catalog-commit")
            self._ledger.mark_committed([r.id for r in group], snapshot_id)
            failpoint("committer.after-ledger-update")
            outcome = self._outcome(identifier, job_id, group, snapshot_id, time.monotonic() - started)
            outcomes.append(outcome)
            log.info(
                "table=%s job=%s checkpoints=%s snapshot=%s files=%d records=%d seconds=%.3f",
                identifier,
                job_id,
                _range(group),
                snapshot_id,
                outcome.data_files,
                outcome.records,
                outcome.seconds,
            )
            self._cleanup(table, group)
            rows = rows[len(group) :]
        return table

    def _refuse_other_streams(
        self, identifier: str, job_id: str, marker: CommittedMarker, done: Sequence[CheckpointRow]
    ) -> None:
        """A checkpoint counts as committed only if the marker comes from the stream that staged it."""
        strangers = [r for r in done if marker.written_by_another_stream(r.stream_id)]
        if not strangers:
            return
        error = JobIdConflictError(
            f"table {identifier}: checkpoint {strangers[0].checkpoint_id} of job {job_id} was staged by "
            f"{strangers[0].describe_stream()}, but the table's checkpoints of that job up to {marker.checkpoint_id} "
            f"come from stream {marker.stream_id}: two streams share the job id. Nothing of this checkpoint was "
            "committed and it stays staged; restart the stream that staged it with a job_id of its own"
        )
        self._ledger.mark_failed([r.id for r in strangers], str(error))
        raise error

    def _try_commit(
        self, table: Table, identifier: str, job_id: str, group: Sequence[CheckpointRow]
    ) -> tuple[Table | None, list[CheckpointRow]]:
        """Build and swap in one snapshot of the longest committable start of ``group``; None if the head moved.

        Returns the new table (the same one when there was nothing to commit) and the checkpoints it
        holds. A checkpoint that cannot be committed (an unreadable manifest, files the table no longer
        accepts) ends the snapshot before it; when it is the first, :class:`_CheckpointFailed` names it
        alone, so the ones after it are not blamed.
        """
        if any(row.schema_id not in (None, table.metadata.current_schema_id) for row in group):
            fresh = load_table(self._catalog, self._config, identifier)
            if fresh.metadata_location != table.metadata_location:
                return None, []  # judged on the table as it is now, after the re-read a lost swap does too
        try:
            check_format_version(table, identifier)  # another tool may have upgraded it since staging
        except IcesinkError as e:
            raise _CheckpointFailed(e, group) from e
        per_row = self._committable(table, identifier, group)
        committing = [row for row, _, _ in per_row]
        try:
            return self._commit_files(table, identifier, job_id, per_row), committing
        except IcesinkError as e:
            raise _CheckpointFailed(e, committing) from e
        except Exception as e:  # an error nobody foresaw still names what it stopped, and stops only that
            error = UnexpectedCommitError(
                f"table {identifier}, job {job_id}, checkpoint(s) {_range(committing)}: committing failed with "
                f"{type(e).__name__}: {e}. Nothing was committed and the checkpoint(s) stay staged; the committer "
                "tries again. If it keeps failing, please report it; `icesink checkpoints discard` gives a "
                "checkpoint up"
            )
            error.__cause__ = e
            raise _CheckpointFailed(error, committing) from e

    def _committable(
        self, table: Table, identifier: str, group: Sequence[CheckpointRow]
    ) -> list[tuple[CheckpointRow, list[DataFile], list[DataFile]]]:
        """The checkpoints of ``group`` up to the first that cannot be committed, with their files."""
        per_row: list[tuple[CheckpointRow, list[DataFile], list[DataFile]]] = []
        for row in group:
            try:
                files = self._read_files(table, identifier, row, False)
                deletes = self._read_files(table, identifier, row, True)
                self._check_schema(table, identifier, row, files, deletes)
            except IcesinkError as e:
                if per_row and not e.transient:
                    log.warning("table=%s: committing up to checkpoint %d first: %s", identifier, row.checkpoint_id, e)
                    break  # the checkpoints before it commit now; it fails on its own next
                raise _CheckpointFailed(e, [row]) from e
            per_row.append((row, files, deletes))
        return per_row

    def _commit_files(
        self,
        table: Table,
        identifier: str,
        job_id: str,
        per_row: Sequence[tuple[CheckpointRow, list[DataFile], list[DataFile]]],
    ) -> Table | None:
        from pyiceberg.exceptions import CommitFailedException

        from icesink.iceberg.files import delete_quietly
        from icesink.iceberg.snapshots import commit_prepared, prepare_snapshot

        group = [row for row, _, _ in per_row]
        files = [f for _, row_files, _ in per_row for f in row_files]
        deletes = [f for _, _, row_deletes in per_row for f in row_deletes]
        last = group[-1]
        properties = marker_properties(job_id, last.checkpoint_id, last.stream_id)
        properties[CHECKPOINT_RANGE_PROPERTY] = _range(group)
        discarded = [
            r for r in self._ledger.unrecorded_discards(identifier, job_id) if r.checkpoint_id < last.checkpoint_id
        ]
        if discarded:
            properties[DISCARDED_PROPERTY] = ",".join(str(r.checkpoint_id) for r in discarded)
        marker = marker_table_properties(job_id, last.checkpoint_id, last.stream_id)
        converted = self._convert(table, identifier, job_id, last.checkpoint_id, deletes) if deletes else None
        if converted is not None and not files and not converted.position_deletes:
            # Its deletes name no row of the table (keys never inserted): like an empty micro-batch, it
            # needs no snapshot, and no snapshot will ever name its delete files.
            delete_quietly(table.io, [str(f.file_path) for f in deletes])
            return table
        written: list[str] = []
        if converted is not None:
            written += converted.written
            properties[CONVERTED_PROPERTY] = str(converted.equality_deletes)
        try:
            prepared = prepare_snapshot(
                table,
                files,
                properties,
                delete_files=converted.position_deletes if converted is not None else deletes,
                table_properties=marker,
                expire_snapshots=self._expire_snapshots,
            )
            written += prepared.written_paths
            if self._before_commit is not None:
                self._before_commit()
            failpoint("committer.before-catalog-commit")  # manifests written, nothing committed
        except BaseException:
            delete_quietly(table.io, written)  # never committed: nothing references them
            raise
        try:
            with database_errors(self._config):
                committed = commit_prepared(table, prepared)
        except CommitFailedException:
            # The swap was refused, so nothing references what was written for it.
            delete_quietly(table.io, written)
            log.info("table=%s job=%s: head moved during commit; re-reading the marker", identifier, job_id)
            return None
        # Any other error leaves the swap's outcome unknown (a connection lost during COMMIT): what was
        # written stays, since the table may name it; the marker decides on the retry, gc removes orphans.
        if converted is not None:
            # The staged equality deletes were replaced by position deletes: no snapshot names them.
            delete_quietly(committed.io, [str(f.file_path) for f in deletes])
        head = committed.metadata.snapshot_by_name(MAIN_BRANCH)
        if discarded and head is not None:
            with contextlib.suppress(IcesinkError):  # the summary is what counts; the ledger only points to it
                self._ledger.mark_discards_recorded([r.id for r in discarded], head.snapshot_id)
        return committed

    def _check_schema(
        self, table: Table, identifier: str, row: CheckpointRow, files: list[DataFile], deletes: list[DataFile]
    ) -> None:
        """Files written against an older schema are committed only if the table still reads them correctly."""
        from icesink.iceberg.schemas import schema_by_id, schema_in_files, written_schema_problem

        current = table.schema()
        if row.schema_id is None:
            return
        # Also at the same schema id: a schema made optional and back to required reuses the old id.
        written = current if row.schema_id == current.schema_id else schema_by_id(table, row.schema_id)
        if written is None and not files:
            written = current  # delete files hold only their keys, which are checked below
        elif written is None:
            # Gone from the metadata (another tool's expiry removes schemas no snapshot uses): the data
            # files' own field ids say which of the table's fields they hold.
            try:
                written = schema_in_files(table, [str(f.file_path) for f in files])
            except OSError as e:
                raise SchemaMismatchError(
                    f"table {identifier}, job {row.job_id}, checkpoint {row.checkpoint_id}: its files were written "
                    f"with schema {row.schema_id}, which is not in the table's metadata any more, and reading their "
                    f"columns failed ({e}). Nothing of the checkpoint was committed and it stays staged; the "
                    "committer checks it again on its next attempt"
                ) from e
        nulls: dict[int, int] = {}
        for data_file in files:
            for field_id, count in (data_file.null_value_counts or {}).items():
                nulls[field_id] = nulls.get(field_id, 0) + count
        keys = {i for d in deletes for i in (d.equality_ids or ())}
        problem = written_schema_problem(current, written, nulls, keys)
        if problem is None:
            return
        raise SchemaMismatchError(
            f"table {identifier}, job {row.job_id}, checkpoint {row.checkpoint_id}: its files were written with "
            f"schema {row.schema_id}, but the table is at schema {current.schema_id} and {problem}. Nothing of the "
            "checkpoint was committed and it stays staged: change the table so that it accepts them again (make "
            "the column optional, restore it or its type), and the committer commits it on its next attempt"
        )

    def _convert(
        self, table: Table, identifier: str, job_id: str, checkpoint_id: int, deletes: list[DataFile]
    ) -> CommitConversion | None:
        """The checkpoint's equality deletes as position deletes on this head, or None to commit them as they are.

        Deletes keyed on fields inside structs are never committed as they are (Iceberg Java would read the
        rows they delete): if they cannot be converted, nothing is committed and the checkpoint stays staged.
        """
        from icesink.iceberg.deletes import nested_key_fields
        from icesink.iceberg.scan import ManifestCache
        from icesink.maintenance.convert import convert_for_commit
        from icesink.maintenance.policy import CONVERT_AT_COMMIT, MaintenancePolicy

        policy = MaintenancePolicy.of(table.properties, identifier)
        nested = sorted({n for d in deletes for n in nested_key_fields(table.schema(), d.equality_ids or ())})
        where = f"table {identifier}, job {job_id}, checkpoint {checkpoint_id}"
        if not policy.convert_at_commit:
            if nested:
                raise ConfigError(
                    f"{where}: its equality deletes are keyed on fields inside structs ({', '.join(nested)}) and "
                    f"the table now sets {CONVERT_AT_COMMIT}=false, but Iceberg Java 1.9 does not apply such "
                    "deletes and would read the rows they delete. Nothing of the checkpoint was committed and it "
                    "stays staged: remove the property, and the committer commits it on its next attempt"
                )
            return None
        try:
            cache = self._manifests.setdefault(identifier, ManifestCache())
            return convert_for_commit(table, deletes, policy, f"{job_id}-{checkpoint_id}", cache, required=bool(nested))
        except (OSError, ValueError) as e:
            if nested:
                raise DeleteConversionError(
                    f"{where}: converting its equality deletes (keyed on {', '.join(nested)}, inside structs) to "
                    f"position deletes failed: {e}. They cannot be committed as they are, since Iceberg Java 1.9 "
                    "does not apply such deletes. Nothing was committed and the checkpoint stays staged; the "
                    "committer tries again, and succeeds once the table's files can be read"
                ) from e
            # Flat-keyed equality deletes are as correct, just slower to read.
            log.warning(
                "table=%s job=%s checkpoint=%d: equality deletes kept, converting them failed: %s",
                identifier,
                job_id,
                checkpoint_id,
                e,
            )
            return None

    def _read_files(self, table: Table, identifier: str, row: CheckpointRow, deletes: bool) -> list[DataFile]:
        from icesink.iceberg.manifests import DeltaManifest, read_delta_manifest

        staged = row.manifests.deletes if deletes else row.manifests.data
        if staged is None:
            return []
        path = staged.path
        manifest = DeltaManifest(path, row.spec_id, staged.length, deletes=deletes)
        try:
            return read_delta_manifest(table.io, manifest)
        except Exception as e:  # whatever the Avro reader raises, the file is unusable
            raise ManifestError(
                f"table {identifier}, job {row.job_id}, checkpoint {row.checkpoint_id}: staged manifest "
                f"{path} cannot be read ({type(e).__name__}: {e}); the checkpoint stays staged. Restore the file "
                f"and run `icesink checkpoints retry {identifier} {row.checkpoint_id}`, or give the checkpoint up "
                f"with `icesink checkpoints discard {identifier} {row.checkpoint_id}` (its rows are then lost)"
            ) from e

    def clean_committed(self) -> int:
        """Delete leftover temporary manifests of every committed checkpoint; returns how many were cleaned."""
        rows = self._ledger.uncleaned()
        for identifier, table_rows in itertools.groupby(rows, key=lambda r: r.table_identifier):
            self._cleanup(load_table(self._catalog, self._config, identifier), list(table_rows))
        return len(rows)

    def _cleanup(self, table: Table, rows: Sequence[CheckpointRow]) -> None:
        """Delete temporary manifests of committed checkpoints; a failure here is only logged."""
        from icesink.iceberg.files import delete_quietly

        cleaned = []
        for row in rows:
            try:
                for path in row.manifest_paths:
                    failpoint("committer.during-cleanup")
                    delete_quietly(table.io, [path])
                cleaned.append(row.id)
            except OSError as e:  # the next run (or gc) retries
                log.warning(
                    "table=%s: could not delete staged manifest of checkpoint %d: %s",
                    row.table_identifier,
                    row.checkpoint_id,
                    e,
                )
        self._ledger.mark_manifests_deleted(cleaned)

    @staticmethod
    def _outcome(
        identifier: str,
        job_id: str,
        rows: Sequence[CheckpointRow],
        snapshot_id: int | None,
        seconds: float,
        already: bool = False,
    ) -> CommitOutcome:
        return CommitOutcome(
            table_identifier=identifier,
            job_id=job_id,
            checkpoint_ids=tuple(r.checkpoint_id for r in rows),
            snapshot_id=snapshot_id,
            data_files=sum(r.manifests.data_files for r in rows),
            records=sum(r.manifests.data_records for r in rows),
            seconds=seconds,
            already_committed=already,
        )


def _range(rows: Sequence[CheckpointRow]) -> str:
    first, last = rows[0].checkpoint_id, rows[-1].checkpoint_id
    return str(first) if first == last else f"{first}-{last}"
