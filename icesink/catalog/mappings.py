"""What a stream's mapping options matched: the keys of a Debezium stream's ``tables=`` and ``partition_by``.

A key is recorded with what it maps to when the stream first runs, and what it first matched (a source table,
or the table a ``partition_by`` key names) when it first does; a key still unmatched is what ``icesink tables
mappings --unmatched`` lists. Writes happen only when something is new, not at every micro-batch.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable
from dataclasses import dataclass

import sqlalchemy as sa

from icesink.catalog.config import CatalogConfig
from icesink.catalog.database import as_utc, database_errors, engine

metadata = sa.MetaData()
mappings = sa.Table(
    "icesink_stream_mappings",
    metadata,
    sa.Column("catalog_name", sa.String(255), primary_key=True),
    sa.Column("job_id", sa.String(255), primary_key=True),
    sa.Column("option", sa.String(32), primary_key=True),
    sa.Column("name", sa.String(512), primary_key=True),
    sa.Column("target", sa.String(1000), nullable=False),
    sa.Column("matched", sa.String(1000), nullable=True),
    sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
)

TABLES_OPTION = "tables"
PARTITION_BY_OPTION = "partition_by"


@dataclass(frozen=True)
class Mapping:
    """One key of a stream's mapping option: what it maps to, and what it matched (None: nothing yet)."""

    job_id: str
    option: str  # tables or partition_by
    name: str
    target: str
    matched: str | None
    updated_at: datetime.datetime


class Mappings:
    """The mapping keys of the streams of one catalog."""

    def __init__(self, config: CatalogConfig) -> None:
        self._config = config

    def record(self, job_id: str, keys: Iterable[tuple[str, str, str]]) -> None:
        """The stream's ``(option, name, target)`` keys: new ones added unmatched, changed targets updated,
        keys the stream no longer has removed."""
        now = datetime.datetime.now(datetime.UTC)
        wanted = {(option, name): target for option, name, target in keys}
        with database_errors(self._config), engine(self._config).begin() as connection:
            rows = connection.execute(
                sa.select(mappings.c.option, mappings.c.name, mappings.c.target).where(self._job(job_id))
            ).all()
            have = {(r.option, r.name): r.target for r in rows}
            for option, name in set(have) - set(wanted):
                connection.execute(
                    mappings.delete().where(self._job(job_id), mappings.c.option == option, mappings.c.name == name)
                )
            for (option, name), target in wanted.items():
                if (option, name) not in have:
                    connection.execute(
                        mappings.insert().values(
                            catalog_name=self._config.name,
                            job_id=job_id,
                            option=option,
                            name=name,
                            target=target,
                            matched=None,
                            updated_at=now,
                        )
                    )
                elif have[(option, name)] != target:
                    connection.execute(
                        mappings.update()
                        .where(self._job(job_id), mappings.c.option == option, mappings.c.name == name)
                        .values(target=target, matched=None, updated_at=now)
                    )

    def matched(self, job_id: str, option: str, name: str, what: str) -> None:
        """The key matched ``what`` (kept: the first match is the one recorded)."""
        with database_errors(self._config), engine(self._config).begin() as connection:
            connection.execute(
                mappings.update()
                .where(
                    self._job(job_id),
                    mappings.c.option == option,
                    mappings.c.name == name,
                    mappings.c.matched.is_(None),
                )
                .values(matched=what, updated_at=datetime.datetime.now(datetime.UTC))
            )

    def all(self, job_id: str | None = None) -> list[Mapping]:
        condition = mappings.c.catalog_name == self._config.name
        if job_id is not None:
            condition = sa.and_(condition, mappings.c.job_id == job_id)
        with database_errors(self._config), engine(self._config).connect() as connection:
            rows = connection.execute(
                sa.select(mappings).where(condition).order_by(mappings.c.job_id, mappings.c.option, mappings.c.name)
            ).all()
        return [Mapping(r.job_id, r.option, r.name, r.target, r.matched, as_utc(r.updated_at)) for r in rows]

    def _job(self, job_id: str) -> sa.ColumnElement[bool]:
        return sa.and_(mappings.c.catalog_name == self._config.name, mappings.c.job_id == job_id)
