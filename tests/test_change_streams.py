"""``spark.readStream.format("icesink")``: a table's changes as a stream, exactly once, into the next table.

Table A receives checkpoints as a stream would write them; the change stream
of A is read with real Spark micro-batches. Replaying what the reader
delivered must give A's state; a second icesink stream turns A's changelog
into table B, which must equal A (and the model) whatever micro-batches the
reader cut.
"""

from __future__ import annotations

import datetime
import json
import random
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyiceberg.types import LongType, StringType

import icesink
from icesink.catalog.config import CatalogConfig
from icesink.catalog.loader import open_catalog
from icesink.committer.maintainer import Maintainer
from icesink.maintenance.policy import MaintenancePolicy
from icesink.maintenance.run import MaintenanceRequest
from tests.helpers.outcomes import check_outcome, iceberg_rust_sql
from tests.test_changelog import replay
from tests.test_maintenance import TABLE, Model, commit_changes, create, random_changes

pytestmark = pytest.mark.spark


def fill(config: CatalogConfig, checkpoints: int, seed: int, start: int = 0, model: Model | None = None) -> Model:
    model = model or Model()
    rng = random.Random(seed)
    for checkpoint in range(start, start + checkpoints):
        changes = random_changes(rng, checkpoint, keys=50, size=40)
        commit_changes(config, checkpoint, changes)
        model.apply(changes)
    return model


def collect(spark: Any, config: CatalogConfig, checkpoint: Path, **options: Any) -> tuple[pa.Table, list[int]]:
    """Run the change stream with Trigger.AvailableNow; everything it delivered, and the rows per micro-batch."""
    batches: list[pa.Table] = []

    def keep(batch: Any, _: int) -> None:
        batches.append(pa.Table.from_pylist([row.asDict() for row in batch.collect()]))

    stream = icesink.read_stream(
        spark, TABLE, catalog={"name": config.name, "uri": config.uri, "warehouse": config.warehouse}, **options
    )
    stream.writeStream.foreachBatch(keep).option("checkpointLocation", str(checkpoint)).trigger(
        availableNow=True
    ).start().awaitTermination()
    delivered = [b for b in batches if b.num_rows]
    rows = pa.concat_tables(delivered) if delivered else pa.table({})
    return rows, [b.num_rows for b in batches]


def state_of(config: CatalogConfig) -> dict[int, str]:
    return {r["id"]: r["v"] for r in icesink.read(TABLE, catalog=config).to_pylist()}


def test_the_change_stream_delivers_every_change_once_across_restarts_and_limits(
    spark: Any, sqlite_catalog: CatalogConfig, tmp_path: Path
) -> None:
    create(sqlite_catalog)
    model = fill(sqlite_catalog, 4, seed=1)
    first, batch_sizes = collect(spark, sqlite_catalog, tmp_path / "ckpt", max_files_per_trigger=1)
    assert len([n for n in batch_sizes if n]) >= 4  # the read limit cut the backlog into micro-batches
    assert replay({}, first) == model.rows
    # More commits, a maintenance run and a restart: only what came since is delivered.
    fill(sqlite_catalog, 3, seed=2, start=4, model=model)
    table = open_catalog(sqlite_catalog).load_table(TABLE)
    Maintainer(open_catalog(sqlite_catalog), sqlite_catalog).run(
        table, TABLE, MaintenanceRequest(MaintenancePolicy(), everything=True)
    )
    second, _ = collect(spark, sqlite_catalog, tmp_path / "ckpt")
    assert replay(replay({}, first), second) == model.rows == state_of(sqlite_catalog)
    maintenance = {s.snapshot_id for s in table.refresh().metadata.snapshots if s.summary["icesink.maintenance"]}
    assert maintenance and not set(second.column("_commit_snapshot_id").to_pylist()) & maintenance


def test_starting_at_a_snapshot_a_time_or_now(spark: Any, sqlite_catalog: CatalogConfig, tmp_path: Path) -> None:
    create(sqlite_catalog)
    fill(sqlite_catalog, 2, seed=3)
    table = open_catalog(sqlite_catalog).load_table(TABLE)
    middle = max(table.metadata.snapshots, key=lambda s: s.sequence_number)
    time.sleep(0.05)
    model = fill(sqlite_catalog, 2, seed=4, start=2)
    later = sorted(table.refresh().metadata.snapshots, key=lambda s: s.sequence_number)[2:]
    by_snapshot, _ = collect(spark, sqlite_catalog, tmp_path / "a", starting=str(middle.snapshot_id))
    assert set(by_snapshot.column("_commit_snapshot_id").to_pylist()) == {middle.snapshot_id} | {
        s.snapshot_id for s in later
    }
    at = datetime.datetime.fromtimestamp(0, datetime.UTC) + datetime.timedelta(milliseconds=later[0].timestamp_ms)
    by_time, _ = collect(spark, sqlite_catalog, tmp_path / "b", starting=at.isoformat())
    assert set(by_time.column("_commit_snapshot_id").to_pylist()) == {s.snapshot_id for s in later}
    _, sizes = collect(spark, sqlite_catalog, tmp_path / "c", starting="latest")
    assert sum(sizes) == 0
    fill(sqlite_catalog, 1, seed=5, start=4, model=model)
    newest, _ = collect(spark, sqlite_catalog, tmp_path / "c", starting="latest")
    head = table.refresh().current_snapshot()
    assert set(newest.column("_commit_snapshot_id").to_pylist()) == {head.snapshot_id}


def test_a_restart_after_the_last_read_snapshot_expired_stops_with_the_reason(
    spark: Any, sqlite_catalog: CatalogConfig, tmp_path: Path
) -> None:
    create(sqlite_catalog)
    fill(sqlite_catalog, 2, seed=6)
    collect(spark, sqlite_catalog, tmp_path / "ckpt")
    fill(sqlite_catalog, 2, seed=7, start=2)
    table = open_catalog(sqlite_catalog).load_table(TABLE)
    read_up_to = sorted(table.metadata.snapshots, key=lambda s: s.sequence_number)[1].snapshot_id
    table.maintenance.expire_snapshots().by_id(read_up_to).commit()
    with pytest.raises(Exception) as raised:
        collect(spark, sqlite_catalog, tmp_path / "ckpt")
    message = str(raised.value)
    assert f"snapshot {read_up_to}" in message and "history.expire.max-snapshot-age-ms" in message
    # Raised in Spark's Python process for the source, not in the driver's: rebuilt from Spark's text.
    from icesink.errors import StartingSnapshotExpiredError

    error = icesink.error_of(raised.value)
    assert isinstance(error, StartingSnapshotExpiredError)
    assert f"snapshot {read_up_to}" in str(error)


def first_offset(config: CatalogConfig, table: str, moment: datetime.datetime) -> int:
    """The snapshot a change stream of ``table`` starting at ``moment`` reads after (before Spark logs it)."""
    from icesink.changelog.source import ChangelogStreamReader, ReadOptions, spark_schema

    options = {"table": table, "catalog.name": config.name, "catalog.uri": config.uri}
    read = ReadOptions.of({**options, "catalog.warehouse": config.warehouse, "starting": moment.isoformat()})
    reader = ChangelogStreamReader(read, spark_schema(read.load().schema(), read.mode))
    return int(reader.initialOffset()["snapshot_id"])


@pytest.mark.parametrize(
    ("change", "said"),
    [
        (lambda schema: schema.add_column("note ü", StringType()), "column 'note ü' was added"),
        (lambda schema: schema.update_column("n", LongType()), "column 'n' changed type from int to long"),
        (lambda schema: schema.make_column_optional("k"), "column 'k' was made optional"),
    ],
    ids=["column added", "type promoted", "made optional"],
)
@pytest.mark.parametrize("several", [False, True], ids=["one table", "several tables"])
def test_a_running_change_stream_stops_at_a_schema_its_columns_cannot_hold_and_a_new_dataframe_reads_it(
    sqlite_catalog: CatalogConfig, change: Any, said: str, several: bool
) -> None:
    """Another tool adds a column (widens one, makes one optional) while the stream runs: read into the columns
    Spark fixed when the DataFrame was made, the new values would be left out until a restart, which reads only
    later changes (a promoted column's values failed inside pyiceberg; a null reached a column declared not
    nullable). The micro-batch stops before anything is read, and again when the query is restarted from the same
    DataFrame; one made anew reads it whole, from the same offsets. Driven as Spark drives the readers."""
    from pyiceberg.schema import Schema
    from pyiceberg.types import IntegerType, NestedField

    from icesink.changelog.source import ChangelogStreamReader, ReadOptions, spark_schema
    from icesink.changelog.tables_source import TablesReadOptions, TablesStreamReader, tables_schema
    from icesink.errors import SchemaMismatchError

    identifier = "shop.evolving %ü"
    catalog = open_catalog(sqlite_catalog)
    catalog.create_namespace_if_not_exists("shop")
    schema = Schema(
        NestedField(1, "id", LongType(), required=True),
        NestedField(2, "n", IntegerType()),
        NestedField(3, "k", LongType(), required=True),
    )
    table = catalog.create_table(identifier, schema)
    table.append(pa.Table.from_pylist([{"id": 1, "n": 1, "k": 1}], schema=table.schema().as_arrow()))
    where = {"catalog.name": sqlite_catalog.name, "catalog.uri": sqlite_catalog.uri}
    where["catalog.warehouse"] = sqlite_catalog.warehouse

    def dataframe() -> tuple[Any, Any]:
        """The options and columns icesink.read_stream gives a DataFrame made now."""
        if several:
            many = TablesReadOptions.of({**where, "tables": json.dumps([identifier])})
            return many, tables_schema(many)
        one = ReadOptions.of({**where, "table": identifier})
        return one, spark_schema(one.load().schema(), one.mode)

    def reader(made: tuple[Any, Any]) -> Any:  # what Spark makes at each start of the query
        return TablesStreamReader(*made) if several else ChangelogStreamReader(*made)

    made_before = dataframe()
    running = reader(made_before)
    start = running.initialOffset()
    first = running.latestOffset(start, running.getDefaultReadLimit())
    assert running.partitions(start, first)  # the rows from before the change
    with table.update_schema() as update:
        change(update)
    table = catalog.load_table(identifier)
    row = {"id": 2, "n": 2**40 if "long" in said else 2, "k": None if "optional" in said else 2}
    table.append(
        pa.Table.from_pylist(
            [{**row, **({"note ü": "x"} if "added" in said else {})}], schema=table.schema().as_arrow()
        )
    )
    second = running.latestOffset(first, running.getDefaultReadLimit())
    for stopped in (running, reader(made_before)):  # running, then restarted from the same DataFrame
        with pytest.raises(SchemaMismatchError) as raised:
            stopped.partitions(first, second)
        assert raised.value.table == identifier
        assert said in str(raised.value) and "a DataFrame made anew with icesink.read_stream" in str(raised.value)
    again = reader(dataframe())  # a DataFrame made anew: the same offsets, the table's schema now
    tasks = again.partitions(first, second)
    rows = [r for task in tasks for batch in again.read(task) for r in batch.to_pylist()]
    if several:
        rows = [r[identifier] for r in rows]
    assert [(r["id"], r["n"], r["k"], r.get("note ü")) for r in rows] == [
        (2, row["n"], row["k"], "x" if "added" in said else None)
    ]


def test_a_change_stream_started_after_a_column_was_dropped_or_widened_reads_the_older_snapshots(
    sqlite_catalog: CatalogConfig,
) -> None:
    """Snapshots written before the stream started, with a column dropped since or a type narrower than now, are
    no schema the stream cannot hold: read from the start, they read as the columns are now."""
    from pyiceberg.schema import Schema
    from pyiceberg.types import IntegerType, NestedField

    from icesink.changelog.source import ChangelogStreamReader, ReadOptions, spark_schema

    catalog = open_catalog(sqlite_catalog)
    catalog.create_namespace_if_not_exists("shop")
    schema = Schema(
        NestedField(1, "id", LongType(), required=True),
        NestedField(2, "n", IntegerType()),
        NestedField(3, "gone", StringType()),
    )
    table = catalog.create_table("shop.older", schema)
    table.append(pa.Table.from_pylist([{"id": 1, "n": 1, "gone": "x"}], schema=table.schema().as_arrow()))
    with table.update_schema() as update:
        update.delete_column("gone")
        update.update_column("n", LongType())
    table = catalog.load_table("shop.older")
    table.append(pa.Table.from_pylist([{"id": 2, "n": 2**40}], schema=table.schema().as_arrow()))
    where = {"catalog.name": sqlite_catalog.name, "catalog.uri": sqlite_catalog.uri}
    options = ReadOptions.of({**where, "catalog.warehouse": sqlite_catalog.warehouse, "table": "shop.older"})
    reader = ChangelogStreamReader(options, spark_schema(options.load().schema(), options.mode))
    start = reader.initialOffset()
    end = reader.latestOffset(start, reader.getDefaultReadLimit())
    rows = [r for task in reader.partitions(start, end) for batch in reader.read(task) for r in batch.to_pylist()]
    assert sorted((r["id"], r["n"], "gone" in r) for r in rows) == [(1, 1, False), (2, 2**40, False)]


def test_a_start_time_older_than_the_kept_history_is_refused_not_read_as_inserts(sqlite_catalog: CatalogConfig) -> None:
    """Snapshots expired: a time before the oldest one kept cannot tell what changed since (its rows were there
    before or came after?); the reader stops with the times it could start at, before Spark logs an offset."""
    from icesink.changelog.source import BEFORE_FIRST
    from icesink.errors import StartingSnapshotExpiredError

    config = sqlite_catalog
    create(config)
    before_all = datetime.datetime.now(datetime.UTC) - datetime.timedelta(minutes=1)

    def start_at(moment: datetime.datetime) -> int:
        return first_offset(config, TABLE, moment)

    fill(config, 3, seed=8)
    table = open_catalog(config).load_table(TABLE)
    first, second, third = sorted(table.metadata.snapshots, key=lambda s: s.sequence_number)
    assert start_at(before_all) == BEFORE_FIRST  # the whole history is kept: every row is a change since

    def moment_of(snapshot: Any) -> datetime.datetime:
        return EPOCH + datetime.timedelta(milliseconds=snapshot.timestamp_ms)

    table.maintenance.expire_snapshots().by_id(first.snapshot_id).commit()
    for moment in (before_all, moment_of(second)):
        with pytest.raises(StartingSnapshotExpiredError) as raised:
            start_at(moment)
        message = str(raised.value)
        assert f"table {TABLE}" in message and "older than the history the table keeps" in message
        assert f"start later than {moment_of(second).isoformat(timespec='milliseconds')}" in message
    assert start_at(moment_of(third)) == second.snapshot_id  # its changes: the third snapshot's


@pytest.mark.parametrize("upgraded", [False, True], ids=["format-1", "upgraded-to-2"])
def test_expired_history_of_a_table_without_sequence_numbers_is_refused_not_read_as_inserts(
    sqlite_catalog: CatalogConfig, upgraded: bool
) -> None:
    """Format 1 has no sequence numbers, and a table upgraded to format 2 numbers its snapshots from 1 again:
    once expiry clears the oldest kept snapshot's parent, only its summary's totals say rows were there before.
    Snapshots written by pyiceberg, as another tool would write them."""
    from pyiceberg.schema import Schema
    from pyiceberg.types import LongType, NestedField

    from icesink.changelog.source import BEFORE_FIRST
    from icesink.errors import StartingSnapshotExpiredError

    config, name = sqlite_catalog, "shop.version one"
    catalog = open_catalog(config)
    catalog.create_namespace_if_not_exists("shop")
    table = catalog.create_table(
        name, Schema(NestedField(1, "x", LongType(), required=False)), properties={"format-version": "1"}
    )
    before_all = datetime.datetime.now(datetime.UTC) - datetime.timedelta(minutes=1)

    def start_at(moment: datetime.datetime) -> int:
        return first_offset(config, name, moment)

    for value in range(2):
        table.append(pa.table({"x": pa.array([value], pa.int64())}))
    if upgraded:
        with table.transaction() as transaction:
            transaction.upgrade_table_version(2)
    table.append(pa.table({"x": pa.array([2], pa.int64())}))
    assert start_at(before_all) == BEFORE_FIRST  # the whole history is kept: every row is a change since
    first, second, _ = sorted(table.metadata.snapshots, key=lambda s: s.timestamp_ms)
    table.maintenance.expire_snapshots().by_ids([first.snapshot_id, second.snapshot_id]).commit()
    (oldest,) = open_catalog(config).load_table(name).metadata.snapshots
    assert oldest.parent_snapshot_id is None and (oldest.sequence_number or 0) <= 1  # nothing else tells
    with pytest.raises(StartingSnapshotExpiredError, match="older than the history the table keeps"):
        start_at(before_all)  # before, its rows 0 and 1 were read as inserted since
    # What the error offers still works: the oldest state kept, as inserts.
    assert sorted(icesink.changes(name, None, catalog=config).column("x").to_pylist()) == [0, 1, 2]


EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)


def rewrite_offsets(checkpoint: Path, change: Any) -> None:
    """Rewrite the change stream's offsets kept in a reading query's checkpoint (the last line of each file)."""
    import json

    for path in (checkpoint / "offsets").iterdir():
        if path.name.isdigit():
            lines = path.read_text().splitlines()
            lines[-1] = json.dumps(change(json.loads(lines[-1])))
            path.write_text("\n".join(lines))


def test_offsets_without_a_version_read_on_and_those_of_a_later_release_are_refused(
    spark: Any, sqlite_catalog: CatalogConfig, tmp_path: Path
) -> None:
    from icesink.changelog.offsets import OFFSET_VERSION

    create(sqlite_catalog)
    model = fill(sqlite_catalog, 2, seed=8)
    first, _ = collect(spark, sqlite_catalog, tmp_path / "ckpt")
    # As the release before versioned offsets wrote them.
    rewrite_offsets(tmp_path / "ckpt", lambda kept: {"snapshot_id": kept["snapshot_id"]})
    fill(sqlite_catalog, 2, seed=9, start=2, model=model)
    second, _ = collect(spark, sqlite_catalog, tmp_path / "ckpt")
    assert replay(replay({}, first), second) == model.rows
    rewrite_offsets(tmp_path / "ckpt", lambda kept: {**kept, "version": OFFSET_VERSION + 1})
    fill(sqlite_catalog, 1, seed=10, start=4, model=model)
    with pytest.raises(Exception) as raised:
        collect(spark, sqlite_catalog, tmp_path / "ckpt")
    message = str(raised.value)
    assert f"table {TABLE}" in message and f"version {OFFSET_VERSION + 1}" in message and "new checkpoint" in message


def test_a_changelog_pipeline_makes_table_b_equal_table_a(
    spark: Any, sqlite_catalog: CatalogConfig, tmp_path: Path
) -> None:
    """A → read_stream(changelog) → icesink.stream(op_column="_change_type") → B, over several runs."""
    create(sqlite_catalog, partition_by=("bucket(4, id)",))
    model = Model()
    for run, seed in enumerate((10, 11, 12)):
        fill(sqlite_catalog, 3, seed=seed, start=run * 3, model=model)
        stream = icesink.read_stream(
            spark,
            TABLE,
            catalog={"name": sqlite_catalog.name, "uri": sqlite_catalog.uri, "warehouse": sqlite_catalog.warehouse},
            max_files_per_trigger=2,
        )
        icesink.stream(
            stream.drop("_commit_snapshot_id", "_commit_timestamp"),
            table="shop.copy",
            checkpoint_location=str(tmp_path / "b"),
            trigger={"availableNow": True},
            create_table=True,
            equality_fields=["id"],
            op_column="_change_type",
            sequence_by="_change_ordinal",
            catalog=sqlite_catalog,
        ).awaitTermination()
        copy = {r["id"]: r["v"] for r in icesink.read("shop.copy", catalog=sqlite_catalog).to_pylist()}
        assert copy == model.rows == state_of(sqlite_catalog), f"run {run}"
    table = open_catalog(sqlite_catalog).load_table("shop.copy")
    rust = {r["id"]: r["v"] for r in iceberg_rust_sql(table, "SELECT id, v FROM t").to_pylist()}
    assert rust == model.rows
    check_outcome("changelog pipeline A -> B", sqlite_catalog, "shop.copy", sorted(model.rows))


def test_the_spark_native_sink_appends_each_batch_once(
    spark: Any, sqlite_catalog: CatalogConfig, tmp_path: Path
) -> None:
    from tests.helpers.streams import add_input_files, expected_rows, input_stream
    from tests.helpers.support import create_orders_table

    create_orders_table(sqlite_catalog, "shop.orders")
    icesink.register(spark)

    def run() -> None:
        (
            input_stream(spark, tmp_path / "in")
            .writeStream.format("icesink")
            .option("table", "shop.orders")
            .option("job_id", "native")
            .option("catalog", sqlite_catalog.name)
            .option("catalog.uri", sqlite_catalog.uri)
            .option("catalog.warehouse", sqlite_catalog.warehouse)
            .option("checkpointLocation", str(tmp_path / "ckpt"))
            .trigger(availableNow=True)
            .start()
            .awaitTermination()
        )

    add_input_files(tmp_path / "in", [(0, 100), (100, 50)])
    run()
    add_input_files(tmp_path / "in", [(150, 25)])
    run()
    rows = icesink.read("shop.orders", catalog=sqlite_catalog).sort_by("id")
    assert rows.to_pylist() == expected_rows([(0, 100), (100, 50), (150, 25)]).to_pylist()
    table = open_catalog(sqlite_catalog).load_table("shop.orders")
    assert {s.summary["icesink.job-id"] for s in table.metadata.snapshots} == {"native"}
    assert table.current_snapshot().summary["icesink.max-committed-checkpoint-id"] == "2"


def test_a_pipeline_passes_the_upstream_watermark_on_and_makes_the_same_partitions_done(
    spark: Any, sqlite_catalog: CatalogConfig, tmp_path: Path
) -> None:
    """bronze (a stream with event_time) → read_stream(with_watermark=True) → silver, watermark_from the upstream."""
    from tests.helpers.event_streams import START, Stream
    from tests.helpers.event_streams import TABLE as BRONZE
    from tests.helpers.support import create_orders_table

    config = sqlite_catalog
    create_orders_table(config, BRONZE, partition_by=("hour(ts)",))
    create_orders_table(config, "shop.silver", partition_by=("hour(ts)",))
    bronze = Stream(config, lateness=5 * 60_000_000)  # its own watermark trails its event times by 5 minutes

    def run() -> None:
        changes = icesink.read_stream(spark, BRONZE, catalog=config, mode="append", with_watermark=True)
        icesink.stream(
            changes,
            table="shop.silver",
            catalog=config,
            checkpoint_location=str(tmp_path / "silver"),
            trigger={"availableNow": True},
            event_time="ts",
            watermark_from="_commit_watermark",
        ).awaitTermination()

    bronze.batch([(1, "a", 10), (2, "a", 50)])
    bronze.batch([(3, "a", 70)])
    run()
    upstream = icesink.watermark(BRONZE, catalog=config)
    assert upstream == START + datetime.timedelta(minutes=65)
    assert icesink.watermark("shop.silver", catalog=config) == upstream  # passed on, not trailing silver's rows
    assert icesink.wait_for_partition("shop.silver", "ts_hour=2026-11-25-00", timeout="0s", catalog=config)
    assert not icesink.wait_for_partition("shop.silver", "ts_hour=2026-11-25-01", timeout="0s", catalog=config)

    bronze.batch([(4, "a", 130), (5, "a", 40)])  # a late row upstream: written there, counted late here too
    run()
    assert icesink.watermark("shop.silver", catalog=config) == START + datetime.timedelta(minutes=125)
    assert icesink.wait_for_partition("shop.silver", "ts_hour=2026-11-25-01", timeout="0s", catalog=config)
    silver = open_catalog(config).load_table("shop.silver")
    assert "_commit_watermark" not in silver.schema().column_names  # read, not written
    assert sorted(silver.scan().to_arrow().column("id").to_pylist()) == [1, 2, 3, 4, 5]
    summary = silver.current_snapshot().summary  # what any reader of the summary sees (pyiceberg here)
    assert summary["icesink.watermark"] == "2026-11-25T02:05:00.000000+00:00" and summary["icesink.late-rows"] == "1"


def test_watermark_from_refuses_what_it_cannot_follow(
    spark: Any, sqlite_catalog: CatalogConfig, tmp_path: Path
) -> None:
    from icesink.errors import ConfigError
    from tests.helpers.event_streams import TABLE as BRONZE
    from tests.helpers.support import create_orders_table

    create_orders_table(sqlite_catalog, BRONZE)
    changes = icesink.read_stream(spark, BRONZE, catalog=sqlite_catalog, mode="append", with_watermark=True)
    assert changes.schema.names[-1] == "_commit_watermark"
    for options, refusal in (
        ({"watermark_from": "_commit_watermark", "lateness": "1 minute", "event_time": "ts"}, "leave lateness out"),
        ({"watermark_from": "id"}, "watermark_from column 'id' is bigint, not a timestamp"),
        ({"watermark_from": "nope"}, "watermark_from"),
    ):
        with pytest.raises(ConfigError, match=refusal):
            icesink.stream(
                changes, table=BRONZE, catalog=sqlite_catalog, checkpoint_location=str(tmp_path / "c"), **options
            )
    with pytest.raises(ConfigError, match="with-watermark='maybe' must be true or false"):
        icesink.read_stream(spark, BRONZE, catalog=sqlite_catalog, with_watermark="maybe")


def test_a_pipeline_with_hostile_names_a_date_event_time_and_another_tool_in_between_passes_the_watermark_on(
    spark: Any, sqlite_catalog: CatalogConfig, tmp_path: Path
) -> None:
    """bronze (a date event time, names Spark would parse) → silver with watermark_from; in between, another tool
    adds a row below the watermark to silver and renames silver's event-time column."""
    import pyarrow.parquet as pq

    from icesink.readiness import partition_statuses
    from tests.helpers.streams import order_for_file_source

    config = sqlite_catalog
    bronze, silver = "shop.`bronze` ü.x", "shop.silver `ü`"
    source = tmp_path / "in"
    source.mkdir()
    day = datetime.date

    def add(number: int, days: list[datetime.date]) -> None:
        rows = {"id": list(range(number * 10, number * 10 + len(days))), "order.day": days, "a `b`": ["x"] * len(days)}
        path = source / f"part-{number:05d}.parquet"
        pq.write_table(
            pa.table(rows, schema=pa.schema([("id", pa.int64()), ("order.day", pa.date32()), ("a `b`", pa.string())])),
            path,
        )
        order_for_file_source(path, number)

    def run_bronze() -> None:
        df = spark.readStream.schema("id long, `order.day` date, `a ``b``` string").option("maxFilesPerTrigger", 1)
        icesink.stream(
            df.parquet(str(source)),
            table=bronze,
            catalog=config,
            checkpoint_location=str(tmp_path / "bronze"),
            trigger={"availableNow": True},
            create_table=True,
            partition_by=["`order.day`"],
            event_time="ORDER.DAY",  # another spelling
        ).awaitTermination()

    def run_silver(partition_by: tuple[str, ...] = ()) -> None:
        changes = icesink.read_stream(spark, bronze, catalog=config, mode="append", with_watermark=True)
        icesink.stream(
            changes,
            table=silver,
            catalog=config,
            checkpoint_location=str(tmp_path / "silver"),
            trigger={"availableNow": True},
            create_table=True,
            partition_by=partition_by,  # once the column is renamed, this name is refused: given at creation only
            event_time="order.day",
            watermark_from="_commit_watermark",
        ).awaitTermination()

    def done_days(identifier: str) -> list[str]:
        return sorted(p.path for p in partition_statuses(identifier, catalog=config) if p.state.value == "done")

    add(0, [day(2026, 11, 24), day(2026, 11, 25)])
    run_bronze()
    run_silver(("`order.day`",))
    midnight = datetime.datetime(2026, 11, 25, tzinfo=datetime.UTC)
    assert icesink.watermark(bronze, catalog=config) == midnight == icesink.watermark(silver, catalog=config)
    assert done_days(silver) == done_days(bronze) == ["order.day=2026-11-24"]

    # Another tool: a row of the 23rd (done long ago) into silver, and the event-time column renamed.
    table = open_catalog(config).load_table(silver)
    extra = {"id": [99], "order.day": [day(2026, 11, 23)], "a `b`": ["other tool"]}
    table.append(pa.table(extra, schema=table.schema().as_arrow()))
    with open_catalog(config).load_table(silver).update_schema() as update:
        update.rename_column("order.day", "day of order")
    add(1, [day(2026, 11, 26), day(2026, 11, 25)])
    run_bronze()
    run_silver()
    upstream = icesink.watermark(bronze, catalog=config)
    assert upstream == midnight + datetime.timedelta(days=1)
    assert icesink.watermark(silver, catalog=config) == upstream  # through the other tool's snapshot
    assert done_days(bronze) == ["order.day=2026-11-24", "order.day=2026-11-25"]
    assert [p.rsplit("=", 1)[1] for p in done_days(silver)] == ["2026-11-23", "2026-11-24", "2026-11-25"]
    table = open_catalog(config).load_table(silver)
    assert "_commit_watermark" not in table.schema().column_names
    assert sorted(table.scan().to_arrow().column("id").to_pylist()) == [0, 1, 10, 11, 99]
