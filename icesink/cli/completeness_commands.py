"""``icesink partitions`` and ``icesink wait``: how far tables are complete, for people and for schedulers."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

import click

from icesink.cli.context import CliContext
from icesink.cli.output import Column, text_table

if TYPE_CHECKING:
    from icesink.catalog.partition_record import PartitionStatus

PARTITION_COLUMNS: list[Column[PartitionStatus]] = [
    Column("partition", lambda p: p.path),
    Column("state", lambda p: p.state.value),
    Column("end", lambda p: p.end),
    Column("rows", lambda p: p.rows),
    Column("rows after done", lambda p: p.rows_after_done or None),
    Column("last change", lambda p: p.changed_at),
    Column("done at snapshot", lambda p: p.done_snapshot_id),
    Column("done watermark", lambda p: p.done_watermark),
]


@click.command("partitions")
@click.argument("table")
@click.option("--branch", default="main", show_default=True, help="The branch whose partitions to list.")
@click.option("--json", "as_json", is_flag=True)
@click.pass_obj
def partitions(obj: CliContext, table: str, branch: str, as_json: bool) -> None:
    """List TABLE's partitions with their state: open, done (the watermark reached its end: at which snapshot and
    watermark), or changed-after-done (rows arrived after it was done: how many, when)."""
    from icesink.readiness import partition_statuses, watermark

    statuses = partition_statuses(table, branch, obj.config)
    reached = watermark(obj.table(table), branch)

    def text() -> str:
        head = f"watermark: {reached.isoformat() if reached else 'none yet'}"
        if statuses:
            return f"{head}\n{text_table(statuses, PARTITION_COLUMNS)}"
        partitioned = any(spec.fields for spec in obj.table(table).metadata.specs().values())
        return f"{head}\n{'no partitions yet' if partitioned else 'the table is not partitioned'}"

    data: Any = {
        "table": table,
        "branch": branch,
        "watermark": reached.isoformat() if reached else None,
        "partitions": [s.as_json() for s in statuses],
    }
    obj.output(as_json).emit(data, text)


@click.command("wait")
@click.argument("tables", nargs=-1, required=True)
@click.option("--partition", required=True, help="The partition, as `icesink partitions` prints it: ts_day=2026-11-25.")
@click.option("--timeout", help="Give up after this long (e.g. '2h', '30 minutes'); exit 1. Default: wait for ever.")
@click.option("--poll", default="2 seconds", show_default=True, help="How often to look.")
@click.option("--branch", default="main", show_default=True)
@click.pass_obj
def wait(obj: CliContext, tables: tuple[str, ...], partition: str, timeout: str | None, poll: str, branch: str) -> None:
    """Wait until PARTITION is done in every one of TABLES, read at one moment of the catalog. Exits 0 once it is,
    1 when --timeout passes first, 2 on a mistake (a table, field or value that does not exist): a scheduler's
    sensor."""
    from icesink.readiness import wait_for_partition

    if wait_for_partition(list(tables), partition, timeout=timeout, poll=poll, branch=branch, catalog=obj.config):
        click.echo(f"{partition} is done in {', '.join(tables)}")
        return
    click.echo(f"{partition} is not done in {', '.join(tables)} after {timeout}", err=True)
    sys.exit(1)
