"""What publishing tells an operator: a failed audit, a branch main cannot follow, checks the committer lacks."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from icesink.catalog.audit_record import AuditEntry
from icesink.commands import icesink_command
from icesink.table_ref import TableRef

if TYPE_CHECKING:
    from icesink.audit.chain import Chain


def failure_message(entry: AuditEntry, main_id: int | None, stopped: bool = False) -> str:
    """An audit failure in words: where, which checks, what they found, and the ways out."""
    where = str(TableRef(entry.identifier, entry.branch))
    checkpoint = f" (checkpoint {entry.checkpoint_id} of job {entry.job_id})" if entry.job_id else " (another tool's)"
    found = "; ".join(f"{check}: {' | '.join(problems)}" for check, problems in entry.problems.items())
    table, branch = entry.identifier, entry.branch
    main = f"main stays at snapshot {main_id}" if main_id is not None else "main does not exist yet and is not created"
    stream = (
        "The stream stopped (on_audit_failure='stop'): fix the rows on the branch with another tool and restart it, "
        "and its next snapshot is audited with everything it adds over main"
        if stopped
        else f"The stream goes on writing to branch {entry.branch}. Fix the rows on the branch (with another tool, or "
        "a later checkpoint): the next snapshot is audited with everything it adds over main"
    )
    return (
        f"table {where}: snapshot {entry.snapshot_id}{checkpoint} failed its audit: {found}. {main}. {stream}. "
        f"`{icesink_command('branches', table)}` shows what is unpublished, "
        f"`{icesink_command('audit', table, options=('--branch', branch))}` checks the branch again, "
        f"`{icesink_command('publish', table, options=('--branch', branch, '--force'))}` publishes it anyway"
    )


def missing_checks_message(identifier: str, missing: Sequence[str]) -> str:
    return (
        f"table {identifier}: its stream's checks {', '.join(missing)} cannot be imported by this committer, so its "
        "branch is not audited and main does not move; install the module that holds them where the committer "
        "runs: the branch is audited on the next pass"
    )


def diverged_message(identifier: str, branch: str, chain: Chain) -> str:
    return (
        f"table {identifier}: main's head {chain.line.main_id} is not an ancestor of the head {chain.line.head_id} "
        f"of branch {branch} (another tool committed to main, or the branch was rolled back below it), so main "
        "cannot follow the branch. Nothing is lost: the stream goes on writing to the branch, and main keeps what "
        "the other tool committed. To go on, make main an ancestor of the branch again: apply main's own change to "
        "the branch as well, then roll main back to the snapshot the branch grew from "
        f"(`{icesink_command('branches', identifier, options=('--branch', branch))}` shows both); publishing resumes "
        "by itself"
    )


def replaced_table_message(ref: TableRef, was: str, now: str) -> str:
    return (
        f"table {ref}: it was written, or its publishing declared, for the table of uuid {was}, but the table of "
        f"that name is now another one (uuid {now}): it was dropped and created again since, or another table was "
        "renamed to its name. The new table is neither audited with the old one's checks nor published by what was "
        "declared for the old one (the committer daemon forgets that), and holds no other table back; a stream "
        "that writes the new table audits and publishes it by its own checks"
    )
