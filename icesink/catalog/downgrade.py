"""``icesink db downgrade``: the catalog database's schema taken back for an earlier icesink release.

Only as far back as every row can go: revision 0006's downgrade would drop which checkpoints commit
across tables, 0005's the discarded state, so neither is offered. Nothing may run meanwhile: a committer
or stream of this release would meet columns it does not know.
"""

from __future__ import annotations

import datetime

import sqlalchemy as sa
from alembic.util import CommandError

from icesink import migrations
from icesink.catalog.config import CatalogConfig
from icesink.catalog.database import as_utc, database_errors, engine, refuse_missing_file
from icesink.errors import ConfigError, LedgerFormatError

# The oldest revision a downgrade keeps every ledger row whole at.
OLDEST = "0006"

_leases = sa.table(
    "icesink_committer_leases",
    sa.column("catalog_name", sa.String()),
    sa.column("scope", sa.String()),
    sa.column("owner", sa.String()),
    sa.column("expires_at", sa.DateTime(timezone=True)),
)


def downgrade(config: CatalogConfig, revision: str) -> None:
    """Take the schema back to ``revision``; a :class:`ConfigError` saying why not where it cannot."""

    known = migrations.revisions()
    if revision not in known:
        raise ConfigError(f"{config.describe()}: no schema revision {revision!r}; the revisions are {', '.join(known)}")
    if known.index(revision) < known.index(OLDEST):
        raise ConfigError(
            f"{config.describe()}: revision {revision} would drop what later revisions keep (which checkpoints "
            f"commit across tables, who discarded one); icesink db downgrade goes back to {OLDEST} at the oldest"
        )
    refuse_missing_file(config)
    with database_errors(config):
        current = migrations.current_revision(engine(config))
        _check_current(config, current, revision, known)
        _refuse_live_committers(config)
        try:
            migrations.downgrade(engine(config), revision)
        except CommandError as e:  # another downgrade got there first
            raise ConfigError(f"{config.describe()}: {e}; `icesink tables list` says where the schema is") from e
        except LedgerFormatError as e:
            raise LedgerFormatError(f"{config.describe()}: {e}; nothing was changed") from e


def _check_current(config: CatalogConfig, current: str | None, revision: str, known: list[str]) -> None:
    if current is None:
        raise ConfigError(f"{config.describe()} has no icesink schema: there is nothing to take back")
    if current not in known:
        raise ConfigError(
            f"{config.describe()} is at schema revision {current}, which a later icesink release made; take it back "
            f"with that release (`icesink db downgrade {revision}`)"
        )
    if known.index(current) <= known.index(revision):
        raise ConfigError(
            f"{config.describe()} is at schema revision {current}, not above {revision}: there is nothing to take "
            "back (`icesink db upgrade` brings it to this release's)"
        )


def _refuse_live_committers(config: CatalogConfig) -> None:
    """A committer holding a lease in any catalog of the database would fail on every pass after this."""
    now = datetime.datetime.now(datetime.UTC)
    with engine(config).connect() as connection:
        if not sa.inspect(connection).has_table("icesink_committer_leases"):
            return
        rows = connection.execute(
            sa.select(_leases.c.catalog_name, _leases.c.scope, _leases.c.owner, _leases.c.expires_at)
        )
        live = [r for r in rows if (as_utc(r.expires_at) or now) > now]
    if live:
        holders = ", ".join(sorted({f"{r.owner} ({r.catalog_name}: {r.scope})" for r in live}))
        raise ConfigError(
            f"{config.describe()}: committers are running ({holders}); stop them, and the streams writing to this "
            "database, then downgrade"
        )
