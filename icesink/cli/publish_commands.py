"""``icesink branches``, ``icesink audit`` and ``icesink publish``: write-audit-publish, for operators."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

import click

from icesink.cli.context import CliContext
from icesink.cli.output import Column, text_table

if TYPE_CHECKING:
    from icesink.audit.chain import Link

UNPUBLISHED_COLUMNS: list[Column[dict[str, Any]]] = [
    Column("snapshot", lambda s: s["snapshot_id"]),
    Column("committed at", lambda s: s["committed_at"]),
    Column("job", lambda s: s["job_id"] or ("(icesink maintenance)" if s["maintenance"] else "(another tool)")),
    Column("checkpoint", lambda s: s["checkpoint_id"]),
    Column("added rows", lambda s: s["added_rows"]),
    Column("audit", lambda s: s["audit"]),
    Column("problems", lambda s: "; ".join(f"{k}: {' | '.join(v)}" for k, v in s["problems"].items()) or None),
]


@click.command("branches")
@click.argument("table")
@click.option("--branch", help="Only this branch (default: every branch but main).")
@click.option("--json", "as_json", is_flag=True)
@click.pass_obj
def branches(obj: CliContext, table: str, branch: str | None, as_json: bool) -> None:
    """Show TABLE's branches: how far main is behind each, and every unpublished snapshot with its audit (passed,
    failed and why, not audited yet)."""
    from icesink.committer.branches import branches_of

    reports = branches_of(obj.table(table), table, obj.config, branch)

    def text() -> str:
        if not reports:
            return f"table {table} has no branch but main"
        parts = []
        for report in reports:
            state = (
                "DIVERGED: main's head is not an ancestor of the branch; main cannot follow it"
                if report.diverged
                else f"main is {len(report.unpublished)} snapshot(s) behind"
            )
            head = (
                f"branch {report.branch}: head {report.head_id}, main {report.main_id}, grown from {report.fork_id}; "
                f"{state}"
            )
            rows = [_row(link) for link in report.unpublished]
            parts.append(head + (f"\n{text_table(rows, UNPUBLISHED_COLUMNS)}" if rows else ""))
        return "\n\n".join(parts)

    obj.output(as_json).emit({"table": table, "branches": [r.as_json() for r in reports]}, text)


def _row(link: Link) -> dict[str, Any]:
    from icesink.committer.branches import link_json

    return link_json(link)


@click.command("audit")
@click.argument("table")
@click.option("--branch", required=True, help="The branch whose head to audit.")
@click.option("--json", "as_json", is_flag=True)
@click.pass_obj
def audit(obj: CliContext, table: str, branch: str, as_json: bool) -> None:
    """Run BRANCH's checks again on everything its head adds over main (after a fix on the branch, say) and
    record the outcome: the stream's next commit, or `icesink publish`, publishes it if it passed. Exits 0 when
    the checks pass, 1 when they fail, 2 on a mistake."""
    from icesink.catalog.ledger import Ledger
    from icesink.committer.branches import audit_again

    entry = audit_again(obj.table(table), table, branch, obj.config, Ledger(obj.config))
    if entry is None:
        obj.output(as_json).emit(
            {"table": table, "branch": branch, "passed": None},
            f"table {table}: main is at branch {branch}'s head; nothing to audit",
        )
        return

    def text() -> str:
        verdict = "passed" if entry.passed else "FAILED"
        lines = [
            f"snapshot {entry.snapshot_id} of branch {branch}: {verdict} on {entry.rows_checked} row(s) added since "
            f"main's head {entry.base_snapshot_id}"
        ]
        lines += [f"  {check}: {problem}" for check, problems in entry.problems.items() for problem in problems]
        return "\n".join(lines)

    obj.output(as_json).emit({"table": table, "branch": branch, **entry.as_json()}, text)
    if not entry.passed:
        sys.exit(1)


@click.command("publish")
@click.argument("table")
@click.option("--branch", required=True, help="The branch to publish.")
@click.option(
    "--snapshot", type=int, help="Move main to this snapshot of the branch (default: the newest that passed)."
)
@click.option("--force", is_flag=True, help="Publish even a snapshot that failed its audit or has none.")
@click.option("--json", "as_json", is_flag=True)
@click.pass_obj
def publish(obj: CliContext, table: str, branch: str, snapshot: int | None, force: bool, as_json: bool) -> None:
    """Move TABLE's main forward to a snapshot of BRANCH, by compare-and-swap: the newest one that passed its audit,
    or --snapshot (which must descend from main's head). Refuses when main moved on its own."""
    from icesink.committer.branches import publish_branch
    from icesink.committer.operator import default_operator

    by = default_operator()
    before, after = publish_branch(obj.catalog(), obj.config, table, branch, by, snapshot, force)
    obj.output(as_json).emit(
        {"table": table, "branch": branch, "main_before": before, "main_after": after, "by": by},
        f"table {table}: main moved from {before} to snapshot {after} of branch {branch}",
    )
