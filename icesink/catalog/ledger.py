"""The ledger: checkpoints staged by writers and their fate, in the catalog database.

A row is written when a micro-batch's files are durable, and lists them
(state ``staged``); the committer moves it to ``committed`` after the catalog
commit. The ledger only says what is waiting: whether a checkpoint is in the
table is decided by the table's marker (see :mod:`icesink.iceberg.marker`).
"""

# Over 400 lines: every statement on the one ledger table, writes and operators' views alike, in one class
# that owns its columns; its values are in catalog/checkpoints.py.

from __future__ import annotations

import datetime
import itertools
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import fields
from typing import TYPE_CHECKING

import sqlalchemy as sa
from pyiceberg.exceptions import CommitFailedException

from icesink.catalog.checkpoints import (
    CheckpointRow,
    CheckpointState,
    DeltaManifests,
    InlineFiles,
    JobLag,
    JobTable,
    JobTables,
    StagedCheckpoint,
    StagedFiles,
    StreamIdentity,
    decode_snapshot_properties,
    encode_snapshot_properties,
)
from icesink.catalog.config import CatalogConfig
from icesink.catalog.database import as_utc, database_errors, engine
from icesink.errors import LedgerFormatError
from icesink.table_ref import MAIN_BRANCH

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine

metadata = sa.MetaData()

checkpoints = sa.Table(
    "icesink_checkpoints",
    metadata,
    sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), primary_key=True, autoincrement=True),
    sa.Column("catalog_name", sa.String(255), nullable=False),
    sa.Column("table_identifier", sa.String(511), nullable=False),
    sa.Column("job_id", sa.String(255), nullable=False),
    sa.Column("checkpoint_id", sa.BigInteger(), nullable=False),
    sa.Column("state", sa.String(16), nullable=False),
    sa.Column("spec_id", sa.Integer(), nullable=False),
    sa.Column("delta_manifests", sa.Text(), nullable=False),  # DeltaManifests.encode: versioned JSON
    sa.Column("snapshot_id", sa.BigInteger()),
    sa.Column("staged_at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("committed_at", sa.DateTime(timezone=True)),
    sa.Column("manifests_deleted", sa.Boolean(), nullable=False),
    sa.Column("error", sa.Text()),
    sa.Column("stream_id", sa.String(255)),
    sa.Column("checkpoint_location", sa.String(1000)),
    sa.Column("schema_id", sa.Integer()),
    sa.Column("column_ids", sa.Text()),  # JSON: DataFrame column -> field id
    sa.Column("failed_at", sa.DateTime(timezone=True)),
    sa.Column("discarded_at", sa.DateTime(timezone=True)),
    sa.Column("discarded_by", sa.String(255)),
    sa.Column("discard_reason", sa.Text()),
    sa.Column("atomic", sa.Boolean(), nullable=False, server_default=sa.false()),
    sa.Column("commit_id", sa.String(64)),
    sa.Column("snapshot_properties", sa.Text()),  # encode_snapshot_properties: versioned JSON
    sa.Column("branch", sa.String(255), nullable=False, server_default=MAIN_BRANCH),
    sa.Column("table_uuid", sa.String(36)),  # of the table the checkpoint was staged for (None: staged before 0015)
    sa.Column("staged_files", sa.Text()),  # StagedFiles.encode while staged (None: none, committed, or before 0018)
)


# A checkpoint's field -> its ledger column, where the two are named apart (the column predates the glossary).
LEDGER_COLUMN = {"identifier": "table_identifier"}
_ROW_FIELDS = tuple(f.name for f in fields(CheckpointRow) if f.name not in ("manifests", "unreadable", "files"))
# Row ids a query names at most (SQLite allows 32,766 parameters in a statement, older builds 999).
_IDS_PER_QUERY = 500
# Every column but the staged files, which only the queries that commit or keep them read (they may be many).
_WITHOUT_FILES = [c for c in checkpoints.c if c.name != "staged_files"]


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def _seconds_since(now: datetime.datetime, then: datetime.datetime | None) -> float:
    aware = as_utc(then)
    return round((now - aware).total_seconds(), 3) if aware is not None else 0.0


def _manifests_of(values: Mapping[str, object], encoded: str) -> DeltaManifests:
    try:
        return DeltaManifests.decode(encoded)
    except ValueError as e:
        raise _format_error(
            values,
            e,
            "the row is damaged: restore the ledger row from a backup (the delta manifests of a checkpoint staged "
            "before 0018 are in the table's metadata directory, named after its job and checkpoint), or discard it",
        ) from e


def _files_in(values: Mapping[str, object], encoded: str | None) -> StagedFiles | None:
    """A row's staged files; a staged row whose manifests say they are in it must hold them."""
    manifests = values["manifests"]
    in_row = isinstance(manifests, DeltaManifests) and any(isinstance(m, InlineFiles) for _, m in manifests.present())
    try:
        if encoded is None:
            if in_row and values["state"] == CheckpointState.STAGED.value:
                raise ValueError("its files are missing from its row")
            return None
        return StagedFiles.decode(encoded)
    except ValueError as e:
        raise _format_error(
            values,
            e,
            "the row is damaged and its files are known nowhere else: restore it from a backup, or discard it",
        ) from e


def _properties_of(values: Mapping[str, object]) -> tuple[tuple[str, str], ...]:
    encoded = values["snapshot_properties"]
    try:
        return decode_snapshot_properties(encoded if isinstance(encoded, str) else None)
    except ValueError as e:
        raise _format_error(values, e, "the row is damaged: restore the ledger row from a backup") from e


def _format_error(values: Mapping[str, object], e: ValueError, damaged: str) -> LedgerFormatError:
    later = "later icesink release" in str(e)
    what = "commit it with the icesink release that staged it, or upgrade icesink where this runs" if later else damaged
    return LedgerFormatError(
        f"checkpoint {values['checkpoint_id']} of job {values['job_id']!r} for table "
        f"{values['identifier']!r} cannot be read from the ledger ({e}); it is left as it is: {what}"
    )


class Ledger:
    """Reads and writes ``icesink_checkpoints`` for one catalog."""

    def __init__(self, config: CatalogConfig, bound: Engine | None = None) -> None:
        self._config = config
        self._engine = bound or engine(config)

    @staticmethod
    def _row(row: sa.Row, unreadable_too: bool = False) -> CheckpointRow:  # type: ignore[type-arg]
        values = {name: row._mapping[LEDGER_COLUMN.get(name, name)] for name in _ROW_FIELDS}
        try:
            values["manifests"] = _manifests_of(values, row._mapping["delta_manifests"])
        except LedgerFormatError as e:
            if not unreadable_too:
                raise
            values["manifests"], values["unreadable"] = DeltaManifests(), str(e)
        try:
            if "staged_files" in row._mapping and "unreadable" not in values:  # read with its files
                values["files"] = _files_in(values, row._mapping["staged_files"])
        except LedgerFormatError as e:  # what it staged is still known, not the files themselves
            if not unreadable_too:
                raise
            values["unreadable"] = str(e)
        try:
            values["snapshot_properties"] = _properties_of(values)
        except LedgerFormatError as e:
            if not unreadable_too:
                raise
            values["snapshot_properties"], values["unreadable"] = (), str(e)
        values["state"] = CheckpointState(values["state"])
        if values["column_ids"] is not None:
            values["column_ids"] = tuple((str(k), int(v)) for k, v in json.loads(values["column_ids"]).items())
        values["staged_at"] = as_utc(values["staged_at"])
        for moment in ("committed_at", "failed_at", "discarded_at"):
            values[moment] = as_utc(values[moment])
        return CheckpointRow(**values)

    def stage(self, staged: StagedCheckpoint, state: CheckpointState = CheckpointState.STAGED) -> bool:
        """Record a staged checkpoint; False if the ledger already had it (the earlier row wins)."""
        return self.stage_all([(staged, state)])

    def stage_all(self, checkpoints_of: Sequence[tuple[StagedCheckpoint, CheckpointState]]) -> bool:
        """Record one checkpoint's rows (one per table) in one transaction: all of them, or none.

        False if the ledger already had any of them (the earlier rows win; nothing of this call is kept).
        """
        now = _now()
        rows = [
            {
                **{
                    LEDGER_COLUMN.get(f.name, f.name): getattr(staged, f.name)
                    for f in fields(staged)
                    if f.name not in ("manifests", "files")
                },
                "delta_manifests": staged.manifests.encode(),
                "staged_files": staged.files.encode() if staged.files else None,
                "catalog_name": self._config.name,
                "state": state.value,
                "staged_at": now,
                "committed_at": now if state == CheckpointState.COMMITTED else None,
                "manifests_deleted": not staged.manifests.present(),
                "column_ids": json.dumps(dict(staged.column_ids)) if staged.column_ids is not None else None,
                "snapshot_properties": encode_snapshot_properties(staged.snapshot_properties),
            }
            for staged, state in checkpoints_of
        ]
        if not rows:
            return True
        with database_errors(self._config):
            try:
                with self._engine.begin() as connection:
                    connection.execute(checkpoints.insert(), rows)
            except sa.exc.IntegrityError:
                return False
        return True

    def _select(
        self, *where: sa.ColumnElement[bool], unreadable_too: bool = False, with_files: bool = False
    ) -> list[CheckpointRow]:
        """The rows, in order; a row whose manifests cannot be read is a :class:`LedgerFormatError`, or with
        ``unreadable_too`` (to list it, or to discard it) a row marked ``unreadable``. Their staged files only
        ``with_files``."""
        query = (
            sa.select(*(checkpoints.c if with_files else _WITHOUT_FILES))
            .where(checkpoints.c.catalog_name == self._config.name, *where)
            .order_by(checkpoints.c.table_identifier, checkpoints.c.job_id, checkpoints.c.checkpoint_id)
        )
        with database_errors(self._config), self._engine.connect() as connection:
            return [self._row(r, unreadable_too) for r in connection.execute(query)]

    def get(
        self,
        identifier: str,
        job_id: str,
        checkpoint_id: int,
        unreadable_too: bool = False,
        with_files: bool = False,
    ) -> CheckpointRow | None:
        rows = self._select(
            checkpoints.c.table_identifier == identifier,
            checkpoints.c.job_id == job_id,
            checkpoints.c.checkpoint_id == checkpoint_id,
            unreadable_too=unreadable_too,
            with_files=with_files,
        )
        return rows[0] if rows else None

    def with_files(self, rows: Sequence[CheckpointRow], unreadable_too: bool = True) -> list[CheckpointRow]:
        """``rows`` (read without their files), their staged ones read again with them: what an operator is shown
        of a few rows, or what a committer reads of the rows it had not read before, rather than a whole backlog
        decoded again."""
        staged = [r.id for r in rows if r.state == CheckpointState.STAGED and not r.unreadable]
        again: dict[int, CheckpointRow] = {}
        for start in range(0, len(staged), _IDS_PER_QUERY):
            chunk = staged[start : start + _IDS_PER_QUERY]
            selected = self._select(checkpoints.c.id.in_(chunk), unreadable_too=unreadable_too, with_files=True)
            again.update((r.id, r) for r in selected)
        return [again.get(r.id, r) for r in rows]

    def get_many(
        self, identifiers: Sequence[str], job_id: str, checkpoint_id: int, unreadable_too: bool = False
    ) -> dict[str, CheckpointRow]:
        """The checkpoint's row in each of ``identifiers`` that has one, in one query (a stream of many tables)."""
        rows = self._select(
            checkpoints.c.table_identifier.in_(list(identifiers)),
            checkpoints.c.job_id == job_id,
            checkpoints.c.checkpoint_id == checkpoint_id,
            unreadable_too=unreadable_too,
        )
        return {r.identifier: r for r in rows}

    def streams_of_job(self, identifier: str, job_id: str) -> list[StreamIdentity]:
        """The streams that staged checkpoints of the job (those that recorded who they are)."""
        c = checkpoints.c
        query = (
            sa.select(c.stream_id, sa.func.max(c.checkpoint_location))
            .where(
                c.catalog_name == self._config.name,
                c.table_identifier == identifier,
                c.job_id == job_id,
                c.stream_id.is_not(None),
            )
            .group_by(c.stream_id)
            .order_by(c.stream_id)
        )
        with database_errors(self._config), self._engine.connect() as connection:
            return [StreamIdentity(stream, location) for stream, location in connection.execute(query)]

    def last_columns(self, identifier: str, job_id: str) -> tuple[int | None, dict[str, int] | None]:
        """The schema id and DataFrame column → field id of the job's latest checkpoint that recorded them."""
        c = checkpoints.c
        query = (
            sa.select(c.schema_id, c.column_ids)
            .where(
                c.catalog_name == self._config.name,
                c.table_identifier == identifier,
                c.job_id == job_id,
                c.schema_id.is_not(None),
            )
            .order_by(c.checkpoint_id.desc())
            .limit(1)
        )
        with database_errors(self._config), self._engine.connect() as connection:
            found = connection.execute(query).first()
        if found is None:
            return None, None
        schema_id, column_ids = found
        return schema_id, ({str(k): int(v) for k, v in json.loads(column_ids).items()} if column_ids else None)

    def last_properties(self, job_id: str, name: str, before: int) -> tuple[int, dict[str, str]] | None:
        """The checkpoint properties of the job's latest checkpoint below ``before`` (in any of its tables) that
        carries ``name``, with that checkpoint's id; None when none does."""
        c = checkpoints.c
        query = (
            sa.select(c.checkpoint_id, c.snapshot_properties)
            .where(
                c.catalog_name == self._config.name,
                c.job_id == job_id,
                c.checkpoint_id < before,
                c.snapshot_properties.contains(json.dumps(name)),  # a cheap filter; decoding decides
            )
            .order_by(c.checkpoint_id.desc())
            .limit(8)
        )
        with database_errors(self._config), self._engine.connect() as connection:
            found = connection.execute(query).all()
        for checkpoint_id, encoded in found:
            try:
                properties = dict(decode_snapshot_properties(encoded))
            except ValueError:
                continue  # an unreadable row says nothing; an older one may
            if name in properties:
                return int(checkpoint_id), properties
        return None

    def pending(
        self,
        identifier: str | None = None,
        job_id: str | None = None,
        with_files: bool = False,
        atomic: bool | None = None,
    ) -> list[CheckpointRow]:
        """Staged, not yet committed checkpoints, ordered by table, job and checkpoint (with their staged files
        for a committer; only those that commit across tables, or only the others, given ``atomic``)."""
        where = [checkpoints.c.state == CheckpointState.STAGED.value]
        if identifier is not None:
            where.append(checkpoints.c.table_identifier == identifier)
        if job_id is not None:
            where.append(checkpoints.c.job_id == job_id)
        if atomic is not None:
            where.append(checkpoints.c.atomic == (sa.true() if atomic else sa.false()))
        return self._select(*where, with_files=with_files)

    def tables_with_pending(self) -> list[str]:
        query = (
            sa.select(checkpoints.c.table_identifier)
            .where(checkpoints.c.catalog_name == self._config.name, checkpoints.c.state == CheckpointState.STAGED.value)
            .distinct()
            .order_by(checkpoints.c.table_identifier)
        )
        with database_errors(self._config), self._engine.connect() as connection:
            return [r[0] for r in connection.execute(query)]

    def pending_counts(self) -> dict[str, int]:
        """Staged checkpoints per table."""
        query = (
            sa.select(checkpoints.c.table_identifier, sa.func.count())
            .where(checkpoints.c.catalog_name == self._config.name, checkpoints.c.state == CheckpointState.STAGED.value)
            .group_by(checkpoints.c.table_identifier)
        )
        with database_errors(self._config), self._engine.connect() as connection:
            return {r[0]: int(r[1]) for r in connection.execute(query)}

    def for_table(
        self, identifier: str, newest: int | None = None, unreadable_too: bool = False, with_files: bool = False
    ) -> list[CheckpointRow]:
        """The table's checkpoints in order; only the ``newest`` of each job when given."""
        rows = self._select(
            checkpoints.c.table_identifier == identifier, unreadable_too=unreadable_too, with_files=with_files
        )
        if newest is None:
            return rows
        by_job: dict[str, list[CheckpointRow]] = {}
        for row in rows:
            by_job.setdefault(row.job_id, []).append(row)
        return [row for job_rows in by_job.values() for row in job_rows[-newest:]]

    def lag(self, identifier: str) -> list[JobLag]:
        """Per job: what waits, what failed, what is in, and how long the oldest waiting checkpoint has waited."""
        c = checkpoints.c
        staged = c.state == CheckpointState.STAGED.value
        committed = c.state == CheckpointState.COMMITTED.value
        query = (
            sa.select(
                c.job_id,
                sa.func.count().filter(staged),
                sa.func.count().filter(sa.and_(staged, c.error.is_not(None))),
                sa.func.count().filter(committed),
                sa.func.max(c.checkpoint_id),
                sa.func.max(c.checkpoint_id).filter(committed),
                sa.func.max(c.committed_at).filter(committed),
                sa.func.min(c.staged_at).filter(staged),
            )
            .where(c.catalog_name == self._config.name, c.table_identifier == identifier)
            .group_by(c.job_id)
            .order_by(c.job_id)
        )
        with database_errors(self._config), self._engine.connect() as connection:
            result = list(connection.execute(query))
        now = _now()
        return [
            JobLag(
                job_id=job,
                pending=int(pending),
                failed=int(failed),
                committed=int(done),
                last_staged_checkpoint=last_staged,
                last_committed_checkpoint=last_committed,
                last_committed_at=as_utc(last_committed_at),
                oldest_pending_at=as_utc(oldest),
                lag_seconds=_seconds_since(now, oldest),
            )
            for job, pending, failed, done, last_staged, last_committed, last_committed_at, oldest in result
        ]

    def jobs(self) -> list[JobTables]:
        """Every job of the catalog with its tables, in one query: a stream that writes many tables is one job."""
        c = checkpoints.c
        staged = c.state == CheckpointState.STAGED.value
        committed = c.state == CheckpointState.COMMITTED.value
        query = (
            sa.select(
                c.job_id,
                c.table_identifier,
                sa.func.max(sa.case((c.atomic == sa.true(), 1), else_=0)),
                sa.func.count().filter(staged),
                sa.func.count().filter(sa.and_(staged, c.error.is_not(None))),
                sa.func.max(c.checkpoint_id).filter(committed),
                sa.func.min(c.staged_at).filter(staged),
            )
            .where(c.catalog_name == self._config.name)
            .group_by(c.job_id, c.table_identifier)
            .order_by(c.job_id, c.table_identifier)
        )
        with database_errors(self._config), self._engine.connect() as connection:
            result = list(connection.execute(query))
        jobs = []
        for job_id, rows in itertools.groupby(result, key=lambda r: r[0]):
            per_table = list(rows)
            committed_ids = [r[5] for r in per_table if r[5] is not None]
            waiting = [as_utc(r[6]) for r in per_table if r[6] is not None]
            jobs.append(
                JobTables(
                    job_id=job_id,
                    atomic=any(r[2] for r in per_table),
                    tables={r[1]: r[5] for r in per_table},
                    pending=sum(int(r[3]) for r in per_table),
                    failed=sum(int(r[4]) for r in per_table),
                    last_committed_checkpoint=max(committed_ids) if committed_ids else None,
                    oldest_pending_at=min(waiting) if waiting else None,
                )
            )
        return jobs

    def mark_failed(self, ids: Sequence[int], error: str) -> None:
        """Record why these checkpoints could not be committed, and when; they stay staged."""
        self._update(ids, error=error, failed_at=_now())

    def tables_with_failures(self) -> set[str]:
        """Tables with a staged checkpoint whose last commit attempt failed."""
        c = checkpoints.c
        query = (
            sa.select(c.table_identifier)
            .where(c.catalog_name == self._config.name, c.state == CheckpointState.STAGED.value, c.error.is_not(None))
            .distinct()
        )
        with database_errors(self._config), self._engine.connect() as connection:
            return {r[0] for r in connection.execute(query)}

    def clear_failure(self, row_id: int) -> bool:
        """Forget a staged checkpoint's error, so that committers try it now; False if it is not staged."""
        return self._update_staged(row_id, error=None, failed_at=None)

    def discard(self, row_id: int, who: str, why: str) -> bool:
        """Give up a staged checkpoint for good; False if it is not staged (committed, or discarded already)."""
        return self._update_staged(  # its files are garbage now: gc deletes them, no snapshot will name them
            row_id,
            state=CheckpointState.DISCARDED.value,
            discarded_at=_now(),
            discarded_by=who,
            discard_reason=why,
            staged_files=None,
        )

    def unrecorded_discards(self, identifier: str, job_id: str) -> list[CheckpointRow]:
        """The job's discarded checkpoints that no snapshot summary names yet."""
        return self.unrecorded_discards_of([identifier], job_id).get(identifier, [])

    def unrecorded_discards_of(self, identifiers: Sequence[str], job_id: str) -> dict[str, list[CheckpointRow]]:
        """:meth:`unrecorded_discards` of several tables, in one query (a commit of many tables)."""
        c = checkpoints.c
        rows = self._select(
            c.table_identifier.in_(identifiers),
            c.job_id == job_id,
            c.state == CheckpointState.DISCARDED.value,
            c.snapshot_id.is_(None),
            unreadable_too=True,  # only their numbers go into the summary
        )
        found: dict[str, list[CheckpointRow]] = {}
        for row in rows:
            found.setdefault(row.identifier, []).append(row)
        return found

    def mark_discards_recorded(self, ids: Sequence[int], snapshot_id: int) -> None:
        """The snapshot whose summary names these discarded checkpoints."""
        self._update(ids, snapshot_id=snapshot_id)

    def _update_staged(self, row_id: int, **values: object) -> bool:
        c = checkpoints.c
        query = checkpoints.update().where(c.id == row_id, c.state == CheckpointState.STAGED.value).values(**values)
        with database_errors(self._config), self._engine.begin() as connection:
            return int(connection.execute(query).rowcount) == 1

    def prune_committed(self, identifier: str, before: datetime.datetime) -> int:
        """Forget committed checkpoints older than ``before`` whose manifests are gone; the newest per job stays."""
        c = checkpoints.c
        newest = (
            sa.select(c.job_id, sa.func.max(c.checkpoint_id))
            .where(c.catalog_name == self._config.name, c.table_identifier == identifier)
            .group_by(c.job_id)
        )
        query = checkpoints.delete().where(
            c.catalog_name == self._config.name,
            c.table_identifier == identifier,
            c.state == CheckpointState.COMMITTED.value,
            c.manifests_deleted == sa.true(),
            c.committed_at < before,
            sa.tuple_(c.job_id, c.checkpoint_id).not_in(newest),
        )
        with database_errors(self._config), self._engine.begin() as connection:
            return int(connection.execute(query).rowcount)

    def uncleaned(self, identifier: str | None = None, job_id: str | None = None) -> list[CheckpointRow]:
        """Committed checkpoints not cleaned up yet: their rows still list their files, or their delta manifests
        (staged before 0018) may still exist (an unreadable row's are left to gc: the table holds its files, so
        they are no longer the ledger's to keep)."""
        where = [checkpoints.c.state == CheckpointState.COMMITTED.value, checkpoints.c.manifests_deleted == sa.false()]
        if identifier is not None:
            where.append(checkpoints.c.table_identifier == identifier)
        if job_id is not None:
            where.append(checkpoints.c.job_id == job_id)
        return self._select(*where, unreadable_too=True)

    def mark_committed(self, ids: Sequence[int], snapshot_id: int | None) -> None:
        self._update(
            ids,
            state=CheckpointState.COMMITTED.value,
            snapshot_id=snapshot_id,
            committed_at=_now(),
            error=None,
            failed_at=None,
        )

    def mark_committed_in(
        self, connection: sa.Connection, snapshots: Mapping[int, int | None], commit_id: str | None
    ) -> None:
        """Within the caller's transaction (the catalog commit's own): ledger row id -> its table's new snapshot.

        A row no longer staged (an operator discarded it meanwhile) fails the whole transaction, as a moved
        table does: the group is rebuilt from what is still staged."""

        now = _now()
        for row_id, snapshot_id in snapshots.items():
            result = connection.execute(
                checkpoints.update()
                .where(checkpoints.c.id == row_id, checkpoints.c.state == CheckpointState.STAGED.value)
                .values(
                    state=CheckpointState.COMMITTED.value,
                    snapshot_id=snapshot_id,
                    committed_at=now,
                    error=None,
                    failed_at=None,
                    commit_id=commit_id,
                )
            )
            if result.rowcount != 1:  # discarded (or committed) by someone else since: the whole commit is off
                raise CommitFailedException(f"checkpoint row {row_id} is no longer staged")

    def branch_at(self, identifier: str, job_id: str, checkpoint_id: int) -> str:
        """The branch the job's checkpoints of the table commit to, as of ``checkpoint_id``: that of its latest
        checkpoint up to it, else (older rows pruned: the newest is always kept) of its first one after it;
        main when the ledger has none."""
        c = checkpoints.c
        mine = (c.catalog_name == self._config.name, c.table_identifier == identifier, c.job_id == job_id)
        up_to = sa.select(c.branch).where(*mine, c.checkpoint_id <= checkpoint_id).order_by(c.checkpoint_id.desc())
        after = sa.select(c.branch).where(*mine, c.checkpoint_id > checkpoint_id).order_by(c.checkpoint_id)
        with database_errors(self._config), self._engine.connect() as connection:
            found = connection.execute(up_to.limit(1)).scalar()
            if found is None:
                found = connection.execute(after.limit(1)).scalar()
        return str(found) if found is not None else MAIN_BRANCH

    def tables_of_job(self, job_id: str) -> dict[str, JobTable]:
        """Every table the job has checkpoints of in the ledger, with the branch and table uuid of its latest one."""
        c = checkpoints.c
        mine = sa.and_(c.catalog_name == self._config.name, c.job_id == job_id)
        newest = (
            sa.select(c.table_identifier, sa.func.max(c.checkpoint_id).label("checkpoint_id"))
            .where(mine)
            .group_by(c.table_identifier)
            .subquery()
        )
        query = (
            sa.select(c.table_identifier, c.branch, c.table_uuid)
            .join(
                newest,
                sa.and_(c.table_identifier == newest.c.table_identifier, c.checkpoint_id == newest.c.checkpoint_id),
            )
            .where(mine)
        )
        with database_errors(self._config), self._engine.connect() as connection:
            rows = connection.execute(query).all()
        return {identifier: JobTable(branch, uuid) for identifier, branch, uuid in rows}

    def last_checkpoint(self, job_id: str) -> int | None:
        """The job's highest checkpoint in the ledger, whatever its state (None: the ledger has none)."""
        c = checkpoints.c
        query = sa.select(sa.func.max(c.checkpoint_id)).where(c.catalog_name == self._config.name, c.job_id == job_id)
        with database_errors(self._config), self._engine.connect() as connection:
            found = connection.execute(query).scalar()
        return int(found) if found is not None else None

    def pending_atomic(
        self, job_id: str, unreadable_too: bool = False, with_files: bool = False
    ) -> list[CheckpointRow]:
        """The job's staged checkpoints that commit across tables, by checkpoint, then table."""
        c = checkpoints.c
        query = (
            sa.select(*(checkpoints.c if with_files else _WITHOUT_FILES))
            .where(
                c.catalog_name == self._config.name,
                c.job_id == job_id,
                c.state == CheckpointState.STAGED.value,
                c.atomic == sa.true(),
            )
            .order_by(c.checkpoint_id, c.table_identifier)
        )
        with database_errors(self._config), self._engine.connect() as connection:
            return [self._row(r, unreadable_too) for r in connection.execute(query)]

    def mark_cleaned(self, ids: Iterable[int]) -> None:
        """Committed checkpoints whose delta manifests are deleted (staged before 0018), or whose rows let their
        files go (the table holds them now; the row keeps how many there were). A row still staged keeps them:
        they are known nowhere else."""
        ids = list(ids)
        if not ids:
            return
        c = checkpoints.c
        with database_errors(self._config), self._engine.begin() as connection:
            connection.execute(
                checkpoints.update()
                .where(c.id.in_(ids), c.state != CheckpointState.STAGED.value)
                .values(manifests_deleted=True, staged_files=None)
            )

    def _update(self, ids: Sequence[int], **values: object) -> None:
        if not ids:
            return
        with database_errors(self._config), self._engine.begin() as connection:
            connection.execute(checkpoints.update().where(checkpoints.c.id.in_(list(ids))).values(**values))
