"""Upserts and CDC with a real Spark stream: the table always equals a plain-Python model of the changes."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest
from pyiceberg.manifest import ManifestContent

import icesink
from icesink.catalog.config import CatalogConfig
from icesink.catalog.loader import open_catalog
from tests.helpers.changes import (
    SPARK_CHANGE_SCHEMA,
    ChangeModel,
    random_checkpoint,
    sorted_rows,
    write_checkpoint_file,
)

pytestmark = pytest.mark.spark
TABLE = "shop.inventory"


def cdc_stream(spark: Any, directory: Path) -> Any:
    return spark.readStream.schema(SPARK_CHANGE_SCHEMA).option("maxFilesPerTrigger", 1).parquet(str(directory))


def run_cdc(spark: Any, config: CatalogConfig, tmp_path: Path, partition_by: list[str], **extra: Any) -> None:
    query = icesink.stream(
        cdc_stream(spark, tmp_path / "in"),
        table=TABLE,
        checkpoint_location=str(tmp_path / "ckpt"),
        trigger={"availableNow": True},
        create_table=True,
        partition_by=partition_by,
        equality_fields=["region", "id"],
        op_column="op",
        sequence_by="seq",
        catalog=config,
        **extra,
    )
    query.awaitTermination()


KEEP_EQUALITY_DELETES = {"icesink.equality-deletes.convert-at-commit": "false"}


def check_model_run(
    spark: Any,
    config: CatalogConfig,
    tmp_path: Path,
    partition_by: list[str],
    seed: int,
    table_properties: dict[str, str] | None = None,
) -> None:
    """Five random CDC checkpoints; after each, the table equals the model.

    By default the committer turns each checkpoint's equality deletes into
    position deletes in the same commit: no snapshot then holds an equality
    delete, and pyiceberg's own scan reads the table. With
    ``icesink.equality-deletes.convert-at-commit=false`` every snapshot carries
    the checkpoint's equality deletes.
    """
    rng = random.Random(seed)
    model = ChangeModel()
    keep = (table_properties or {}).get("icesink.equality-deletes.convert-at-commit") == "false"
    for checkpoint in range(5):
        changes = random_checkpoint(rng, checkpoint)
        write_checkpoint_file(tmp_path / "in", checkpoint, changes)
        model.apply(changes)
        run_cdc(spark, config, tmp_path, partition_by, table_properties=table_properties)
        assert sorted_rows(icesink.read(TABLE, catalog=config)) == model.expected(), (
            f"seed {seed}, checkpoint {checkpoint}"
        )
    table = open_catalog(config).load_table(TABLE)
    snapshots = sorted(table.metadata.snapshots, key=lambda s: s.sequence_number)
    assert [s.summary["icesink.max-committed-checkpoint-id"] for s in snapshots] == ["0", "1", "2", "3", "4"]
    if keep:
        assert all(int(s.summary["added-equality-delete-files"]) > 0 for s in snapshots)
    else:
        assert all(int(s.summary["total-equality-deletes"]) == 0 for s in snapshots)
        assert any(int(s.summary["added-position-deletes"] or 0) > 0 for s in snapshots)
        assert sorted_rows(table.scan().to_arrow()) == model.expected()  # pyiceberg reads it itself
    # The data files hold superseded rows too: only the deletes make the table equal the model.
    assert int(snapshots[-1].summary["total-records"]) > len(model.rows)
    assert table.schema().identifier_field_names() == {"region", "id"}


def test_cdc_stream_equals_the_model_on_each_catalog(spark: Any, catalog_config: CatalogConfig, tmp_path: Path) -> None:
    check_model_run(spark, catalog_config, tmp_path, [], seed=11)


def test_cdc_stream_keeping_equality_deletes_equals_the_model(
    spark: Any, sqlite_catalog: CatalogConfig, tmp_path: Path
) -> None:
    check_model_run(spark, sqlite_catalog, tmp_path, [], seed=13, table_properties=KEEP_EQUALITY_DELETES)


@pytest.mark.parametrize(
    "partition_by", [["region"], ["bucket(4, id)"], ["region", "bucket(2, id)"]], ids=["identity", "bucket", "both"]
)
def test_partitioned_cdc_stream_equals_the_model(
    spark: Any, sqlite_catalog: CatalogConfig, tmp_path: Path, partition_by: list[str]
) -> None:
    check_model_run(spark, sqlite_catalog, tmp_path, partition_by, seed=23)


def test_merged_manifests_keep_each_delete_applying_to_the_rows_it_deleted(
    spark: Any, sqlite_catalog: CatalogConfig, tmp_path: Path
) -> None:
    """Merging rewrites data and delete entries as EXISTING; their sequence numbers must not change."""
    merge_early = {"commit.manifest.min-count-to-merge": "3", **KEEP_EQUALITY_DELETES}
    check_model_run(spark, sqlite_catalog, tmp_path, ["region"], seed=31, table_properties=merge_early)
    table = open_catalog(sqlite_catalog).load_table(TABLE)
    manifests = table.current_snapshot().manifests(table.io)
    assert len(manifests) < 2 * len(table.metadata.snapshots)  # one data and one delete manifest per commit, merged
    merged = [m for m in manifests if m.existing_files_count]
    assert {m.content for m in merged} == {ManifestContent.DATA, ManifestContent.DELETES}


def test_plain_upsert_replaces_rows_by_key(spark: Any, sqlite_catalog: CatalogConfig, tmp_path: Path) -> None:
    """Without an op column every row replaces its key; without sequence_by the later input row wins."""
    changes = [
        {"region": "eu", "id": 1, "value": "a", "seq": 1, "op": "I"},
        {"region": "eu", "id": 2, "value": "b", "seq": 1, "op": "I"},
        {"region": "eu", "id": 1, "value": "a2", "seq": 1, "op": "I"},
    ]
    write_checkpoint_file(tmp_path / "in", 0, changes)
    df = cdc_stream(spark, tmp_path / "in").drop("op")
    options = dict(table=TABLE, checkpoint_location=str(tmp_path / "ckpt"), trigger={"availableNow": True})
    icesink.stream(
        df, create_table=True, equality_fields=["region", "id"], catalog=sqlite_catalog, **options
    ).awaitTermination()
    write_checkpoint_file(tmp_path / "in", 1, [{"region": "eu", "id": 2, "value": "b2", "seq": 0, "op": "I"}])
    # The table's identifier fields are the default key of a restarted stream.
    icesink.stream(cdc_stream(spark, tmp_path / "in").drop("op"), catalog=sqlite_catalog, **options).awaitTermination()
    assert sorted_rows(icesink.read(TABLE, catalog=sqlite_catalog)) == [
        {"region": "eu", "id": 1, "value": "a2", "seq": 1},
        {"region": "eu", "id": 2, "value": "b2", "seq": 0},
    ]


def test_time_travel_and_filters_see_the_state_of_their_snapshot(
    spark: Any, sqlite_catalog: CatalogConfig, tmp_path: Path
) -> None:
    write_checkpoint_file(
        tmp_path / "in", 0, [{"region": "eu", "id": i, "value": "old", "seq": 0, "op": "I"} for i in range(5)]
    )
    run_cdc(spark, sqlite_catalog, tmp_path, [])
    write_checkpoint_file(tmp_path / "in", 1, [{"region": "eu", "id": 3, "value": "new", "seq": 1, "op": "U"}])
    run_cdc(spark, sqlite_catalog, tmp_path, [])
    table = open_catalog(sqlite_catalog).load_table(TABLE)
    first = min(table.metadata.snapshots, key=lambda s: s.sequence_number)
    before = icesink.read(TABLE, snapshot_id=first.snapshot_id, catalog=sqlite_catalog)
    assert sorted(before.column("value").to_pylist()) == ["old"] * 5
    assert icesink.read(TABLE, row_filter="id = 3", catalog=sqlite_catalog).column("value").to_pylist() == ["new"]
    assert icesink.read(TABLE, row_filter="id >= 3", catalog=sqlite_catalog).num_rows == 2


def _bad(spark: Any, config: CatalogConfig, tmp_path: Path, **kwargs: Any) -> Any:
    options: dict[str, Any] = dict(
        table=TABLE,
        checkpoint_location=str(tmp_path / "ckpt"),
        trigger={"availableNow": True},
        create_table=True,
        equality_fields=["region", "id"],
        op_column="op",
        sequence_by="seq",
        catalog=config,
    )
    options.update(kwargs)
    return icesink.stream(cdc_stream(spark, tmp_path / "in"), **options)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (
            {"equality_fields": ["region", "nope"]},
            "equality field 'nope' is neither a column of the DataFrame nor a field inside",
        ),
        ({"sequence_by": "updated_at"}, "sequence_by column 'updated_at' is not a column of the DataFrame"),
        ({"op_column": "operation"}, "op_column 'operation' is not a column of the DataFrame"),
        ({"op_values": {"c": "create"}}, "use 'insert', 'update', 'delete' or 'skip'"),
        ({"partition_by": ["value"]}, "'value' is not among the equality fields"),
    ],
)
def test_bad_change_stream_settings_are_refused_before_starting(
    spark: Any, sqlite_catalog: CatalogConfig, tmp_path: Path, options: dict[str, Any], message: str
) -> None:
    from icesink.errors import ConfigError

    write_checkpoint_file(tmp_path / "in", 0, [{"region": "eu", "id": 1, "value": "a", "seq": 0, "op": "I"}])
    with pytest.raises(ConfigError, match=message):
        _bad(spark, sqlite_catalog, tmp_path, **options)
    assert not spark.streams.active


def test_float_equality_field_is_refused(spark: Any, sqlite_catalog: CatalogConfig, tmp_path: Path) -> None:
    from icesink.errors import ConfigError

    write_checkpoint_file(tmp_path / "in", 0, [{"region": "eu", "id": 1, "value": "a", "seq": 0, "op": "I"}])
    df = cdc_stream(spark, tmp_path / "in").selectExpr("CAST(id AS DOUBLE) AS score", "value")
    with pytest.raises(ConfigError, match="equality field 'score' is double; floating-point keys"):
        icesink.stream(
            df,
            table=TABLE,
            checkpoint_location=str(tmp_path / "c"),
            create_table=True,
            equality_fields=["score"],
            catalog=sqlite_catalog,
        )


@pytest.mark.parametrize(
    ("bad_change", "message"),
    [
        ({"region": "eu", "id": None, "value": "x", "seq": 5, "op": "U"}, "equality field 'id' is null in 1 row"),
        ({"region": "eu", "id": 7, "value": "x", "seq": 5, "op": "X"}, "unknown operation 'X'"),
    ],
)
def test_bad_rows_fail_the_batch_and_the_stream_resumes_once_the_data_is_fixed(
    spark: Any, sqlite_catalog: CatalogConfig, tmp_path: Path, bad_change: dict[str, Any], message: str
) -> None:
    good = [{"region": "eu", "id": i, "value": "v", "seq": 0, "op": "I"} for i in range(3)]
    write_checkpoint_file(tmp_path / "in", 0, good)
    _bad(spark, sqlite_catalog, tmp_path).awaitTermination()
    fixed = {**bad_change, "id": 7, "op": "U"}
    write_checkpoint_file(
        tmp_path / "in", 1, [{"region": "eu", "id": 0, "value": "gone", "seq": 1, "op": "D"}, bad_change]
    )
    with pytest.raises(Exception) as raised:
        _bad(spark, sqlite_catalog, tmp_path).awaitTermination()
    text = str(raised.value)
    assert message in text and TABLE in text and "checkpoint 1" in text
    assert sorted_rows(icesink.read(TABLE, catalog=sqlite_catalog)) == [
        {"region": "eu", "id": i, "value": "v", "seq": 0} for i in range(3)
    ]
    # The operator fixes the file in place; the restarted stream replays checkpoint 1.
    (tmp_path / "in" / "changes-00001.parquet").unlink()
    write_checkpoint_file(tmp_path / "in", 1, [{"region": "eu", "id": 0, "value": "gone", "seq": 1, "op": "D"}, fixed])
    _bad(spark, sqlite_catalog, tmp_path).awaitTermination()
    assert sorted_rows(icesink.read(TABLE, catalog=sqlite_catalog)) == [
        {"region": "eu", "id": 1, "value": "v", "seq": 0},
        {"region": "eu", "id": 2, "value": "v", "seq": 0},
        {"region": "eu", "id": 7, "value": "x", "seq": 5},
    ]
