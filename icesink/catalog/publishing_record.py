"""What each stream into a branch asks of publishing, kept for the committer daemon (``icesink_publishing``).

A stream whose commits the daemon makes cannot hand it Python objects: it records, per table and job, the branch,
the publish policy and its checks as :func:`icesink.audit.running.describe_check` describes them, and the daemon
makes them again (built-ins from their arguments, functions imported).
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import sqlalchemy as sa

from icesink.catalog.config import CatalogConfig
from icesink.catalog.database import database_errors, engine

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine

metadata = sa.MetaData()

publishing = sa.Table(
    "icesink_publishing",
    metadata,
    sa.Column("catalog_name", sa.String(255), primary_key=True),
    sa.Column("table_identifier", sa.String(511), primary_key=True),
    sa.Column("job_id", sa.String(255), primary_key=True),
    sa.Column("branch", sa.String(255), nullable=False),
    sa.Column("atomic", sa.Boolean(), nullable=False),
    sa.Column("policy", sa.String(32), nullable=False),
    sa.Column("interval_seconds", sa.Float(), nullable=False),
    sa.Column("checks", sa.Text(), nullable=False),  # JSON: the checks, described
    sa.Column("declared_at", sa.DateTime(timezone=True), nullable=False),
)


@dataclass(frozen=True)
class Declared:
    """One table's publishing, as its stream declared it."""

    identifier: str
    job_id: str
    branch: str
    atomic: bool
    policy: str
    interval_seconds: float
    checks: tuple[dict[str, object], ...]


class PublishingRecord:
    """Reads and writes ``icesink_publishing`` for one catalog."""

    def __init__(self, config: CatalogConfig, bound: Engine | None = None) -> None:
        self._config = config
        self._engine = bound or engine(config)

    def declare(self, declared: Declared) -> None:
        """Record (or replace) a table's publishing for a job."""
        c = publishing.c
        keys = {"catalog_name": self._config.name, "table_identifier": declared.identifier, "job_id": declared.job_id}
        values = {
            "branch": declared.branch,
            "atomic": declared.atomic,
            "policy": declared.policy,
            "interval_seconds": declared.interval_seconds,
            "checks": json.dumps(list(declared.checks), ensure_ascii=False, default=str),
            "declared_at": datetime.datetime.now(datetime.UTC),
        }
        where = [c.catalog_name == keys["catalog_name"], c.table_identifier == declared.identifier]
        with database_errors(self._config), self._engine.begin() as connection:
            found = connection.execute(
                sa.update(publishing).where(*where, c.job_id == declared.job_id).values(**values)
            )
            if found.rowcount == 0:
                connection.execute(sa.insert(publishing).values(**keys, **values))

    def of_tables(self, identifiers: Sequence[str]) -> list[Declared]:
        return self._select(publishing.c.table_identifier.in_(list(identifiers)))

    def every_table(self) -> list[Declared]:
        return self._select(sa.true())

    def of_job(self, job_id: str) -> list[Declared]:
        return self._select(publishing.c.job_id == job_id)

    def _select(self, where: sa.ColumnElement[bool]) -> list[Declared]:
        c = publishing.c
        query = sa.select(publishing).where(c.catalog_name == self._config.name, where).order_by(c.table_identifier)
        with database_errors(self._config), self._engine.connect() as connection:
            rows = connection.execute(query).all()
        return [
            Declared(
                r.table_identifier,
                r.job_id,
                r.branch,
                bool(r.atomic),
                r.policy,
                float(r.interval_seconds),
                tuple(json.loads(r.checks)),
            )
            for r in rows
        ]
