"""The ``icesink`` root command: its options, one-line errors, and every command group put together."""

from __future__ import annotations

import logging
import sys
from typing import Any

import click

from icesink.cli.catalog_commands import changes, db, scan, snapshots, tables
from icesink.cli.checkpoint_commands import checkpoints, jobs
from icesink.cli.committer_commands import committer, maintain
from icesink.cli.completeness_commands import partitions, wait
from icesink.cli.context import CliContext
from icesink.cli.output import JSON, TEXT
from icesink.cli.publish_commands import audit, branches, publish
from icesink.errors import IcesinkError


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
@click.option(
    "--output",
    type=click.Choice([TEXT, JSON]),
    default=TEXT,
    show_default=True,
    help="Tables for people, or strict JSON for machines (a command's --json says the same).",
)
@click.option("-v", "--verbose", is_flag=True, help="Log at INFO level.")
@click.pass_context
def main(
    ctx: click.Context, name: str | None, uri: str | None, warehouse: str | None, output: str, verbose: bool
) -> None:
    """Exactly-once streaming writes from Spark into Iceberg tables."""
    logging.basicConfig(
        level=logging.INFO if verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s %(message)s",
    )
    from icesink.settings import check_environment

    check_environment()
    ctx.obj = CliContext(name, uri, warehouse, output)


for command in (
    db,
    tables,
    snapshots,
    scan,
    changes,
    checkpoints,
    jobs,
    committer,
    maintain,
    partitions,
    wait,
    branches,
    audit,
    publish,
):
    main.add_command(command)
