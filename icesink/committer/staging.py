"""Staging a checkpoint: the durable hand-off from the writing driver to the committer."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from icesink.catalog.checkpoints import (
    CheckpointRow,
    CheckpointState,
    DeltaManifests,
    InlineFiles,
    StagedCheckpoint,
    StagedFiles,
    StreamIdentity,
)
from icesink.catalog.ledger import Ledger
from icesink.commands import icesink_command
from icesink.errors import ConfigError, JobIdConflictError, LedgerFormatError, TableReplacedError, WriteResultError
from icesink.failpoints import failpoint
from icesink.iceberg.manifests import to_data_file
from icesink.iceberg.summaries import computed_by_iceberg
from icesink.properties import COMMITTER_SUMMARY_NAMES, WATERMARK_PROPERTY
from icesink.results import FileRecord, WriteResult
from icesink.table_ref import MAIN_BRANCH, TableRef

if TYPE_CHECKING:
    from pyiceberg.manifest import DataFile
    from pyiceberg.table import Table

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TableResults:
    """What one checkpoint wrote into one table: its files, the schema they were written with (default:
    the table's current one), which field each DataFrame column went to, and the values the checkpoint carries
    into its snapshot's summary (icesink's own markers win over them)."""

    table: Table
    identifier: str
    results: Sequence[WriteResult]
    schema_id: int | None = None
    column_ids: Mapping[str, int] | None = None
    snapshot_properties: Mapping[str, str] | None = None
    branch: str = MAIN_BRANCH  # of the table, that committing the checkpoint moves

    @property
    def ref(self) -> TableRef:
        return TableRef(self.identifier, self.branch)


def stage_checkpoint(
    ledger: Ledger,
    table: Table,
    identifier: str,
    job_id: str,
    checkpoint_id: int,
    results: Sequence[WriteResult],
    stream: StreamIdentity | None = None,
    schema_id: int | None = None,
    column_ids: dict[str, int] | None = None,
) -> bool:
    """Stage one table's checkpoint (see :func:`stage_tables`)."""
    written = TableResults(table, identifier, results, schema_id, column_ids)
    return stage_tables(ledger, job_id, checkpoint_id, [written], stream)


def stage_tables(
    ledger: Ledger,
    job_id: str,
    checkpoint_id: int,
    written: Sequence[TableResults],
    stream: StreamIdentity | None = None,
    atomic: bool = False,
) -> bool:
    """Record the checkpoint's files in the ledger, a row per table holding that table's data and delete files,
    in one transaction: every table's row, or none.

    The files are kept in the rows themselves, not in delta manifest files (as releases before did): staging
    writes no file, whatever the number of tables, and the committer reads them with the rows. A committed
    checkpoint's row lets its files go (see :mod:`icesink.committer.cleanup`).

    Returns False when the ledger already had this checkpoint from the same stream (a retried batch); the
    earlier staging wins. The same checkpoint of the same job staged by another stream is a
    :class:`JobIdConflictError`: two streams share a job id. With ``atomic`` the tables' rows are committed
    together, in one catalog transaction.
    """
    stream = stream or StreamIdentity()
    names = [w.identifier for w in written]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ConfigError(
            f"table {twice[0]}: checkpoint {checkpoint_id} of job {job_id} would stage it twice (two parts of the "
            "stream write it); nothing was staged. Give each part a table of its own"
        )
    staged = [_staged(one, job_id, checkpoint_id, stream, atomic) for one in written]
    holds_files = any(s.manifests.present() for s in staged)
    if holds_files:
        failpoint("stage.after-manifest")
    rows = [(s, CheckpointState.STAGED if _to_commit(s) else CheckpointState.COMMITTED) for s in staged]
    if ledger.stage_all(rows):
        if holds_files:
            failpoint("stage.after-ledger")
        return True
    for one in written:
        _same_stream(ledger, one.identifier, job_id, checkpoint_id, stream)
    if holds_files:
        log.warning(
            "table(s) %s: checkpoint %d of job %s was already staged; this attempt's files are left to gc",
            ", ".join(w.identifier for w in written),
            checkpoint_id,
            job_id,
        )
        failpoint("stage.after-ledger")
    return False


def _to_commit(staged: StagedCheckpoint) -> bool:
    """Whether the committer has something to do with the checkpoint: files to commit, or a watermark that may
    make the table's partitions done, or late rows to count, though the table got no rows (a quiet table of a
    stream whose other tables move its watermark, or a table whose rows were all set aside as late). The
    committer makes a snapshot of such a checkpoint only when it records something."""
    return bool(staged.manifests.present()) or any(name == WATERMARK_PROPERTY for name, _ in staged.snapshot_properties)


def _staged(
    written: TableResults, job_id: str, checkpoint_id: int, stream: StreamIdentity, atomic: bool
) -> StagedCheckpoint:
    """The table's checkpoint, its files in it (none when it wrote no file)."""

    table = written.table
    records = tuple(f for r in written.results for f in r.data_files)
    delete_records = tuple(f for r in written.results for f in r.delete_files)
    every_file = records + delete_records
    # Every file of a checkpoint is written with the spec the driver read for it.
    spec_id = every_file[0].spec_id if every_file else table.metadata.default_spec_id
    _check_partitions(written, checkpoint_id, spec_id, every_file)
    return StagedCheckpoint(
        identifier=written.identifier,
        job_id=job_id,
        checkpoint_id=checkpoint_id,
        spec_id=spec_id,
        manifests=DeltaManifests(
            InlineFiles.of(records) if records else None, InlineFiles.of(delete_records) if delete_records else None
        ),
        files=StagedFiles(records, delete_records) if every_file else None,
        stream_id=stream.stream_id,
        checkpoint_location=stream.checkpoint_location,
        schema_id=table.metadata.current_schema_id if written.schema_id is None else written.schema_id,
        column_ids=tuple(sorted(written.column_ids.items())) if written.column_ids is not None else None,
        atomic=atomic,
        snapshot_properties=_snapshot_properties(written, checkpoint_id),
        branch=written.branch,
        table_uuid=str(table.metadata.table_uuid),
    )


def _check_partitions(written: TableResults, checkpoint_id: int, spec_id: int, files: tuple[FileRecord, ...]) -> None:
    """Files staged in the ledger are read at commit: one whose spec or partition the table does not have would
    stop its table until discarded. Refused here instead, before anything is staged."""
    spec = written.table.metadata.specs().get(spec_id)
    odd = next((f for f in files if spec is None or f.spec_id != spec_id or len(f.partition) != len(spec.fields)), None)
    if odd is not None:
        raise WriteResultError(
            f"table {written.identifier}: checkpoint {checkpoint_id} holds file {odd.path} of partition spec "
            f"{odd.spec_id} with {len(odd.partition)} partition value(s); the table's spec {spec_id} "
            f"{'is not in its metadata' if spec is None else f'has {len(spec.fields)} field(s)'}. Nothing was "
            "staged. Run the same icesink version on the driver and on every executor (PYSPARK_PYTHON)"
        )


def _snapshot_properties(written: TableResults, checkpoint_id: int) -> tuple[tuple[str, str], ...]:
    """The checkpoint's summary values, checked: a summary holds strings only."""

    given = written.snapshot_properties or {}
    for name, value in given.items():
        if not isinstance(name, str) or not name or not isinstance(value, str):
            raise ConfigError(
                f"table {written.identifier}: checkpoint {checkpoint_id} carries snapshot property {name!r} = "
                f"{value!r}; a snapshot summary holds non-empty string names and string values. Nothing was staged"
            )
        if computed_by_iceberg(name) or name in COMMITTER_SUMMARY_NAMES:
            whose = (
                "Iceberg computes (counts, totals, the operation)"
                if computed_by_iceberg(name)
                else "icesink's committer writes"
            )
            raise ConfigError(
                f"table {written.identifier}: checkpoint {checkpoint_id} carries snapshot property {name!r}, a "
                f"field {whose} for every snapshot; name it otherwise. Nothing was staged"
            )
    return tuple(sorted(given.items()))


def _same_stream(ledger: Ledger, identifier: str, job_id: str, checkpoint_id: int, stream: StreamIdentity) -> bool:
    """False when the checkpoint was staged before by this stream; an error when by another one."""
    earlier = ledger.get(identifier, job_id, checkpoint_id, unreadable_too=True)  # only who staged it matters
    if earlier is not None and stream.differs_from(earlier.stream_id):
        raise JobIdConflictError(
            f"table {identifier}: checkpoint {checkpoint_id} of job {job_id} was already staged by "
            f"{earlier.describe_stream()}, and now {stream.describe()} stages it too: two streams share the job "
            "id. Nothing of this batch was staged; give each stream a job_id of its own (or drop job_id= to use "
            "Spark's query id)"
        )
    return False


def check_staged_for(table: Table, identifier: str, row: CheckpointRow) -> None:
    """A checkpoint staged for a table since dropped and created again under its name is not committed into the
    new one: its files were written with the old table's field ids and partitioning, which the new table's may
    give other meanings. ``table`` must be the table as the catalog has it now (see ``SnapshotBuilder``)."""
    current = str(table.metadata.table_uuid)
    if row.table_uuid is None or row.table_uuid == current:
        return
    discard = icesink_command(
        "checkpoints discard", identifier, row.checkpoint_id, options=("--job", row.job_id, "--yes")
    )
    raise TableReplacedError(
        f"table {identifier}, job {row.job_id}, checkpoint {row.checkpoint_id}: staged for the table of uuid "
        f"{row.table_uuid}, but the table of that name is now another one (uuid {current}): it was dropped and "
        "created again since, or another table was renamed to its name. Its files were written for the old table's "
        "columns and partitioning, so it is not committed into this one. Nothing was committed and its files stay "
        f"staged. `{discard}` gives it up (its rows are then not in the table; do so for each checkpoint staged "
        "for the old table), and the checkpoints after it commit; to keep its rows, write them again with a "
        "stream into the new table",
        table=identifier,
        checkpoint_id=row.checkpoint_id,
        job_id=row.job_id,
    )


def files_in_row(table: Table, identifier: str, row: CheckpointRow, deletes: bool) -> list[DataFile]:
    """The data (or delete) files a checkpoint staged in its ledger row, as a manifest would give them back (read
    with the row: ``Ledger.pending(..., with_files=True)``)."""
    if row.files is None:  # a row that lost them (or read without them): nothing to commit from
        discard = icesink_command(
            "checkpoints discard", identifier, row.checkpoint_id, options=("--job", row.job_id, "--yes")
        )
        raise LedgerFormatError(
            f"table {identifier}, job {row.job_id}, checkpoint {row.checkpoint_id}: its ledger row holds no files, "
            f"though the checkpoint staged some; the row is damaged. Restore it from a backup, or give the "
            f"checkpoint up with `{discard}`"
        )
    spec = table.metadata.specs().get(row.spec_id)
    partition_type = spec.partition_type(table.schema()) if spec is not None else None
    return [
        to_data_file(r, table.metadata.format_version, partition_type)
        for r in (row.files.deletes if deletes else row.files.data)
    ]
