"""``spark.readStream.format("icesink").option("tables", ...)``: the changes of several tables as one stream,
every micro-batch ending at one consistent cut.

Each offset is every table's snapshot as the catalog's pointers showed them in one transaction. Tables a
stream commits atomically (``icesink.stream(tables=...)``) move in one transaction, so every micro-batch
holds whole checkpoints of the job in every table: a join of its tables' changes never sees an order
without its lines. The rows of all tables come in one DataFrame: ``_table`` names a row's table, one
struct column per table (named by its identifier) holds its columns, null in the other tables' rows, and
the change columns follow as in a stream of one table.

Options: ``tables`` (a JSON list of identifiers), ``catalog`` or ``catalog.<key>``, ``mode``, ``starting``
(``earliest`` or ``latest``: a snapshot id or a time belongs to one table) and ``net-changes``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import SupportsTriggerAvailableNow

from icesink.changelog.source import BEFORE_FIRST
from icesink.changelog.stream_schema import StartedColumns, refuse_later_schemas
from icesink.changelog.tasks import (
    ChangeTask,
    conformed,
    group_parts,
    keys_stay_in_partitions,
    pairs_across_partitions,
    task_changes,
)
from icesink.errors import ConfigError, StartingSnapshotExpiredError

if TYPE_CHECKING:
    import pyarrow as pa
    from pyiceberg.catalog.sql import SqlCatalog
    from pyiceberg.table import Table
    from pyspark.sql.types import StructType

    from icesink.catalog.config import CatalogConfig
    from icesink.changelog.plan import Planner

OPTIONS = ("tables", "mode", "starting", "net-changes")
TABLE_COLUMN = "_table"
TABLES_OFFSET_VERSION = 1
WHAT = 'readStream.format("icesink").option("tables", ...)'


@dataclass(frozen=True)
class TablesReadOptions:
    """The options of a change stream of several tables, checked once."""

    tables: tuple[str, ...]
    catalog: tuple[tuple[str, str], ...]
    mode: str
    latest: bool
    net_changes: bool

    @classmethod
    def of(cls, options: Mapping[str, str]) -> TablesReadOptions:
        import difflib

        from icesink.catalog.loader import check_identifier
        from icesink.changelog.modes import MODES

        for key in sorted(options):
            if key in OPTIONS or key == "catalog" or key.startswith(("catalog.", "__")):
                continue
            close = difflib.get_close_matches(key, OPTIONS, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ConfigError(f"{WHAT}: unknown option {key!r}{hint}; its options are {', '.join(OPTIONS)}, catalog")
        tables = _tables(options.get("tables", ""))
        for identifier in tables:
            check_identifier(identifier)
        mode = options.get("mode", "changelog")
        if mode not in MODES:
            raise ConfigError(f"{WHAT}: option mode={mode!r} must be one of {', '.join(MODES)}")
        starting = str(options.get("starting", "earliest")).strip().lower()
        if starting not in ("earliest", "latest"):
            raise ConfigError(
                f"{WHAT}: option starting={options.get('starting')!r} must be earliest or latest (a snapshot id or a "
                "time belongs to one table: read that table alone to start there)"
            )
        net = str(options.get("net-changes", "false")).lower()
        if net not in ("true", "false"):
            raise ConfigError(f"{WHAT}: option net-changes={net!r} must be true or false")
        catalog = tuple(sorted((k, str(v)) for k, v in options.items() if k == "catalog" or k.startswith("catalog.")))
        return cls(tables, catalog, mode, starting == "latest", net == "true")

    def config(self) -> CatalogConfig:
        from icesink.catalog.config import catalog_from_options

        return catalog_from_options(dict(self.catalog))

    def cut(self, handle: SqlCatalog | None = None) -> dict[str, Table]:
        """Every table as the catalog's pointers show them in one transaction (``handle``: an open catalog)."""
        from icesink.catalog.loader import open_catalog, table_at
        from icesink.catalog.pointers import read_pointers

        config = self.config()
        handle = handle or open_catalog(config)
        pointers = read_pointers(config, self.tables, pending=True)  # a pending table: empty until it commits
        return {name: table_at(handle, name, location) for name, location in pointers.items()}


def _tables(text: str) -> tuple[str, ...]:
    try:
        value = json.loads(text) if text else None
    except ValueError:
        value = None
    if not isinstance(value, list) or not value or not all(isinstance(t, str) for t in value):
        raise ConfigError(
            f'{WHAT}: option tables={text!r} must be a JSON list of table names, e.g. \'["shop.orders", '
            '"shop.order_lines"]\' (icesink.read_stream(spark, tables=[...]) writes it)'
        )
    if len(set(value)) != len(value):
        raise ConfigError(f"{WHAT}: option tables names a table twice: {value}")
    if len({v.casefold() for v in value}) != len(value):
        raise ConfigError(
            f"{WHAT}: option tables names tables that differ only in case ({value}); their columns would too, and "
            "Spark's column names ignore case: read them in two streams"
        )
    return tuple(value)


def tables_schema(options: TablesReadOptions) -> StructType:
    """``_table``, one struct column per table with its columns, then the change columns."""
    from pyspark.sql.types import StringType, StructField, StructType

    from icesink.changelog.modes import check_mode
    from icesink.changelog.source import spark_schema

    fields = [StructField(TABLE_COLUMN, StringType(), False)]
    change_fields: list[StructField] = []
    for name, table in options.cut().items():
        check_mode(name, options.mode, options.net_changes, table)
        schema = spark_schema(table.schema(), options.mode)
        columns = len(table.schema().fields)
        fields.append(StructField(name, StructType(schema.fields[:columns]), True))
        change_fields = schema.fields[columns:]
    return StructType(fields + change_fields)


@dataclass(frozen=True)
class TableTask:
    """One Spark task: a change task of one of the tables."""

    table: str
    task: ChangeTask


class TablesStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Offsets are every table's snapshot at one instant of the catalog; partitions, each table's changes."""

    def __init__(self, options: TablesReadOptions, schema: StructType) -> None:
        self._options = options
        self._declared = schema
        self._ceiling: dict[str, int] | None = None
        self._planners: dict[str, Planner] = {}
        self._handle: SqlCatalog | None = None
        self._uuids: dict[str, str] = {}  # each table's uuid as the query started: checked on every cut
        at_start = self._cut()
        # Each table's columns as the DataFrame, made before the query started, declares them.
        own = {f.name: getattr(f.dataType, "fields", []) for f in schema.fields if f.name in at_start}
        self._started = {name: StartedColumns.declared(table, own.get(name, [])) for name, table in at_start.items()}
        self._schemas = {name: started.schema for name, started in self._started.items()}
        self._uuids = {name: str(table.metadata.table_uuid) for name, table in at_start.items()}

    def __getstate__(self) -> dict[str, Any]:
        # Executors only read(): the plans and the catalog (its database engine) stay on the driver.
        return {**self.__dict__, "_planners": {}, "_handle": None}

    def _cut(self) -> dict[str, Table]:
        """The tables now, each checked to be the table the query started on (not dropped and made again, nor
        another tool's of the name where a stream's pending table was)."""
        from icesink.catalog.loader import open_catalog

        if self._handle is None:
            self._handle = open_catalog(self._options.config())
        tables = self._options.cut(self._handle)
        for name, table in tables.items():
            known = self._uuids.get(name)
            if known is not None and str(table.metadata.table_uuid) != known:
                raise StartingSnapshotExpiredError(
                    f"{WHAT}: table {name} is not the table this query started reading (uuid {known}, now "
                    f"{table.metadata.table_uuid}): it was dropped and created again, or another tool created a "
                    "table of the name. Its changes cannot be told from the old one's; start the query anew with a "
                    "new checkpoint location"
                )
        return tables

    def _heads(self, tables: dict[str, Table]) -> dict[str, int]:
        heads = {}
        for name, table in tables.items():
            snapshot = table.current_snapshot()
            heads[name] = snapshot.snapshot_id if snapshot is not None else BEFORE_FIRST
        return heads

    def initialOffset(self) -> dict[str, Any]:
        heads = self._heads(self._cut())
        return self._offset({n: (heads[n] if self._options.latest else BEFORE_FIRST) for n in self._options.tables})

    def prepareForTriggerAvailableNow(self) -> None:
        self._ceiling = self._heads(self._cut())

    def latestOffset(self, start: dict[str, Any], limit: Any) -> dict[str, Any]:
        tables = self._cut()
        heads = self._ceiling if self._ceiling is not None else self._heads(tables)
        first = self._snapshots(start)
        if first == heads:
            return start
        for name, table in tables.items():  # refused before Spark logs the offset, not in every replay after
            begin, head = first[name], heads[name]
            if begin != head and begin != BEFORE_FIRST:
                if head == BEFORE_FIRST:
                    raise StartingSnapshotExpiredError(
                        f"{WHAT}: table {name} has no current snapshot any more (it had {begin}); start the query "
                        "anew with a new checkpoint location"
                    )
                self._planner(name, table).snapshots(begin, head)  # raises where begin is no ancestor of head
        return self._offset(heads)

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[InputPartition]:
        first, last = self._snapshots(start), self._snapshots(end)
        tasks: list[InputPartition] = []
        tables = self._cut() if first != last else {}
        for name, table in tables.items():
            begin, stop = first[name], last[name]
            if begin == stop or stop == BEFORE_FIRST:
                continue
            planner = self._planner(name, table)
            snapshots = planner.snapshots(None if begin == BEFORE_FIRST else begin, stop)
            refuse_later_schemas(name, self._started[name], table, snapshots)
            parts = []
            if begin == BEFORE_FIRST and snapshots:
                parts += planner.state(snapshots[0])  # from the oldest snapshot kept: its rows, as inserts
                snapshots = snapshots[1:]
            for snapshot in snapshots:
                parts += planner.changes(snapshot)
            for group in group_parts(
                parts,
                self._options.net_changes,
                keys_stay=keys_stay_in_partitions(table),
                pair_across=pairs_across_partitions(table, self._options.mode),
            ):
                task = ChangeTask(
                    metadata_location=table.metadata_location,
                    io_properties=tuple(sorted((k, str(v)) for k, v in table.io.properties.items())),
                    schema=self._schemas[name],
                    parts=tuple(group),
                    mode=self._options.mode,
                    net_changes=self._options.net_changes,
                )
                tasks.append(InputPartition(TableTask(name, task)))
        return tasks

    def _planner(self, name: str, table: Table) -> Planner:
        """The table's planner, kept while its metadata is unchanged (with its manifest cache across)."""
        from icesink.changelog.plan import Planner

        planner = self._planners.get(name)
        if planner is None or planner.table.metadata_location != table.metadata_location:
            planner = Planner(table, cache=planner.cache if planner else None)
            self._planners[name] = planner
        return planner

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        import pyarrow as pa
        from pyspark.sql.pandas.types import to_arrow_schema
        from pyspark.sql.types import StructType

        value: TableTask = partition.value
        declared = to_arrow_schema(self._declared, timezone="UTC")
        tables = len(self._options.tables)
        own = self._declared[value.table].dataType
        assert isinstance(own, StructType)
        change = self._declared.fields[1 + tables :]
        own_columns = to_arrow_schema(StructType(list(own.fields) + change), timezone="UTC")
        for rows in task_changes(value.task):
            columns = conformed(rows, own_columns)
            count = columns.num_rows
            arrays: list[pa.Array] = [pa.repeat(pa.scalar(value.table, pa.string()), count)]
            for field in list(declared)[1 : 1 + tables]:  # this table's struct; null in the others
                if field.name != value.table:
                    arrays.append(pa.nulls(count, field.type))
                    continue
                children = [columns.column(f.name).combine_chunks() for f in field.type]
                arrays.append(pa.StructArray.from_arrays(children, fields=list(field.type)))
            arrays += [columns.column(f.name).combine_chunks() for f in change]
            yield from pa.Table.from_arrays(arrays, schema=declared).to_batches()

    def commit(self, end: dict[str, Any]) -> None:
        """Nothing to release: the offsets live in the reading query's checkpoint."""

    def _snapshots(self, kept: dict[str, Any]) -> dict[str, int]:
        """Every table's snapshot in an offset from the reading query's checkpoint."""
        version, snapshots = kept.get("version"), kept.get("snapshots")
        if version != TABLES_OFFSET_VERSION or not isinstance(snapshots, dict):
            raise ConfigError(
                f"{WHAT}: the reading query's checkpoint holds an offset this release cannot read ({kept}); it was "
                "written by a later icesink. Read on with that release, or start anew with a new checkpoint location"
            )
        if sorted(snapshots) != sorted(self._options.tables):
            raise ConfigError(
                f"{WHAT}: the reading query's checkpoint was written reading tables {sorted(snapshots)}, not "
                f"{sorted(self._options.tables)}; a reader of other tables needs a checkpoint location of its own"
            )
        for name, known in (kept.get("uuids") or {}).items():
            if self._uuids.get(name) not in (None, known):
                raise StartingSnapshotExpiredError(
                    f"{WHAT}: table {name} is not the table the reading query's checkpoint was written for (uuid "
                    f"{known}, now {self._uuids[name]}): it was dropped and created again, or another tool created a "
                    "table of the name. Start the query anew with a new checkpoint location"
                )
        return {str(k): int(v) for k, v in snapshots.items()}

    def _offset(self, snapshots: dict[str, int]) -> dict[str, Any]:
        """An offset: each table's snapshot, and which table it is (its uuid), for the checks on restart."""
        return {"version": TABLES_OFFSET_VERSION, "snapshots": dict(snapshots), "uuids": dict(self._uuids)}
