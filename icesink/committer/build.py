"""Building one table's snapshot of staged checkpoints, ready to swap into the catalog.

Shared by the committer of one table (:mod:`icesink.committer.commit`) and the one of a group of tables
committed together (:mod:`icesink.committer.group`): read each checkpoint's files, check they still fit
the table, convert its equality deletes, and write the snapshot's manifests and manifest list. What is written
for a snapshot that is never committed is deleted again.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from pyiceberg.table.refs import MAIN_BRANCH

from icesink.catalog.checkpoints import CheckpointRow, InlineFiles
from icesink.catalog.config import CatalogConfig
from icesink.catalog.ledger import Ledger
from icesink.catalog.loader import load_table
from icesink.commands import icesink_command
from icesink.committer.completeness import CommitCompleteness, records_completeness
from icesink.committer.conversion import CommitConversions
from icesink.committer.done_actions import DoneActions
from icesink.committer.staging import check_staged_for, files_in_row
from icesink.errors import IcesinkError, JobIdConflictError, ManifestError, SchemaMismatchError, UnexpectedCommitError
from icesink.iceberg.describe import check_format_version
from icesink.iceberg.manifests import DeltaManifest, read_delta_manifest
from icesink.iceberg.marker import CommittedMarker, marker_properties, marker_table_properties
from icesink.iceberg.references import delete_quietly
from icesink.iceberg.schemas import schema_by_id, schema_in_files, written_schema_problem
from icesink.iceberg.snapshots import prepare_snapshot
from icesink.iceberg.watermarks import splits_table_property
from icesink.properties import (
    CHECKPOINT_RANGE_PROPERTY,
    COMMITTER_SUMMARY_NAMES,
    CONVERTED_PROPERTY,
    DISCARDED_PROPERTY,
)

if TYPE_CHECKING:
    from pyiceberg.catalog.sql import SqlCatalog
    from pyiceberg.manifest import DataFile
    from pyiceberg.table import Table

    from icesink.iceberg.snapshots import PreparedSnapshot

log = logging.getLogger("icesink.committer")


class CheckpointFailed(Exception):
    """Carries a commit error and the checkpoints it belongs to (not the ones after them) to the job loop."""

    def __init__(self, error: IcesinkError, rows: Sequence[CheckpointRow]) -> None:
        super().__init__(str(error))
        first = rows[0] if rows else None
        self.error = error.located(first.identifier, first.checkpoint_id, first.job_id) if first else error
        self.rows = list(rows)


@dataclass(frozen=True)
class CheckpointFiles:
    """One staged checkpoint with the files it staged."""

    row: CheckpointRow
    files: list[DataFile]
    deletes: list[DataFile]


@dataclass
class PreparedCommit:
    """One table's snapshot of some checkpoints of one job, written and ready to swap in.

    ``snapshot`` is None when there is nothing to commit (the checkpoints' deletes name no row).
    """

    table: Table
    identifier: str
    job_id: str
    rows: list[CheckpointRow]
    snapshot: PreparedSnapshot | None
    written: list[str] = field(default_factory=list)  # deleted again if the snapshot is not committed
    replaced_deletes: list[str] = field(default_factory=list)  # staged equality deletes, converted
    discarded: list[CheckpointRow] = field(default_factory=list)  # named by this snapshot's summary


@dataclass(frozen=True)
class CommitOutcome:
    """One snapshot committed, or checkpoints found already committed."""

    identifier: str
    job_id: str
    checkpoint_ids: tuple[int, ...]
    snapshot_id: int | None
    data_files: int
    records: int
    seconds: float
    already_committed: bool = False
    # Committed as they were staged: not converted (over the conversion limit, or conversion off or failed).
    equality_delete_files: int = 0
    branch: str = MAIN_BRANCH  # the branch the checkpoints went to

    @staticmethod
    def of(
        identifier: str,
        job_id: str,
        rows: Sequence[CheckpointRow],
        snapshot_id: int | None,
        seconds: float,
        already: bool = False,
        equality_delete_files: int = 0,
    ) -> CommitOutcome:
        return CommitOutcome(
            identifier=identifier,
            job_id=job_id,
            checkpoint_ids=tuple(r.checkpoint_id for r in rows),
            snapshot_id=snapshot_id,
            data_files=sum(r.manifests.data_files for r in rows),
            records=sum(r.manifests.data_records for r in rows),
            seconds=seconds,
            already_committed=already,
            equality_delete_files=equality_delete_files,
            branch=rows[0].branch if rows else MAIN_BRANCH,
        )


class SnapshotBuilder:
    """Prepares the snapshots of staged checkpoints; keeps the manifests it read for later conversions."""

    def __init__(
        self,
        catalog: SqlCatalog,
        config: CatalogConfig,
        ledger: Ledger,
        expire_snapshots: bool = False,
        on_partition_done: Callable[[dict[str, object]], None] | None = None,
    ) -> None:
        self._catalog = catalog
        self._config = config
        self._ledger = ledger
        self._expire_snapshots = expire_snapshots
        self._conversions = CommitConversions()
        self._completeness = CommitCompleteness(config)
        self._recording = threading.Lock()  # tables prepared side by side keep the partition record one at a time
        self._done_actions = DoneActions(config, on_partition_done)
        self.actions_waiting: set[str] = set()  # tables whose done actions failed after a commit

    def try_prepare(
        self,
        table: Table,
        identifier: str,
        job_id: str,
        group: Sequence[CheckpointRow],
        properties: Mapping[str, str] | None = None,
        discarded: Sequence[CheckpointRow] | None = None,
    ) -> PreparedCommit | None:
        """The snapshot of the longest committable start of ``group``; None if the table must be read again.

        ``discarded``: the job's discarded checkpoints of the table no summary names yet, where the caller read
        them for several tables at once (else read here).

        A checkpoint that cannot be committed (an unreadable manifest, files the table no longer
        accepts) ends the snapshot before it; when it is the first, :class:`CheckpointFailed` names it
        alone, so the ones after it are not blamed.
        """
        uuid = str(table.metadata.table_uuid)
        other = any(
            row.schema_id not in (None, table.metadata.current_schema_id) or row.table_uuid not in (None, uuid)
            for row in group
        )
        # Judged on the table as it is now (a view kept from an earlier commit may be of a table another tool
        # dropped and created again since), after the re-read a lost swap does too.
        if other and self._moved(table, identifier):
            return None
        try:
            check_format_version(table, identifier)  # another tool may have upgraded it since staging
        except IcesinkError as e:
            raise CheckpointFailed(e, group) from e
        try:
            per_row = self._committable(table, identifier, group)
        except CheckpointFailed:
            # Refused by a view kept from an earlier commit, by a table that may accept the files now: a stream makes
            # a column optional for nulls after writing them with the schema before (the id this view has).
            if self._moved(table, identifier):
                return None
            raise
        specs = {f.spec_id for c in per_row for f in (*c.files, *c.deletes)}
        # Written with a partition spec added after this view was read; or a later checkpoint refused (as above).
        cut = not specs <= set(table.metadata.specs()) or len(per_row) < len(group)
        if cut and self._moved(table, identifier):
            return None
        committing = [c.row for c in per_row]
        try:
            return self._prepare(table, identifier, job_id, per_row, properties or {}, discarded)
        except Exception as e:
            raise commit_failure(e, identifier, job_id, committing) from e

    def _moved(self, table: Table, identifier: str) -> bool:
        """Whether the catalog holds a later version of the table than ``table`` (the caller reads it again)."""
        return load_table(self._catalog, self._config, identifier).metadata_location != table.metadata_location

    def _committable(self, table: Table, identifier: str, group: Sequence[CheckpointRow]) -> list[CheckpointFiles]:
        """The checkpoints of ``group`` up to the first that cannot be committed, with their files."""
        per_row: list[CheckpointFiles] = []
        for row in group:
            try:
                check_staged_for(table, identifier, row)
                files = self._read_files(table, identifier, row, False)
                deletes = self._read_files(table, identifier, row, True)
                self._check_schema(table, identifier, row, files, deletes)
            except IcesinkError as e:
                if per_row and not e.transient:
                    log.warning("table=%s: committing up to checkpoint %d first: %s", identifier, row.checkpoint_id, e)
                    break  # the checkpoints before it commit now; it fails on its own next
                raise CheckpointFailed(e, [row]) from e
            per_row.append(CheckpointFiles(row, files, deletes))
        return per_row

    def _prepare(
        self,
        table: Table,
        identifier: str,
        job_id: str,
        per_row: Sequence[CheckpointFiles],
        extra: Mapping[str, str],
        unrecorded: Sequence[CheckpointRow] | None,
    ) -> PreparedCommit:
        group = [c.row for c in per_row]
        files = [f for c in per_row for f in c.files]
        deletes = [f for c in per_row for f in c.deletes]
        last = group[-1]
        branch = last.branch  # every checkpoint of one snapshot commits to the same branch (plan_snapshots)
        # The checkpoints' own values (a later checkpoint's replacing an earlier one's), then icesink's, which win.
        own = {n: v for row in group for n, v in row.snapshot_properties if n not in COMMITTER_SUMMARY_NAMES}
        with self._recording:
            splits = self._completeness.record(table, identifier, branch, per_row, own)
        properties = {**own, **marker_properties(job_id, last.checkpoint_id, last.stream_id), **extra}
        properties[CHECKPOINT_RANGE_PROPERTY] = checkpoint_range(group)
        if unrecorded is None:
            unrecorded = self._ledger.unrecorded_discards(identifier, job_id)
        discarded = [r for r in unrecorded if r.checkpoint_id < last.checkpoint_id]
        if discarded:
            properties[DISCARDED_PROPERTY] = ",".join(str(r.checkpoint_id) for r in discarded)
        marker = marker_table_properties(job_id, last.checkpoint_id, last.stream_id, branch)
        if splits is not None:
            marker[splits_table_property(job_id, branch)] = splits
        if not files and not deletes and not records_completeness(own):
            # Checkpoints without files, staged for what they might record (see staging._to_commit): nothing
            # made done, no row late, so no snapshot; the ledger marks them committed.
            return PreparedCommit(table, identifier, job_id, group, None)
        converted = self._conversions.convert(table, last.ref, job_id, last.checkpoint_id, deletes) if deletes else None
        prepared = PreparedCommit(table, identifier, job_id, group, None, discarded=discarded)
        if converted is not None and not files and not converted.position_deletes:
            # Its deletes name no row of the table (keys never inserted): like an empty micro-batch, it needs no
            # snapshot. Its delete files go once the ledger says so (:meth:`committed`): until then a retry of
            # this prepare (a group rebuilt on a moved head) still reads them.
            prepared.replaced_deletes = [str(f.file_path) for f in deletes]
            return prepared
        if converted is not None:
            prepared.written += converted.written
            prepared.replaced_deletes = [str(f.file_path) for f in deletes]
            properties[CONVERTED_PROPERTY] = str(converted.equality_deletes)
        try:
            prepared.snapshot = prepare_snapshot(
                table,
                files,
                properties,
                delete_files=converted.position_deletes if converted is not None else deletes,
                branch=branch,
                table_properties=marker,
                expire_snapshots=self._expire_snapshots,
            )
        except BaseException:
            self.abandon(prepared)
            raise
        prepared.written += prepared.snapshot.written_paths
        return prepared

    @staticmethod
    def abandon(prepared: PreparedCommit) -> None:
        """The snapshot will never be committed: nothing references what was written for it."""

        delete_quietly(prepared.table.io, prepared.written)

    def committed(self, prepared: PreparedCommit, committed: Table) -> None:
        """After the swap (or, with nothing to swap, after the ledger marked the checkpoints committed): the
        staged equality deletes no snapshot names go, and the discards are recorded."""

        # Converted to position deletes, or naming no row: no snapshot names them.
        delete_quietly(committed.io, prepared.replaced_deletes)
        head = committed.metadata.snapshot_by_name(prepared.rows[-1].branch) if prepared.rows else None
        if prepared.discarded and head is not None and prepared.snapshot is not None:
            with contextlib.suppress(IcesinkError):  # the summary is what counts; the ledger only points to it
                self._ledger.mark_discards_recorded([r.id for r in prepared.discarded], head.snapshot_id)
        if not prepared.rows or prepared.snapshot is None:
            return
        if not self._done_actions.run(committed, prepared.identifier, prepared.rows[-1].branch):
            self.actions_waiting.add(prepared.identifier)  # tried again by the stream's ActionRetrier, or the daemon

    def _check_schema(
        self, table: Table, identifier: str, row: CheckpointRow, files: list[DataFile], deletes: list[DataFile]
    ) -> None:
        """Files written against an older schema are committed only if the table still reads them correctly."""

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

    def _read_files(self, table: Table, identifier: str, row: CheckpointRow, deletes: bool) -> list[DataFile]:
        staged = row.manifests.deletes if deletes else row.manifests.data
        if staged is None:
            return []
        if isinstance(staged, InlineFiles):  # in the ledger row itself
            return files_in_row(table, identifier, row, deletes)
        path = staged.path
        which, job = (identifier, row.checkpoint_id), ("--job", row.job_id)
        manifest = DeltaManifest(path, row.spec_id, staged.length, deletes=deletes)
        try:
            return read_delta_manifest(table.io, manifest)
        except Exception as e:  # whatever the Avro reader raises, the file is unusable
            raise ManifestError(
                f"table {identifier}, job {row.job_id}, checkpoint {row.checkpoint_id}: staged manifest "
                f"{path} cannot be read ({type(e).__name__}: {e}); the checkpoint stays staged. Restore the file "
                f"and run `{icesink_command('checkpoints retry', *which, options=job)}`, or give the checkpoint up "
                f"with `{icesink_command('checkpoints discard', *which, options=(*job, '--yes'))}` (its rows are then "
                "lost)"
            ) from e


def refuse_other_streams(
    ledger: Ledger, identifier: str, job_id: str, marker: CommittedMarker, done: Sequence[CheckpointRow]
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
    ledger.mark_failed([r.id for r in strangers], str(error))
    raise error.located(identifier, strangers[0].checkpoint_id, job_id)


def commit_failure(error: Exception, identifier: str, job_id: str, rows: Sequence[CheckpointRow]) -> CheckpointFailed:
    """The error as the failure of these checkpoints; an error nobody foresaw still names what it stopped."""
    if isinstance(error, IcesinkError):
        return CheckpointFailed(error, rows)
    unexpected = UnexpectedCommitError(
        f"table {identifier}, job {job_id}, checkpoint(s) {checkpoint_range(rows)}: committing failed with "
        f"{type(error).__name__}: {error}. Nothing was committed and the checkpoint(s) stay staged; the "
        "committer tries again. If it keeps failing, please report it; `icesink checkpoints discard` gives "
        "a checkpoint up"
    )
    unexpected.__cause__ = error
    return CheckpointFailed(unexpected, rows)


def checkpoint_range(rows: Sequence[CheckpointRow]) -> str:
    """``first-last`` (or one id) of consecutive checkpoints, as snapshot summaries and messages say it."""
    first, last = rows[0].checkpoint_id, rows[-1].checkpoint_id
    return str(first) if first == last else f"{first}-{last}"
