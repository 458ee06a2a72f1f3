"""Opening pyiceberg's ``SqlCatalog`` on a migrated database."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Literal, overload

import sqlalchemy as sa
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.exceptions import NoSuchTableError, ValidationError
from pyiceberg.io import load_file_io
from pyiceberg.serializers import FromInputFile
from pyiceberg.table import Table

from icesink.catalog import database
from icesink.catalog.config import CatalogConfig
from icesink.commands import icesink_command
from icesink.errors import ConfigError, TableMetadataError, TableNotFoundError
from icesink.iceberg.pending_tables import PendingAwareCatalog, pending_location
from icesink.iceberg.sql_catalog import IcesinkSqlCatalog

if TYPE_CHECKING:
    from pyiceberg.catalog.sql import SqlCatalog
    from pyiceberg.table import Table

    from icesink.iceberg.pending_tables import PendingAwareCatalog


@overload
def open_catalog(config: CatalogConfig, pending_tables: Literal[True]) -> PendingAwareCatalog: ...
@overload
def open_catalog(config: CatalogConfig, pending_tables: bool = False) -> SqlCatalog: ...
def open_catalog(config: CatalogConfig, pending_tables: bool = False) -> SqlCatalog:
    """The catalog, after checking that its schema is migrated.

    icesink's embedded SQLite default is created and migrated on first use;
    any other database is migrated by its operator with ``icesink db upgrade``.
    With ``pending_tables`` (icesink's writers and committers), it also loads
    and commits the tables streams created that wait for their first commit
    (:mod:`icesink.iceberg.pending_tables`); readers never see those.
    """

    if config.embedded:
        database.upgrade_on_first_use(config)
    database.ensure_migrated(config)
    kind = PendingAwareCatalog if pending_tables else IcesinkSqlCatalog
    with database.database_errors(config):
        catalog = kind(config.name, **config.pyiceberg_properties())
    # Share the pooled engine so the ledger and the catalog use the same connections.
    catalog.engine.dispose()
    catalog.engine = database.engine(config)
    return catalog


# The catalog's columns for a namespace and a table name hold this many characters (PostgreSQL enforces it).
NAME_LIMIT = 255


def check_identifier(identifier: str) -> None:
    """``namespace.table``, both parts non-empty and within the catalog's columns; otherwise a
    :class:`ConfigError` that shows the form."""
    namespace, _, name = identifier.rpartition(".")
    if not namespace or not name or any(not part for part in namespace.split(".")):
        raise ConfigError(
            f"table {identifier!r} is not a table identifier: write namespace.table, e.g. 'shop.{name or 'orders'}'"
        )
    for part, value in (("namespace", namespace), ("table name", name)):
        if len(value) > NAME_LIMIT:
            raise ConfigError(
                f"table {identifier[:60]!r}…: its {part} has {len(value)} characters; the catalog holds at most "
                f"{NAME_LIMIT}. Choose a shorter name (icesink.debezium(tables={{...}}) maps a source table to one)"
            )


def load_table(catalog: SqlCatalog, config: CatalogConfig, identifier: str, own: bool = False) -> Table:
    """The table, or :class:`TableNotFoundError` naming the catalog.

    ``own`` (with a catalog opened with ``pending_tables``): the table streams of that name write, its pending
    table even where another tool created one of the name meanwhile (for the operator's commands).
    """

    check_identifier(identifier)
    with database.database_errors(config):
        try:
            if own and isinstance(catalog, PendingAwareCatalog):
                return catalog.load_own_table(identifier)
            return catalog.load_table(identifier)
        except NoSuchTableError as e:
            raise _not_found(catalog, config, identifier) from e
        except (ValidationError, ValueError, FileNotFoundError) as e:  # not Iceberg metadata, not JSON, gone
            location = _metadata_location(config, identifier)
            raise TableMetadataError(
                f"table {identifier}: its metadata file {location} cannot be read ({type(e).__name__}: "
                f"{str(e).strip().splitlines()[0] if str(e).strip() else ''}); nothing was changed. Restore the "
                "file, or point the catalog at an earlier metadata file of the table (iceberg_tables.metadata_location)"
            ) from e


def load_tables(catalog: SqlCatalog, config: CatalogConfig, identifiers: Sequence[str]) -> list[Table]:
    """The tables, in order, as :func:`load_table` loads each, with one statement for all their pointers where
    the catalog knows pending tables."""

    for identifier in identifiers:
        check_identifier(identifier)
    if isinstance(catalog, PendingAwareCatalog) and len(identifiers) > 1:
        with database.database_errors(config):
            try:
                found = catalog.load_tables(identifiers)
            except (NoSuchTableError, ValidationError, ValueError, FileNotFoundError):
                pass  # the table at fault named below, as loading it alone names it
            else:
                return [found[identifier] for identifier in identifiers]
    return [load_table(catalog, config, identifier) for identifier in identifiers]


def _not_found(catalog: SqlCatalog, config: CatalogConfig, identifier: str) -> TableNotFoundError:
    if pending_location(catalog.engine, config.name, identifier) is not None:
        return TableNotFoundError(
            f"table {identifier!r} is not in {config.describe()} yet: a stream created it, and it appears with the "
            f"first commit that brings it rows (`{icesink_command('checkpoints list', identifier)}` shows what is "
            "staged)",
            table=identifier,
        )
    return TableNotFoundError(
        f"table {identifier!r} does not exist in {config.describe()}; create it first (icesink.stream(..., "
        "create_table=True) does), or check the name and the catalog (`icesink tables list`)",
        table=identifier,
    )


def table_at(catalog: SqlCatalog, identifier: str, metadata_location: str) -> Table:
    """The table as one of its metadata files describes it (a pointer read earlier), not as it is now."""

    io = load_file_io(properties=catalog.properties, location=metadata_location)
    metadata = FromInputFile.table_metadata(io.new_input(metadata_location))
    namespace, name = identifier.rsplit(".", 1)
    return Table(
        identifier=(*namespace.split("."), name),
        metadata=metadata,
        metadata_location=metadata_location,
        io=load_file_io(properties={**catalog.properties, **metadata.properties}, location=metadata_location),
        catalog=catalog,
    )


def _metadata_location(config: CatalogConfig, identifier: str) -> str:
    """Where the catalog says the table's metadata is (for errors about that file)."""

    namespace, name = identifier.rsplit(".", 1)
    query = sa.text(
        "SELECT metadata_location FROM iceberg_tables WHERE catalog_name = :catalog AND table_namespace = :namespace "
        "AND table_name = :name"
    )
    with database.engine(config).connect() as connection:
        found = connection.execute(query, {"catalog": config.name, "namespace": namespace, "name": name}).first()
    return str(found[0]) if found else "(unknown)"
