"""The ``icesink`` command line: catalog database, tables, snapshots, checkpoints and the committer."""

# Over 400 lines: every command is here, each a few lines of options around a call; splitting it into a
# package with one output layer (text and JSON from the same column specs) is the next step.

from __future__ import annotations

import datetime
import json
import logging
import sys
from collections.abc import Sequence
from typing import Any

import click

from icesink.errors import IcesinkError, SnapshotNotFoundError


class Context:
    def __init__(self, name: str | None, uri: str | None, warehouse: str | None) -> None:
        self._args = (name, uri, warehouse)
        self._config: Any = None

    @property
    def config(self) -> Any:
        if self._config is None:
            from icesink.catalog.config import CatalogConfig

            name, uri, warehouse = self._args
            self._config = CatalogConfig.resolve(name=name, uri=uri, warehouse=warehouse)
        return self._config

    def catalog(self) -> Any:
        from icesink.catalog.loader import open_catalog

        return open_catalog(self.config)

    def table(self, identifier: str) -> Any:
        from icesink.catalog.loader import load_table

        return load_table(self.catalog(), self.config, identifier)


def _table(rows: Sequence[Sequence[Any]], headers: Sequence[str]) -> str:
    cells = [[("" if v is None else str(v)) for v in row] for row in rows]
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(headers)]
    line = "  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True))
    body = ["  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)) for r in cells]
    return "\n".join([line, "  ".join("-" * w for w in widths), *body])


def json_value(value: Any) -> Any:
    """A value as strict JSON can hold it (docs/operations/cli.md).

    NaN and infinities become the strings ``"NaN"``, ``"Infinity"``, ``"-Infinity"``
    (JSON has no such numbers); binary becomes base64; decimals become strings, so
    no digit is lost to a float; dates and times become ISO 8601 strings.
    """
    import base64
    import datetime
    import decimal
    import math

    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, bytes):
        return base64.b64encode(value).decode("ascii")
    if isinstance(value, decimal.Decimal):
        return format(value, "f")  # never exponent notation: "-0.000000001", not "-1E-9"
    if isinstance(value, datetime.date | datetime.time):
        return value.isoformat()
    if isinstance(value, dict):
        return {str(k): json_value(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_value(v) for v in value]
    return value


CHECKPOINT_HEADERS = (
    "job",
    "checkpoint",
    "state",
    "files",
    "records",
    "delete files",
    "snapshot",
    "staged at",
    "committed at",
    "commit",
)


def _lag_text(jobs: Sequence[Any]) -> str:
    return _table(
        [
            [
                j.job_id,
                j.pending,
                j.failed,
                j.committed,
                j.last_staged_checkpoint,
                j.last_committed_checkpoint,
                j.last_committed_at,
                f"{j.lag_seconds:.1f}s",
            ]
            for j in jobs
        ],
        ["job", "pending", "failed", "committed", "last staged", "last committed", "committed at", "lag"],
    )


def _checkpoints_text(rows: Sequence[Any]) -> str:
    from icesink.committer.checkpoints import CheckpointState

    return _table(
        [
            [
                r.job_id,
                r.checkpoint_id,
                r.status,
                r.manifests.data_files,
                r.manifests.data_records,
                r.manifests.delete_files,
                r.snapshot_id if r.state == CheckpointState.COMMITTED else None,  # a discard's is where it is named
                r.staged_at,
                r.committed_at,
                _short(r.commit_id),
            ]
            for r in rows
        ],
        CHECKPOINT_HEADERS,
    )


def _attention(ledger: Any, table: str, rows: Sequence[Any]) -> list[str]:
    """The sections about checkpoints someone should look at: failed, discarded, held back by another table."""
    from icesink.committer.checkpoints import CheckpointState

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
        failing = [r for r in ledger.pending_atomic(job) if r.table_identifier != table and r.status == "failed"]
        if failing:
            first = failing[0]
            lines.append(
                f"job {job}: waits for checkpoint {first.checkpoint_id} of table {first.table_identifier} "
                f"(`icesink checkpoints list {first.table_identifier}` says why)"
            )
    return lines


def _short(commit_id: str | None) -> str | None:
    """The start of an atomic commit's id: enough to see which snapshots and checkpoints went together."""
    return commit_id[:8] if commit_id else None


def _checkpoint_json(row: Any) -> dict[str, Any]:
    """A ledger row as flat JSON: its manifests as the columns they are stored in, and its status."""
    from dataclasses import fields

    plain = {f.name: getattr(row, f.name) for f in fields(row) if f.name != "manifests"}
    return {**plain, **row.manifests.columns(), "status": row.status}


def _json(data: Any, indent: int | None = 2) -> str:
    return json.dumps(json_value(data), indent=indent, allow_nan=False, default=str)


def _emit(as_json: bool, data: Any, text: str) -> None:
    click.echo(_json(data) if as_json else text)


class _Seconds(click.FloatRange):
    """A finite number of seconds above zero: a zero or negative lease or poll interval would spin or never hold."""

    name = "seconds"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        import math

        seconds = super().convert(value, param, ctx)
        if not math.isfinite(seconds):
            self.fail(f"{value!r} is not a finite number of seconds", param, ctx)
        return seconds


POSITIVE_SECONDS = _Seconds(min=0, min_open=True)
MIN_GC_AGE = datetime.timedelta(minutes=1)


class IcesinkGroup(click.Group):
    """Shows icesink errors as one clear line and exit code 2, not a traceback."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except IcesinkError as e:
            click.echo(f"error: {e}", err=True)
            sys.exit(2)


@click.group(cls=IcesinkGroup)
@click.option(
    "--catalog",
    "name",
    envvar="ICESINK_CATALOG",
    help="Catalog name in .pyiceberg.yaml / PYICEBERG_CATALOG__<NAME>__*.",
)
@click.option("--uri", help="Catalog database URL (overrides the configuration).")
@click.option("--warehouse", help="Warehouse location (overrides the configuration).")
@click.option("-v", "--verbose", is_flag=True, help="Log at INFO level.")
@click.pass_context
def main(ctx: click.Context, name: str | None, uri: str | None, warehouse: str | None, verbose: bool) -> None:
    """Exactly-once streaming writes from Spark into Iceberg tables."""
    logging.basicConfig(
        level=logging.INFO if verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s %(message)s",
    )
    from icesink.settings import check_environment

    check_environment()
    ctx.obj = Context(name, uri, warehouse)


@main.group()
def db() -> None:
    """The catalog database schema."""


@db.command("upgrade")
@click.pass_obj
def db_upgrade(obj: Context) -> None:
    """Create or migrate the catalog and ledger tables."""
    from icesink import migrations
    from icesink.catalog import database

    database.upgrade(obj.config)
    click.echo(f"{obj.config.describe()} is at schema revision {migrations.head_revision()}")


@main.group()
def tables() -> None:
    """Tables in the catalog."""


@tables.command("list")
@click.option("--json", "as_json", is_flag=True)
@click.pass_obj
def tables_list(obj: Context, as_json: bool) -> None:
    """List every table with its current snapshot."""
    from icesink.catalog.database import database_errors

    catalog = obj.catalog()
    rows: list[dict[str, Any]] = []
    errors = []
    with database_errors(obj.config):
        names = [".".join(i) for namespace in catalog.list_namespaces() for i in catalog.list_tables(namespace)]
    for name in names:
        try:  # one unreadable table does not hide the others
            table = obj.table(name)
        except IcesinkError as e:
            errors.append(str(e))
            rows.append(
                {
                    "table": name,
                    "snapshots": None,
                    "current_snapshot_id": None,
                    "total_records": None,
                    "location": None,
                    "error": str(e),
                }
            )
            continue
        current = table.current_snapshot()
        rows.append(
            {
                "table": name,
                "snapshots": len(table.metadata.snapshots),
                "current_snapshot_id": current.snapshot_id if current else None,
                "total_records": int(current.summary["total-records"] or 0) if current and current.summary else 0,
                "location": table.location(),
                "error": None,
            }
        )
    text = _table(
        [
            [r["table"], r["snapshots"], r["current_snapshot_id"], r["total_records"], r["location"] or "(unreadable)"]
            for r in rows
        ],
        ["table", "snapshots", "current", "records", "location"],
    )
    _emit(as_json, rows, text)
    if errors:
        for error in errors:
            click.echo(f"error: {error}", err=True)
        sys.exit(2)


@main.group()
def snapshots() -> None:
    """Snapshots of a table."""


@snapshots.command("list")
@click.argument("table")
@click.option("--json", "as_json", is_flag=True)
@click.pass_obj
def snapshots_list(obj: Context, table: str, as_json: bool) -> None:
    """List the snapshots of TABLE, oldest first."""
    from icesink.catalog.snapshots import list_snapshots

    infos = list_snapshots(obj.table(table))
    rows = [
        [
            s.snapshot_id,
            s.parent_id,
            s.committed_at,
            s.operation,
            s.job_id,
            s.checkpoint_id,
            s.added_records,
            s.deleted_records,
            s.added_files,
            s.deleted_files,
            _short(s.commit_id),
        ]
        for s in infos
    ]
    headers = [
        "snapshot",
        "parent",
        "committed at",
        "operation",
        "job",
        "checkpoint",
        "+records",
        "-records",
        "+files",
        "-files",
        "commit",
    ]
    _emit(as_json, [s.to_json() for s in infos], _table(rows, headers))


@snapshots.command("show")
@click.argument("table")
@click.argument("snapshot_id", type=int)
@click.option("--json", "as_json", is_flag=True)
@click.pass_obj
def snapshots_show(obj: Context, table: str, snapshot_id: int, as_json: bool) -> None:
    """Show the full summary and the manifests of one snapshot."""
    from icesink.catalog.snapshots import show_snapshot

    info = show_snapshot(obj.table(table), snapshot_id)
    if info is None:
        raise SnapshotNotFoundError(f"table {table} has no snapshot {snapshot_id}; `icesink snapshots list {table}`")
    summary = "\n".join(f"  {k}: {v}" for k, v in sorted(info["summary"].items()))
    manifests = _table(
        [
            [m["content"], m["added_files"], m["existing_files"], m["deleted_files"], m["added_rows"], m["path"]]
            for m in info["manifests"]
        ],
        ["content", "added", "existing", "deleted", "rows", "path"],
    )
    text = (
        f"snapshot {info['snapshot_id']} (parent {info['parent_id']}, sequence {info['sequence_number']}) "
        f"committed at {info['committed_at']}\nsummary:\n{summary}\nmanifests:\n{manifests}"
    )
    _emit(as_json, info, text)


@main.command("scan")
@click.argument("table")
@click.option("--limit", default=20, show_default=True, help="Rows to show (0: all).")
@click.option("--filter", "row_filter", help='Row filter, e.g. "order_id > 100".')
@click.option("--snapshot", "snapshot_id", type=int, help="Read this snapshot instead of the current one.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per row.")
@click.pass_obj
def scan(obj: Context, table: str, limit: int, row_filter: str | None, snapshot_id: int | None, as_json: bool) -> None:
    """Print TABLE's rows, with equality and position deletes applied."""
    from icesink.reader import read_table

    _emit_rows(read_table(obj.table(table), snapshot_id, row_filter), limit, as_json, "rows")


def _emit_rows(rows: Any, limit: int, as_json: bool, what: str) -> None:
    """The first ``limit`` rows of an Arrow table (0: all): one JSON object per line, or a text table."""
    total = rows.num_rows
    if limit:
        rows = rows.slice(0, limit)
    records = rows.to_pylist()
    if as_json:
        for record in records:
            click.echo(_json(record, indent=None))
        return
    click.echo(_table([[_cell(v) for v in r.values()] for r in records], rows.column_names))
    click.echo(f"({len(records)} of {total} {what})")


def _cell(value: Any) -> Any:
    """A value as a person reads it: nested values, binary and decimals in their JSON form, not Python's repr."""
    import decimal

    if isinstance(value, dict | list | tuple | bytes | decimal.Decimal):
        plain = json_value(value)
        return plain if isinstance(plain, str) else _json(plain, indent=None)
    return value


@main.command("changes")
@click.argument("table")
@click.option("--from", "start", type=int, help="Changes after this snapshot (default: from the oldest state kept).")
@click.option("--to", "end", type=int, help="Up to and including this snapshot (default: the head).")
@click.option(
    "--mode", type=click.Choice(["changelog", "append"]), default="changelog", show_default=True, help="What to list."
)
@click.option("--net", "net_changes", is_flag=True, help="Collapse each key's changes to its net change.")
@click.option("--limit", default=20, show_default=True, help="Changes to show (0: all).")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per change.")
@click.pass_obj
def changes(
    obj: Context,
    table: str,
    start: int | None,
    end: int | None,
    mode: str,
    net_changes: bool,
    limit: int,
    as_json: bool,
) -> None:
    """Print what changed in TABLE between two snapshots: inserts, deletes, update_before/update_after pairs."""
    from icesink.changelog.api import changes as read_changes

    _emit_rows(read_changes(obj.table(table), start, end, mode, net_changes=net_changes), limit, as_json, "changes")


@main.group()
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
def checkpoints_list(obj: Context, table: str, limit: int, as_json: bool) -> None:
    """Per job: pending, failed and committed checkpoints of TABLE and the commit lag; then the newest checkpoints.

    The lag is how long the oldest checkpoint still waiting for its commit has waited.
    """
    from dataclasses import asdict

    from icesink.committer.ledger import Ledger
    from icesink.errors import TableNotFoundError

    ledger = Ledger(obj.config)
    try:
        obj.table(table)  # also checks (or, for the embedded default, applies) the migrations
    except TableNotFoundError:
        if not ledger.for_table(table, newest=1):
            raise  # neither a table nor checkpoints: most likely a typo
    jobs = ledger.lag(table)
    rows = ledger.for_table(table, newest=limit or None)
    text = "\n\n".join([_lag_text(jobs), _checkpoints_text(rows), *_attention(ledger, table, rows)])
    _emit(
        as_json,
        {"jobs": [asdict(j) for j in jobs], "checkpoints": [_checkpoint_json(r) for r in rows]},
        text,
    )


def _operator_choice(obj: Context, table: str, checkpoint: int, job: str | None) -> tuple[Any, Any, Any]:
    from icesink.committer.ledger import Ledger
    from icesink.committer.operator import choose_checkpoint

    iceberg_table = obj.table(table)
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
    obj: Context, table: str, checkpoint: int, job: str | None, reason: str | None, yes: bool, as_json: bool
) -> None:
    """Give up a staged or failed CHECKPOINT of TABLE for good, so that the checkpoints after it commit.

    Its rows never reach the table. The ledger keeps who discarded it, when and why, and the next snapshot
    of its job names it in icesink.discarded-checkpoints. A committed checkpoint is never discarded.
    """

    from icesink.committer.operator import check_not_in_table, default_operator, discard

    ledger, iceberg_table, choice = _operator_choice(obj, table, checkpoint, job)
    if not yes:
        check_not_in_table(iceberg_table, choice)
        _emit(
            as_json,
            {"discarded": False, "would_lose": _checkpoint_json(choice.row)},
            f"{choice.what_is_lost()}.\nNothing was changed; add --yes to discard it.",
        )
        return
    why = reason or choice.row.error or "no reason given"
    row = discard(ledger, iceberg_table, choice, default_operator(), why)
    _emit(
        as_json,
        {"discarded": True, "checkpoint": _checkpoint_json(row)},
        f"discarded checkpoint {row.checkpoint_id} of job {row.job_id} of table {table} "
        f"({row.manifests.data_records} row(s) lost), by {row.discarded_by}: {why}",
    )


@checkpoints.command("retry")
@click.argument("table")
@click.argument("checkpoint", type=click.IntRange(min=0))
@click.option("--job", help="The checkpoint's job, when several jobs have one of that number.")
@click.pass_obj
def checkpoints_retry(obj: Context, table: str, checkpoint: int, job: str | None) -> None:
    """Have a failed CHECKPOINT of TABLE tried again now that its cause is fixed (committers pick it up at once)."""
    from icesink.committer.operator import retry

    ledger, iceberg_table, choice = _operator_choice(obj, table, checkpoint, job)
    row = retry(ledger, iceberg_table, choice)
    click.echo(f"checkpoint {row.checkpoint_id} of job {row.job_id} of table {table} will be tried again")


@main.group()
def jobs() -> None:
    """Streams (jobs) and the tables each writes."""


@jobs.command("list")
@click.option("--json", "as_json", is_flag=True)
@click.pass_obj
def jobs_list(obj: Context, as_json: bool) -> None:
    """Every job with its tables: a stream into many tables is one job; atomic ones commit them together."""
    from dataclasses import asdict

    from icesink.committer.ledger import Ledger

    obj.catalog()  # checks (or, for the embedded default, applies) the migrations
    found = Ledger(obj.config).jobs()
    rows = [
        [
            j.job_id,
            "yes" if j.atomic else "no",
            len(j.tables),
            j.pending,
            j.failed,
            j.last_committed_checkpoint,
            j.oldest_pending_at,
        ]
        for j in found
    ]
    text = _table(rows, ["job", "atomic", "tables", "pending", "failed", "last committed", "oldest pending"])
    for j in found:
        text += f"\n\njob {j.job_id}:\n" + _table(
            [[table, checkpoint] for table, checkpoint in j.tables.items()], ["table", "last committed checkpoint"]
        )
    _emit(as_json, [asdict(j) for j in found], text)


@main.group()
def committer() -> None:
    """The committer daemon."""


@committer.command("run")
@click.option("--table", "tables", multiple=True, help="Only commit these tables (repeatable).")
@click.option("--once", is_flag=True, help="Drain what is pending, then exit.")
@click.option(
    "--poll-interval",
    type=POSITIVE_SECONDS,
    default=0.5,
    show_default=True,
    envvar="ICESINK_POLL_INTERVAL",
    show_envvar=True,
    help="Seconds between ledger polls.",
)
@click.option(
    "--lease-ttl",
    type=POSITIVE_SECONDS,
    default=10.0,
    show_default=True,
    envvar="ICESINK_LEASE_TTL",
    show_envvar=True,
    help="Seconds without renewal after which a standby takes over.",
)
@click.option(
    "--metrics-port",
    type=click.IntRange(0, 65535),
    envvar="ICESINK_METRICS_PORT",
    show_envvar=True,
    help="Serve /metrics (Prometheus) and /healthz here.",
)
@click.option(
    "--metrics-host",
    default="127.0.0.1",
    show_default=True,
    envvar="ICESINK_METRICS_HOST",
    show_envvar=True,
    help="Metrics address.",
)
@click.option(
    "--max-failures",
    type=click.IntRange(min=1),
    default=5,
    show_default=True,
    envvar="ICESINK_MAX_FAILURES",
    show_envvar=True,
    help="Failures in a row after which a table makes /healthz 503.",
)
@click.option(
    "--expire-snapshots",
    is_flag=True,
    envvar="ICESINK_EXPIRE_SNAPSHOTS",
    show_envvar=True,
    help="Drop snapshots past each table's history.expire.* retention in every commit (keeps commit cost flat).",
)
@click.option(
    "--maintain",
    is_flag=True,
    envvar="ICESINK_MAINTAIN",
    show_envvar=True,
    help="Between commits, convert leftover equality deletes and compact small files when due (icesink.maintain.*).",
)
@click.pass_obj
def committer_run(
    obj: Context,
    tables: tuple[str, ...],
    once: bool,
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
    and take over when its lease expires.
    """
    from icesink.committer.daemon import CommitterDaemon

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

        server = StatusServer(metrics_host, metrics_port, daemon.metrics, daemon.problems, daemon.jobs)
        server.start()
        logging.getLogger("icesink.committer").info("metrics and health on http://%s:%d", metrics_host, server.port)
    try:
        report = daemon.run(once=once)
    finally:
        if server is not None:
            server.stop()
    if once and report.failed:
        for line in _failures(report.failed):
            click.echo(f"error: {line}", err=True)
        sys.exit(2)


def _check_committer_options(
    obj: Context, tables: tuple[str, ...], once: bool, poll_interval: float, lease_ttl: float
) -> None:
    from icesink.catalog.loader import check_identifier
    from icesink.errors import TableNotFoundError

    if poll_interval >= lease_ttl:
        # The lease is renewed once per poll: it would lapse between polls and standbys would take over.
        raise click.BadParameter(
            f"{poll_interval:g}s is not below --lease-ttl ({lease_ttl:g}s): the lease is renewed once per poll, so "
            "it would lapse between polls; poll more often or raise --lease-ttl",
            param_hint="--poll-interval",
        )
    for table in tables:
        check_identifier(table)
        try:
            obj.table(table)
        except TableNotFoundError:
            if once:
                raise
            logging.getLogger("icesink.committer").warning("table %s does not exist (yet); waiting for it", table)


def _failures(failed: dict[str, str]) -> list[str]:
    """Each error once: tables committed together fail together, with one error and the tables it holds back."""
    by_error: dict[str, list[str]] = {}
    for table, error in failed.items():
        by_error.setdefault(error, []).append(table)
    lines = []
    for error, tables in by_error.items():
        named = [t for t in tables if t in error]
        held = [t for t in tables if t not in error]
        if not named:  # an error that does not name its table: the first one is said to be it
            error, held = f"table {tables[0]}: {error}", tables[1:]
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
def committer_gc(obj: Context, tables: tuple[str, ...], older_than: str, dry_run: bool, as_json: bool) -> None:
    """Delete files no snapshot and no checkpoint references (failed attempts, expired snapshots, merged manifests).

    Also forgets committed checkpoints older than --older-than in the ledger (the newest of each job stays).
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

    catalog = obj.catalog()
    for table in tables:
        obj.table(table)  # a misspelt --table is an error, not an empty report
    if not tables:
        with database_errors(obj.config):
            tables = tuple(
                ".".join(identifier)
                for namespace in catalog.list_namespaces()
                for identifier in catalog.list_tables(namespace)
            )
    reports, errors = [], []
    for table in tables:
        try:  # a table gc must leave alone (an unreadable staged manifest) does not keep the others dirty
            reports.append(collect_garbage(catalog, obj.config, table, age, dry_run=dry_run))
        except IcesinkError as e:
            errors.append(str(e))
    verb = "would delete" if dry_run else "deleted"
    text = _table(
        [[r.table, r.files_seen, r.referenced, r.too_young, len(r.deleted), r.ledger_rows_pruned] for r in reports],
        ["table", "files", "referenced", "too young", verb, "ledger rows pruned"],
    )
    _emit(as_json, [asdict(r) for r in reports], text)
    for error in errors:
        click.echo(f"error: {error}", err=True)
    if errors:
        sys.exit(2)


@main.command("maintain")
@click.argument("table")
@click.option(
    "--all", "everything", is_flag=True, help="Everything worth doing, not only what the thresholds say is due."
)
@click.option("--dry-run", is_flag=True, help="Report what would be done; change nothing.")
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
def maintain(obj: Context, table: str, everything: bool, dry_run: bool, as_json: bool, lease_ttl: float) -> None:
    """Convert TABLE's equality deletes into position deletes and compact its small files, when due.

    Thresholds are the table's icesink.maintain.* properties; --all does everything worth doing. Safe
    while streams commit: maintenance commits are checked against what was committed meanwhile.
    """
    from dataclasses import asdict

    from icesink.committer.maintainer import Maintainer, describe
    from icesink.maintenance.policy import MaintenancePolicy

    iceberg_table = obj.table(table)
    policy = MaintenancePolicy.of(iceberg_table.properties, table)

    def progress(number: int, group: Any, result: Any) -> None:
        click.echo(
            f"group {number + 1}/{result.groups_planned}: {len(group.files)} file(s), "
            f"{group.bytes / 2**20:.1f} MiB; {result.files_written} file(s) written so far, {result.seconds:.1f}s",
            err=True,
        )

    report = Maintainer(obj.catalog(), obj.config, lease_ttl=lease_ttl).run(
        iceberg_table, table, policy, everything=everything, dry_run=dry_run, progress=progress
    )
    if dry_run:
        text = (
            f"table {table}: {report.before.data_files} data file(s), {report.before.position_delete_files} position "
            f"and {report.before.equality_delete_files} equality delete file(s); would rewrite "
            f"{report.planned_files} file(s) in {report.planned_groups} group(s)"
        )
        if report.notes:
            text += "; " + "; ".join(report.notes)
    else:
        text = f"table {table}: {describe(report)}"
    _emit(as_json, asdict(report), text)


if __name__ == "__main__":
    main()
