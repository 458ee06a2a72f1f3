"""The catalog's pointers (each table's current metadata file), read at one moment.

A consistent cut of several tables needs their pointers from one transaction: tables committed
together (``icesink.stream(tables=...)``) then come back at the same checkpoint.
"""

from __future__ import annotations

from collections.abc import Sequence

from icesink.catalog.config import CatalogConfig
from icesink.catalog.database import database_errors, engine
from icesink.catalog.loader import check_identifier
from icesink.errors import TableNotFoundError


def read_pointers(config: CatalogConfig, identifiers: Sequence[str]) -> dict[str, str]:
    """Each table's metadata location, all read in one statement; :class:`TableNotFoundError` names a missing one."""
    import sqlalchemy as sa
    from pyiceberg.catalog.sql import IcebergTables

    for identifier in identifiers:
        check_identifier(identifier)
    names = [tuple(identifier.rsplit(".", 1)) for identifier in identifiers]
    t = IcebergTables
    query = sa.select(t.table_namespace, t.table_name, t.metadata_location).where(
        t.catalog_name == config.name, sa.tuple_(t.table_namespace, t.table_name).in_(names)
    )
    with database_errors(config), engine(config).connect() as connection:
        found = {f"{ns}.{name}": location for ns, name, location in connection.execute(query) if location}
    missing = [i for i in identifiers if i not in found]
    if missing:
        raise TableNotFoundError(
            f"table(s) {', '.join(repr(m) for m in missing)} do not exist in {config.describe()}; check the names "
            "(`icesink tables list`)"
        )
    return {i: found[i] for i in identifiers}
