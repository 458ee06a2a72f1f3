"""Alembic migrations owning every table icesink reads or writes.

They create pyiceberg's SQL catalog tables (``iceberg_tables``,
``iceberg_namespace_properties``) and icesink's own (the checkpoint ledger),
so that the catalog can be opened with ``init_catalog_tables`` off. The
version is kept in ``icesink_alembic_version`` so that an application's own
alembic history in the same database is left alone.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine

VERSION_TABLE = "icesink_alembic_version"
# The newest revision, written out: every process that opens a catalog compares the database's revision with
# it, and asking alembic means importing it and every script (about half a second, paid again by each Python
# process Spark starts for a stream). tests/test_migrations.py holds it equal to alembic's head.
HEAD = "0018"
SCRIPT_LOCATION = str(Path(__file__).parent)


def _config(engine: Engine):  # type: ignore[no-untyped-def]
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", SCRIPT_LOCATION)
    config.attributes["engine"] = engine
    return config


def upgrade(engine: Engine, revision: str = "head") -> None:
    """Bring the database schema up to ``revision``."""
    from alembic import command

    command.upgrade(_config(engine), revision)


def downgrade(engine: Engine, revision: str) -> None:
    """Take the database schema back to ``revision`` (before running an earlier icesink release on it)."""
    from alembic import command

    command.downgrade(_config(engine), revision)


def revisions() -> list[str]:
    """Every revision, oldest first."""
    from alembic.script import ScriptDirectory

    return [r.revision for r in reversed(list(ScriptDirectory(SCRIPT_LOCATION).walk_revisions()))]


def head_revision() -> str:
    """Alembic's head, read from the scripts (:data:`HEAD` is the same, without reading them)."""
    from alembic.script import ScriptDirectory

    head = ScriptDirectory(SCRIPT_LOCATION).get_current_head()
    assert head is not None
    return head


def current_revision(engine: Engine) -> str | None:
    """The revision the database is at, or None if icesink never migrated it."""
    from sqlalchemy import inspect, text

    with engine.connect() as connection:
        if not inspect(connection).has_table(VERSION_TABLE):
            return None
        row = connection.execute(text(f"SELECT version_num FROM {VERSION_TABLE}")).first()
        return None if row is None else str(row[0])
