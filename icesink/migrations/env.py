"""Alembic environment: runs on the engine icesink passes in, never on a URL of its own."""

from __future__ import annotations

from alembic import context

from icesink.migrations import VERSION_TABLE

engine = context.config.attributes["engine"]

with engine.connect() as connection:
    context.configure(
        connection=connection,
        version_table=VERSION_TABLE,
        render_as_batch=connection.dialect.name == "sqlite",
        transaction_per_migration=True,
    )
    with context.begin_transaction():
        context.run_migrations()
    connection.commit()
