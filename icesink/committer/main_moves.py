"""Moving ``main`` of tables to audited snapshots of their branches: one compare-and-swap per table, all in one
transaction of the catalog database that also records them as published (the stream's publisher and
``icesink publish`` both)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from icesink.audit.chain import Chain, Link
from icesink.catalog.audit_record import AuditRecord
from icesink.catalog.database import database_errors
from icesink.errors import PublishError
from icesink.failpoints import failpoint
from icesink.iceberg.catalog_commit import TableSwap, commit_tables
from icesink.iceberg.publish import descends_from_main, move_main

if TYPE_CHECKING:
    from pyiceberg.catalog.sql import SqlCatalog
    from pyiceberg.table import Table

    from icesink.catalog.config import CatalogConfig


def publish_moves(
    catalog: SqlCatalog, config: CatalogConfig, moves: Sequence[tuple[Chain, Link]], by: str
) -> list[Table]:
    """Move each table's main to its link's snapshot, all in one transaction of the catalog database that also
    records them as published; ``CommitFailedException`` when a table changed since its chain was read."""
    for chain, link in moves:
        if not descends_from_main(chain.table, link.snapshot_id):
            raise PublishError(
                f"table {chain.identifier}: snapshot {link.snapshot_id} does not descend from main's head "
                f"{chain.line.main_id}; main is not moved to it",
                table=chain.identifier,
            )
    record = AuditRecord(config)
    swaps = [
        TableSwap(chain.table, move_main(chain.table, link.snapshot_id, chain.line.main_id)) for chain, link in moves
    ]
    published = [(chain.identifier, chain.branch, link.snapshot_id) for chain, link in moves]
    failpoint("publish.before-swap")  # audits recorded, main not moved
    with database_errors(config):
        tables = commit_tables(
            catalog,
            swaps,
            within=lambda connection: record.mark_published_in(connection, published, by),
            moment="publish",
        )
    failpoint("publish.after-swap")  # main moved; the done actions for main not run
    return tables
