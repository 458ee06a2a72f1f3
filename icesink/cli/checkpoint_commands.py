"""Commands about the ledger: checkpoints per table (and an operator's discard or retry of one), and jobs."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import click

from icesink.cli.catalog_commands import short_commit
from icesink.cli.context import CliContext
from icesink.cli.output import Column, text_table
from icesink.commands import icesink_command

LAG_COLUMNS: list[Column[Any]] = [
    Column("job", lambda j: j.job_id),
    Column("pending", lambda j: j.pending),
    Column("failed", lambda j: j.failed),
    Column("committed", lambda j: j.committed),
    Column("last staged", lambda j: j.last_staged_checkpoint),
    Column("last committed", lambda j: j.last_committed_checkpoint),
    Column("committed at", lambda j: j.last_committed_at),
    Column("lag", lambda j: f"{j.lag_seconds:.1f}s"),
]


def _snapshot_of(row: Any) -> Any:
    from icesink.catalog.checkpoints import CheckpointState

    return row.snapshot_id if row.state == CheckpointState.COMMITTED else None  # a discard's is where it is named


CHECKPOINT_COLUMNS: list[Column[Any]] = [
    Column("job", lambda r: r.job_id),
    Column("checkpoint", lambda r: r.checkpoint_id),
    Column("state", lambda r: r.status),
    Column("files", lambda r: r.manifests.data_files),
    Column("records", lambda r: r.manifests.data_records),
    Column("delete files", lambda r: r.manifests.delete_files),
    Column("snapshot", _snapshot_of),
    Column("staged at", lambda r: r.staged_at),
    Column("committed at", lambda r: r.committed_at),
    Column("commit", lambda r: short_commit(r.commit_id)),
]
JOB_COLUMNS: list[Column[Any]] = [
    Column("job", lambda j: j.job_id),
    Column("atomic", lambda j: "yes" if j.atomic else "no"),
    Column("tables", lambda j: len(j.tables)),
    Column("pending", lambda j: j.pending),
    Column("failed", lambda j: j.failed),
    Column("last committed", lambda j: j.last_committed_checkpoint),
    Column("oldest pending", lambda j: j.oldest_pending_at),
]
JOB_TABLE_COLUMNS: list[Column[tuple[str, Any]]] = [
    Column("table", lambda t: t[0]),
    Column("last committed checkpoint", lambda t: t[1]),
]


def checkpoint_json(row: Any) -> dict[str, Any]:
    """A ledger row as flat JSON: its manifests as flat fields, and its status."""
    from dataclasses import fields

    from icesink.catalog.ledger import LEDGER_COLUMN

    # Named as the ledger's columns are (``table_identifier``), which scripts read.
    shown = [f for f in fields(row) if f.name not in ("manifests", "files")]  # the files: counts, below
    plain = {LEDGER_COLUMN.get(f.name, f.name): getattr(row, f.name) for f in shown}
    plain["snapshot_properties"] = dict(row.snapshot_properties)  # as the snapshot's summary will hold them
    return {**plain, **row.manifests.flat(), "status": row.status}


@click.group()
def checkpoints() -> None:
    """Checkpoints staged by streams, per job."""


@checkpoints.command("list")
@click.argument("table")
@click.option(
    "--limit",
    type=click.IntRange(min=0),
    default=20,
    show_default=True,
    help="Newest checkpoints shown per job; 0 shows all.",
)
@click.option("--json", "as_json", is_flag=True)
@click.pass_obj
def checkpoints_list(obj: CliContext, table: str, limit: int, as_json: bool) -> None:
    """Per job: pending, failed and committed checkpoints of TABLE and the commit lag; then the newest checkpoints.

    The lag is how long the oldest checkpoint still waiting for its commit has waited.
    """
    from dataclasses import asdict

    from icesink.catalog.audit_record import AuditRecord
    from icesink.catalog.ledger import Ledger
    from icesink.errors import TableNotFoundError

    ledger = Ledger(obj.config)
    try:
        obj.table(table, pending_tables=True)  # also checks (or, for the embedded default, applies) the migrations
    except TableNotFoundError:
        if not ledger.for_table(table, newest=1, unreadable_too=True):
            raise  # neither a table nor checkpoints: most likely a typo
    jobs = ledger.lag(table)
    # Staged rows read again with their files: one whose files cannot be read shows as unreadable, as the committer
    # finds it.
    rows = ledger.with_files(ledger.for_table(table, newest=limit or None, unreadable_too=True))
    # A checkpoint committed to an audited branch (write-audit-publish): its snapshot's audit, and whether main has it.
    snapshots = [r.snapshot_id for r in rows if r.snapshot_id is not None and r.branch != "main"]
    audits = {(e.snapshot_id, e.branch): e for e in AuditRecord(obj.config).of_snapshots(table, snapshots)}

    def audit_of(row: Any) -> Any:
        return audits.get((row.snapshot_id, row.branch))

    def audit_word(row: Any) -> str | None:
        entry = audit_of(row)
        if entry is None:
            return None
        return ("passed" if entry.passed else "FAILED") + (", published" if entry.published_at else "")

    columns = [*CHECKPOINT_COLUMNS, Column("audit", audit_word)] if audits else CHECKPOINT_COLUMNS
    listed = [{**checkpoint_json(r), **({"audit": audit_of(r).as_json()} if audit_of(r) else {})} for r in rows]
    obj.output(as_json).emit(
        {"jobs": [asdict(j) for j in jobs], "checkpoints": listed},
        lambda: "\n\n".join(
            [text_table(jobs, LAG_COLUMNS), text_table(rows, columns), *_attention(ledger, table, rows)]
        ),
    )


def _attention(ledger: Any, table: str, rows: Sequence[Any]) -> list[str]:
    """The sections about checkpoints someone should look at: failed, discarded, held back by another table."""
    from icesink.catalog.checkpoints import CheckpointState

    sections = []
    errors = [
        f"checkpoint {r.checkpoint_id} of job {r.job_id} (at {r.failed_at}): {r.error}"
        for r in rows
        if r.status == "failed"
    ]
    if errors:
        sections.append(
            "failed (`icesink checkpoints retry` once the cause is fixed, or `discard`):\n" + "\n".join(errors)
        )
    unreadable = [
        f"checkpoint {r.checkpoint_id} of job {r.job_id}: {r.unreadable}" for r in rows if r.status == "unreadable"
    ]
    if unreadable:
        sections.append(
            "unreadable (as each says, or `icesink checkpoints discard` to give it up):\n" + "\n".join(unreadable)
        )
    discarded = [
        f"checkpoint {r.checkpoint_id} of job {r.job_id} by {r.discarded_by} at {r.discarded_at}: {r.discard_reason}"
        for r in rows
        if r.state == CheckpointState.DISCARDED
    ]
    if discarded:
        sections.append("discarded:\n" + "\n".join(discarded))
    held = _held_back(ledger, table, rows)
    if held:
        sections.append("held back (committed together with a table whose checkpoint failed):\n" + "\n".join(held))
    return sections


def _held_back(ledger: Any, table: str, rows: Sequence[Any]) -> list[str]:
    """This table's staged checkpoints that wait for another table of their atomic job to commit."""
    lines = []
    for job in sorted({r.job_id for r in rows if r.atomic and r.status == "staged"}):
        failing = [
            r
            for r in ledger.pending_atomic(job, unreadable_too=True, with_files=True)
            if r.identifier != table and r.status in ("failed", "unreadable")
        ]
        if failing:
            first = failing[0]
            lines.append(
                f"job {job}: waits for checkpoint {first.checkpoint_id} of table {first.identifier} "
                f"(`{icesink_command('checkpoints list', first.identifier)}` says why)"
            )
    return lines


def _operator_choice(obj: CliContext, table: str, checkpoint: int, job: str | None) -> tuple[Any, Any, Any]:
    from icesink.catalog.ledger import Ledger
    from icesink.committer.operator import choose_checkpoint

    iceberg_table = obj.table(table, pending_tables=True)
    ledger = Ledger(obj.config)
    return ledger, iceberg_table, choose_checkpoint(ledger, table, checkpoint, job)


@checkpoints.command("discard")
@click.argument("table")
@click.argument("checkpoint", type=click.IntRange(min=0))
@click.option("--job", help="The checkpoint's job, when several jobs have one of that number.")
@click.option("--reason", help="Why, for the ledger and the next snapshot (default: the checkpoint's error).")
@click.option("--yes", is_flag=True, help="Discard it; without --yes, only say what would be lost.")
@click.option("--json", "as_json", is_flag=True)
@click.pass_obj
def checkpoints_discard(
    obj: CliContext, table: str, checkpoint: int, job: str | None, reason: str | None, yes: bool, as_json: bool
) -> None:
    """Give up a staged or failed CHECKPOINT of TABLE for good, so that the checkpoints after it commit.

    Its rows never reach the table. The ledger keeps who discarded it, when and why, and the next snapshot
    of its job names it in icesink.discarded-checkpoints. A committed checkpoint is never discarded.
    """

    from icesink.committer.operator import check_not_in_table, default_operator, discard

    ledger, iceberg_table, choice = _operator_choice(obj, table, checkpoint, job)
    if not yes:
        check_not_in_table(iceberg_table, choice)
        obj.output(as_json).emit(
            {"discarded": False, "would_lose": checkpoint_json(choice.row)},
            f"{choice.what_is_lost()}.\nNothing was changed; add --yes to discard it.",
        )
        return
    why = reason or choice.row.error or "no reason given"
    row = discard(ledger, iceberg_table, choice, default_operator(), why)
    obj.output(as_json).emit(
        {"discarded": True, "checkpoint": checkpoint_json(row)},
        f"discarded checkpoint {row.checkpoint_id} of job {row.job_id} of table {table} "
        f"({'an unknown number of' if row.unreadable else row.manifests.data_records} row(s) lost), "
        f"by {row.discarded_by}: {why}",
    )


@checkpoints.command("retry")
@click.argument("table")
@click.argument("checkpoint", type=click.IntRange(min=0))
@click.option("--job", help="The checkpoint's job, when several jobs have one of that number.")
@click.pass_obj
def checkpoints_retry(obj: CliContext, table: str, checkpoint: int, job: str | None) -> None:
    """Have a failed CHECKPOINT of TABLE tried again now that its cause is fixed (committers pick it up at once)."""
    from icesink.committer.operator import retry

    ledger, iceberg_table, choice = _operator_choice(obj, table, checkpoint, job)
    row = retry(ledger, iceberg_table, choice)
    obj.output().emit(
        {"retried": checkpoint_json(row)},
        f"checkpoint {row.checkpoint_id} of job {row.job_id} of table {table} will be tried again",
    )


@click.group()
def jobs() -> None:
    """Streams (jobs) and the tables each writes."""


@jobs.command("list")
@click.option("--json", "as_json", is_flag=True)
@click.pass_obj
def jobs_list(obj: CliContext, as_json: bool) -> None:
    """Every job with its tables: a stream into many tables is one job; atomic ones commit them together."""
    from dataclasses import asdict

    from icesink.catalog.ledger import Ledger

    obj.catalog(pending_tables=True)  # checks (or, for the embedded default, applies) the migrations
    found = Ledger(obj.config).jobs()

    def text() -> str:
        return "".join(
            [
                text_table(found, JOB_COLUMNS),
                *(f"\n\njob {j.job_id}:\n" + text_table(j.tables.items(), JOB_TABLE_COLUMNS) for j in found),
            ]
        )

    obj.output(as_json).emit([asdict(j) for j in found], text)
