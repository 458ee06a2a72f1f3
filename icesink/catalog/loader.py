"""Opening pyiceberg's ``SqlCatalog`` on a migrated database."""

from __future__ import annotations

from typing import TYPE_CHECKING

from icesink.catalog import database
from icesink.catalog.config import CatalogConfig
from icesink.errors import TableNotFoundError

if TYPE_CHECKING:
    from pyiceberg.catalog.sql import SqlCatalog
    from pyiceberg.table import Table


def open_catalog(config: CatalogConfig) -> SqlCatalog:
    """The catalog, after checking that its schema is migrated.

    icesink's embedded SQLite default is created and migrated on first use;
    any other database is migrated by its operator with ``icesink db upgrade``.
    """
    from pyiceberg.catalog.sql import SqlCatalog

    if config.embedded:
        database.upgrade(config)
    database.ensure_migrated(config)
    with database.database_errors(config):
        catalog = SqlCatalog(config.name, **config.pyiceberg_properties())
    # Share the pooled engine so the ledger and the catalog use the same connections.
    catalog.engine.dispose()
    catalog.engine = database.engine(config)
    return catalog


def load_table(catalog: SqlCatalog, config: CatalogConfig, identifier: str) -> Table:
    from pyiceberg.exceptions import NoSuchTableError

    with database.database_errors(config):
        try:
            return catalog.load_table(identifier)
        except NoSuchTableError as e:
            raise TableNotFoundError(
                f"table {identifier!r} does not exist in {config.describe()}; create it first or pass create_table=True"
            ) from e
