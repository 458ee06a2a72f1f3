"""Readers nobody here wrote read what icesink committed: iceberg-rust (via DataFusion) and pyiceberg."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from icesink.catalog.config import CatalogConfig
from icesink.catalog.loader import open_catalog
from tests.streams import add_input_files, expected_rows, input_stream, run_available

pytestmark = [pytest.mark.interop, pytest.mark.spark]
TABLE = "shop.orders"


def read_with_iceberg_rust(metadata_location: str, where: str = "TRUE") -> pa.Table:
    """iceberg-rust's table provider in a DataFusion session."""
    from datafusion import SessionContext
    from pyiceberg.table import StaticTable

    provider = StaticTable.from_metadata(metadata_location)
    context = SessionContext()
    context.register_table("t", provider)
    return context.sql(f"SELECT id, name, amount, ts FROM t WHERE {where} ORDER BY id").to_arrow_table()


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

    rust = read_with_iceberg_rust(table.metadata_location)
    assert rust.num_rows == len(expected)
    assert [
        dict(zip(rust.column_names, r, strict=True)) for r in zip(*rust.to_pydict().values(), strict=True)
    ] == expected

    scanned = table.scan().to_arrow().sort_by("id").to_pylist()
    assert scanned == expected

    # Filters pushed into the readers use the bounds and partition values icesink wrote.
    some = read_with_iceberg_rust(table.metadata_location, "id < 10 AND name IS NOT NULL")
    assert some.column("id").to_pylist() == list(range(10))
    planned = list(table.scan(row_filter="id >= 1000").plan_files())
    assert sum(t.file.record_count for t in planned) >= 1234
    assert len(planned) < len(list(table.scan().plan_files()))
