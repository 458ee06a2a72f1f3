"""Strict configuration with Spark: catalog names, ``starting`` and the options of the ``icesink`` format.

Each case is what a user writes; each must fail with a message naming what is
wrong and the fix, before any row is delivered or written.
"""

from __future__ import annotations

import datetime
from pathlib import Path
from typing import Any

import pytest

import icesink
from icesink.catalog.config import CatalogConfig
from icesink.catalog.loader import open_catalog
from icesink.errors import ConfigError
from tests.test_change_streams import fill
from tests.test_maintenance import TABLE, create

pytestmark = pytest.mark.spark


def files_under(directory: Path) -> list[Path]:
    return sorted(p for p in directory.rglob("*") if p.is_file())


def catalog_of(config: CatalogConfig) -> dict[str, str]:
    return {"name": config.name, "uri": config.uri, "warehouse": config.warehouse}


def run_changes(stream: Any, checkpoint: Path) -> list[Any]:
    """Run a change stream with Trigger.AvailableNow; every row it delivered."""
    delivered: list[Any] = []
    query = (
        stream.writeStream.foreachBatch(lambda batch, _: delivered.extend(batch.collect()))
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    return delivered


# --- 1. A catalog name nobody defined ---------------------------------------------------------------------------


def test_stream_and_read_stream_with_an_undefined_catalog_name_create_nothing(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.helpers.streams import add_input_files, input_stream

    add_input_files(tmp_path / "in", [(0, 10)])
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.setenv("PYICEBERG_CATALOG__PROD__URI", f"sqlite:///{tmp_path / 'prod.db'}")
    monkeypatch.setenv("PYICEBERG_CATALOG__PROD__WAREHOUSE", (tmp_path / "prod").as_uri())
    with pytest.raises(ConfigError, match="catalog 'prdo' is not defined; defined catalogs: 'prod'"):
        icesink.stream(
            input_stream(spark, tmp_path / "in"),
            table="shop.orders",
            checkpoint_location=str(work / "ckpt"),
            catalog="prdo",
        )
    with pytest.raises(ConfigError, match="catalog 'prdo' is not defined"):  # icesink's own, not Spark's wrapping
        icesink.read_stream(spark, "shop.orders", catalog="prdo")
    assert files_under(work) == [] and not (tmp_path / "prod.db").exists()


# --- 2. starting ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("starting", ["1234567890123456789", "123", 123])
def test_an_unknown_starting_snapshot_id_is_refused_naming_it(
    spark: Any, sqlite_catalog: CatalogConfig, tmp_path: Path, starting: str | int
) -> None:
    """Digits are a snapshot id: never read as epoch milliseconds (nothing) nor as a small time (everything)."""
    create(sqlite_catalog)
    fill(sqlite_catalog, 2, seed=1)
    stream = icesink.read_stream(spark, TABLE, catalog=catalog_of(sqlite_catalog), starting=starting)
    with pytest.raises(Exception) as raised:
        run_changes(stream, tmp_path / "ckpt")
    message = str(raised.value)
    assert "SnapshotNotFoundError" in message
    assert f"table {TABLE} has no snapshot {int(starting)}" in message


def test_starting_at_a_snapshot_whose_parent_expired_is_the_expired_error(
    spark: Any, sqlite_catalog: CatalogConfig, tmp_path: Path
) -> None:
    create(sqlite_catalog)
    fill(sqlite_catalog, 3, seed=3)
    table = open_catalog(sqlite_catalog).load_table(TABLE)
    first, second, _ = sorted(table.metadata.snapshots, key=lambda s: s.sequence_number)
    table.maintenance.expire_snapshots().by_id(first.snapshot_id).commit()
    stream = icesink.read_stream(spark, TABLE, catalog=catalog_of(sqlite_catalog), starting=second.snapshot_id)
    with pytest.raises(Exception) as raised:
        run_changes(stream, tmp_path / "ckpt")
    message = str(raised.value)
    assert "StartingSnapshotExpiredError" in message
    assert f"starting={second.snapshot_id}, but the snapshot before it is no longer kept" in message


def test_starting_at_a_datetime_or_an_iso_timestamp_reads_what_was_committed_from_then_on(
    spark: Any, sqlite_catalog: CatalogConfig, tmp_path: Path
) -> None:
    create(sqlite_catalog)
    fill(sqlite_catalog, 2, seed=2)
    table = open_catalog(sqlite_catalog).load_table(TABLE)
    second = sorted(table.metadata.snapshots, key=lambda s: s.sequence_number)[1]
    at = datetime.datetime.fromtimestamp(0, datetime.UTC) + datetime.timedelta(milliseconds=second.timestamp_ms)
    naive = at.replace(tzinfo=None)  # no zone: UTC
    for number, starting in enumerate(
        [at, naive, naive.isoformat(), at.astimezone(datetime.timezone(datetime.timedelta(hours=5))).isoformat()]
    ):
        stream = icesink.read_stream(spark, TABLE, catalog=catalog_of(sqlite_catalog), starting=starting)
        rows = run_changes(stream, tmp_path / f"ckpt-{number}")
        assert {r["_commit_snapshot_id"] for r in rows} == {second.snapshot_id}, starting


def test_an_unreadable_starting_is_refused_when_the_stream_is_defined(
    spark: Any, sqlite_catalog: CatalogConfig
) -> None:
    create(sqlite_catalog)
    with pytest.raises(ConfigError) as raised:  # icesink's own error, not Spark's wrapping of it
        icesink.read_stream(spark, TABLE, catalog=catalog_of(sqlite_catalog), starting="yesterday")
    message = str(raised.value)
    assert "starting='yesterday' is not one of earliest, latest, a snapshot id" in message and "ISO 8601" in message


# --- 3. Options of the icesink format -------------------------------------------------------------------------


def test_a_misspelt_change_stream_option_is_refused_at_load(spark: Any, sqlite_catalog: CatalogConfig) -> None:
    create(sqlite_catalog)
    icesink.register(spark)
    reader = spark.readStream.format("icesink").option("table", TABLE)
    for key, value in catalog_of(sqlite_catalog).items():
        reader = reader.option(f"catalog.{key}", value)
    with pytest.raises(Exception) as raised:
        reader.option("startng", "latest").load()
    message = str(raised.value)
    assert "unknown option 'startng' (did you mean 'starting'?)" in message
    assert "mode, starting, max-files-per-trigger" in message


def native_append(
    spark: Any, config: CatalogConfig, table: str, tmp_path: Path, path: str | None = None, **options: str
) -> None:
    """``writeStream.format("icesink")`` over one input file, as the README shows it, plus ``options``."""
    from tests.helpers.streams import add_input_files, input_stream

    add_input_files(tmp_path / "in", [(0, 10)])
    icesink.register(spark)
    writer = (
        input_stream(spark, tmp_path / "in")
        .writeStream.format("icesink")
        .option("table", table)
        .option("job_id", "native")
        .option("catalog", config.name)
        .option("catalog.uri", config.uri)
        .option("catalog.warehouse", config.warehouse)
        .option("checkpointLocation", str(tmp_path / "ckpt"))
        .queryName(f"native_{tmp_path.name}")
    )
    for key, value in options.items():
        writer = writer.option(key, value)
    writer.trigger(availableNow=True).start(path).awaitTermination()


@pytest.mark.parametrize(
    ("options", "says"),
    [
        ({"jobid": "other"}, "unknown option 'jobid' (did you mean 'job_id'?)"),
        ({"equality_fields": "id"}, "option 'equality_fields': this sink only appends"),
        ({"op-column": "op"}, "option 'op-column': this sink only appends"),
    ],
)
def test_the_format_sink_refuses_options_it_would_ignore_and_writes_nothing(
    spark: Any, sqlite_catalog: CatalogConfig, tmp_path: Path, options: dict[str, str], says: str
) -> None:
    from tests.helpers.support import create_orders_table

    table = create_orders_table(sqlite_catalog, "shop.orders")
    with pytest.raises(Exception) as raised:
        native_append(spark, sqlite_catalog, "shop.orders", tmp_path, **options)
    assert says in str(raised.value)
    assert table.refresh().current_snapshot() is None
    assert files_under(Path(table.location().removeprefix("file://"))) == files_under(
        Path(table.location().removeprefix("file://")) / "metadata"
    )


def test_the_format_sink_refuses_a_table_with_identifier_fields(
    spark: Any, sqlite_catalog: CatalogConfig, tmp_path: Path
) -> None:
    from tests.helpers.support import create_orders_table

    table = create_orders_table(sqlite_catalog, "shop.orders")
    with table.update_schema() as update:
        update.set_identifier_fields("id")
    with pytest.raises(Exception) as raised:
        native_append(spark, sqlite_catalog, "shop.orders", tmp_path)
    message = str(raised.value)
    assert "table shop.orders has identifier fields (id)" in message and "icesink.stream" in message
    assert table.refresh().current_snapshot() is None


def test_what_spark_passes_to_the_format_sink_is_accepted(
    spark: Any, sqlite_catalog: CatalogConfig, tmp_path: Path
) -> None:
    """checkpointLocation, queryName and the path of start() reach the sink as options: not the user's typos."""
    from tests.helpers.support import create_orders_table

    table = create_orders_table(sqlite_catalog, "shop.orders")
    native_append(spark, sqlite_catalog, "shop.orders", tmp_path, path="shop.orders")
    assert table.refresh().current_snapshot().summary["added-records"] == "10"


def test_the_format_sink_refuses_complete_output_mode_and_writes_nothing(
    spark: Any, sqlite_catalog: CatalogConfig, tmp_path: Path
) -> None:
    """Complete mode hands the sink the whole result at every trigger: appended, it would repeat rows."""
    from pyiceberg.schema import Schema
    from pyiceberg.types import LongType, NestedField, StringType

    from tests.helpers.streams import add_input_files, input_stream

    catalog = open_catalog(sqlite_catalog)
    catalog.create_namespace_if_not_exists("shop")
    schema = Schema(NestedField(1, "name", StringType()), NestedField(2, "count", LongType(), required=True))
    table = catalog.create_table("shop.counts", schema)
    add_input_files(tmp_path / "in", [(0, 10)])
    icesink.register(spark)
    query = (
        input_stream(spark, tmp_path / "in")
        .groupBy("name")
        .count()
        .writeStream.format("icesink")
        .outputMode("complete")
        .option("table", "shop.counts")
        .option("catalog", sqlite_catalog.name)
        .option("catalog.uri", sqlite_catalog.uri)
        .option("catalog.warehouse", sqlite_catalog.warehouse)
        .option("checkpointLocation", str(tmp_path / "ckpt"))
    )
    with pytest.raises(Exception) as raised:
        query.trigger(availableNow=True).start().awaitTermination()
    assert 'table shop.counts: writeStream.format("icesink") appends each micro-batch' in str(raised.value)
    assert 'outputMode("complete")' in str(raised.value)
    assert table.refresh().current_snapshot() is None


# --- 4. icesink.* table property names ----------------------------------------------------------------------------


def test_a_misspelt_table_property_of_one_target_is_refused_before_any_table_is_created(
    spark: Any, sqlite_catalog: CatalogConfig, tmp_path: Path
) -> None:
    from icesink.catalog.database import engine
    from icesink.iceberg.pending_tables import pending_tables
    from tests.helpers.streams import add_input_files, input_stream

    add_input_files(tmp_path / "in", [(0, 10)])
    with pytest.raises(ConfigError) as refused:
        icesink.stream(
            input_stream(spark, tmp_path / "in"),
            tables={
                "shop.first": icesink.Target(create_table=True),
                "shop.second": icesink.Target(create_table=True, table_properties={"icesink.write.max-open-file": "4"}),
            },
            checkpoint_location=str(tmp_path / "ckpt"),
            catalog=sqlite_catalog,
        )
    message = str(refused.value)
    assert message.startswith("table shop.second: table_properties holds unknown icesink table property")
    assert "'icesink.write.max-open-file' (did you mean 'icesink.write.max-open-files'?)" in message
    assert pending_tables(engine(sqlite_catalog), sqlite_catalog.name) == []  # not even the first target's


def test_a_stream_into_a_table_with_an_unknown_icesink_property_writes_it_and_warns_naming_it(
    spark: Any, sqlite_catalog: CatalogConfig, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Another tool set it, and the stream may not own the table: a warning on the driver's log, not a refusal."""
    from tests.helpers.streams import add_input_files, input_stream, run_available
    from tests.helpers.support import create_orders_table, table_ids

    table = create_orders_table(sqlite_catalog, "shop.orders")
    with table.transaction() as change:
        change.set_properties({"icesink.maintain.min-commit": "3"})
    add_input_files(tmp_path / "in", [(0, 10)])
    with caplog.at_level("WARNING", logger="icesink.stream"):
        run_available(
            input_stream(spark, tmp_path / "in"),
            table="shop.orders",
            checkpoint_location=str(tmp_path / "ckpt"),
            catalog=sqlite_catalog,
        )
    assert table_ids(sqlite_catalog, "shop.orders") == list(range(10))
    (warning,) = [r.getMessage() for r in caplog.records if "icesink.maintain.min-commit'" in r.getMessage()]
    assert warning.startswith("table shop.orders: its properties hold unknown icesink table property")
    assert "(did you mean 'icesink.maintain.min-commits'?)" in warning and "not applied" in warning
