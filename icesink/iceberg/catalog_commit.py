"""Several tables' snapshots swapped into a SQL catalog in one database transaction, or none.

pyiceberg's ``SqlCatalog.commit_table`` moves one table's pointer per
transaction (a compare-and-swap on ``iceberg_tables.metadata_location``). A
checkpoint that touches several tables must move all their pointers together,
so that a reader of the catalog never sees one table with the checkpoint and
another without it: every table's new metadata file is written first, then one
transaction compare-and-swaps every pointer (or inserts it, for a table the
stream created: :mod:`icesink.iceberg.pending_tables`) and runs the caller's
own statements (the ledger's), and commits. If any pointer moved meanwhile, the
transaction rolls back and nothing of it is visible.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

import sqlalchemy as sa
from pyiceberg.catalog import Catalog
from pyiceberg.catalog.sql import IcebergTables, SqlCatalog
from pyiceberg.exceptions import CommitFailedException
from pyiceberg.table import Table
from pyiceberg.table.update import TableRequirement, TableUpdate

from icesink.failpoints import failpoint
from icesink.iceberg.metadata_cache import remember
from icesink.iceberg.pending_tables import PendingAwareCatalog, PendingTable, publish
from icesink.side_by_side import SideBySide, side_by_side

log = logging.getLogger(__name__)


class MetadataChange(Protocol):
    """What a swap applies to a table's metadata: a prepared snapshot, or a branch moved (a publish)."""

    @property
    def requirements(self) -> tuple[TableRequirement, ...]: ...

    @property
    def updates(self) -> tuple[TableUpdate, ...]: ...


@dataclass(frozen=True)
class TableSwap:
    """One table's part of a commit across tables: the table as it was read, and what changes in it."""

    table: Table
    prepared: MetadataChange


def commit_tables(
    catalog: SqlCatalog,
    swaps: Sequence[TableSwap],
    within: Callable[[sa.Connection], None] | None = None,
    moment: str = "group",
) -> list[Table]:
    """Swap every table to its prepared snapshot in one transaction; the committed tables, in order.

    ``within`` runs inside the same transaction after the swaps (the ledger's bookkeeping, so that it can never
    disagree with the catalog). ``moment`` names the failpoints (``group.during-transaction``, say). Raises
    ``CommitFailedException`` naming the first table whose head moved; then no table changed, and the new
    metadata files written for the attempt are deleted.
    """
    staged = [_stage(catalog, swap, current) for swap, current in zip(swaps, _current(catalog, swaps), strict=True)]
    written: list[tuple[Table, str]] = []
    each = SideBySide(
        lambda new: _written(catalog, new),
        [new for _, new in staged],
        side_by_side([new for _, new in staged], catalog.engine),
    )
    try:
        for new in each:
            written.append((new, new.metadata_location))
        failpoint(f"{moment}.before-transaction")  # every metadata file written, no pointer moved
    except BaseException:
        _delete_quietly([*written, *((new, new.metadata_location) for new in each.unused())])
        raise
    with catalog.engine.connect() as connection:
        transaction = connection.begin()
        try:
            for number, (current, new) in enumerate(staged):
                if isinstance(current, PendingTable):  # created by the stream: it enters the catalog now
                    publish(connection, catalog, current, new.metadata_location)
                else:
                    _swap_pointer(connection, catalog.name, current, new.metadata_location)
                if number == 0:
                    failpoint(f"{moment}.during-transaction")  # one pointer moved, not committed
            if within is not None:
                within(connection)
        except BaseException:
            transaction.rollback()  # nothing of it is visible, so nothing references what was written
            _delete_quietly(written)
            raise
        # An error in COMMIT itself (a lost connection) leaves the outcome unknown: the files stay, since
        # the catalog may name them; the marker decides on the retry, gc removes orphans.
        transaction.commit()
    for _, new in staged:
        remember(new.metadata_location, new.metadata)
    failpoint(f"{moment}.after-transaction")
    return [
        Table(
            identifier=new.name(),
            metadata=new.metadata,
            metadata_location=new.metadata_location,
            io=new.io,
            catalog=catalog,
        )
        for _, new in staged
    ]


def _written(catalog: SqlCatalog, new: Table) -> Table:
    catalog._write_metadata(metadata=new.metadata, io=new.io, metadata_path=new.metadata_location)
    return new


def _current(catalog: SqlCatalog, swaps: Sequence[TableSwap]) -> list[Table]:
    """Every table as the catalog has it now (one statement for all of them, where the catalog can)."""
    if isinstance(catalog, PendingAwareCatalog) and len(swaps) > 1:
        names = [".".join(swap.table.name()) for swap in swaps]
        found = catalog.load_tables(names)
        return [found[name] for name in names]
    return [catalog.load_table(swap.table.name()) for swap in swaps]


def _stage(catalog: SqlCatalog, swap: TableSwap, current: Table) -> tuple[Table, Table]:
    """The table's new metadata (checked against its requirements), on ``current``: the table as the catalog has
    it now."""
    identifier = swap.table.name()
    if current.metadata_location != swap.table.metadata_location:
        # Built on metadata another commit replaced (on any branch, or an expiry): build it again.
        raise CommitFailedException(f"Table has been updated by another process: {identifier}")
    new = catalog._update_and_stage_table(current, identifier, swap.prepared.requirements, swap.prepared.updates)
    return current, new


def _swap_pointer(connection: sa.Connection, catalog_name: str, current: Table, location: str) -> None:
    identifier = current.name()
    namespace = Catalog.namespace_to_string(Catalog.namespace_from(identifier))
    name = Catalog.table_name_from(identifier)
    result = connection.execute(
        sa.update(IcebergTables)
        .where(
            IcebergTables.catalog_name == catalog_name,
            IcebergTables.table_namespace == namespace,
            IcebergTables.table_name == name,
            IcebergTables.metadata_location == current.metadata_location,
        )
        .values(metadata_location=location, previous_metadata_location=current.metadata_location)
    )
    if result.rowcount != 1:
        raise CommitFailedException(f"Table has been updated by another process: {namespace}.{name}")


def _delete_quietly(written: Sequence[tuple[Table, str]]) -> None:
    """Best effort, beside the error that ends the commit (which must not be hidden): gc takes what is left."""
    from icesink.iceberg.references import delete_quietly

    for table, location in written:
        try:
            delete_quietly(table.io, [location])
        except OSError as e:
            log.warning("table=%s: %s of a commit that did not happen is left to gc: %s", table.name(), location, e)
