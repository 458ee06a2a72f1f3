"""The partition record: each time partition of a table's branch, open, done, or changed after done.

It is kept from the table's own history, snapshot by snapshot (:func:`icesink.iceberg.partition_history`):
the rows each snapshot added to each partition, and the watermark it recorded. A partition is done at the
first snapshot whose watermark reaches its end; rows added to it after that (late rows, or another tool's)
make it ``changed-after-done``, counted. Maintenance snapshots only move rows and change nothing here. The
record is a cache of what the table says: when the branch was rolled back or its history expired past the
record's last snapshot, it is rebuilt from the history that is left.
"""

from __future__ import annotations

import datetime
import enum
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import sqlalchemy as sa

from icesink.catalog.config import CatalogConfig
from icesink.catalog.database import as_utc, database_errors, engine
from icesink.completeness.partition_times import TimeField, TimeKind, partition_end, partition_path
from icesink.completeness.watermark import format_watermark, micros_to_datetime
from icesink.iceberg.partition_history import (
    Reach,
    SnapshotPartitions,
    live_partitions,
    partition_history,
    recorded_event_field,
    spec_fields,
    time_fields,
)
from icesink.iceberg.watermarks import recorded_watermark
from icesink.results import decode_partition_value, encode_partition_value
from icesink.table_ref import MAIN_BRANCH

if TYPE_CHECKING:
    from pyiceberg.table import Table
    from sqlalchemy.engine import Connection, Engine

metadata = sa.MetaData()

partitions = sa.Table(
    "icesink_partitions",
    metadata,
    sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), primary_key=True, autoincrement=True),
    sa.Column("catalog_name", sa.String(255), nullable=False),
    sa.Column("table_identifier", sa.String(511), nullable=False),
    sa.Column("branch", sa.String(255), nullable=False),
    sa.Column("spec_id", sa.Integer(), nullable=False),
    sa.Column("partition_key", sa.Text(), nullable=False),  # JSON of the partition's values
    sa.Column("partition_path", sa.Text(), nullable=False),  # name=value/..., time values in human form
    sa.Column("end_micros", sa.BigInteger()),  # None: no time field with a value, never done by time
    sa.Column("state", sa.String(32), nullable=False),
    sa.Column("row_count", sa.BigInteger(), nullable=False),
    sa.Column("rows_after_done", sa.BigInteger(), nullable=False),  # added after the partition was done
    sa.Column("first_snapshot_id", sa.BigInteger(), nullable=False),
    sa.Column("last_snapshot_id", sa.BigInteger(), nullable=False),
    sa.Column("changed_at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("done_snapshot_id", sa.BigInteger()),
    sa.Column("done_watermark", sa.String(64)),
    sa.Column("done_at", sa.DateTime(timezone=True)),
    sa.Column("actions_at", sa.DateTime(timezone=True)),  # when the done actions last succeeded for it
)
progress = sa.Table(
    "icesink_partition_progress",
    metadata,
    sa.Column("catalog_name", sa.String(255), primary_key=True),
    sa.Column("table_identifier", sa.String(511), primary_key=True),
    sa.Column("branch", sa.String(255), primary_key=True),
    sa.Column("snapshot_id", sa.BigInteger()),
    sa.Column("event_field_id", sa.Integer()),  # the column the ends were computed for (its field id)
    sa.Column("watermark_micros", sa.BigInteger()),  # the watermark as of that snapshot
)


class PartitionState(enum.StrEnum):
    OPEN = "open"
    DONE = "done"
    CHANGED_AFTER_DONE = "changed-after-done"


@dataclass(frozen=True)
class PartitionStatus:
    """One partition of a table's branch, as the record holds it."""

    path: str
    spec_id: int
    values: tuple[object, ...]
    end: datetime.datetime | None
    state: PartitionState
    rows: int
    rows_after_done: int
    first_snapshot_id: int
    last_snapshot_id: int
    changed_at: datetime.datetime
    done_snapshot_id: int | None
    done_watermark: str | None
    done_at: datetime.datetime | None

    def as_json(self) -> dict[str, object]:
        return {
            "partition": self.path,
            "spec_id": self.spec_id,
            "end": self.end.isoformat() if self.end else None,
            "state": self.state.value,
            "rows": self.rows,
            "rows_after_done": self.rows_after_done,
            "first_snapshot_id": self.first_snapshot_id,
            "last_snapshot_id": self.last_snapshot_id,
            "changed_at": self.changed_at.isoformat(),
            "done_snapshot_id": self.done_snapshot_id,
            "done_watermark": self.done_watermark,
            "done_at": self.done_at.isoformat() if self.done_at else None,
        }


def _key(values: Sequence[object]) -> str:
    encoded = [encode_partition_value(v) for v in values]  # type: ignore[arg-type]
    return json.dumps(encoded, default=str, separators=(",", ":"), ensure_ascii=False)


def _values(key: str) -> tuple[object, ...]:
    return tuple(decode_partition_value(v) for v in json.loads(key))


def _moment(timestamp_ms: int) -> datetime.datetime:
    return datetime.datetime.fromtimestamp(timestamp_ms / 1000, tz=datetime.UTC)


class PartitionRecord:
    """Reads and keeps ``icesink_partitions`` for one catalog."""

    def __init__(self, config: CatalogConfig, bound: Engine | None = None) -> None:
        self._config = config
        self._engine = bound or engine(config)

    def _where(self, identifier: str, branch: str) -> list[sa.ColumnElement[bool]]:
        c = partitions.c
        return [c.catalog_name == self._config.name, c.table_identifier == identifier, c.branch == branch]

    def keep_up(self, table: Table, identifier: str, branch: str = MAIN_BRANCH) -> None:
        """Bring the record of ``branch`` up to its head: the snapshots since the last one recorded; all of it
        again when the branch was rolled back or the watermark's column changed; from the head's files when
        expiry removed history the record had not seen."""
        p = progress.c
        where = [p.catalog_name == self._config.name, p.table_identifier == identifier, p.branch == branch]
        ref = table.metadata.refs.get(branch)
        head = ref.snapshot_id if ref else None
        event_field = recorded_event_field(table, branch)
        with database_errors(self._config), self._engine.begin() as connection:
            known = connection.execute(
                sa.select(p.snapshot_id, p.event_field_id, p.watermark_micros).where(*where)
            ).first()
            if known is not None and known.snapshot_id == head and known.event_field_id == event_field:
                return
            since = None if known is None or known.event_field_id != event_field else known.snapshot_id
            history, reach = partition_history(table, since, branch)
            watermark = known.watermark_micros if known is not None and reach == Reach.SINCE else None
            acted: dict[tuple[int, str], object] = {}
            if reach != Reach.SINCE:  # built again: the actions that ran are not run again
                c = partitions.c
                found = sa.select(c.spec_id, c.partition_key, c.actions_at).where(
                    *self._where(identifier, branch), c.actions_at.is_not(None)
                )
                acted = {(r.spec_id, r.partition_key): r.actions_at for r in connection.execute(found)}
                connection.execute(sa.delete(partitions).where(*self._where(identifier, branch)))
            if reach == Reach.CUT:
                seed = live_partitions(table, branch)
                history = [replace(seed, watermark=recorded_watermark(table.metadata, branch))] if seed else []
            watermark = self._apply(connection, table, identifier, branch, history, event_field, watermark)
            for (spec_id, key), at in acted.items():
                c = partitions.c
                done = [*self._where(identifier, branch), c.spec_id == spec_id, c.partition_key == key]
                connection.execute(
                    sa.update(partitions).where(*done, c.done_snapshot_id.is_not(None)).values(actions_at=at)
                )
            values = {"snapshot_id": head, "event_field_id": event_field, "watermark_micros": watermark}
            if known is None:
                keys = {"catalog_name": self._config.name, "table_identifier": identifier, "branch": branch}
                connection.execute(sa.insert(progress).values(**keys, **values))
            else:
                connection.execute(sa.update(progress).where(*where).values(**values))

    def _apply(
        self,
        connection: Connection,
        table: Table,
        identifier: str,
        branch: str,
        history: Iterable[SnapshotPartitions],
        event_field: int | None,
        watermark: int | None,
    ) -> int | None:
        """The history's snapshots applied in order, from ``watermark`` (the record's, before them); returns the
        watermark after them."""
        # Every time field shows in human form; only those over the watermark's column give a partition its end.
        fields_of = {spec_id: spec_fields(table, spec_id) for spec_id in table.metadata.specs()}
        ends_of = {
            spec_id: time_fields(spec_fields(table, spec_id, event_field, every_time_field=False))
            for spec_id in table.metadata.specs()
        }
        for snapshot in history:
            added: dict[tuple[int, str], tuple[tuple[object, ...], int]] = {}
            for spec_id, values, rows in snapshot.added:
                known_rows = added.get((spec_id, _key(values)), (values, 0))[1]
                added[(spec_id, _key(values))] = (values, known_rows + rows)
            for (spec_id, key), (values, rows) in added.items():
                if not fields_of.get(spec_id):
                    continue  # an unpartitioned spec has no partitions to be done
                ends = ends_of[spec_id]
                self._add_rows(connection, identifier, branch, snapshot, spec_id, key, values, rows, fields_of, ends)
            if snapshot.watermark is not None:
                watermark = snapshot.watermark if watermark is None else max(watermark, snapshot.watermark)
            if watermark is not None:
                self._mark_done(connection, identifier, branch, snapshot, watermark)
        return watermark

    def _add_rows(
        self,
        connection: Connection,
        identifier: str,
        branch: str,
        snapshot: SnapshotPartitions,
        spec_id: int,
        key: str,
        values: tuple[object, ...],
        rows: int,
        fields_of: dict[int, dict[int, tuple[str, TimeKind | None]]],
        ends: list[TimeField],
    ) -> None:
        """``rows`` added to one partition by ``snapshot``: a new partition is open; a done one changed after."""
        c = partitions.c
        at = _moment(snapshot.timestamp_ms)
        where = [*self._where(identifier, branch), c.spec_id == spec_id, c.partition_key == key]
        row = connection.execute(sa.select(c.state, c.row_count, c.rows_after_done).where(*where)).first()
        if row is None:
            fields = fields_of.get(spec_id, {})
            connection.execute(
                sa.insert(partitions).values(
                    catalog_name=self._config.name,
                    table_identifier=identifier,
                    branch=branch,
                    spec_id=spec_id,
                    partition_key=key,
                    partition_path=partition_path(fields, values),
                    end_micros=partition_end(ends, values),
                    state=PartitionState.OPEN.value,
                    row_count=rows,
                    rows_after_done=0,
                    first_snapshot_id=snapshot.snapshot_id,
                    last_snapshot_id=snapshot.snapshot_id,
                    changed_at=at,
                )
            )
            return
        after_done = row.state != PartitionState.OPEN.value
        connection.execute(
            sa.update(partitions)
            .where(*where)
            .values(
                row_count=row.row_count + rows,
                rows_after_done=row.rows_after_done + (rows if after_done else 0),
                state=PartitionState.CHANGED_AFTER_DONE.value if after_done else row.state,
                last_snapshot_id=snapshot.snapshot_id,
                changed_at=at,
            )
        )

    def _mark_done(
        self, connection: Connection, identifier: str, branch: str, snapshot: SnapshotPartitions, watermark: int
    ) -> None:
        """The open partitions whose end the watermark reached: done at ``snapshot``."""
        c = partitions.c
        connection.execute(
            sa.update(partitions)
            .where(
                *self._where(identifier, branch),
                c.state == PartitionState.OPEN.value,
                c.end_micros.is_not(None),
                c.end_micros <= watermark,
            )
            .values(
                state=PartitionState.DONE.value,
                done_snapshot_id=snapshot.snapshot_id,
                done_watermark=format_watermark(watermark),
                done_at=_moment(snapshot.timestamp_ms),
            )
        )

    def open_ending_by(self, identifier: str, branch: str, watermark: int) -> list[str]:
        """The open partitions whose end the watermark reaches: the ones a commit at it makes done."""
        c = partitions.c
        query = (
            sa.select(c.partition_path)
            .where(
                *self._where(identifier, branch),
                c.state == PartitionState.OPEN.value,
                c.end_micros.is_not(None),
                c.end_micros <= watermark,
            )
            .order_by(c.end_micros, c.partition_path)
        )
        with database_errors(self._config), self._engine.connect() as connection:
            return [row[0] for row in connection.execute(query)]

    def known(self, identifier: str, branch: str, keys: Sequence[tuple[int, str]]) -> set[tuple[int, str]]:
        """Which of these (spec id, partition key) the record has."""
        if not keys:
            return set()
        c = partitions.c
        query = sa.select(c.spec_id, c.partition_key).where(
            *self._where(identifier, branch), sa.tuple_(c.spec_id, c.partition_key).in_(list(keys))
        )
        with database_errors(self._config), self._engine.connect() as connection:
            return {(int(s), str(k)) for s, k in connection.execute(query)}

    def awaiting_actions(self, identifier: str, branch: str = MAIN_BRANCH) -> list[PartitionStatus]:
        """The done partitions whose done actions have not succeeded yet."""
        c = partitions.c
        return self.statuses(identifier, branch, c.done_snapshot_id.is_not(None), c.actions_at.is_(None))

    def awaiting_tables(self) -> list[tuple[str, str]]:
        """Every (table, branch) of the catalog with a done partition whose done actions have not succeeded yet."""
        c = partitions.c
        query = (
            sa.select(c.table_identifier, c.branch)
            .where(c.catalog_name == self._config.name, c.done_snapshot_id.is_not(None), c.actions_at.is_(None))
            .distinct()
            .order_by(c.table_identifier, c.branch)
        )
        with database_errors(self._config), self._engine.connect() as connection:
            return [(str(t), str(b)) for t, b in connection.execute(query)]

    def actions_done(self, identifier: str, branch: str, status: PartitionStatus) -> None:
        c = partitions.c
        key = partition_key(status.values)
        where = [*self._where(identifier, branch), c.spec_id == status.spec_id, c.partition_key == key]
        with database_errors(self._config), self._engine.begin() as connection:
            connection.execute(
                sa.update(partitions).where(*where).values(actions_at=datetime.datetime.now(datetime.UTC))
            )

    def statuses(
        self, identifier: str, branch: str = MAIN_BRANCH, *where: sa.ColumnElement[bool]
    ) -> list[PartitionStatus]:
        c = partitions.c
        query = (
            sa.select(partitions)
            .where(*self._where(identifier, branch), *where)
            .order_by(c.end_micros, c.partition_path)
        )
        with database_errors(self._config), self._engine.connect() as connection:
            rows = connection.execute(query).all()
        return [
            PartitionStatus(
                path=r.partition_path,
                spec_id=r.spec_id,
                values=_values(r.partition_key),
                end=micros_to_datetime(r.end_micros) if r.end_micros is not None else None,
                state=PartitionState(r.state),
                rows=r.row_count,
                rows_after_done=r.rows_after_done,
                first_snapshot_id=r.first_snapshot_id,
                last_snapshot_id=r.last_snapshot_id,
                changed_at=as_utc(r.changed_at),
                done_snapshot_id=r.done_snapshot_id,
                done_watermark=r.done_watermark,
                done_at=as_utc(r.done_at) if r.done_at is not None else None,
            )
            for r in rows
        ]


def partition_key(values: Sequence[object]) -> str:
    """How the record keys a partition's values."""
    return _key(values)
