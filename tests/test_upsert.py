"""Upserts and CDC with a real Spark stream: the table always equals a plain-Python model of the changes."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

import icesink
from icesink.catalog.config import CatalogConfig
from icesink.catalog.loader import open_catalog
from tests.changes import SPARK_CHANGE_SCHEMA, ChangeModel, random_checkpoint, sorted_rows, write_checkpoint_file

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


def check_model_run(spark: Any, config: CatalogConfig, tmp_path: Path, partition_by: list[str], seed: int) -> None:
    rng = random.Random(seed)
    model = ChangeModel()
    for checkpoint in range(5):
        changes = random_checkpoint(rng, checkpoint)
        write_checkpoint_file(tmp_path / "in", checkpoint, changes)
        model.apply(changes)
        run_cdc(spark, config, tmp_path, partition_by)
        assert sorted_rows(icesink.read(TABLE, catalog=config)) == model.expected(), (
            f"seed {seed}, checkpoint {checkpoint}"
        )
    table = open_catalog(config).load_table(TABLE)
    snapshots = sorted(table.metadata.snapshots, key=lambda s: s.sequence_number)
    assert [s.summary["icesink.max-committed-checkpoint-id"] for s in snapshots] == ["0", "1", "2", "3", "4"]
    assert all(int(s.summary["added-equality-delete-files"]) > 0 for s in snapshots)
    # The data files hold superseded rows too: only the deletes make the table equal the model.
    assert int(snapshots[-1].summary["total-records"]) > len(model.rows)
    assert table.schema().identifier_field_names() == {"region", "id"}


def test_cdc_stream_equals_the_model_on_each_catalog(spark: Any, catalog_config: CatalogConfig, tmp_path: Path) -> None:
    check_model_run(spark, catalog_config, tmp_path, [], seed=11)


@pytest.mark.parametrize(
    "partition_by", [["region"], ["bucket(4, id)"], ["region", "bucket(2, id)"]], ids=["identity", "bucket", "both"]
)
def test_partitioned_cdc_stream_equals_the_model(
    spark: Any, sqlite_catalog: CatalogConfig, tmp_path: Path, partition_by: list[str]
) -> None:
    check_model_run(spark, sqlite_catalog, tmp_path, partition_by, seed=23)
