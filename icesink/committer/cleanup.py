"""Letting go of what committed checkpoints staged (their files are in the table now): the entries of their
files in their ledger rows, and the delta manifest files of checkpoints staged by releases before."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING

from icesink.catalog.checkpoints import CheckpointRow
from icesink.catalog.ledger import Ledger
from icesink.failpoints import failpoint
from icesink.iceberg.references import delete_quietly

if TYPE_CHECKING:
    from pyiceberg.table import Table

log = logging.getLogger("icesink.committer")


def clean_staged(ledger: Ledger, table: Table, rows: Sequence[CheckpointRow]) -> None:
    """Let go of what committed checkpoints staged; a failure to delete a manifest file is only logged (the next
    run, or gc, retries)."""
    clean_staged_of(ledger, [(table, rows)])


def clean_staged_of(ledger: Ledger, committed: Sequence[tuple[Table, Sequence[CheckpointRow]]]) -> None:
    """:func:`clean_staged` for several tables, with one ledger update for all of them."""

    cleaned = []
    for table, rows in committed:
        for row in rows:
            try:
                if row.manifests.present():
                    failpoint("committer.during-cleanup")
                for path in row.manifest_paths:
                    delete_quietly(table.io, [path])
                cleaned.append(row.id)
            except OSError as e:  # the next run (or gc) retries
                log.warning(
                    "table=%s: could not delete staged manifest of checkpoint %d: %s",
                    row.identifier,
                    row.checkpoint_id,
                    e,
                )
    ledger.mark_cleaned(cleaned)
