"""Commands that read the catalog: its database schema, tables, snapshots, rows and changes."""

from __future__ import annotations

import sys
from typing import Any

import click

from icesink.cli.context import CliContext
from icesink.cli.output import Column, quiet_progress, text_table
from icesink.errors import IcesinkError, SnapshotNotFoundError


def short_commit(commit_id: str | None) -> str | None:
    """The start of an atomic commit's id: enough to see which snapshots and checkpoints went together."""
    return commit_id[:8] if commit_id else None


@click.group()
def db() -> None:
    """The catalog database schema."""


@db.command("upgrade")
@click.pass_obj
def db_upgrade(obj: CliContext) -> None:
    """Create or migrate the catalog and ledger tables."""
    from icesink import migrations
    from icesink.catalog import database

    database.upgrade(obj.config)
    click.echo(f"{obj.config.describe()} is at schema revision {migrations.head_revision()}")


@db.command("downgrade")
@click.argument("revision")
@click.pass_obj
def db_downgrade(obj: CliContext, revision: str) -> None:
    """Take the schema back to REVISION, before running an earlier icesink release on the catalog."""
    from icesink.catalog.downgrade import downgrade

    downgrade(obj.config, revision)
    click.echo(f"{obj.config.describe()} is at schema revision {revision}")


@click.group()
def tables() -> None:
    """Tables in the catalog."""


TABLE_COLUMNS: list[Column[dict[str, Any]]] = [
    Column("table", lambda r: r["table"]),
    Column("snapshots", lambda r: r["snapshots"]),
    Column("current", lambda r: "(pending: first commit to come)" if r.get("pending") else r["current_snapshot_id"]),
    Column("records", lambda r: r["total_records"]),
    Column("location", lambda r: r["location"] or "(unreadable)"),
]


@tables.command("list")
@click.option("--json", "as_json", is_flag=True)
@click.pass_obj
def tables_list(obj: CliContext, as_json: bool) -> None:
    """List every table with its current snapshot, and the tables streams created that readers will see
    with their first commit (pending)."""
    from icesink.catalog.database import database_errors
    from icesink.catalog.loader import load_table
    from icesink.catalog.views import table_names
    from icesink.iceberg.pending_tables import pending_tables

    catalog = obj.catalog()
    rows: list[dict[str, Any]] = []
    errors = []
    with database_errors(obj.config):
        names = table_names(catalog)
        pending = pending_tables(catalog.engine, obj.config.name)
    for name in names:
        try:  # one unreadable table does not hide the others
            rows.append(_table_row(obj, name))
        except IcesinkError as e:
            errors.append(str(e))
            rows.append(
                {
                    "table": name,
                    "snapshots": None,
                    "current_snapshot_id": None,
                    "total_records": None,
                    "location": None,
                    "pending": False,
                    "error": str(e),
                }
            )
    for name, _, _ in pending:
        try:
            rows.append(_table_row(obj, name, pending=True))
            if name in names:  # another tool created one of the name meanwhile: the error says what to do
                load_table(obj.catalog(pending_tables=True), obj.config, name)
        except IcesinkError as e:
            errors.append(str(e))
    obj.output(as_json).emit(rows, lambda: text_table(rows, TABLE_COLUMNS))
    if errors:
        for error in errors:
            click.echo(f"error: {error}", err=True)
        sys.exit(2)


@tables.command("drop-pending")
@click.argument("table")
@click.option("--yes", is_flag=True, help="Drop it; without --yes, only say what would go.")
@click.pass_obj
def tables_drop_pending(obj: CliContext, table: str, yes: bool) -> None:
    """Give up TABLE, which a stream created and which waits for its first commit (pending): its files go and
    its name is free again. Refused while the ledger holds a checkpoint of it not yet committed or discarded."""
    from icesink.catalog.database import database_errors
    from icesink.catalog.ledger import Ledger
    from icesink.catalog.loader import open_catalog
    from icesink.errors import ConfigError, TableNotFoundError
    from icesink.iceberg.pending_tables import pending_location

    catalog = open_catalog(obj.config, pending_tables=True)
    with database_errors(obj.config):
        location = pending_location(catalog.engine, obj.config.name, table)
    if location is None:
        raise TableNotFoundError(
            f"table {table!r} is not a pending table of {obj.config.describe()} (`icesink tables list` shows them)"
        )
    waiting = Ledger(obj.config).pending(table)
    if waiting:
        raise ConfigError(
            f"table {table}: checkpoints {', '.join(str(r.checkpoint_id) for r in waiting)} of it are staged; "
            "dropping it would lose their rows. Let them commit, or give them up first (`icesink checkpoints "
            f"discard {table} N`)"
        )
    if not yes:
        click.echo(f"would drop pending table {table} (metadata {location}) and its files; add --yes to drop it")
        return
    with database_errors(obj.config):
        deleted = catalog.drop_pending_table(table)
    click.echo(f"dropped pending table {table}: {len(deleted)} file(s) deleted")


MAPPING_COLUMNS: list[Column[dict[str, Any]]] = [
    Column("job", lambda r: r["job_id"]),
    Column("option", lambda r: r["option"]),
    Column("key", lambda r: r["key"]),
    Column("maps to", lambda r: r["target"]),
    Column("matched", lambda r: r["matched"] or "(nothing yet)"),
]


@tables.command("mappings")
@click.option("--job", "job_id", help="Only this stream's keys (its job id).")
@click.option("--unmatched", is_flag=True, help="Only the keys that matched nothing yet.")
@click.option("--json", "as_json", is_flag=True)
@click.pass_obj
def tables_mappings(obj: CliContext, job_id: str | None, unmatched: bool, as_json: bool) -> None:
    """The keys of Debezium streams' tables= and partition_by options, each with what it matched: the source
    table a tables= key routes, the table a partition_by key partitions. A key that matched nothing routes
    nothing (check its spelling); --unmatched lists only those."""
    from icesink.catalog.mappings import Mappings

    rows = [
        {
            "job_id": m.job_id,
            "option": m.option,
            "key": m.name,
            "target": m.target,
            "matched": m.matched,
            "updated_at": m.updated_at.isoformat(),
        }
        for m in Mappings(obj.config).all(job_id)
        if not unmatched or m.matched is None
    ]
    obj.output(as_json).emit(rows, lambda: text_table(rows, MAPPING_COLUMNS))


def _table_row(obj: CliContext, name: str, pending: bool = False) -> dict[str, Any]:
    table = obj.table(name, pending_tables=pending)
    current = table.current_snapshot()
    return {
        "table": name,
        "snapshots": len(table.metadata.snapshots),
        "current_snapshot_id": current.snapshot_id if current else None,
        "total_records": int(current.summary["total-records"] or 0) if current and current.summary else 0,
        "location": table.location(),
        "pending": pending,
        "error": None,
    }


@click.group()
def snapshots() -> None:
    """Snapshots of a table."""


SNAPSHOT_COLUMNS: list[Column[Any]] = [
    Column("snapshot", lambda s: s.snapshot_id),
    Column("parent", lambda s: s.parent_id),
    Column("committed at", lambda s: s.committed_at),
    Column("operation", lambda s: s.operation),
    Column("job", lambda s: s.job_id),
    Column("checkpoint", lambda s: s.checkpoint_id),
    Column("+records", lambda s: s.added_records),
    Column("-records", lambda s: s.deleted_records),
    Column("+files", lambda s: s.added_files),
    Column("-files", lambda s: s.deleted_files),
    Column("commit", lambda s: short_commit(s.commit_id)),
]
MANIFEST_COLUMNS: list[Column[dict[str, Any]]] = [
    Column("content", lambda m: m["content"]),
    Column("added", lambda m: m["added_files"]),
    Column("existing", lambda m: m["existing_files"]),
    Column("deleted", lambda m: m["deleted_files"]),
    Column("rows", lambda m: m["added_rows"]),
    Column("path", lambda m: m["path"]),
]


@snapshots.command("list")
@click.argument("table")
@click.option("--json", "as_json", is_flag=True)
@click.pass_obj
def snapshots_list(obj: CliContext, table: str, as_json: bool) -> None:
    """List the snapshots of TABLE, oldest first."""
    from icesink.catalog.views import list_snapshots

    infos = list_snapshots(obj.table(table))
    obj.output(as_json).emit([s.to_json() for s in infos], lambda: text_table(infos, SNAPSHOT_COLUMNS))


@snapshots.command("show")
@click.argument("table")
@click.argument("snapshot_id", type=int)
@click.option("--json", "as_json", is_flag=True)
@click.pass_obj
def snapshots_show(obj: CliContext, table: str, snapshot_id: int, as_json: bool) -> None:
    """Show the full summary and the manifests of one snapshot."""
    from icesink.catalog.views import show_snapshot

    info = show_snapshot(obj.table(table), snapshot_id)
    if info is None:
        raise SnapshotNotFoundError(f"table {table} has no snapshot {snapshot_id}; `icesink snapshots list {table}`")

    def text() -> str:
        summary = "\n".join(f"  {k}: {v}" for k, v in sorted(info["summary"].items()))
        return (
            f"snapshot {info['snapshot_id']} (parent {info['parent_id']}, sequence {info['sequence_number']}) "
            f"committed at {info['committed_at']}\nsummary:\n{summary}\n"
            f"manifests:\n{text_table(info['manifests'], MANIFEST_COLUMNS)}"
        )

    obj.output(as_json).emit(info, text)


@click.command("scan")
@click.argument("table")
@click.option("--limit", type=click.IntRange(min=0), default=20, show_default=True, help="Rows to show (0: all).")
@click.option("--filter", "row_filter", help='Row filter, e.g. "order_id > 100".')
@click.option("--snapshot", "snapshot_id", type=int, help="Read this snapshot instead of the current one.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per row.")
@click.pass_obj
def scan(
    obj: CliContext, table: str, limit: int, row_filter: str | None, snapshot_id: int | None, as_json: bool
) -> None:
    """Print TABLE's rows, with equality and position deletes applied."""
    from icesink.reader import read_table

    obj.output(as_json).rows(read_table(obj.table(table), snapshot_id, row_filter), limit, "rows")


@click.command("changes")
@click.argument("table")
@click.option("--from", "start", type=int, help="Changes after this snapshot (default: from the oldest state kept).")
@click.option("--to", "end", type=int, help="Up to and including this snapshot (default: the head).")
@click.option(
    "--mode", type=click.Choice(["changelog", "append"]), default="changelog", show_default=True, help="What to list."
)
@click.option("--net", "net_changes", is_flag=True, help="Collapse each key's changes to its net change.")
@click.option("--limit", type=click.IntRange(min=0), default=20, show_default=True, help="Changes to show (0: all).")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per change.")
@click.pass_obj
def changes(
    obj: CliContext,
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

    with quiet_progress(f"reading the changes of {table}, snapshot by snapshot") as report:
        rows = read_changes(obj.table(table), start, end, mode, net_changes=net_changes, progress=report)
    obj.output(as_json).rows(rows, limit, "changes")
