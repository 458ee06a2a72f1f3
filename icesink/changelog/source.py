"""``spark.readStream.format("icesink")``: a table's changes as a stream, on pyspark's Python data source API.

The shape of Flink's FLIP-27 sources: the stream reader (the split
enumerator, on the driver) turns offsets, which are snapshots of the table's
``main`` branch, into partitions (the splits: per snapshot and table
partition, the data files it added and the ones whose rows it changed); Spark
ships them to executors, which read them (:mod:`icesink.changelog.compute`). The
offsets live in the reading query's checkpoint, so a restarted reader goes on
after the last snapshot it committed; if that snapshot has expired meanwhile,
the reader stops with :class:`~icesink.errors.StartingSnapshotExpiredError`
rather than skip changes silently.

Options (named as Iceberg's Spark source names them where it has them):

* ``table`` (required), ``catalog`` (a name) or ``catalog.<key>`` (pyiceberg properties);
* ``mode``: ``changelog`` (default) or ``append``;
* ``starting``: ``earliest`` (default: the oldest state kept, then every change),
  ``latest`` (changes from now on), a snapshot id (digits, always: its changes and
  later ones), or an ISO 8601 timestamp (UTC unless it has a zone: changes
  committed at or after it); anything else is refused when the stream is defined;
* ``max-files-per-trigger``, ``max-rows-per-trigger``: bound a micro-batch (at
  least one snapshot is always read);
* ``net-changes``: collapse a key's changes within a micro-batch.

Any other option is refused, naming the closest known one (a misspelt
``startng`` would otherwise read from ``earliest`` without a word).

``Trigger.AvailableNow`` reads up to the head as of the query's start.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxFiles,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from icesink.changelog.offsets import offset, offset_snapshot
from icesink.changelog.stream_schema import StartedColumns, refuse_later_schemas
from icesink.changelog.tasks import (
    ChangeTask,
    conformed,
    group_parts,
    keys_stay_in_partitions,
    pairs_across_partitions,
    task_changes,
)
from icesink.errors import ConfigError
from icesink.iceberg.expired_history import history_cut

if TYPE_CHECKING:
    import pyarrow as pa
    from pyiceberg.schema import Schema
    from pyiceberg.table import Table
    from pyspark.sql.types import StructType

    from icesink.changelog.plan import Planner, SnapshotChanges

BEFORE_FIRST = -1  # the offset before a table's first snapshot (or its oldest one kept)


STARTING_FORMS = (
    "earliest, latest, a snapshot id (digits: always an id, never a time), or an ISO 8601 timestamp "
    "(2026-11-23T10:00:00Z; UTC when it has no zone)"
)
EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
OPTIONS = ("mode", "starting", "max-files-per-trigger", "max-rows-per-trigger", "net-changes", "with-watermark")


@dataclass(frozen=True)
class Starting:
    """Where a stream without a checkpoint starts: ``earliest``, ``latest``, a ``snapshot`` id or a ``time`` (ms)."""

    kind: str
    value: int = 0

    @classmethod
    def parse(cls, table: str, text: str) -> Starting:
        """One of the accepted forms; no guessing (a snapshot id is never read as a time)."""
        import re

        cleaned = text.strip()
        if cleaned.lower() in ("earliest", "latest"):
            return cls(cleaned.lower())
        if re.fullmatch(r"-?[0-9]+", cleaned):
            return cls("snapshot", int(cleaned))
        try:
            moment = datetime.datetime.fromisoformat(cleaned)
        except ValueError:
            raise ConfigError(f"table {table}: starting={text!r} is not one of {STARTING_FORMS}") from None
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=datetime.UTC)
        return cls("time", (moment - EPOCH) // datetime.timedelta(milliseconds=1))


@dataclass(frozen=True)
class ReadOptions:
    """The options of a change stream, checked once."""

    table: str
    catalog: tuple[tuple[str, str], ...]  # the catalog options: "catalog" and "catalog.<key>"
    mode: str
    starting: Starting
    max_files: int | None
    max_rows: int | None
    net_changes: bool
    with_watermark: bool = False  # _commit_watermark: the table's watermark as of each change's commit

    @classmethod
    def of(cls, options: Mapping[str, str]) -> ReadOptions:
        from icesink.catalog.config import check_data_source_options
        from icesink.changelog.modes import MODES

        table = check_data_source_options('readStream.format("icesink")', options, OPTIONS)
        mode = options.get("mode", "changelog")
        if mode not in MODES:
            raise ConfigError(f"table {table}: option mode={mode!r} must be one of {', '.join(MODES)}")
        net = _flag(table, options, "net-changes")
        with_watermark = _flag(table, options, "with-watermark")
        catalog = tuple(sorted((k, str(v)) for k, v in options.items() if k == "catalog" or k.startswith("catalog.")))
        return cls(
            table=table,
            catalog=catalog,
            mode=mode,
            starting=Starting.parse(table, options.get("starting", "earliest")),
            max_files=_limit(table, options, "max-files-per-trigger"),
            max_rows=_limit(table, options, "max-rows-per-trigger"),
            net_changes=net,
            with_watermark=with_watermark,
        )

    def load(self) -> Table:
        from icesink.catalog.config import catalog_from_options
        from icesink.catalog.loader import load_table, open_catalog

        config = catalog_from_options(dict(self.catalog))
        return load_table(open_catalog(config), config, self.table)


def _flag(table: str, options: Mapping[str, str], name: str) -> bool:
    value = str(options.get(name, "false")).lower()
    if value not in ("true", "false"):
        raise ConfigError(f"table {table}: option {name}={value!r} must be true or false")
    return value == "true"


def _extra(options: ReadOptions) -> int:
    """How many columns a change stream declares after the table's own: those of a table without any."""
    from pyiceberg.schema import Schema

    return len(spark_schema(Schema(), options.mode, options.with_watermark).fields)


def spark_schema(schema: Schema, mode: str, with_watermark: bool = False) -> StructType:
    """The DataFrame schema of a change stream: the table's columns, then the change columns, the watermark's."""
    from pyspark.sql.types import LongType, StringType, StructField, StructType, TimestampType

    from icesink.spark_types import spark_columns

    fields = spark_columns(schema)
    if mode == "changelog":
        fields += [
            StructField("_change_type", StringType(), False),
            StructField("_change_ordinal", LongType(), False),
            StructField("_commit_snapshot_id", LongType(), False),
            StructField("_commit_timestamp", TimestampType(), False),
        ]
    if with_watermark:
        fields.append(StructField("_commit_watermark", TimestampType(), True))
    return StructType(fields)


class ChangelogStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Offsets are snapshots of ``main``; partitions are the planned changes between two of them."""

    def __init__(self, options: ReadOptions, schema: StructType) -> None:
        self._options = options
        self._declared = schema
        self._ceiling: int | None = None  # AvailableNow: no offset past the head as of the query's start
        self._state: tuple[Table, Planner] | None = None
        # The columns of the DataFrame, made before the query started: the table's then, maybe not its now.
        self._started = StartedColumns.declared(self._table, schema.fields[: len(schema.fields) - _extra(options)])
        self._schema = self._started.schema  # the one the declared columns come from

    def __getstate__(self) -> dict[str, Any]:
        # Spark ships the reader to executors for read(): the catalog (and its database engine) stays here.
        return {**self.__dict__, "_state": None}

    @property
    def _table(self) -> Table:
        return self._loaded()[0]

    @property
    def _planner(self) -> Planner:
        return self._loaded()[1]

    def _loaded(self) -> tuple[Table, Planner]:
        from icesink.changelog.plan import Planner

        if self._state is None:
            table = self._options.load()
            self._state = (table, Planner(table))
        return self._state

    def _refresh(self) -> Table:
        from icesink.changelog.plan import Planner

        table, planner = self._loaded()
        fresh = table.refresh()
        if fresh.metadata_location != table.metadata_location:
            planner = Planner(fresh, cache=planner.cache)
        self._state = (fresh, planner)
        return fresh

    def _head(self) -> int:
        snapshot = self._table.current_snapshot()
        return snapshot.snapshot_id if snapshot is not None else BEFORE_FIRST

    def initialOffset(self) -> dict[str, Any]:
        self._refresh()
        starting = self._options.starting
        if starting.kind == "earliest":
            return offset(BEFORE_FIRST)
        if starting.kind == "latest":
            return offset(self._head())
        if starting.kind == "snapshot":
            return offset(self._before_snapshot(starting.value))
        for snapshot in self._ancestry():  # oldest first
            if snapshot.timestamp_ms >= starting.value:
                return offset(self._before_time(snapshot, starting.value))
        return offset(self._head())

    def _before_time(self, first: Any, moment_ms: int) -> int:
        """The offset whose next changes are those made at ``moment_ms`` and after (``first`` is the oldest
        snapshot of main since): the one before ``first``, which must still be kept. An older moment than the
        history kept would otherwise read the oldest state as inserts made after it."""
        from icesink.errors import StartingSnapshotExpiredError

        before = self._kept_parent(first)
        if before is None:
            table = self._options.table
            since = _iso(moment_ms)
            oldest = _iso(first.timestamp_ms)
            raise StartingSnapshotExpiredError(
                f"table {table}: starting={since} is older than the history the table keeps (its oldest snapshot "
                f"of main, {first.snapshot_id}, was made at {oldest}; those before it were expired by "
                "history.expire.max-snapshot-age-ms / min-snapshots-to-keep), so the changes made since cannot be "
                f"told; start later than {oldest}, or starting=earliest (the oldest state kept, as inserts)"
            )
        return before

    def _before_snapshot(self, snapshot_id: int) -> int:
        """The offset whose next changes are ``snapshot_id``'s: its parent, which must still be kept."""
        from icesink.errors import SnapshotNotFoundError, StartingSnapshotExpiredError

        table = self._options.table
        metadata = self._table.metadata
        snapshot = metadata.snapshot_by_id(snapshot_id)
        if snapshot is None:
            raise SnapshotNotFoundError(
                f"table {table} has no snapshot {snapshot_id} (starting={snapshot_id}: digits are always a snapshot "
                f"id, a time is an ISO 8601 timestamp); `icesink snapshots list {table}` lists the snapshots it keeps"
            )
        if snapshot_id not in {s.snapshot_id for s in self._ancestry()}:
            raise StartingSnapshotExpiredError(
                f"table {table}: snapshot {snapshot_id} (starting=) is not in the history of main (rolled back, or "
                "on another branch); start at a snapshot of main"
            )
        before = self._kept_parent(snapshot)
        if before is None:
            raise StartingSnapshotExpiredError(
                f"table {table}: starting={snapshot_id}, but the snapshot before it is no longer kept (expired by "
                "history.expire.max-snapshot-age-ms / min-snapshots-to-keep), so the changes it made cannot be told; "
                "start at a later snapshot, or starting=earliest (the oldest state kept, as inserts)"
            )
        return before

    def _kept_parent(self, snapshot: Any) -> int | None:
        """The offset just before ``snapshot``: its parent while the table keeps it, :data:`BEFORE_FIRST` for the
        table's first snapshot, None when the parent was expired (the changes ``snapshot`` made cannot be told).

        pyiceberg clears the parent id of a snapshot whose parent it expires (see :mod:`expired_history`)."""
        parent = snapshot.parent_snapshot_id
        if parent is None and not history_cut(snapshot):
            return BEFORE_FIRST
        if parent is None or self._table.metadata.snapshot_by_id(parent) is None:
            return None
        return int(parent)

    def _ancestry(self) -> list[Any]:
        head = self._head()
        return [] if head == BEFORE_FIRST else self._planner.snapshots(None, head)

    def prepareForTriggerAvailableNow(self) -> None:
        self._refresh()
        self._ceiling = self._head()

    def getDefaultReadLimit(self) -> ReadLimit:
        if self._options.max_files is not None:
            return ReadMaxFiles(self._options.max_files)
        if self._options.max_rows is not None:
            return ReadMaxRows(self._options.max_rows)
        return ReadAllAvailable()

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        self._refresh()
        head = self._head() if self._ceiling is None else self._ceiling
        begin = offset_snapshot(self._options.table, start)
        if head in (BEFORE_FIRST, begin):
            return start  # unchanged, in whatever version it was written
        snapshots = self._planner.snapshots(None if begin == BEFORE_FIRST else begin, head)
        files = rows = 0
        chosen = begin
        for snapshot in snapshots:
            summary = snapshot.summary.additional_properties if snapshot.summary is not None else {}
            files += sum(
                int(summary.get(k, 0) or 0) for k in ("added-data-files", "added-delete-files", "deleted-data-files")
            )
            rows += sum(
                int(summary.get(k, 0) or 0)
                for k in ("added-records", "deleted-records", "added-position-deletes", "added-equality-deletes")
            )
            over = (isinstance(limit, ReadMaxFiles) and files > limit.max_files) or (
                isinstance(limit, ReadMaxRows) and rows > limit.max_rows
            )
            if over and chosen != begin:
                break
            chosen = snapshot.snapshot_id
            if over:
                break
        return offset(chosen)

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[InputPartition]:
        first, last = offset_snapshot(self._options.table, start), offset_snapshot(self._options.table, end)
        if first == last or last == BEFORE_FIRST:
            return []
        table = self._refresh()
        snapshots = self._planner.snapshots(None if first == BEFORE_FIRST else first, last)
        refuse_later_schemas(self._options.table, self._started, table, snapshots)
        parts: list[SnapshotChanges] = []
        if first == BEFORE_FIRST and snapshots:
            parts += self._planner.state(snapshots[0])  # from the oldest snapshot kept: its rows, as inserts
            snapshots = snapshots[1:]
        for snapshot in snapshots:
            parts += self._planner.changes(snapshot)
        groups = group_parts(
            parts,
            self._options.net_changes,
            keys_stay=keys_stay_in_partitions(table),
            pair_across=pairs_across_partitions(table, self._options.mode),
        )
        return [InputPartition(self._task(table, group)) for group in groups]

    def _task(self, table: Table, parts: list[SnapshotChanges]) -> ChangeTask:
        return ChangeTask(
            metadata_location=table.metadata_location,
            io_properties=tuple(sorted((k, str(v)) for k, v in table.io.properties.items())),
            schema=self._schema,
            parts=tuple(parts),
            mode=self._options.mode,
            net_changes=self._options.net_changes,
            with_watermark=self._options.with_watermark,
        )

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        from pyspark.sql.pandas.types import to_arrow_schema

        task: ChangeTask = partition.value
        declared = to_arrow_schema(self._declared, timezone="UTC")
        for rows in task_changes(task):
            yield from conformed(rows, declared).to_batches()

    def commit(self, end: dict[str, Any]) -> None:
        """Nothing to release: the offsets live in the reading query's checkpoint."""


def _limit(table: str, options: Mapping[str, str], name: str) -> int | None:
    raw = options.get(name)
    if raw is None:
        return None
    if not raw.isascii() or not raw.isdigit() or int(raw) < 1:
        raise ConfigError(f"table {table}: option {name}={raw!r} must be a positive whole number")
    return int(raw)


def _iso(moment_ms: int) -> str:
    return (EPOCH + datetime.timedelta(milliseconds=moment_ms)).isoformat(timespec="milliseconds")
