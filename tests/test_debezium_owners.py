"""One source table, one target table, for the life of the stream and beyond: a second source table routed to a
table (in a later micro-batch, after a restart, from another stream) is refused before anything is written."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import icesink
from icesink.catalog.config import CatalogConfig
from icesink.catalog.ledger import Ledger
from icesink.catalog.loader import open_catalog
from icesink.errors import ConfigError
from icesink.properties import SOURCE_PROPERTY
from tests.helpers.debezium_fixture import KAFKA_SCHEMA, record, write_batches

FIELDS = [{"type": "int32", "optional": False, "field": "id"}, {"type": "string", "optional": True, "field": "v"}]


def run(spark: Any, config: CatalogConfig, source: Path, checkpoint: Path, spec: Any) -> None:
    events = spark.readStream.schema(KAFKA_SCHEMA).option("maxFilesPerTrigger", 1).json(str(source))
    icesink.stream(
        events, tables=spec, checkpoint_location=str(checkpoint), trigger={"availableNow": True}, catalog=config
    ).awaitTermination()


def ids(config: CatalogConfig, identifier: str) -> list[tuple[int, str]]:
    return sorted((r["id"], r["v"]) for r in icesink.read(identifier, catalog=config).to_pylist())


@pytest.mark.spark
def test_a_second_source_table_for_one_table_is_refused_in_a_later_micro_batch_a_restart_and_another_stream(
    spark: Any, sqlite_catalog: CatalogConfig, tmp_path: Path
) -> None:
    batches = [
        [record("db.public.customers", p, 0, {"id": p + 1}, {"id": p + 1, "v": "public"}, FIELDS) for p in (0, 1)],
        [
            record("db.sales.customers", 0, 0, {"id": 1}, {"id": 1, "v": "sales"}, FIELDS),
            record("db.sales.customers", 1, 0, {"id": 2}, None, FIELDS, op="d"),
        ],
    ]
    write_batches(tmp_path / "in", batches)
    message = (
        r"table inv.customers: source tables public.customers and sales.customers both go there; nothing of the "
        r"micro-batch was written. Map each to a table of its own: icesink.debezium\(\.\.\., tables=\{"
        r"'public.customers': '\.\.\.', 'sales.customers': '\.\.\.'\}\) The table belongs to source table "
        r"public.customers \(schema public, table customers\)"
    )
    with pytest.raises(Exception, match=message):
        run(spark, sqlite_catalog, tmp_path / "in", tmp_path / "ckpt", icesink.debezium("inv"))
    assert ids(sqlite_catalog, "inv.customers") == [(1, "public"), (2, "public")]  # sales' rows never came
    table = open_catalog(sqlite_catalog).load_table("inv.customers")
    assert json.loads(table.properties[SOURCE_PROPERTY]) == {
        "connector": None,
        "database": None,
        "schema": "public",
        "table": "customers",
    }
    # A restart of the stream, and another stream reading only sales' records: refused alike, nothing staged.
    with pytest.raises(Exception, match=message):
        run(spark, sqlite_catalog, tmp_path / "in", tmp_path / "ckpt", icesink.debezium("inv"))
    write_batches(tmp_path / "sales", [batches[1]])
    with pytest.raises(Exception, match=message):
        run(spark, sqlite_catalog, tmp_path / "sales", tmp_path / "other", icesink.debezium("inv"))
    assert [r.checkpoint_id for r in Ledger(sqlite_catalog).for_table("inv.customers")] == [0]
    assert ids(sqlite_catalog, "inv.customers") == [(1, "public"), (2, "public")]
    # The mapping the message names separates them.
    mapping = {"sales.customers": "inv.sales_customers"}
    run(spark, sqlite_catalog, tmp_path / "in", tmp_path / "ckpt", icesink.debezium("inv", tables=mapping))
    assert ids(sqlite_catalog, "inv.sales_customers") == [(1, "sales")]
    assert ids(sqlite_catalog, "inv.customers") == [(1, "public"), (2, "public")]


@pytest.mark.spark
def test_a_dot_in_a_source_table_name_keeps_its_prefix_and_old_tables_get_their_owner_on_first_use(
    spark: Any, sqlite_catalog: CatalogConfig, tmp_path: Path
) -> None:
    """Source table ``a.b`` goes to ``inv.a.b`` (table b of namespace inv.a), never to ``inv.b``, which source
    table ``b`` takes; a table an earlier release created (no owner recorded) belongs to its first source."""
    from pyiceberg.schema import Schema
    from pyiceberg.types import IntegerType, NestedField, StringType

    catalog = open_catalog(sqlite_catalog)
    catalog.create_namespace("inv")
    catalog.create_table(
        "inv.old",
        Schema(
            NestedField(1, "id", IntegerType(), required=True),
            NestedField(2, "v", StringType()),
            identifier_field_ids=[1],
        ),
    )
    dotted = record("db.public.x", 0, 0, {"id": 1}, {"id": 1, "v": "dotted"}, FIELDS)
    dotted["value"] = dotted["value"].replace('"table": "x"', '"table": "a.b"')
    batch = [
        dotted,
        record("db.public.b", 0, 1, {"id": 2}, {"id": 2, "v": "plain"}, FIELDS),
        record("db.public.old", 0, 2, {"id": 3}, {"id": 3, "v": "old"}, FIELDS),
    ]
    write_batches(tmp_path / "in", [batch])
    run(spark, sqlite_catalog, tmp_path / "in", tmp_path / "ckpt", icesink.debezium("inv"))
    assert ids(sqlite_catalog, "inv.a.b") == [(1, "dotted")]
    assert ids(sqlite_catalog, "inv.b") == [(2, "plain")]
    assert ids(sqlite_catalog, "inv.old") == [(3, "old")]
    owner = json.loads(open_catalog(sqlite_catalog).load_table("inv.old").properties[SOURCE_PROPERTY])
    assert (owner["schema"], owner["table"]) == ("public", "old")


def test_the_source_property_is_icesinks_own() -> None:
    with pytest.raises(ConfigError, match=r"'icesink\.debezium\.source' is icesink's own"):
        icesink.debezium("inv", table_properties={SOURCE_PROPERTY: "{}"})


@pytest.mark.spark
def test_mapping_keys_that_match_nothing_are_said_once_and_listed(
    spark: Any, sqlite_catalog: CatalogConfig, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A typo in tables= or partition_by routed rows to a default-named, unpartitioned table without a word."""
    from tests.test_cli import invoke

    batches = [
        [record("db.public.customers", 0, n, {"id": n}, {"id": n, "v": "c"}, FIELDS) for n in (0, 1)],
        [record("db.public.orders", 0, 0, {"id": 5}, {"id": 5, "v": "o"}, FIELDS)],
    ]
    write_batches(tmp_path / "in", batches)
    spec = icesink.debezium(
        "inv",
        tables={"public.customer": "inv.clients", "public.orders": "inv.orders"},
        partition_by={"inv.custmers": ["bucket(4, id)"], "inv.orders": ["bucket(2, id)"]},
    )
    run(spark, sqlite_catalog, tmp_path / "in", tmp_path / "ckpt", spec)
    # Once each, for the keys that nearly match what came; not for those whose source came later.
    said = sorted(r.getMessage() for r in caplog.records if "misspelt" in r.getMessage())
    assert len(said) == 2, said
    assert "partition_by key 'inv.custmers' names no table the stream writes, and it writes 'inv.customers'" in said[0]
    assert "tables= key 'public.customer' matches no source table, and source table 'public.customers' came" in said[1]
    code, output = invoke(sqlite_catalog, "tables", "mappings", "--json")
    assert code == 0, output
    listed = {(r["option"], r["key"]): r["matched"] for r in json.loads(output)}
    assert listed == {
        ("tables", "public.customer"): None,
        ("tables", "public.orders"): "public.orders",
        ("partition_by", "inv.custmers"): None,
        ("partition_by", "inv.orders"): "public.orders",
    }
    code, output = invoke(sqlite_catalog, "tables", "mappings", "--unmatched")
    assert code == 0 and "public.customer " in output and "inv.custmers" in output and "inv.orders" not in output
    assert ids(sqlite_catalog, "inv.customers") == [(0, "c"), (1, "c")]  # where the typo sent them
    assert open_catalog(sqlite_catalog).load_table("inv.orders").spec().fields[0].name == "id_bucket"
