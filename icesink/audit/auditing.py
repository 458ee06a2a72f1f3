"""Auditing one branch snapshot: the rows it added over its base, the rows its checkpoints wrote, the checks."""

from __future__ import annotations

import datetime
from collections.abc import Sequence
from typing import TYPE_CHECKING

from icesink.audit.inputs import AuditInput
from icesink.audit.running import Check, run_checks
from icesink.catalog.audit_record import AuditEntry
from icesink.catalog.checkpoints import CheckpointState
from icesink.checks import columns_read
from icesink.properties import JOB_ID_PROPERTY

if TYPE_CHECKING:
    from pyiceberg.table import Table

    from icesink.audit.chain import Chain
    from icesink.catalog.ledger import Ledger


def audit_link(chain: Chain, index: int, checks: Sequence[Check], ledger: Ledger) -> AuditEntry:
    """The audit of the chain's snapshot at ``index`` against :meth:`Chain.base_for` (not recorded yet)."""
    from icesink.arrays import empty_table
    from icesink.reader import read_table

    link = chain.links[index]
    base = chain.base_for(index)
    table = chain.table
    if checks:
        # Only the columns the checks read, when they say which (the built-ins): a read that follows them.
        snapshot = table.metadata.snapshot_by_id(link.snapshot_id)
        schema = (
            table.metadata.schema_by_id(snapshot.schema_id) if snapshot and snapshot.schema_id is not None else None
        )
        columns = columns_read(checks, schema or table.schema())
        added = read_table(table, link.snapshot_id, added_after=base, columns=columns)
    else:
        added = empty_table(table.schema().as_arrow())
    written, committed = _row_counts(table, chain, index, base, ledger)
    checkpoint = link.checkpoint_id if link.job_id else _last_checkpoint(chain, index)
    audit = AuditInput(
        added=added,
        table=table,
        snapshot_id=link.snapshot_id,
        checkpoint_id=checkpoint,
        identifier=chain.identifier,
        branch=chain.branch,
        base_snapshot_id=base,
        written_rows=written,
        committed_rows=committed,
    )
    outcome = run_checks(checks, audit)
    return AuditEntry(
        identifier=chain.identifier,
        branch=chain.branch,
        snapshot_id=link.snapshot_id,
        base_snapshot_id=base,
        job_id=link.job_id,
        checkpoint_id=link.checkpoint_id,
        passed=outcome.passed,
        rows_checked=outcome.rows_checked,
        problems=outcome.problems,
        checks=outcome.checks,
        audited_at=datetime.datetime.now(datetime.UTC),
        table_uuid=str(table.metadata.table_uuid),
    )


def _last_checkpoint(chain: Chain, index: int) -> int | None:
    """Another tool's snapshot: the checkpoint of the last icesink snapshot before it, as messages name it."""
    return next((link.checkpoint_id for link in reversed(chain.links[:index]) if link.job_id), None)


def _row_counts(table: Table, chain: Chain, index: int, base: int | None, ledger: Ledger) -> tuple[int | None, int]:
    """Rows the stream's tasks wrote for the icesink snapshots after ``base`` up to ``index``, and the rows those
    snapshots added by their summaries; written is None when the ledger no longer holds a checkpoint."""
    start = next((i + 1 for i, link in enumerate(chain.links) if link.snapshot_id == base), 0)
    written: int | None = 0
    committed = 0
    for link in chain.links[start : index + 1]:
        summary = link.snapshot.summary
        if link.job_id is None or summary is None or summary.get(JOB_ID_PROPERTY) is None:
            continue
        committed += int(summary.get("added-records") or 0)
        if written is None or link.checkpoint_id is None:
            written = None
            continue
        first = link.first_checkpoint_id if link.first_checkpoint_id is not None else link.checkpoint_id
        for checkpoint_id in range(first, link.checkpoint_id + 1):
            row = ledger.get(chain.identifier, link.job_id, checkpoint_id)
            if row is None:
                if checkpoint_id != link.checkpoint_id:  # not every id in a range is a checkpoint (empty batches)
                    continue
                written = None
                break
            if row.state != CheckpointState.DISCARDED:  # a discarded one's files never reached the table
                written += row.manifests.data_records
    return written, committed
