"""Commands that commit and clean: the committer daemon, garbage collection and maintenance."""

from __future__ import annotations

import datetime
import logging
import sys
from collections.abc import Callable
from shlex import quote
from typing import TYPE_CHECKING, Any, TypeVar

import click

from icesink.cli.context import CliContext
from icesink.cli.output import Column, progress, step_progress, text_table
from icesink.errors import ConfigError, IcesinkError
from icesink.settings import DAEMON_SETTINGS

if TYPE_CHECKING:
    from pyiceberg.table import Table


class _Seconds(click.FloatRange):
    """A finite number of seconds above zero: a zero or negative lease or poll interval would spin or never hold."""

    name = "seconds"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        import math

        seconds = super().convert(value, param, ctx)
        if not math.isfinite(seconds):
            self.fail(f"{value!r} is not a finite number of seconds", param, ctx)
        return seconds


FC = TypeVar("FC", bound=Callable[..., Any])  # a command function, as click's decorators take it
POSITIVE_SECONDS = _Seconds(min=0, min_open=True)
SECONDS = _Seconds(min=0)
# `committer run --once` found another committer holding its lease and did not (or no longer) wait for it: not a
# failure of any table (2), and a script may well treat it as "someone else is on it".
LEASE_HELD = 3
MIN_GC_AGE = datetime.timedelta(minutes=1)


def daemon_option(envvar: str, **typed: Any) -> Callable[[FC], FC]:
    """An option of ``committer run`` as ``icesink.settings.DAEMON_SETTINGS`` describes it (its flag, default,
    environment variable and help), with its ``type``."""
    setting = DAEMON_SETTINGS[envvar]
    help_text = setting.meaning[0].upper() + setting.meaning[1:] + "."
    if isinstance(setting.default, bool):
        return click.option(setting.option, is_flag=True, envvar=envvar, show_envvar=True, help=help_text)
    shown = setting.default is not None
    return click.option(
        setting.option,
        default=setting.default,
        show_default=shown,
        envvar=envvar,
        show_envvar=True,
        help=help_text,
        **typed,
    )


@click.group()
def committer() -> None:
    """The committer daemon."""


@committer.command("run")
@click.option("--table", "tables", multiple=True, help="Only commit these tables (repeatable).")
@click.option(
    "--once",
    is_flag=True,
    help="Drain what is pending, then exit: 2 if a table failed, 3 if another committer holds the lease.",
)
@click.option(
    "--wait",
    type=SECONDS,
    metavar="SECONDS",
    help="With --once: stand by up to SECONDS for a lease another committer holds, as a standby does, "
    "before exiting 3.",
)
@daemon_option("ICESINK_POLL_INTERVAL", type=POSITIVE_SECONDS)
@daemon_option("ICESINK_LEASE_TTL", type=POSITIVE_SECONDS)
@daemon_option("ICESINK_METRICS_PORT", type=click.IntRange(0, 65535))
@daemon_option("ICESINK_METRICS_HOST")
@daemon_option("ICESINK_MAX_FAILURES", type=click.IntRange(min=1))
@daemon_option("ICESINK_EXPIRE_SNAPSHOTS")
@daemon_option("ICESINK_MAINTAIN")
@click.pass_obj
def committer_run(
    obj: CliContext,
    tables: tuple[str, ...],
    once: bool,
    wait: float | None,
    poll_interval: float,
    lease_ttl: float,
    metrics_port: int | None,
    metrics_host: str,
    max_failures: int,
    expire_snapshots: bool,
    maintain: bool,
) -> None:
    """Commit staged checkpoints into their tables until stopped (SIGTERM/SIGINT finish the commit in flight).

    One committer per scope (all tables, or the --table list) is active; others wait as standbys
    and take over when its lease expires. With --once it does not wait: it exits 3 naming the
    committer that holds the lease, unless --wait gives it time to take over.
    """
    from icesink.committer.daemon import CommitterDaemon
    from icesink.errors import LeaseHeldError

    if wait is not None and not once:
        raise click.BadParameter(
            "applies with --once: without it the committer stands by for as long as it runs", param_hint="--wait"
        )
    _check_committer_options(obj, tables, once, poll_interval, lease_ttl)
    logging.getLogger("icesink").setLevel(logging.INFO)
    daemon = CommitterDaemon(
        obj.config,
        tables=tables,
        poll_interval=poll_interval,
        lease_ttl=lease_ttl,
        max_failures=max_failures,
        expire_snapshots=expire_snapshots,
        maintain=maintain,
    )
    daemon.install_signal_handlers()
    server = None
    if metrics_port is not None:
        from icesink.committer.observability import StatusServer

        server = StatusServer(
            metrics_host, metrics_port, daemon.metrics, daemon.problems, daemon.jobs, daemon.failures, daemon.audits
        )
        server.start()
        logging.getLogger("icesink.committer").info("metrics and health on http://%s:%d", metrics_host, server.port)
    try:
        report = daemon.run(once=once, wait=wait)
    except LeaseHeldError as e:
        click.echo(f"error: {e}", err=True)
        sys.exit(LEASE_HELD)
    finally:
        if server is not None:
            server.stop()
    if once and report.failed:
        for line in _failures(report.errors):
            click.echo(f"error: {line}", err=True)
        sys.exit(2)


def _check_committer_options(
    obj: CliContext, tables: tuple[str, ...], once: bool, poll_interval: float, lease_ttl: float
) -> None:
    from icesink.catalog.loader import check_identifier
    from icesink.errors import TableNotFoundError

    if poll_interval >= lease_ttl:
        # The lease is renewed once per poll: it would lapse between polls and standbys would take over.
        raise click.BadParameter(
            f"{poll_interval:g}s is not below --lease-ttl ({lease_ttl:g}s; ICESINK_LEASE_TTL): the lease is renewed "
            "once per poll, so it would lapse between polls; poll more often or raise --lease-ttl",
            param_hint="--poll-interval",
        )
    for table in tables:
        check_identifier(table)
        try:
            obj.table(table, pending_tables=True)
        except TableNotFoundError:
            if once:
                raise
            logging.getLogger("icesink.committer").warning("table %s does not exist (yet); waiting for it", table)


def _failures(errors: dict[str, dict[str, object]]) -> list[str]:
    """Each error once: tables committed together fail together, with one error and the tables it holds back."""
    by_error: dict[tuple[object, ...], list[str]] = {}
    for table, fields in errors.items():
        where = (fields["message"], fields.get("table"), fields.get("checkpoint_id"), fields.get("job_id"))
        by_error.setdefault(where, []).append(table)
    lines = []
    for (message, own, _, _), tables in by_error.items():  # own: the table the error is about, as it says
        error = str(message)
        held = [t for t in tables if t != own]
        if own not in tables:  # about no table of these: the first one is said to be it
            own, held = tables[0], tables[1:]
        if not error.startswith(f"table {own}"):  # a message that does not say which table (a lost database)
            error = f"table {own}: {error}"
        lines.append(f"{error} (it also holds back {', '.join(held)}, committed with it)" if held else error)
    return lines


@committer.command("gc")
@click.option("--table", "tables", multiple=True, help="Only these tables (repeatable); default: every table.")
@click.option(
    "--older-than",
    default="3d",
    show_default=True,
    help="Only files last modified longer ago than this (90s, 30m, 12h, 3d); keep it above the longest batch.",
)
@click.option("--dry-run", is_flag=True, help="Report what would be deleted; delete nothing.")
@click.option("--json", "as_json", is_flag=True)
@click.pass_obj
def committer_gc(obj: CliContext, tables: tuple[str, ...], older_than: str, dry_run: bool, as_json: bool) -> None:
    """Delete files no snapshot and no checkpoint references (failed attempts, expired snapshots, merged manifests).

    Also forgets committed checkpoints older than --older-than in the ledger (the newest of each job stays), and
    the audits of snapshots the table has expired (the newest of each branch and job stays).
    """
    from dataclasses import asdict

    from icesink.committer.gc import collect_garbage, parse_age

    try:
        age = parse_age(older_than)
    except ValueError as e:
        raise click.BadParameter(str(e), param_hint="--older-than") from e
    if age < MIN_GC_AGE:
        # A micro-batch's files are on storage before its checkpoint is staged: to gc they look unreferenced.
        raise click.BadParameter(
            f"{older_than!r} is under a minute: files of a micro-batch still being written are referenced by "
            "nothing yet and would be deleted; use an age above your longest micro-batch (at least 1m)",
            param_hint="--older-than",
        )
    from icesink.catalog.database import database_errors

    catalog = obj.catalog(pending_tables=True)
    for table in tables:
        obj.table(table, pending_tables=True)  # a misspelt --table is an error, not an empty report
    if not tables:
        from icesink.catalog.views import table_names

        with database_errors(obj.config):
            tables = tuple(table_names(catalog, pending=True))
    reports, errors = [], []
    for table in progress(tables, "collecting garbage"):
        try:  # a table gc must leave alone (an unreadable staged manifest) does not keep the others dirty
            reports.append(collect_garbage(catalog, obj.config, table, age, dry_run=dry_run))
        except IcesinkError as e:
            errors.append(str(e))
    columns: list[Column[Any]] = [
        Column("table", lambda r: r.table),
        Column("files", lambda r: r.files_seen),
        Column("referenced", lambda r: r.referenced),
        Column("too young", lambda r: r.too_young),
        Column("would delete" if dry_run else "deleted", lambda r: len(r.deleted)),
        Column("ledger rows pruned", lambda r: r.ledger_rows_pruned),
        Column("audit rows pruned", lambda r: r.audit_rows_pruned),
    ]
    obj.output(as_json).emit([asdict(r) for r in reports], lambda: text_table(reports, columns))
    for error in errors:
        click.echo(f"error: {error}", err=True)
    if errors:
        sys.exit(2)


@click.command("maintain")
@click.argument("table")
@click.option(
    "--all", "everything", is_flag=True, help="Everything worth doing, not only what the thresholds say is due."
)
@click.option("--dry-run", is_flag=True, help="Report what would be done; change nothing.")
@click.option(
    "--branch",
    default=None,
    help="The branch to maintain (default main). A stream into a branch is maintained on that branch, so that main "
    "can still follow it.",
)
@click.option("--json", "as_json", is_flag=True)
@click.option(
    "--lease-ttl",
    type=POSITIVE_SECONDS,
    default=10.0,
    show_default=True,
    envvar="ICESINK_LEASE_TTL",
    show_envvar=True,
    help="Seconds without renewal after which another maintainer of the table may take over.",
)
@click.pass_obj
def maintain(
    obj: CliContext, table: str, everything: bool, dry_run: bool, branch: str | None, as_json: bool, lease_ttl: float
) -> None:
    """Convert TABLE's equality deletes into position deletes and compact its small files, when due.

    Thresholds are the table's icesink.maintain.* properties; --all does everything worth doing. Safe
    while streams commit: maintenance commits are checked against what was committed meanwhile.
    """
    from dataclasses import asdict

    from pyiceberg.table.refs import MAIN_BRANCH

    from icesink.committer.maintainer import Maintainer, describe
    from icesink.maintenance.policy import MaintenancePolicy
    from icesink.maintenance.run import MaintenanceRequest

    iceberg_table = obj.table(table, pending_tables=True)
    policy = MaintenancePolicy.of(iceberg_table.properties, table)
    branch = maintained_branch(iceberg_table, table, branch)

    with step_progress(f"maintaining {table}") as step:

        def report_group(number: int, group: Any, result: Any) -> None:
            step(
                number + 1,
                result.groups_planned,
                f"group {number + 1}/{result.groups_planned}: {len(group.files)} file(s), "
                f"{group.bytes / 2**20:.1f} MiB; {result.files_written} file(s) written so far, {result.seconds:.1f}s",
            )

        request = MaintenanceRequest(policy, everything=everything, dry_run=dry_run, progress=report_group)
        report = Maintainer(obj.catalog(pending_tables=True), obj.config, lease_ttl=lease_ttl).run(
            iceberg_table, table, request, branch
        )
    if dry_run:
        text = (
            f"table {table}: {report.before.data_files} data file(s), {report.before.position_delete_files} position "
            f"and {report.before.equality_delete_files} equality delete file(s); would rewrite "
            f"{report.planned_files} file(s) in {report.planned_groups} group(s), and merge the position deletes of "
            f"{report.planned_delete_merges} partition(s)"
        )
        if report.notes:
            text += "; " + "; ".join(report.notes)
    else:
        text = f"table {table}: {describe(report)}"
    if branch != MAIN_BRANCH:
        text = text.replace(f"table {table}:", f"table {table} branch {branch}:", 1)
    obj.output(as_json).emit(asdict(report), text)


def maintained_branch(iceberg_table: Table, table: str, branch: str | None) -> str:
    """The branch ``icesink maintain`` works on: the one named, or main when no branch would diverge from it."""
    from pyiceberg.table.refs import MAIN_BRANCH, SnapshotRefType

    from icesink.iceberg.publish import branches_following_main

    refs = iceberg_table.metadata.refs
    if branch is not None:
        if branch != MAIN_BRANCH and (branch not in refs or refs[branch].snapshot_ref_type != SnapshotRefType.BRANCH):
            known = ", ".join(sorted(n for n, r in refs.items() if r.snapshot_ref_type == SnapshotRefType.BRANCH))
            what = f": {branch!r} is a tag, not a branch" if branch in refs else f" has no branch {branch!r}"
            raise ConfigError(f"table {table}{what} (its branches: {known or 'none'})", table=table)
        return branch
    others = sorted(n for n, r in refs.items() if n != MAIN_BRANCH and r.snapshot_ref_type == SnapshotRefType.BRANCH)
    if MAIN_BRANCH not in refs and others:
        raise ConfigError(
            f"table {table}: main has no snapshot yet, and its branches do ({', '.join(others)}); name the one to "
            f"maintain, e.g. --branch {quote(others[0])}",
            table=table,
        )
    following = branches_following_main(iceberg_table)
    if following:
        names = ", ".join(following)
        raise ConfigError(
            f"table {table}: main can be fast-forwarded along branch {names}; maintaining main would commit to main "
            "alone and make main diverge from it, which stops publishing. Maintain the branch instead (--branch "
            f"{quote(following[0])}): main gets the maintained files when it is published. To maintain main anyway, "
            "give --branch main",
            table=table,
        )
    return MAIN_BRANCH
