"""Alembic environment: runs on the engine icesink passes in, never on a URL of its own.

All migrations run in one transaction that first takes a database lock, so
concurrent ``icesink db upgrade`` runs (or first uses of the embedded catalog)
wait for each other: the next one reads the version only once the previous
one has committed, and finds nothing left to do.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from alembic import context

from icesink.migrations import VERSION_TABLE

if TYPE_CHECKING:
    from sqlalchemy.engine import Connection

# Any fixed 64-bit number; PostgreSQL advisory locks are named by numbers. "icesink\0" as bytes.
MIGRATION_LOCK_KEY = 0x6963657369_6E6B00


def lock_for_migrations(connection: Connection) -> None:
    """Hold the database's migration lock until the transaction ends."""
    from sqlalchemy import text

    dialect = connection.dialect.name
    if dialect == "postgresql":
        connection.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": MIGRATION_LOCK_KEY})
    elif dialect == "sqlite":
        # Takes the write lock now (waiting up to the connection's busy timeout), before the version is read.
        connection.exec_driver_sql("BEGIN IMMEDIATE")
    # Other databases get no lock: icesink's catalogs are SQLite and PostgreSQL.


engine = context.config.attributes["engine"]

with engine.connect() as connection, connection.begin():
    lock_for_migrations(connection)
    # The connection is already in a transaction: alembic runs every migration inside it.
    context.configure(
        connection=connection,
        version_table=VERSION_TABLE,
        render_as_batch=connection.dialect.name == "sqlite",
    )
    with context.begin_transaction():
        context.run_migrations()
