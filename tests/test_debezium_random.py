"""Random Debezium histories (tests/helpers/debezium_history.py) through a real stream, against their model:
schemas that change at the source while records of several partitions interleave across micro-batches, values
at the edges of their types; read back by icesink, iceberg-rust and DuckDB, every value exact."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

import icesink
from icesink.catalog.config import CatalogConfig
from icesink.catalog.loader import open_catalog
from tests.helpers import debezium_history
from tests.helpers.debezium_fixture import KAFKA_SCHEMA, write_batches
from tests.helpers.outcomes import read_with_duckdb, read_with_iceberg_rust

# One seed a catalog in the suite; more with ICESINK_DEBEZIUM_SEEDS=100 (each takes a few seconds).
SEEDS = list(range(int(os.environ.get("ICESINK_DEBEZIUM_SEEDS", "1"))))


def rows_by_key(rows: list[dict[str, Any]], columns: list[str]) -> dict[int, dict[str, Any]]:
    return {r["id"]: {c: debezium_history.comparable(r.get(c)) for c in columns} for r in rows}


@pytest.mark.spark
@pytest.mark.parametrize("seed", SEEDS)
def test_a_random_history_equals_its_model_for_every_reader(
    spark: Any, catalog_config: CatalogConfig, tmp_path: Path, seed: int
) -> None:
    history = debezium_history.generate(seed)
    write_batches(tmp_path / "in", history.batches)
    events = spark.readStream.schema(KAFKA_SCHEMA).option("maxFilesPerTrigger", 1).json(str(tmp_path / "in"))
    icesink.stream(
        events,
        tables=icesink.debezium("app"),
        checkpoint_location=str(tmp_path / "ckpt"),
        trigger={"availableNow": True},
        catalog=catalog_config,
    ).awaitTermination()
    catalog = open_catalog(catalog_config)
    for identifier, model in history.model("app").items():
        if not catalog.table_exists(identifier):
            assert not model, f"seed {seed}: {identifier} was never created"
            continue
        table = catalog.load_table(identifier)
        columns = [f.name for f in table.schema().fields]
        expected = {key: {c: debezium_history.comparable(row.get(c)) for c in columns} for key, row in model.items()}
        ours = rows_by_key(icesink.read(identifier, catalog=catalog_config).to_pylist(), columns)
        assert ours == expected, f"seed {seed}, {identifier}, icesink's reader"
        rust = rows_by_key(read_with_iceberg_rust(catalog_config, identifier).to_pylist(), columns)
        assert rust == expected, f"seed {seed}, {identifier}, iceberg-rust"
        (duck,) = read_with_duckdb(table.metadata_location)
        assert rows_by_key(duck, ["id"]).keys() == expected.keys(), f"seed {seed}, {identifier}, DuckDB"
