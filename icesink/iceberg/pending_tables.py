"""Tables created by a stream that appear in the catalog with their first commit, not before.

pyiceberg's ``create_table`` inserts the catalog's row at once, so a table a
stream creates would show empty to every reader until its first checkpoint
commits, and an atomic checkpoint across tables would not be atomic for it.
Here a new table's first metadata file is written and named in icesink's own
``icesink_pending_tables`` instead. :class:`PendingAwareCatalog`, the catalog
of icesink's writers and committers, loads such a table from there, commits
schema changes to it there, and publishes it with its first snapshot: the
commit inserts the catalog's row and deletes the pending one in one
transaction (:func:`publish`, also used by a commit across tables). Readers
open the plain catalog and never see a pending table.

Another tool may create a table of the same name meanwhile. The stream's files
were written for its own table, so they are never committed into that one: a
load finds both and raises :class:`TableCreatedElsewhereError`.
"""

from __future__ import annotations

import datetime
import hashlib
import uuid
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from pyiceberg.catalog import Catalog
from pyiceberg.catalog.sql import IcebergTables, SqlCatalog
from pyiceberg.exceptions import CommitFailedException, NoSuchTableError
from pyiceberg.io import load_file_io
from pyiceberg.partitioning import PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table import CommitTableResponse, Table
from pyiceberg.table.locations import load_location_provider
from pyiceberg.table.metadata import new_table_metadata
from pyiceberg.table.sorting import UNSORTED_SORT_ORDER
from pyiceberg.table.update import AddSnapshotUpdate, TableRequirement, TableUpdate
from pyiceberg.typedef import Identifier

from icesink.commands import icesink_command
from icesink.errors import TableCreatedElsewhereError
from icesink.iceberg.metadata_cache import table_metadata
from icesink.iceberg.sql_catalog import IcesinkSqlCatalog

PENDING_TABLES = sa.Table(
    "icesink_pending_tables",
    sa.MetaData(),
    sa.Column("catalog_name", sa.String(255), primary_key=True),
    sa.Column("table_namespace", sa.String(255), primary_key=True),
    sa.Column("table_name", sa.String(255), primary_key=True),
    sa.Column("metadata_location", sa.String(1000), nullable=False),
    sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
)


_COLUMNS = ["catalog_name", "table_namespace", "table_name", "metadata_location", "created_at"]


class PendingTable(Table):
    """A table as its pending metadata describes it: not in the catalog's ``iceberg_tables`` yet."""


class PendingAwareCatalog(IcesinkSqlCatalog):
    """The SQL catalog as icesink's writers and committers see it: pending tables included."""

    def load_table(self, identifier: str | Identifier) -> Table:
        pending = self.pending_location(identifier)
        try:
            table = super().load_table(identifier)
        except NoSuchTableError:
            if pending is None:
                raise
            if self._has_view(identifier):  # its publishing could never insert the name: say why, not retry
                raise _view_in_the_way(identifier, pending) from None
            return self._pending_table(identifier, pending)
        # Read apart, the two can show a table published in between: then its pending row is gone now.
        if pending is not None and self.pending_location(identifier) is not None:
            raise _created_elsewhere(table, pending)
        return table

    def load_tables(self, identifiers: Sequence[str]) -> dict[str, Table]:
        """Several tables, each as :meth:`load_table` loads it, from one statement for all their pointers (a
        micro-batch into many tables loads them all, then commits them all)."""
        wanted = {identifier: _parts(identifier) for identifier in identifiers}
        names = sorted(set(wanted.values()))
        t, p = IcebergTables, PENDING_TABLES.c
        catalog_rows = sa.select(sa.literal(0).label("pending"), t.table_namespace, t.table_name, t.metadata_location)
        catalog_rows = catalog_rows.where(
            t.catalog_name == self.name, sa.tuple_(t.table_namespace, t.table_name).in_(names)
        )
        if (tables_only := self._iceberg_type_filter()) is not None:  # as load_table: a view of the name is no table
            catalog_rows = catalog_rows.where(tables_only)
        query = sa.union_all(
            catalog_rows,
            sa.select(sa.literal(1), p.table_namespace, p.table_name, p.metadata_location).where(
                p.catalog_name == self.name, sa.tuple_(p.table_namespace, p.table_name).in_(names)
            ),
        )
        with self.engine.connect() as connection:  # one statement: one view of both, unlike two loads
            rows = connection.execute(query).all()
        found: dict[tuple[str, str], dict[int, str]] = {}
        for pending, namespace, name, location in rows:
            found.setdefault((namespace, name), {})[int(pending)] = location
        tables: dict[str, Table] = {}
        for identifier, key in wanted.items():
            locations = found.get(key, {})
            in_catalog, pending = locations.get(0), locations.get(1)
            if not in_catalog:  # pending, absent or a damaged row (rare, and not for long): as one load says it
                tables[identifier] = self.load_table(identifier)
                continue
            table = self._catalog_table(key, in_catalog)
            if pending:
                raise _created_elsewhere(table, pending)
            tables[identifier] = table
        return tables

    def _has_view(self, identifier: str | Identifier) -> bool:
        """Whether the catalog holds a view of that name (Iceberg Java and Rust keep views beside tables)."""
        tables_only = self._iceberg_type_filter()
        if tables_only is None:  # a catalog without the column has no views
            return False
        namespace, name = _parts(identifier)
        t = IcebergTables
        query = sa.select(sa.func.count()).where(
            t.catalog_name == self.name, t.table_namespace == namespace, t.table_name == name, ~tables_only
        )
        with self.engine.connect() as connection:
            return bool(connection.execute(query).scalar())

    def pending_location(self, identifier: str | Identifier) -> str | None:
        """The metadata file of the pending table of that name, if a stream created one."""
        return pending_location(self.engine, self.name, identifier)

    def create_pending_table(
        self, identifier: str, schema: Schema, spec: PartitionSpec, location: str, properties: dict[str, str]
    ) -> Table:
        """A new table, its metadata written and named as pending; the one already there if another stream
        created it first, or published it meanwhile.

        ``location`` is where a table of that name goes; the pending table takes that directory with its
        uuid's first digits appended, so that a table another tool creates under the name meanwhile (at the
        usual place) never shares its files.
        """
        from icesink.iceberg.references import delete_quietly

        namespace, name = _parts(identifier)
        table_uuid = uuid.uuid4()
        own_location = f"{location.rstrip('/')}-{table_uuid.hex[:8]}"
        metadata = new_table_metadata(
            location=own_location,
            schema=schema,
            partition_spec=spec,
            sort_order=UNSORTED_SORT_ORDER,
            properties=properties,
            table_uuid=table_uuid,
        )
        metadata_location = load_location_provider(own_location, properties).new_table_metadata_file_location()
        io = load_file_io(properties=self.properties, location=metadata_location)
        self._write_metadata(metadata, io, metadata_location)
        values = sa.select(
            sa.literal(self.name),
            sa.literal(namespace),
            sa.literal(name),
            sa.literal(metadata_location),
            sa.literal(datetime.datetime.now(datetime.UTC), sa.DateTime(timezone=True)),
        ).where(~sa.exists().where(_catalog_row(self.name, namespace, name)))
        try:
            with self.engine.begin() as connection:
                _lock_name(connection, self.name, namespace, name)
                # One statement: no table of the name enters the catalog between the check and the insert.
                inserted = connection.execute(sa.insert(PENDING_TABLES).from_select(_COLUMNS, values)).rowcount
        except sa.exc.IntegrityError:
            inserted = 0  # another stream's pending table is the one
        if inserted != 1:
            delete_quietly(io, [metadata_location])
            _remove_if_empty(metadata_location.rsplit("/", 1)[0], own_location)
            return self.load_table(identifier)
        return self._pending_table(identifier, metadata_location)

    def commit_table(
        self, table: Table, requirements: tuple[TableRequirement, ...], updates: tuple[TableUpdate, ...]
    ) -> CommitTableResponse:
        """A pending table's first snapshot publishes it; any other change of it stays pending."""
        from icesink.iceberg.references import delete_quietly

        pending = self.pending_location(table.name())
        if pending is None:
            return super().commit_table(table, requirements, updates)
        current = self._pending_table(table.name(), pending)
        staged = self._update_and_stage_table(current, table.name(), requirements, updates)
        if staged.metadata == current.metadata:
            return CommitTableResponse(metadata=current.metadata, metadata_location=current.metadata_location)
        self._write_metadata(staged.metadata, staged.io, staged.metadata_location)
        with self.engine.connect() as connection:
            transaction = connection.begin()
            try:
                if any(isinstance(u, AddSnapshotUpdate) for u in updates):
                    publish(connection, self, current, staged.metadata_location)
                else:
                    _move_pending(connection, self.name, current, staged.metadata_location)
            except BaseException:
                transaction.rollback()  # nothing names the new file
                delete_quietly(staged.io, [staged.metadata_location])
                raise
            # An error in COMMIT itself leaves the outcome unknown: the file stays, since the catalog may name it.
            transaction.commit()
        return CommitTableResponse(metadata=staged.metadata, metadata_location=staged.metadata_location)

    def load_own_table(self, identifier: str | Identifier) -> Table:
        """The table streams of that name write: its pending table if a stream created one, even beside another
        tool's table of the name (for an operator sorting that out), else the catalog's."""
        pending = self.pending_location(identifier)
        return self._pending_table(identifier, pending) if pending is not None else super().load_table(identifier)

    def drop_pending_table(self, identifier: str | Identifier) -> list[str]:
        """Give up the pending table of that name: its row goes, and every file under its own location (a
        directory no other table shares). The files deleted; ``NoSuchTableError`` if it is not pending."""
        from icesink.iceberg.references import delete_quietly, list_files

        pending = self.pending_location(identifier)
        if pending is None:
            raise NoSuchTableError(f"Table is not pending: {'.'.join(_parts(identifier))}")
        table = self._pending_table(identifier, pending)
        namespace, name = _parts(identifier)
        with self.engine.begin() as connection:
            _lock_name(connection, self.name, namespace, name)
            gone = connection.execute(
                sa.delete(PENDING_TABLES).where(
                    _row(self.name, namespace, name), PENDING_TABLES.c.metadata_location == pending
                )
            )
        if gone.rowcount != 1:
            raise CommitFailedException(f"Table has been updated by another process: {namespace}.{name}")
        files = [stored.uri for stored in list_files(table, table.location())]
        delete_quietly(table.io, files)
        return files

    def _convert_orm_to_iceberg(self, orm_table: IcebergTables) -> Table:
        """pyiceberg's, with the metadata file parsed once per process (:mod:`icesink.iceberg.metadata_cache`)."""
        metadata_location = orm_table.metadata_location
        if not metadata_location or not orm_table.table_namespace or not orm_table.table_name:
            return super()._convert_orm_to_iceberg(orm_table)  # pyiceberg's errors for a damaged row
        return self._catalog_table((orm_table.table_namespace, orm_table.table_name), metadata_location)

    def _catalog_table(self, name: tuple[str, str], metadata_location: str) -> Table:
        namespace, table_name = name
        io = load_file_io(properties=self.properties, location=metadata_location)
        metadata = table_metadata(io, metadata_location)
        return Table(
            identifier=(*Catalog.identifier_to_tuple(namespace), table_name),
            metadata=metadata,
            metadata_location=metadata_location,
            io=self._load_file_io(metadata.properties, metadata_location),
            catalog=self,
        )

    def _pending_table(self, identifier: str | Identifier, metadata_location: str) -> PendingTable:
        io = load_file_io(properties=self.properties, location=metadata_location)
        metadata = table_metadata(io, metadata_location)
        namespace, name = _parts(identifier)
        return PendingTable(
            identifier=(*namespace.split("."), name),
            metadata=metadata,
            metadata_location=metadata_location,
            io=load_file_io(properties={**self.properties, **metadata.properties}, location=metadata_location),
            catalog=self,
        )


def publish(connection: sa.Connection, catalog: SqlCatalog, current: Table, metadata_location: str) -> None:
    """Within the caller's transaction: the pending table enters the catalog at ``metadata_location``.

    ``CommitFailedException`` if its pending row moved meanwhile (another stream committed it) or the
    catalog has a table of that name already (then the next load says who made it).
    """
    namespace, name = _parts(current.name())
    _lock_name(connection, catalog.name, namespace, name)
    moved = connection.execute(
        sa.delete(PENDING_TABLES).where(
            _row(catalog.name, namespace, name), PENDING_TABLES.c.metadata_location == current.metadata_location
        )
    )
    if moved.rowcount != 1:
        raise CommitFailedException(f"Table has been updated by another process: {namespace}.{name}")
    try:  # the caller's transaction rolls back on the error, the delete above with it
        connection.execute(
            sa.insert(IcebergTables).values(**catalog._create_table_row(namespace, name, metadata_location))
        )
    except sa.exc.IntegrityError as e:
        raise CommitFailedException(f"Table has been created by another process: {namespace}.{name}") from e


def _move_pending(connection: sa.Connection, catalog_name: str, current: Table, metadata_location: str) -> None:
    namespace, name = _parts(current.name())
    moved = connection.execute(
        sa.update(PENDING_TABLES)
        .where(_row(catalog_name, namespace, name), PENDING_TABLES.c.metadata_location == current.metadata_location)
        .values(metadata_location=metadata_location)
    )
    if moved.rowcount != 1:
        raise CommitFailedException(f"Table has been updated by another process: {namespace}.{name}")


def pending_location(engine: sa.Engine, catalog_name: str, identifier: str | Identifier) -> str | None:
    """The metadata file of the catalog's pending table of that name, if a stream created one."""
    namespace, name = _parts(identifier)
    query = sa.select(PENDING_TABLES.c.metadata_location).where(_row(catalog_name, namespace, name))
    with engine.connect() as connection:
        found = connection.execute(query).scalar()
    return str(found) if found is not None else None


def pending_tables(engine: sa.Engine, catalog_name: str) -> list[tuple[str, str, datetime.datetime]]:
    """(identifier, metadata location, created at) of every pending table of the catalog, by name."""
    query = sa.select(PENDING_TABLES).where(PENDING_TABLES.c.catalog_name == catalog_name)
    with engine.connect() as connection:
        rows = connection.execute(query).all()
    return sorted((f"{r.table_namespace}.{r.table_name}", r.metadata_location, r.created_at) for r in rows)


def _created_elsewhere(table: Table, pending: str) -> TableCreatedElsewhereError:
    identifier = ".".join(table.name())
    return TableCreatedElsewhereError(
        f"table {identifier}: a stream created it (pending metadata {pending}) and has not committed to it yet, "
        f"but another tool created a table of that name in the catalog meanwhile (metadata "
        f"{table.metadata_location}). The stream's files were written for its own table and are not committed "
        "into the other one; they stay staged. Drop or rename the other table (then they commit), or discard "
        f"them (`{icesink_command('checkpoints discard', identifier, 'N')}`) and give the name up "
        f"(`{icesink_command('tables drop-pending', identifier)}`), mapping the stream's source table to another name"
    )


def _view_in_the_way(identifier: str | Identifier, pending: str) -> TableCreatedElsewhereError:
    name = identifier if isinstance(identifier, str) else ".".join(identifier)
    return TableCreatedElsewhereError(
        f"table {name}: a stream created it (pending metadata {pending}) and has not committed to it yet, but "
        "another tool created a view of that name in the catalog meanwhile, so the table cannot enter the catalog "
        "under it. The stream's files stay staged. Drop or rename the view (then they commit), or discard them "
        f"(`{icesink_command('checkpoints discard', name, 'N')}`) and give the name up "
        f"(`{icesink_command('tables drop-pending', name)}`), mapping the stream's source table to another name"
    )


def _remove_if_empty(*directories: str) -> None:
    """A creator that lost leaves no empty directories behind on a local file system (object stores have none)."""
    import contextlib
    import os

    from icesink import paths

    for directory in directories:
        location = paths.parse(directory)
        if location.is_local:
            with contextlib.suppress(OSError):  # not empty after all, or already gone
                os.rmdir(location.path)


def _lock_name(connection: sa.Connection, catalog_name: str, namespace: str, name: str) -> None:
    """On PostgreSQL, a lock on the table's name until the transaction ends: a stream creating a pending table
    and a commit publishing one of that name take turns (SQLite's single writer already makes them)."""
    if connection.dialect.name != "postgresql":
        return
    digest = hashlib.sha256("\0".join(("icesink-pending", catalog_name, namespace, name)).encode()).digest()
    connection.execute(
        sa.text("SELECT pg_advisory_xact_lock(:key)"), {"key": int.from_bytes(digest[:8], "big", signed=True)}
    )


def _catalog_row(catalog_name: str, namespace: str, name: str) -> Any:
    return sa.and_(
        IcebergTables.catalog_name == catalog_name,
        IcebergTables.table_namespace == namespace,
        IcebergTables.table_name == name,
    )


def _parts(identifier: str | Identifier) -> tuple[str, str]:
    return Catalog.namespace_to_string(Catalog.namespace_from(identifier)), Catalog.table_name_from(identifier)


def _row(catalog_name: str, namespace: str, name: str) -> Any:
    return sa.and_(
        PENDING_TABLES.c.catalog_name == catalog_name,
        PENDING_TABLES.c.table_namespace == namespace,
        PENDING_TABLES.c.table_name == name,
    )
