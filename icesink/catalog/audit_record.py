"""The audit record: every branch snapshot's audit outcome, and which of them were published to main.

One row per snapshot the committer audited (write-audit-publish, :mod:`icesink.audit`). It says what the
snapshot's rows were compared with (``base_snapshot_id``: its parent, or main's head when an earlier snapshot
since main failed), whether the checks passed, their problems and the checks that ran. Publishing sets
``published_at`` of the snapshot main moved to, in the transaction that moves main, so the record never says
published about a snapshot main does not reach.
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import sqlalchemy as sa

from icesink.catalog.config import CatalogConfig
from icesink.catalog.database import as_utc, database_errors, engine

if TYPE_CHECKING:
    from sqlalchemy.engine import Connection, Engine

metadata = sa.MetaData()

audits = sa.Table(
    "icesink_audits",
    metadata,
    sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), primary_key=True, autoincrement=True),
    sa.Column("catalog_name", sa.String(255), nullable=False),
    sa.Column("table_identifier", sa.String(511), nullable=False),
    sa.Column("branch", sa.String(255), nullable=False),
    sa.Column("snapshot_id", sa.BigInteger(), nullable=False),
    sa.Column("base_snapshot_id", sa.BigInteger()),  # the rows checked are those added after it
    sa.Column("job_id", sa.String(255)),  # None: another tool's snapshot
    sa.Column("checkpoint_id", sa.BigInteger()),
    sa.Column("passed", sa.Boolean(), nullable=False),
    sa.Column("rows_checked", sa.BigInteger(), nullable=False),
    sa.Column("problems", sa.Text(), nullable=False),  # JSON: {check: [problem, ...]} of the checks that failed
    sa.Column("checks", sa.Text(), nullable=False),  # JSON: the checks that ran, as icesink.checks describes them
    sa.Column("audited_at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("published_at", sa.DateTime(timezone=True)),
    sa.Column("published_by", sa.String(255)),  # "committer", or the operator of `icesink publish`
    sa.Column("table_uuid", sa.String(36)),  # of the table audited (None: recorded before 0016)
)


@dataclass(frozen=True)
class AuditEntry:
    """One snapshot's audit, as recorded."""

    identifier: str
    branch: str
    snapshot_id: int
    base_snapshot_id: int | None
    job_id: str | None
    checkpoint_id: int | None
    passed: bool
    rows_checked: int
    problems: Mapping[str, Sequence[str]]
    checks: Sequence[Mapping[str, object]]
    audited_at: datetime.datetime
    published_at: datetime.datetime | None = None
    published_by: str | None = None
    table_uuid: str | None = None  # which table of the name (None: recorded before it was said)

    def as_json(self) -> dict[str, object]:
        return {
            "snapshot_id": self.snapshot_id,
            "base_snapshot_id": self.base_snapshot_id,
            "job_id": self.job_id,
            "checkpoint_id": self.checkpoint_id,
            "passed": self.passed,
            "rows_checked": self.rows_checked,
            "problems": {name: list(found) for name, found in self.problems.items()},
            "checks": [dict(c) for c in self.checks],
            "audited_at": self.audited_at.isoformat(),
            "published_at": self.published_at.isoformat() if self.published_at else None,
            "published_by": self.published_by,
            "table_uuid": self.table_uuid,
        }

    def held(self) -> dict[str, object]:
        """A failed audit as the committer daemon's /healthz lists it: the table whose publishing it holds."""
        return {
            "table": self.identifier,
            "branch": self.branch,
            "snapshot_id": self.snapshot_id,
            "checkpoint_id": self.checkpoint_id,
            "job_id": self.job_id,
            "problems": self.problems,
        }


# Row ids named in one statement (SQLite before 3.32 binds at most 999 parameters).
_IDS_PER_STATEMENT = 500


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


class AuditRecord:
    """Reads and writes ``icesink_audits`` for one catalog."""

    def __init__(self, config: CatalogConfig, bound: Engine | None = None) -> None:
        self._config = config
        self._engine = bound or engine(config)

    def _where(self, identifier: str, branch: str) -> list[sa.ColumnElement[bool]]:
        c = audits.c
        return [c.catalog_name == self._config.name, c.table_identifier == identifier, c.branch == branch]

    def record(self, entry: AuditEntry) -> None:
        """Record a snapshot's audit; an audit of it recorded before (a re-run) is replaced."""
        c = audits.c
        values = {
            "base_snapshot_id": entry.base_snapshot_id,
            "job_id": entry.job_id,
            "checkpoint_id": entry.checkpoint_id,
            "passed": entry.passed,
            "rows_checked": entry.rows_checked,
            "problems": json.dumps(entry.problems, ensure_ascii=False),
            "checks": json.dumps(entry.checks, ensure_ascii=False, default=str),
            "audited_at": entry.audited_at,
            "table_uuid": entry.table_uuid,
        }
        where = [*self._where(entry.identifier, entry.branch), c.snapshot_id == entry.snapshot_id]
        with database_errors(self._config), self._engine.begin() as connection:
            if connection.execute(sa.update(audits).where(*where).values(**values)).rowcount == 0:
                keys = {
                    "catalog_name": self._config.name,
                    "table_identifier": entry.identifier,
                    "branch": entry.branch,
                    "snapshot_id": entry.snapshot_id,
                }
                connection.execute(sa.insert(audits).values(**keys, **values))

    def of_branch(self, identifier: str, branch: str, table_uuid: str | None = None) -> dict[int, AuditEntry]:
        """Every recorded audit of the table's branch, by snapshot id; with ``table_uuid``, only those of that
        table (and those recorded before audits said which): not those of a table of the name dropped since."""
        where = self._where(identifier, branch)
        if table_uuid is not None:
            where.append(_of_table(table_uuid))
        with database_errors(self._config), self._engine.connect() as connection:
            rows = connection.execute(sa.select(audits).where(*where)).all()
        return {r.snapshot_id: _entry(r) for r in rows}

    def of_snapshots(self, identifier: str, snapshot_ids: Sequence[int], branch: str | None = None) -> list[AuditEntry]:
        """The recorded audits of these snapshots of the table: of ``branch``'s, or of every branch that has them
        (a snapshot two branches share has an audit per branch)."""
        if not snapshot_ids:
            return []
        c = audits.c
        where = [c.catalog_name == self._config.name, c.table_identifier == identifier]
        if branch is not None:
            where.append(c.branch == branch)
        with database_errors(self._config), self._engine.connect() as connection:
            rows = connection.execute(sa.select(audits).where(*where, c.snapshot_id.in_(list(snapshot_ids)))).all()
        return [_entry(r) for r in rows]

    def mark_published_in(self, connection: Connection, published: Sequence[tuple[str, str, int]], by: str) -> None:
        """In the caller's transaction (the one that moves main): (table, branch, snapshot) were published."""
        c = audits.c
        now = _now()
        for identifier, branch, snapshot_id in published:
            connection.execute(
                sa.update(audits)
                .where(*self._where(identifier, branch), c.snapshot_id == snapshot_id)
                .values(published_at=now, published_by=by)
            )

    def prune(
        self,
        identifier: str,
        kept: Collection[int],
        before: datetime.datetime,
        dry_run: bool = False,
        table_uuid: str | None = None,
    ) -> int:
        """Forget the audits of snapshots the table keeps no more (expired), recorded before ``before``, and, given
        the table's ``table_uuid``, every audit of an earlier table of the name (dropped and created again); how
        many (``dry_run``: how many would go).

        A table keeps its history for as long as its retention says, and its audits with it: without this the
        record would grow by a row per audited commit for as long as the table lives. The newest audit of each
        branch by each job (or by none: another tool's snapshot) stays whatever its snapshot: its checks are the
        ones run again (``icesink audit``, a daemon publishing a table its stream met in an earlier run), and it
        says the branch is audited at all, which ``icesink publish`` holds it to. ``kept`` must be read after
        ``before`` was fixed: a snapshot committed since is audited after ``before``, so its audit stays."""
        c = audits.c
        old = [c.catalog_name == self._config.name, c.table_identifier == identifier, c.audited_at < before]
        with database_errors(self._config), self._engine.begin() as connection:
            found = sa.select(c.id, c.branch, c.job_id, c.snapshot_id, c.audited_at, c.table_uuid).where(*old)
            newest: dict[tuple[str, str | None], tuple[datetime.datetime, int, int]] = {}
            expired = []
            for r in connection.execute(found):
                if table_uuid is not None and r.table_uuid not in (None, table_uuid):
                    expired.append(r.id)  # another table's, whatever its snapshot: its branch is gone with it
                    continue
                order = (as_utc(r.audited_at), r.snapshot_id, r.id)
                key = (r.branch, r.job_id)
                if key not in newest or order > newest[key]:
                    newest[key] = order
                if r.snapshot_id not in kept:
                    expired.append(r.id)
            last = {order[2] for order in newest.values()}
            gone = [i for i in expired if i not in last]
            if not dry_run:
                for start in range(0, len(gone), _IDS_PER_STATEMENT):
                    chunk = gone[start : start + _IDS_PER_STATEMENT]
                    connection.execute(sa.delete(audits).where(*old, c.id.in_(chunk)))
        return len(gone)


def _of_table(table_uuid: str) -> sa.ColumnElement[bool]:
    """Audits of the table with this uuid, or recorded before audits said which table they were of."""
    c = audits.c
    return sa.or_(c.table_uuid.is_(None), c.table_uuid == table_uuid)


def _entry(row: sa.Row) -> AuditEntry:  # type: ignore[type-arg]
    return AuditEntry(
        identifier=row.table_identifier,
        branch=row.branch,
        snapshot_id=row.snapshot_id,
        base_snapshot_id=row.base_snapshot_id,
        job_id=row.job_id,
        checkpoint_id=row.checkpoint_id,
        passed=bool(row.passed),
        rows_checked=row.rows_checked,
        problems=json.loads(row.problems),
        checks=json.loads(row.checks),
        audited_at=as_utc(row.audited_at),
        published_at=as_utc(row.published_at),
        published_by=row.published_by,
        table_uuid=row.table_uuid,
    )
