"""What an operator can do with a checkpoint that cannot commit: give it up, or have it tried again.

A discarded checkpoint is never committed; its job's later checkpoints
commit past it, and the next snapshot of the job names it in
``icesink.discarded-checkpoints``. Whether a checkpoint is in the table is
decided by the table's marker, as everywhere: a checkpoint the table holds is
never discarded, whatever the ledger says.
"""

from __future__ import annotations

import getpass
import socket
from dataclasses import dataclass
from typing import TYPE_CHECKING

from icesink.catalog.checkpoints import CheckpointRow, CheckpointState
from icesink.catalog.ledger import Ledger
from icesink.commands import icesink_command
from icesink.errors import ConfigError
from icesink.iceberg.marker import committed_marker

if TYPE_CHECKING:
    from pyiceberg.table import Table


@dataclass(frozen=True)
class CheckpointChoice:
    """The checkpoint an operator named, and what acting on it changes."""

    row: CheckpointRow

    def what_is_lost(self) -> str:
        r = self.row
        if r.unreadable:
            return (
                f"checkpoint {r.checkpoint_id} of job {r.job_id} of table {r.identifier} (unreadable: {r.unreadable}): "
                "whatever it staged would never reach the table"
            )
        return (
            f"checkpoint {r.checkpoint_id} of job {r.job_id} of table {r.identifier} ({r.status}): "
            f"{r.manifests.data_files} data file(s) with {r.manifests.data_records} row(s) and "
            f"{r.manifests.delete_files} delete file(s) with {r.manifests.delete_records} key(s) would never reach "
            "the table"
        )


def default_operator() -> str:
    """Who acts, as the ledger records it: the user and host running the command."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = "unknown"
    return f"{user}@{socket.gethostname()}"


def choose_checkpoint(ledger: Ledger, identifier: str, checkpoint_id: int, job_id: str | None) -> CheckpointChoice:
    """The ledger row an operator means; an error naming what to pass when it is absent or ambiguous."""
    rows = [
        r
        for r in ledger.for_table(identifier, unreadable_too=True)  # an unreadable row may be discarded
        if r.checkpoint_id == checkpoint_id and (job_id is None or r.job_id == job_id)
    ]
    if not rows:
        whose = f" of job {job_id}" if job_id is not None else ""
        raise ConfigError(
            f"table {identifier} has no checkpoint {checkpoint_id}{whose} in the ledger; "
            f"`{icesink_command('checkpoints list', identifier)}` shows its checkpoints"
        )
    if len(rows) > 1:
        jobs = ", ".join(sorted(r.job_id for r in rows))
        raise ConfigError(
            f"table {identifier}: checkpoint {checkpoint_id} exists for several jobs ({jobs}); name one with --job"
        )
    # Read again with its files: a row whose files cannot be read is unreadable, not merely failed.
    chosen = ledger.get(identifier, rows[0].job_id, checkpoint_id, unreadable_too=True, with_files=True)
    return CheckpointChoice(chosen or rows[0])


def check_not_in_table(table: Table, choice: CheckpointChoice) -> None:
    """Refuse a checkpoint the table already holds (its job's marker reached it), whatever the ledger says."""

    row = choice.row
    if row.state == CheckpointState.COMMITTED:
        raise ConfigError(
            f"table {row.identifier}: checkpoint {row.checkpoint_id} of job {row.job_id} is committed "
            f"(snapshot {row.snapshot_id}); a committed checkpoint is never discarded or retried"
        )
    if row.state == CheckpointState.DISCARDED:
        raise ConfigError(
            f"table {row.identifier}: checkpoint {row.checkpoint_id} of job {row.job_id} was discarded by "
            f"{row.discarded_by} at {row.discarded_at}; it cannot come back (replay its data under a new job)"
        )
    marker = committed_marker(table.metadata, row.job_id, row.branch)
    if marker is not None and row.checkpoint_id <= marker.checkpoint_id:
        raise ConfigError(
            f"table {row.identifier}: checkpoint {row.checkpoint_id} of job {row.job_id} is in the table "
            f"(the job's snapshots reach checkpoint {marker.checkpoint_id}); the committer marks it committed on "
            "its next pass. Nothing was changed"
        )


def discard(ledger: Ledger, table: Table, choice: CheckpointChoice, who: str, why: str) -> CheckpointRow:
    """Give the checkpoint up for good; returns the row as the ledger now holds it."""
    check_not_in_table(table, choice)
    row = choice.row
    if not ledger.discard(row.id, who, why):
        raise ConfigError(
            f"table {row.identifier}: checkpoint {row.checkpoint_id} of job {row.job_id} changed while "
            "this command ran (a committer committed it?); nothing was discarded. Look again with "
            "`icesink checkpoints list`"
        )
    updated = ledger.get(row.identifier, row.job_id, row.checkpoint_id, unreadable_too=True)
    assert updated is not None
    return updated


def retry(ledger: Ledger, table: Table, choice: CheckpointChoice) -> CheckpointRow:
    """Clear a failed checkpoint's error, so that committers try it at once."""
    check_not_in_table(table, choice)
    row = choice.row
    if row.unreadable:
        raise ConfigError(
            f"table {row.identifier}: checkpoint {row.checkpoint_id} of job {row.job_id} cannot be tried again as it "
            f"is: {row.unreadable}"
        )
    if row.error is None:
        raise ConfigError(
            f"table {row.identifier}: checkpoint {row.checkpoint_id} of job {row.job_id} has not failed; "
            "it is waiting for a committer (`icesink committer run`, or its stream's inline committer)"
        )
    ledger.clear_failure(row.id)
    updated = ledger.get(row.identifier, row.job_id, row.checkpoint_id)
    assert updated is not None
    return updated
