"""Readers nobody here wrote read what icesink committed: iceberg-rust (via DataFusion) and pyiceberg."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from icesink.catalog.config import CatalogConfig
from icesink.catalog.loader import open_catalog
from tests.helpers.outcomes import iceberg_rust_sql, read_with_duckdb, read_with_iceberg_java
from tests.helpers.streams import add_input_files, expected_rows, input_stream, run_available

pytestmark = [pytest.mark.interop, pytest.mark.spark]
TABLE = "shop.orders"


def rust_orders(table: Any, where: str = "TRUE") -> pa.Table:
    return iceberg_rust_sql(table, f"SELECT id, name, amount, ts FROM t WHERE {where} ORDER BY id")


@pytest.mark.parametrize(
    "partition_by", [[], ["day(ts)", "bucket(4, id)", "truncate(2, name)"]], ids=["unpartitioned", "partitioned"]
)
def test_independent_readers_return_exactly_the_input(
    spark: Any, catalog_config: CatalogConfig, tmp_path: Path, partition_by: list[str]
) -> None:
    batches = [(0, 700), (700, 300), (1000, 1234)]
    add_input_files(tmp_path / "in", batches)
    run_available(
        input_stream(spark, tmp_path / "in"),
        table=TABLE,
        checkpoint_location=str(tmp_path / "ckpt"),
        create_table=True,
        partition_by=partition_by,
        catalog=catalog_config,
    )
    expected = expected_rows(batches).to_pylist()
    table = open_catalog(catalog_config).load_table(TABLE)

    rust = rust_orders(table)
    assert rust.num_rows == len(expected)
    assert [
        dict(zip(rust.column_names, r, strict=True)) for r in zip(*rust.to_pydict().values(), strict=True)
    ] == expected

    scanned = table.scan().to_arrow().sort_by("id").to_pylist()
    assert scanned == expected

    # Filters pushed into the readers use the bounds and partition values icesink wrote.
    some = rust_orders(table, "id < 10 AND name IS NOT NULL")
    assert some.column("id").to_pylist() == list(range(10))
    planned = list(table.scan(row_filter="id >= 1000").plan_files())
    assert sum(t.file.record_count for t in planned) >= 1234
    assert len(planned) < len(list(table.scan().plan_files()))


@pytest.mark.parametrize(
    ("partition_by", "keep"),
    [([], True), (["region", "bucket(4, id)"], False)],
    ids=["unpartitioned-equality-deletes", "partitioned-position-deletes"],
)
def test_independent_readers_apply_our_deletes_like_the_model(
    spark: Any, sqlite_catalog: CatalogConfig, tmp_path: Path, partition_by: list[str], keep: bool, java_reader: Path
) -> None:
    """iceberg-rust, Iceberg Java and DuckDB read the row deltas: equality deletes as the stream wrote them
    (Java also proves ``equality_ids`` are list<int>), and position deletes the committer resolved them into."""
    import random

    import icesink
    from tests.helpers.changes import ChangeModel, random_checkpoint, sorted_rows, write_checkpoint_file
    from tests.test_upsert import KEEP_EQUALITY_DELETES, run_cdc
    from tests.test_upsert import TABLE as CDC_TABLE

    rng = random.Random(5)
    model = ChangeModel()
    for checkpoint in range(4):
        changes = random_checkpoint(rng, checkpoint, keys=30, size=80)
        write_checkpoint_file(tmp_path / "in", checkpoint, changes)
        model.apply(changes)
    properties = KEEP_EQUALITY_DELETES if keep else {}
    run_cdc(spark, sqlite_catalog, tmp_path, partition_by, table_properties=properties)
    table = open_catalog(sqlite_catalog).load_table(CDC_TABLE)
    assert len(table.metadata.snapshots) == 4  # one row delta per checkpoint
    kind = "added-equality-delete-files" if keep else "added-position-delete-files"
    assert sum(int(s.summary[kind] or 0) for s in table.metadata.snapshots) > 0

    rust = iceberg_rust_sql(table, "SELECT region, id, value, seq FROM t")
    assert sorted_rows(rust) == model.expected()

    java = read_with_iceberg_java(java_reader, table.metadata_location, ["region", "id", "value", "seq"])
    assert sorted(java, key=lambda r: (r["region"], r["id"])) == model.expected()

    assert sorted_rows(icesink.read(table)) == model.expected()
    (duck,) = read_with_duckdb(table.metadata_location)
    assert sorted(duck, key=lambda r: (r["region"], r["id"])) == model.expected()
