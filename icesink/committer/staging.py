"""Staging a checkpoint: the durable hand-off from the writing driver to the committer."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from icesink import paths
from icesink.committer.ledger import (
    CheckpointState,
    DeltaManifests,
    Ledger,
    StagedCheckpoint,
    StagedManifest,
    StreamIdentity,
)
from icesink.errors import JobIdConflictError
from icesink.failpoints import failpoint
from icesink.results import WriteResult

if TYPE_CHECKING:
    from pyiceberg.table import Table

log = logging.getLogger(__name__)


def stage_checkpoint(
    ledger: Ledger,
    table: Table,
    table_identifier: str,
    job_id: str,
    checkpoint_id: int,
    results: Sequence[WriteResult],
    stream: StreamIdentity | None = None,
    schema_id: int | None = None,
    column_ids: dict[str, int] | None = None,
) -> bool:
    """Write the checkpoint's delta manifest and record it in the ledger.

    Returns False when the ledger already had this checkpoint from the same
    stream (a retried batch); the earlier staging wins and this attempt's
    manifest is removed. The same checkpoint of the same job staged by
    another stream is a :class:`JobIdConflictError`: two streams share a job id.
    ``schema_id`` is the schema the files were written with (default: the table's current one),
    ``column_ids`` which field each DataFrame column was written to.
    """
    from icesink.iceberg.manifests import to_data_file, write_delta_manifest

    stream = stream or StreamIdentity()
    records = [f for r in results for f in r.data_files]
    delete_records = [f for r in results for f in r.delete_files]
    written = records + delete_records
    # Every file of a checkpoint is written with the spec the driver read for it.
    spec_id = written[0].spec_id if written else table.metadata.default_spec_id
    empty = StagedCheckpoint(
        table_identifier=table_identifier,
        job_id=job_id,
        checkpoint_id=checkpoint_id,
        spec_id=spec_id,
        stream_id=stream.stream_id,
        checkpoint_location=stream.checkpoint_location,
        schema_id=table.metadata.current_schema_id if schema_id is None else schema_id,
        column_ids=tuple(sorted(column_ids.items())) if column_ids is not None else None,
    )
    if not written:
        # Nothing to commit; remember the checkpoint so a retry does not rewrite it.
        staged = ledger.stage(empty, state=CheckpointState.COMMITTED)
        return staged or _same_stream(ledger, table_identifier, job_id, checkpoint_id, stream)
    format_version = table.metadata.format_version
    prefix = f"icesink-{paths.segment(job_id, 64)}-{checkpoint_id:010d}-{uuid.uuid4().hex}"
    staged_manifests: list[StagedManifest | None] = []
    for deletes, group in ((False, records), (True, delete_records)):
        if not group:
            staged_manifests.append(None)
            continue
        path = table.location_provider().new_metadata_location(f"{prefix}-{'deletes' if deletes else 'data'}.avro")
        files = [to_data_file(r, format_version) for r in group]
        written_manifest = write_delta_manifest(table.metadata, table.io, path, spec_id, files, deletes=deletes)
        records_in = sum(r.record_count for r in group)
        staged_manifests.append(StagedManifest(path, written_manifest.length, len(group), records_in))
    failpoint("stage.after-manifest")
    manifests = DeltaManifests(*staged_manifests)
    staged = ledger.stage(replace(empty, manifests=manifests))
    if not staged:
        for path in manifests.paths:
            table.io.delete(path)
        _same_stream(ledger, table_identifier, job_id, checkpoint_id, stream)
        log.warning(
            "table %s: checkpoint %d of job %s was already staged; dropped this attempt's manifest",
            table_identifier,
            checkpoint_id,
            job_id,
        )
    failpoint("stage.after-ledger")
    return staged


def _same_stream(
    ledger: Ledger, table_identifier: str, job_id: str, checkpoint_id: int, stream: StreamIdentity
) -> bool:
    """False when the checkpoint was staged before by this stream; an error when by another one."""
    earlier = ledger.get(table_identifier, job_id, checkpoint_id)
    if earlier is not None and stream.differs_from(earlier.stream_id):
        raise JobIdConflictError(
            f"table {table_identifier}: checkpoint {checkpoint_id} of job {job_id} was already staged by "
            f"{earlier.describe_stream()}, and now {stream.describe()} stages it too: two streams share the job "
            "id. Nothing of this batch was staged; give each stream a job_id of its own (or drop job_id= to use "
            "Spark's query id)"
        )
    return False
