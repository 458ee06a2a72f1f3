"""icesink.stream end to end with a real local[2] Spark session."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import icesink
from icesink.catalog.config import CatalogConfig
from icesink.catalog.loader import open_catalog
from icesink.errors import (
    ConfigError,
    NotStreamingError,
    SchemaMismatchError,
    TableNotFoundError,
)
from icesink.paths import file_uri
from tests.helpers.streams import add_input_files, expected_rows, input_stream, order_for_file_source, run_available
from tests.helpers.support import create_orders_table

pytestmark = pytest.mark.spark
TABLE = "shop.orders"


def table_rows(config: CatalogConfig, identifier: str = TABLE) -> list[dict[str, Any]]:
    table = open_catalog(config).load_table(identifier)
    return sorted(table.scan().to_arrow().to_pylist(), key=lambda r: r["id"])


def test_rows_in_the_table_equal_the_input_one_snapshot_per_batch(
    spark: Any, catalog_config: CatalogConfig, tmp_path: Path
) -> None:
    batches = [(0, 1000), (1000, 1), (1001, 2500)]
    add_input_files(tmp_path / "in", batches)
    run_available(
        input_stream(spark, tmp_path / "in"),
        table=TABLE,
        checkpoint_location=str(tmp_path / "ckpt"),
        create_table=True,
        catalog=catalog_config,
    )
    assert table_rows(catalog_config) == expected_rows(batches).to_pylist()
    table = open_catalog(catalog_config).load_table(TABLE)
    snapshots = sorted(table.metadata.snapshots, key=lambda s: s.sequence_number)
    assert [s.summary["icesink.max-committed-checkpoint-id"] for s in snapshots] == ["0", "1", "2"]
    assert len({s.summary["icesink.job-id"] for s in snapshots}) == 1


def test_restart_on_the_same_checkpoint_keeps_the_job_and_writes_each_row_once(
    spark: Any, catalog_config: CatalogConfig, tmp_path: Path
) -> None:
    first, second = [(0, 100), (100, 100)], [(200, 50)]
    add_input_files(tmp_path / "in", first)
    options = dict(table=TABLE, checkpoint_location=str(tmp_path / "ckpt"), create_table=True, catalog=catalog_config)
    run_available(input_stream(spark, tmp_path / "in"), **options)
    add_input_files(tmp_path / "in", second)
    run_available(input_stream(spark, tmp_path / "in"), **options)
    assert table_rows(catalog_config) == expected_rows(first + second).to_pylist()
    table = open_catalog(catalog_config).load_table(TABLE)
    assert len({s.summary["icesink.job-id"] for s in table.metadata.snapshots}) == 1
    assert table.current_snapshot().summary["icesink.max-committed-checkpoint-id"] == "2"


def test_a_stream_killed_while_recording_its_first_offset_starts_again(
    spark: Any, sqlite_catalog: CatalogConfig, tmp_path: Path
) -> None:
    """What a SIGKILL during Spark's first offset write leaves (seen in the fault tests): Spark 4 alone refuses
    to start from it ("should be empty on batch 0")."""
    offsets = tmp_path / "ckpt" / "offsets"
    offsets.mkdir(parents=True)
    (offsets / ".0.d5f2c086-2bc7-4482-9031-b307f8729b2c.tmp").write_bytes(b"")
    (offsets / "..0.d5f2c086-2bc7-4482-9031-b307f8729b2c.tmp.crc").write_bytes(b"")
    add_input_files(tmp_path / "in", [(0, 10)])
    options = dict(table=TABLE, checkpoint_location=str(tmp_path / "ckpt"), create_table=True, catalog=sqlite_catalog)
    run_available(input_stream(spark, tmp_path / "in"), **options)
    assert table_rows(sqlite_catalog) == expected_rows([(0, 10)]).to_pylist()


def test_partitioned_table_is_created_and_filled(spark: Any, catalog_config: CatalogConfig, tmp_path: Path) -> None:
    batches = [(0, 500), (500, 500)]
    add_input_files(tmp_path / "in", batches)
    run_available(
        input_stream(spark, tmp_path / "in"),
        table=TABLE,
        checkpoint_location=str(tmp_path / "ckpt"),
        create_table=True,
        partition_by=["day(ts)", "bucket(4, id)", "truncate(3, name)"],
        catalog=catalog_config,
    )
    table = open_catalog(catalog_config).load_table(TABLE)
    assert [str(f.transform) for f in table.spec().fields] == ["day", "bucket[4]", "truncate[3]"]
    assert table_rows(catalog_config) == expected_rows(batches).to_pylist()


def test_inline_committer_expires_snapshots_past_the_tables_retention(
    spark: Any, sqlite_catalog: CatalogConfig, tmp_path: Path
) -> None:
    first, second = [(0, 100), (100, 100)], [(200, 50), (250, 50)]
    add_input_files(tmp_path / "in", first)
    options: dict[str, Any] = dict(
        table=TABLE, checkpoint_location=str(tmp_path / "ckpt"), create_table=True, catalog=sqlite_catalog
    )
    run_available(input_stream(spark, tmp_path / "in"), **options)
    with open_catalog(sqlite_catalog).load_table(TABLE).transaction() as transaction:
        transaction.set_properties(
            {"history.expire.max-snapshot-age-ms": "1", "history.expire.min-snapshots-to-keep": "1"}
        )
    add_input_files(tmp_path / "in", second)
    run_available(input_stream(spark, tmp_path / "in"), expire_snapshots=True, **options)
    table = open_catalog(sqlite_catalog).load_table(TABLE)
    assert [s.summary["icesink.max-committed-checkpoint-id"] for s in table.metadata.snapshots] == ["3"]
    assert table_rows(sqlite_catalog) == expected_rows(first + second).to_pylist()
    with pytest.raises(ConfigError, match="expire_snapshots applies to the inline committer"):
        icesink.stream(input_stream(spark, tmp_path / "in"), committer="daemon", expire_snapshots=True, **options)


def test_daemon_mode_only_stages_until_the_committer_runs(
    spark: Any, catalog_config: CatalogConfig, tmp_path: Path
) -> None:
    from click.testing import CliRunner

    from icesink.cli import main

    add_input_files(tmp_path / "in", [(0, 10), (10, 10)])
    run_available(
        input_stream(spark, tmp_path / "in"),
        table=TABLE,
        checkpoint_location=str(tmp_path / "ckpt"),
        create_table=True,
        catalog=catalog_config,
        committer="daemon",
    )
    assert open_catalog(catalog_config).load_table(TABLE).current_snapshot() is None
    args = ["--catalog", catalog_config.name, "--uri", catalog_config.uri, "--warehouse", catalog_config.warehouse]
    result = CliRunner().invoke(main, [*args, "committer", "run", "--once"])
    assert result.exit_code == 0, result.output
    assert [r["id"] for r in table_rows(catalog_config)] == list(range(20))
    assert len(open_catalog(catalog_config).load_table(TABLE).metadata.snapshots) == 1  # both appends merged


def test_restart_below_the_tables_marker_is_an_error_naming_the_choice(
    spark: Any, catalog_config: CatalogConfig, tmp_path: Path
) -> None:
    """An older copy of the same checkpoint location (same Spark query id) rewinds the stream."""
    import shutil

    add_input_files(tmp_path / "in", [(0, 10)])
    options = dict(table=TABLE, create_table=True, catalog=catalog_config, job_id="orders-job")
    checkpoint = tmp_path / "ckpt"
    run_available(input_stream(spark, tmp_path / "in"), checkpoint_location=str(checkpoint), **options)
    shutil.copytree(checkpoint, tmp_path / "backup")
    add_input_files(tmp_path / "in", [(10, 10), (20, 10)])
    run_available(input_stream(spark, tmp_path / "in"), checkpoint_location=str(checkpoint), **options)
    shutil.rmtree(checkpoint)
    shutil.copytree(tmp_path / "backup", checkpoint)  # the operator restores an old backup
    with pytest.raises(Exception) as raised:
        run_available(input_stream(spark, tmp_path / "in"), checkpoint_location=str(checkpoint), **options)
    message = str(raised.value)
    assert "older copy of its checkpoint location" in message
    assert "checkpoint 2 of job orders-job" in message and "new job_id" in message
    assert [r["id"] for r in table_rows(catalog_config)] == list(range(30))


def test_null_in_a_required_column_fails_the_batch_and_commits_nothing_of_it(
    spark: Any, catalog_config: CatalogConfig, tmp_path: Path
) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    create_orders_table(catalog_config)  # id is required
    add_input_files(tmp_path / "in", [(0, 10)])
    bad = pa.table({"id": pa.array([100, None], pa.int64()), "name": ["a", "b"], "amount": [1.0, 2.0]})
    bad = bad.append_column("ts", pa.array([None, None], pa.timestamp("us", tz="UTC")))
    bad_file = tmp_path / "in" / "part-00001.parquet"
    pq.write_table(bad, bad_file)
    order_for_file_source(bad_file, 1)
    with pytest.raises(Exception) as raised:
        run_available(
            input_stream(spark, tmp_path / "in"),
            table=TABLE,
            checkpoint_location=str(tmp_path / "c"),
            catalog=catalog_config,
        )
    message = str(raised.value)
    assert "column 'id' is required" in message and "checkpoint 1" in message and TABLE in message
    assert [r["id"] for r in table_rows(catalog_config)] == list(range(10))


def test_unknown_table_without_create_table(spark: Any, catalog_config: CatalogConfig, tmp_path: Path) -> None:
    import icesink

    add_input_files(tmp_path / "in", [(0, 1)])
    with pytest.raises(TableNotFoundError, match=r"'shop\.missing' does not exist.*create_table=True"):
        icesink.stream(
            input_stream(spark, tmp_path / "in"),
            table="shop.missing",
            checkpoint_location=str(tmp_path / "c"),
            catalog=catalog_config,
        )
    assert not spark.streams.active


@pytest.mark.parametrize(
    ("schema", "message"),
    [
        ("name string, amount double, ts timestamp", "required column 'id'"),
        ("id string, name string, amount double, ts timestamp", "column 'id' is long in the table but string"),
        (
            "id long, name string, amount double, ts timestamp, extra int",
            r"DataFrame column 'extra' \(int\) is not in the table",
        ),
    ],
)
def test_dataframe_that_does_not_fit_the_table_is_refused_before_starting(
    spark: Any, catalog_config: CatalogConfig, tmp_path: Path, schema: str, message: str
) -> None:
    import icesink

    create_orders_table(catalog_config)
    add_input_files(tmp_path / "in", [(0, 1)])
    with pytest.raises(SchemaMismatchError, match=message):
        icesink.stream(
            input_stream(spark, tmp_path / "in", schema),
            table=TABLE,
            checkpoint_location=str(tmp_path / "c"),
            catalog=catalog_config,
        )
    assert not spark.streams.active


def test_narrower_types_and_missing_optional_columns_are_accepted(
    spark: Any, catalog_config: CatalogConfig, tmp_path: Path
) -> None:
    create_orders_table(catalog_config)
    add_input_files(tmp_path / "in", [(0, 5)])
    df = input_stream(spark, tmp_path / "in").selectExpr("CAST(id AS INT) AS id", "name")
    run_available(df, table=TABLE, checkpoint_location=str(tmp_path / "c"), catalog=catalog_config)
    assert table_rows(catalog_config) == [{"id": i, "name": f"name-{i}", "amount": None, "ts": None} for i in range(5)]


def test_batch_dataframe_is_refused(spark: Any, catalog_config: CatalogConfig, tmp_path: Path) -> None:
    import icesink

    with pytest.raises(NotStreamingError, match="not streaming"):
        icesink.stream(spark.range(3), table=TABLE, checkpoint_location=str(tmp_path / "c"), catalog=catalog_config)


def test_bad_catalog_uri_is_refused(spark: Any, tmp_path: Path) -> None:
    import icesink

    add_input_files(tmp_path / "in", [(0, 1)])
    with pytest.raises(ConfigError, match="not a database URL"):
        icesink.stream(
            input_stream(spark, tmp_path / "in"),
            table=TABLE,
            checkpoint_location=str(tmp_path / "c"),
            catalog={"uri": "definitely not a url", "warehouse": file_uri(tmp_path)},
        )


def test_streams_on_the_sessions_default_location_get_a_checkpoint_each(
    spark: Any, sqlite_catalog: CatalogConfig, tmp_path: Path
) -> None:
    """Without checkpoint_location, each stream gets a directory of its own under the session's default (named
    after its table), so two streams never share a checkpoint, and a restart resumes its own job."""
    other = "shop.returns ü %/x"
    add_input_files(tmp_path / "in", [(0, 10)])
    spark.conf.set("spark.sql.streaming.checkpointLocation", str(tmp_path / "default"))
    try:
        for table in (TABLE, other, TABLE):
            run_available(input_stream(spark, tmp_path / "in"), table=table, create_table=True, catalog=sqlite_catalog)
    finally:
        spark.conf.unset("spark.sql.streaming.checkpointLocation")
    assert sorted(p.name for p in (tmp_path / "default").iterdir()) == sorted(
        ["shop.orders", "shop.returns%20%C3%BC%20%25%2Fx"]
    )
    for table in (TABLE, other):
        assert len(table_rows(sqlite_catalog, table)) == 10, table
        snapshots = open_catalog(sqlite_catalog).load_table(table).metadata.snapshots
        assert len(snapshots) == 1, f"{table}: the restart wrote its checkpoint again"
