"""The catalog's pointers (each table's current metadata file), read at one moment.

A consistent cut of several tables needs their pointers from one transaction: tables committed
together (``icesink.stream(tables=...)``) then come back at the same checkpoint.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from pyiceberg.catalog.sql import IcebergTables

from icesink.catalog.config import CatalogConfig
from icesink.catalog.database import database_errors, engine
from icesink.catalog.loader import check_identifier
from icesink.errors import TableNotFoundError
from icesink.iceberg.pending_tables import PENDING_TABLES


def read_pointers(config: CatalogConfig, identifiers: Sequence[str], pending: bool = False) -> dict[str, str]:
    """Each table's metadata location, all read in one statement; :class:`TableNotFoundError` names a missing one.

    With ``pending``, a table a stream created that waits for its first commit counts, at its pending metadata
    (no snapshot: empty), read in the same statement: a cut taken between two of a job's checkpoints shows it
    empty exactly when its first commit is still to come.
    """

    for identifier in identifiers:
        check_identifier(identifier)
    names = [tuple(identifier.rsplit(".", 1)) for identifier in identifiers]
    t, p = IcebergTables, PENDING_TABLES.c
    query = sa.select(t.table_namespace, t.table_name, t.metadata_location, sa.literal(0).label("rank")).where(
        t.catalog_name == config.name, sa.tuple_(t.table_namespace, t.table_name).in_(names)
    )
    if pending:
        waiting = sa.select(p.table_namespace, p.table_name, p.metadata_location, sa.literal(1).label("rank")).where(
            p.catalog_name == config.name, sa.tuple_(p.table_namespace, p.table_name).in_(names)
        )
        query = sa.union_all(query, waiting)  # type: ignore[assignment]
    with database_errors(config), engine(config).connect() as connection:
        rows = sorted(connection.execute(query), key=lambda r: -r[3])  # the catalog's table over a pending one
        found = {f"{ns}.{name}": location for ns, name, location, _ in rows if location}
    missing = [i for i in identifiers if i not in found]
    if missing:
        raise TableNotFoundError(
            f"table(s) {', '.join(repr(m) for m in missing)} do not exist in {config.describe()}; check the names "
            "(`icesink tables list`)",
            table=missing[0] if len(missing) == 1 else None,
        )
    return {i: found[i] for i in identifiers}


def every_pointer(config: CatalogConfig) -> dict[str, str]:
    """Every table's metadata location in the catalog, pending tables included (one statement)."""

    t, p = IcebergTables, PENDING_TABLES.c
    query = sa.union_all(
        sa.select(t.table_namespace, t.table_name, t.metadata_location).where(t.catalog_name == config.name),
        sa.select(p.table_namespace, p.table_name, p.metadata_location).where(p.catalog_name == config.name),
    )
    with database_errors(config), engine(config).connect() as connection:
        return {f"{ns}.{name}": location for ns, name, location in connection.execute(query) if location}
