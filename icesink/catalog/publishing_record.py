"""What each stream into a branch asks of publishing, kept for the committer daemon (``icesink_publishing``).

A stream whose commits the daemon makes cannot hand it Python objects: it records, per table and job, the branch,
the publish policy and its checks as :func:`icesink.audit.running.describe_check` describes them, and the daemon
makes them again (built-ins from their arguments, functions imported).
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import sqlalchemy as sa

from icesink.catalog.config import CatalogConfig
from icesink.catalog.database import database_errors, engine

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine

metadata = sa.MetaData()
_STATEMENT_NAMES = 500  # tables named in one statement (SQLite's limit on parameters is 999 in old builds)
_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
# The policy of a table the daemon publishes nothing of for its job: its stream publishes inline, or nobody does.
NOT_PUBLISHED = "none"

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
    declared_at: datetime.datetime | None = field(default=None, compare=False)  # None: not recorded yet


class PublishingRecord:
    """Reads and writes ``icesink_publishing`` for one catalog."""

    def __init__(self, config: CatalogConfig, bound: Engine | None = None) -> None:
        self._config = config
        self._engine = bound or engine(config)

    def take_over(self, identifiers: Sequence[str], job_id: str, declared: Sequence[Declared]) -> list[Declared]:
        """Make ``identifiers`` the tables of ``job_id``'s stream, with ``declared`` what the daemon publishes of
        them (the others: nothing), in one transaction; returns what other jobs had declared for the daemon.

        A table's main follows one stream: the one that met the table last says how, or that the daemon does
        not publish it at all (an inline stream publishes its own; a stream without publishing leaves main to
        ``icesink publish``). An older stream's declaration would otherwise go on moving main with its checks.
        Two streams taking a table over at once may both leave a row: the newest counts (:meth:`owners`).
        """
        c = publishing.c
        now = datetime.datetime.now(datetime.UTC)
        names = sorted({*identifiers, *(d.identifier for d in declared)})
        publishing_ = {d.identifier for d in declared}
        rows = [_row(self._config.name, d, now) for d in declared]
        rows += [_row(self._config.name, _not_published(n, job_id), now) for n in names if n not in publishing_]
        superseded = [d for d in self.of_tables(names) if d.job_id != job_id]
        with database_errors(self._config), self._engine.begin() as connection:
            for start in range(0, len(names), _STATEMENT_NAMES):
                chunk = names[start : start + _STATEMENT_NAMES]
                connection.execute(
                    sa.delete(publishing).where(c.catalog_name == self._config.name, c.table_identifier.in_(chunk))
                )
            if rows:
                connection.execute(sa.insert(publishing), rows)
        return superseded

    def owners(self, identifiers: Sequence[str]) -> dict[str, str]:
        """The job whose stream met each table last (tables no stream met since this record began: absent)."""
        return {d.identifier: d.job_id for d in self._newest(self._select(_named(identifiers)))}

    def of_tables(self, identifiers: Sequence[str]) -> list[Declared]:
        """What the daemon publishes of these tables: the declaration of the stream that met each last."""
        return [d for d in self._newest(self._select(_named(identifiers))) if d.policy != NOT_PUBLISHED]

    def every_table(self) -> list[Declared]:
        """What the daemon publishes, of every table."""
        return [d for d in self._newest(self._select(sa.true())) if d.policy != NOT_PUBLISHED]

    def of_job(self, job_id: str) -> list[Declared]:
        """What the daemon publishes for a job: its declarations of the tables it still holds, the newest first."""
        mine = self._select(publishing.c.job_id == job_id)
        owners = self.owners([d.identifier for d in mine])
        found = [d for d in mine if owners.get(d.identifier) == job_id and d.policy != NOT_PUBLISHED]
        return sorted(found, key=lambda d: d.declared_at or _EPOCH, reverse=True)

    @staticmethod
    def _newest(found: list[Declared]) -> list[Declared]:
        newest: dict[str, Declared] = {}
        for one in found:
            known = newest.get(one.identifier)
            if known is None or (one.declared_at or _EPOCH, one.job_id) > (known.declared_at or _EPOCH, known.job_id):
                newest[one.identifier] = one
        return [newest[name] for name in sorted(newest)]

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
                _utc(r.declared_at),
            )
            for r in rows
        ]


def _row(catalog_name: str, declared: Declared, now: datetime.datetime) -> dict[str, object]:
    return {
        "catalog_name": catalog_name,
        "table_identifier": declared.identifier,
        "job_id": declared.job_id,
        "branch": declared.branch,
        "atomic": declared.atomic,
        "policy": declared.policy,
        "interval_seconds": declared.interval_seconds,
        "checks": json.dumps(list(declared.checks), ensure_ascii=False, default=str),
        "declared_at": now,
    }


def _utc(moment: datetime.datetime | None) -> datetime.datetime | None:
    """SQLite gives back a naive datetime for what was stored in UTC."""
    return moment.replace(tzinfo=datetime.UTC) if moment is not None and moment.tzinfo is None else moment


def _not_published(identifier: str, job_id: str) -> Declared:
    return Declared(identifier, job_id, "", False, NOT_PUBLISHED, 0.0, ())


def _named(identifiers: Sequence[str]) -> sa.ColumnElement[bool]:
    return publishing.c.table_identifier.in_(sorted(set(identifiers)))
