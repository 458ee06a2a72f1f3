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
from icesink.table_ref import TableRef

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
    sa.Column("table_uuid", sa.String(36)),  # the table declared for (NULL: declared before 0017, any of the name)
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
    table_uuid: str | None = None  # the table of the name it was declared for (None: any, declared before 0017)

    def of_another_table(self, table_uuid: str) -> bool:
        """Whether it was declared for another table of the name, dropped since (``table_uuid``: the one now)."""
        return self.table_uuid is not None and self.table_uuid != table_uuid

    @property
    def ref(self) -> TableRef:
        return TableRef(self.identifier, self.branch)


class PublishingRecord:
    """Reads and writes ``icesink_publishing`` for one catalog."""

    def __init__(self, config: CatalogConfig, bound: Engine | None = None) -> None:
        self._config = config
        self._engine = bound or engine(config)

    def take_over(self, refs: Sequence[TableRef], job_id: str, declared: Sequence[Declared]) -> list[Declared]:
        """Make the branches ``refs`` (and those of ``declared``) the stream of ``job_id``'s, ``declared`` saying
        how the daemon publishes them (the others: not at all), in one transaction; returns what other jobs held.

        A branch is published by one stream: the one that met it last says how, or that the daemon does not
        publish it at all (an inline stream publishes its own; a stream without publishing leaves main to
        ``icesink publish``). An older stream's declaration would otherwise go on moving main with its checks.
        The job's rows for other branches of the tables go too (restarted into another branch). Two streams
        taking a branch over at once may both leave a row: the newest counts (:meth:`owners`).
        """
        c = publishing.c
        now = datetime.datetime.now(datetime.UTC)
        taken = sorted({*((r.identifier, r.branch) for r in refs), *((d.identifier, d.branch) for d in declared)})
        publishing_ = {(d.identifier, d.branch) for d in declared}
        rows = [_row(self._config.name, d, now) for d in declared]
        rows += [
            _row(self._config.name, _not_published(t, b, job_id), now) for t, b in taken if (t, b) not in publishing_
        ]
        held = self.owners([TableRef(t, b) for t, b in taken])
        superseded = [d for d in held.values() if d.job_id != job_id]
        with database_errors(self._config), self._engine.begin() as connection:
            for start in range(0, len(taken), _STATEMENT_NAMES):
                chunk = taken[start : start + _STATEMENT_NAMES]
                same_branch = sa.tuple_(c.table_identifier, c.branch).in_(chunk)
                same_job = sa.and_(c.job_id == job_id, c.table_identifier.in_([t for t, _ in chunk]))
                connection.execute(
                    sa.delete(publishing).where(c.catalog_name == self._config.name, sa.or_(same_branch, same_job))
                )
            if rows:
                connection.execute(sa.insert(publishing), rows)
        return superseded

    def owners(self, refs: Sequence[TableRef]) -> dict[TableRef, Declared]:
        """The row of the stream that met each branch last (branches no stream met since this record began:
        absent)."""
        wanted = set(refs)
        found = self._newest(self._select(_named([r.identifier for r in refs])))
        return {d.ref: d for d in found if d.ref in wanted}

    def of_tables(self, identifiers: Sequence[str]) -> list[Declared]:
        """What the daemon publishes of these tables: per branch, the declaration of the stream that met it last."""
        return [d for d in self._newest(self._select(_named(identifiers))) if d.policy != NOT_PUBLISHED]

    def every_table(self) -> list[Declared]:
        """What the daemon publishes, of every table."""
        return [d for d in self._newest(self._select(sa.true())) if d.policy != NOT_PUBLISHED]

    def of_job(self, job_id: str) -> list[Declared]:
        """What the daemon publishes for a job: its declarations of the branches it still holds, the newest first."""
        mine = self._select(publishing.c.job_id == job_id)
        owners = self.owners([d.ref for d in mine])
        found = [d for d in mine if _held_by(owners.get(d.ref), job_id) and d.policy != NOT_PUBLISHED]
        return sorted(found, key=lambda d: d.declared_at or _EPOCH, reverse=True)

    def forget_declared(self, declared: Declared) -> None:
        """Drop one job's declaration of a table that was dropped and created again since (the row as it was: a
        declaration the job made since, of the table now, stays)."""
        c = publishing.c
        same = sa.and_(
            c.catalog_name == self._config.name,
            c.table_identifier == declared.identifier,
            c.job_id == declared.job_id,
            c.branch == declared.branch,
            c.table_uuid == declared.table_uuid,
        )
        with database_errors(self._config), self._engine.begin() as connection:
            connection.execute(sa.delete(publishing).where(same))

    def forget(self, identifiers: Sequence[str]) -> None:
        """Drop every row of these tables (they no longer exist)."""
        c = publishing.c
        with database_errors(self._config), self._engine.begin() as connection:
            connection.execute(sa.delete(publishing).where(c.catalog_name == self._config.name, _named(identifiers)))

    @staticmethod
    def _newest(found: list[Declared]) -> list[Declared]:
        newest: dict[TableRef, Declared] = {}
        for one in found:
            known = newest.get(one.ref)
            if known is None or (one.declared_at or _EPOCH, one.job_id) > (known.declared_at or _EPOCH, known.job_id):
                newest[one.ref] = one
        return [newest[ref] for ref in sorted(newest, key=lambda r: (r.identifier, r.branch))]

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
                r.table_uuid,
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
        "table_uuid": declared.table_uuid,
    }


def _utc(moment: datetime.datetime | None) -> datetime.datetime | None:
    """SQLite gives back a naive datetime for what was stored in UTC."""
    return moment.replace(tzinfo=datetime.UTC) if moment is not None and moment.tzinfo is None else moment


def _not_published(identifier: str, branch: str, job_id: str) -> Declared:
    return Declared(identifier, job_id, branch, False, NOT_PUBLISHED, 0.0, ())  # of whatever table has the name


def _named(identifiers: Sequence[str]) -> sa.ColumnElement[bool]:
    return publishing.c.table_identifier.in_(sorted(set(identifiers)))


def _held_by(owner: Declared | None, job_id: str) -> bool:
    return owner is not None and owner.job_id == job_id
