"""Staging a checkpoint: the durable hand-off from the writing driver to the committer."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Sequence
from typing import TYPE_CHECKING

from icesink.committer.ledger import CheckpointState, Ledger, StagedCheckpoint
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
) -> bool:
    """Write the checkpoint's delta manifest and record it in the ledger.

    Returns False when the ledger already had this checkpoint (a retried
    batch); the earlier staging wins and this attempt's manifest is removed.
    """
    from icesink.iceberg.manifests import DeltaManifest, to_data_file, write_delta_manifest

    records = [f for r in results for f in r.data_files]
    delete_records = [f for r in results for f in r.delete_files]
    written = records + delete_records
    # Every file of a checkpoint is written with the spec the driver read for it.
    spec_id = written[0].spec_id if written else table.metadata.default_spec_id
    if not written:
        # Nothing to commit; remember the checkpoint so a retry does not rewrite it.
        return ledger.stage(
            StagedCheckpoint(table_identifier, job_id, checkpoint_id, spec_id, None, None, 0, 0),
            state=CheckpointState.COMMITTED,
        )
    format_version = table.metadata.format_version
    prefix = f"icesink-{job_id}-{checkpoint_id:010d}-{uuid.uuid4().hex}"
    manifests: dict[bool, DeltaManifest] = {}
    for deletes, group in ((False, records), (True, delete_records)):
        if group:
            path = table.location_provider().new_metadata_location(f"{prefix}-{'deletes' if deletes else 'data'}.avro")
            files = [to_data_file(r, format_version) for r in group]
            manifests[deletes] = write_delta_manifest(table.metadata, table.io, path, spec_id, files, deletes=deletes)
    failpoint("stage.after-manifest")
    data, deletes_manifest = manifests.get(False), manifests.get(True)
    staged = ledger.stage(
        StagedCheckpoint(
            table_identifier=table_identifier,
            job_id=job_id,
            checkpoint_id=checkpoint_id,
            spec_id=spec_id,
            data_manifest=data.path if data else None,
            data_manifest_length=data.length if data else None,
            data_files=len(records),
            data_records=sum(r.record_count for r in records),
            delete_manifest=deletes_manifest.path if deletes_manifest else None,
            delete_manifest_length=deletes_manifest.length if deletes_manifest else None,
            delete_files=len(delete_records),
            delete_records=sum(r.record_count for r in delete_records),
        )
    )
    if not staged:
        log.warning(
            "table %s: checkpoint %d of job %s was already staged; dropping this attempt's manifest",
            table_identifier,
            checkpoint_id,
            job_id,
        )
        for manifest in manifests.values():
            table.io.delete(manifest.path)
    failpoint("stage.after-ledger")
    return staged
