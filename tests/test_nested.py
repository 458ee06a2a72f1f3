"""Structs, lists and maps, nested to any depth: written with a field id on every field, element, key and
value, read back by readers nobody here wrote, and evolved while a stream runs."""

from __future__ import annotations

import datetime
import decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import icesink
from icesink.catalog.config import CatalogConfig
from icesink.catalog.ledger import Ledger
from icesink.catalog.loader import open_catalog
from icesink.committer.commit import TableCommitter
from icesink.errors import BadRowError
from tests.helpers.outcomes import iceberg_rust_sql, read_many_with_iceberg_java, read_with_duckdb
from tests.helpers.support import add_input_file, stage_rows, write_files

UTC = datetime.UTC
# Names a user may pick: spaces, %, / and letters beyond ASCII in the table and in a nested field.
EVENTS = "shop.nested events ü %"
AT = "at time/ü %"

# The leaves of the table below, by the names Iceberg gives them (create_table numbers the fields afresh).
LEAVES = (
    "id",
    "payload.user.name",
    "payload.user.scores.element",
    "payload.amount",
    f"payload.{AT}",
    "tags.element",
    "attrs.key",
    "attrs.value",
)


def _ids(table: Any) -> dict[str, int]:
    """Field id of every field of the table, by its dotted name."""
    schema = table.schema()
    return {name: schema.find_field(name).field_id for name in schema._name_to_id}


def _events_schema() -> Any:
    from pyiceberg.schema import Schema
    from pyiceberg.types import (
        DecimalType,
        DoubleType,
        ListType,
        LongType,
        MapType,
        NestedField,
        StringType,
        StructType,
        TimestamptzType,
    )

    user = StructType(
        NestedField(11, "name", StringType(), required=True),
        NestedField(12, "scores", ListType(13, DoubleType(), element_required=False)),
    )
    payload = StructType(
        NestedField(5, "user", user),
        NestedField(6, "amount", DecimalType(12, 2)),
        NestedField(7, AT, TimestamptzType()),
    )
    return Schema(
        NestedField(1, "id", LongType(), required=True),
        NestedField(2, "payload", payload),
        NestedField(3, "tags", ListType(8, StringType(), element_required=True)),
        NestedField(4, "attrs", MapType(9, StringType(), 10, LongType(), value_required=False)),
    )


# Every shape that must survive: a null struct next to a struct of nulls, a null list next to an empty one,
# a null map next to an empty one, null elements and values, dates before 1970 and 1582.
ROWS: list[dict[str, Any]] = [
    {
        "id": 1,
        "payload": {
            "user": {"name": "ana", "scores": [1.5, None, -2.0]},
            "amount": decimal.Decimal("12.30"),
            AT: datetime.datetime(2024, 5, 1, 12, 0, tzinfo=UTC),
        },
        "tags": ["a", "b"],
        "attrs": [("k1", 1), ("k2", None)],
    },
    {"id": 2, "payload": None, "tags": None, "attrs": None},
    {"id": 3, "payload": {"user": None, "amount": None, AT: None}, "tags": [], "attrs": []},
    {
        "id": 4,
        "payload": {
            "user": {"name": "bö ü", "scores": []},
            "amount": decimal.Decimal("-0.01"),
            AT: datetime.datetime(1500, 1, 1, tzinfo=UTC),
        },
        "tags": ["z"],
        "attrs": [("", -5)],
    },
]


def _input_rows(rows: list[dict[str, Any]] = ROWS) -> pa.Table:
    """As Spark hands them over: its own names for nested fields, no field ids, everything nullable."""
    user = pa.struct([("name", pa.string()), ("scores", pa.list_(pa.float64()))])
    payload = pa.struct([("user", user), ("amount", pa.decimal128(12, 2)), (AT, pa.timestamp("us", tz="UTC"))])
    schema = pa.schema(
        [
            ("id", pa.int64()),
            ("payload", payload),
            ("tags", pa.list_(pa.string())),
            ("attrs", pa.map_(pa.string(), pa.int64())),
        ]
    )
    return pa.Table.from_pylist(rows, schema=schema)


def _expected(rows: list[dict[str, Any]] = ROWS) -> list[dict[str, Any]]:
    return sorted(rows, key=lambda r: r["id"])


def _plain(value: Any) -> Any:
    """One spelling of nested values across readers: decimals as text, timestamps as UTC ISO text."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, decimal.Decimal):
        return str(value)
    if isinstance(value, datetime.datetime):
        return value.astimezone(UTC).isoformat() if value.tzinfo else value.isoformat()
    return value


def _rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted((_plain(_maps_as_pairs(r)) for r in rows), key=lambda r: r["id"])


def _maps_as_pairs(row: dict[str, Any]) -> dict[str, Any]:
    attrs = row.get("attrs")
    if isinstance(attrs, dict):  # readers that hand maps over as dicts
        attrs = list(attrs.items())
    return {**row, "attrs": None if attrs is None else sorted((tuple(p) for p in attrs), key=lambda p: p[0])}


def _utc_payload_at(row: dict[str, Any]) -> dict[str, Any]:
    """Spark 3.5 prints timestamptz values as naive UTC text (its session zone)."""
    payload = row.get("payload")
    if payload and payload.get(AT):
        at = datetime.datetime.fromisoformat(payload[AT]).replace(tzinfo=UTC)
        row = {**row, "payload": {**payload, AT: at}}
    return row


def _create(config: CatalogConfig, identifier: str, schema: Any) -> Any:
    catalog = open_catalog(config)
    catalog.create_namespace_if_not_exists("shop")
    return catalog.create_table(identifier, schema=schema)


def _commit(config: CatalogConfig, identifier: str, rows: pa.Table, checkpoint_id: int = 0) -> Any:
    assert stage_rows(config, identifier, "job", checkpoint_id, rows)
    catalog = open_catalog(config)
    TableCommitter.of(config).commit_pending(identifier)
    return catalog.load_table(identifier)


# --- the Arrow writer, without Spark -------------------------------------------------------------------------------


def test_every_nested_field_element_key_and_value_carries_its_field_id(sqlite_catalog: CatalogConfig) -> None:
    table = _create(sqlite_catalog, EVENTS, _events_schema())
    result = write_files(table, EVENTS, "job", 0, _input_rows())
    (record,) = result.data_files
    schema = pq.read_schema(record.path.removeprefix("file://"))

    def ids(field: pa.Field) -> list[tuple[str, int]]:
        own = [(field.name, int(field.metadata[b"PARQUET:field_id"]))]
        kind = field.type
        if pa.types.is_struct(kind):
            return own + [i for child in kind for i in ids(child)]
        if pa.types.is_map(kind):
            return own + ids(kind.key_field) + ids(kind.item_field)
        if pa.types.is_list(kind):
            return own + ids(kind.value_field)
        return own

    field_id = _ids(table)
    names = [
        "id",
        "payload",
        "payload.user",
        "payload.user.name",
        "payload.user.scores",
        "payload.user.scores.element",
        "payload.amount",
        f"payload.{AT}",
        "tags",
        "tags.element",
        "attrs",
        "attrs.key",
        "attrs.value",
    ]
    assert [i for field in schema for i in ids(field)] == [(n.rsplit(".", 1)[-1], field_id[n]) for n in names]
    assert len(set(field_id.values())) == len(field_id)


def test_nested_metrics_are_per_leaf_with_bounds_outside_lists_and_maps_only(sqlite_catalog: CatalogConfig) -> None:
    table = _create(sqlite_catalog, EVENTS, _events_schema())
    (record,) = write_files(table, EVENTS, "job", 0, _input_rows()).data_files
    field_id = _ids(table)
    by_name = {fid: name for name, fid in field_id.items()}

    def named(metrics: dict[int, Any]) -> dict[str, Any]:
        return {by_name[fid]: value for fid, value in metrics.items()}

    # A struct leaf has a value per row, null where a struct above it is. List and map leaves count entries.
    values = [4, 4, 3, 4, 4, 3, 3, 3]
    nulls = [0, 2, 1, 2, 2, 0, 0, 1]
    assert named(record.value_counts) == dict(zip(LEAVES, values, strict=True))
    assert named(record.null_value_counts) == dict(zip(LEAVES, nulls, strict=True))
    bounded = {"id", "payload.user.name", "payload.amount", f"payload.{AT}"}
    assert set(named(record.lower_bounds)) == bounded == set(named(record.upper_bounds))
    assert named(record.lower_bounds)["payload.user.name"] == b"ana"
    assert named(record.upper_bounds)["payload.user.name"] == "bö ü".encode()
    assert set(named(record.column_sizes)) == set(LEAVES) and all(record.column_sizes.values())


def test_a_null_in_a_required_nested_field_names_its_path(sqlite_catalog: CatalogConfig) -> None:
    table = _create(sqlite_catalog, EVENTS, _events_schema())
    nameless = [{**ROWS[0], "payload": {**ROWS[0]["payload"], "user": {"name": None, "scores": None}}}]
    with pytest.raises(BadRowError, match=r"checkpoint 0, task 0: field 'payload.user.name' is required"):
        write_files(table, EVENTS, "job", 0, _input_rows(nameless))
    # Under a null struct, a required field may be null: the struct is.
    write_files(
        table, EVENTS, "job", 0, _input_rows([{**ROWS[0], "payload": {"user": None, "amount": None, AT: None}}])
    )
    null_tag = [{**ROWS[0], "tags": ["a", None]}]
    with pytest.raises(BadRowError, match=r"field 'tags.element' is required but 1 row"):
        write_files(table, EVENTS, "job", 0, _input_rows(null_tag))


def test_a_checkpoint_staged_under_an_older_schema_meets_nested_changes(sqlite_catalog: CatalogConfig) -> None:
    from pyiceberg.types import StringType

    from icesink.errors import SchemaMismatchError

    _create(sqlite_catalog, EVENTS, _events_schema())
    assert stage_rows(sqlite_catalog, EVENTS, "job", 0, _input_rows())
    catalog = open_catalog(sqlite_catalog)
    ledger = Ledger(sqlite_catalog)
    # A nested rename and a new optional nested field: the staged files still read correctly, by field id.
    with catalog.load_table(EVENTS).update_schema() as update:
        update.rename_column("payload.user.name", "login")
        update.add_column(("payload", "channel"), StringType())
    # A new required field in a struct the files have: they cannot hold it.
    with catalog.load_table(EVENTS).update_schema(allow_incompatible_changes=True) as update:
        update.add_column(("payload", "tenant"), StringType(), required=True)
    with pytest.raises(
        SchemaMismatchError, match=r"checkpoint 0.*field 'payload.tenant' is required now and its files"
    ):
        TableCommitter(catalog, sqlite_catalog, ledger).commit_pending(EVENTS, "job")
    assert catalog.load_table(EVENTS).current_snapshot() is None
    assert [c.checkpoint_id for c in ledger.pending(EVENTS, "job")] == [0]
    with catalog.load_table(EVENTS).update_schema() as update:
        update.make_column_optional("payload.tenant")
    TableCommitter(catalog, sqlite_catalog, ledger).commit_pending(EVENTS, "job")
    rows = sorted(icesink.read(EVENTS, catalog=sqlite_catalog).to_pylist(), key=lambda r: r["id"])
    assert [r["payload"] and r["payload"]["user"] for r in rows] == [
        {"login": "ana", "scores": [1.5, None, -2.0]},
        None,
        None,
        {"login": "bö ü", "scores": []},
    ]
    assert {(r["payload"] or {}).get("channel") for r in rows} == {None}
    assert {(r["payload"] or {}).get("tenant") for r in rows} == {None}


@pytest.mark.interop
def test_nested_rows_read_back_identically_by_every_reader(sqlite_catalog: CatalogConfig, java_reader: Path) -> None:
    _create(sqlite_catalog, EVENTS, _events_schema())
    events = _commit(sqlite_catalog, EVENTS, _input_rows())
    expected = _rows(_expected())
    assert _rows(icesink.read(events).to_pylist()) == expected
    assert _rows(events.scan().to_arrow().to_pylist()) == expected  # pyiceberg
    assert _rows(iceberg_rust_sql(events, "SELECT * FROM t").to_pylist()) == expected
    (duck,) = read_with_duckdb(events.metadata_location)
    assert _rows(duck) == expected
    (java,) = read_many_with_iceberg_java(java_reader, [(events.metadata_location, ["id", "payload", "tags", "attrs"])])
    assert _rows([_utc_payload_at(r) for r in java]) == expected
    # Pruning on a struct field: bounds of payload.amount let readers skip the file.
    assert events.scan(row_filter="payload.amount > 100").plan_files() == []
    assert len(list(events.scan(row_filter="payload.amount > 10").plan_files())) == 1


PEOPLE = "shop.people"
PEOPLE_DDL = "id long, payload struct<user: struct<name: string, score: int>, note: string>"
_PEOPLE_INPUT = pa.schema(
    [
        ("id", pa.int64()),
        (
            "payload",
            pa.struct([("user", pa.struct([("name", pa.string()), ("score", pa.int32())])), ("note", pa.string())]),
        ),
    ]
)


def _people(start: int, count: int) -> pa.Table:
    rows = [
        {"id": i, "payload": {"user": {"name": f"user {i}", "score": i}, "note": None if i % 2 else f"n{i}"}}
        for i in range(start, start + count)
    ]
    return pa.Table.from_pylist(rows, schema=_PEOPLE_INPUT)


@pytest.mark.spark
def test_a_nested_field_renamed_or_added_by_another_tool_keeps_its_field_id(
    spark: Any, sqlite_catalog: CatalogConfig, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from pyiceberg.types import StringType

    from icesink.errors import ConfigError
    from tests.helpers.support import wait_for

    source, checkpoint = tmp_path / "in", tmp_path / "ckpt"
    catalog = open_catalog(sqlite_catalog)

    def start(trigger: dict[str, Any], **options: Any) -> Any:
        df = spark.readStream.schema(PEOPLE_DDL).option("maxFilesPerTrigger", 1).parquet(str(source))
        return icesink.stream(
            df, table=PEOPLE, checkpoint_location=str(checkpoint), trigger=trigger, catalog=sqlite_catalog, **options
        )

    def committed(count: int) -> bool:
        snapshot = catalog.load_table(PEOPLE).current_snapshot()
        return snapshot is not None and int(snapshot.summary["total-records"]) == count

    add_input_file(source, _people(0, 3))
    with pytest.raises(ConfigError, match=r"writer='spark' cannot write this stream: column\(s\) 'payload' are nested"):
        start({"availableNow": True}, create_table=True, writer="spark").awaitTermination()
    caplog.set_level("INFO", logger="icesink.stream")
    query = start({"processingTime": "200 milliseconds"}, create_table=True, evolve_schema=True)
    try:
        wait_for(lambda: committed(3), "the first micro-batch")
        assert "icesink's Arrow writer (column(s) 'payload' are nested" in caplog.text
        with catalog.load_table(PEOPLE).update_schema() as update:
            update.rename_column("payload.user.name", "full name")
            update.add_column(("payload", "user", "email"), StringType())
        add_input_file(source, _people(3, 3))
        wait_for(lambda: committed(6), "the micro-batch after the rename")
        with catalog.load_table(PEOPLE).update_schema() as update:
            update.delete_column("payload.user.score")
        add_input_file(source, _people(6, 3))
        with pytest.raises(Exception) as stopped:
            query.awaitTermination(120)
    finally:
        query.stop()
    assert "field 'payload.user.score' (field id" in str(stopped.value)
    assert "which this stream writes, was dropped from the table by someone else" in str(stopped.value)
    assert committed(6)

    user = catalog.load_table(PEOPLE).schema().find_field("payload.user").field_type
    assert [f.name for f in user.fields] == ["full name", "email"]  # no field re-created under the old name
    rows = sorted(icesink.read(PEOPLE, catalog=sqlite_catalog).to_pylist(), key=lambda r: r["id"])
    assert [r["payload"]["user"] for r in rows] == [{"full name": f"user {i}", "email": None} for i in range(6)]
    assert [r["payload"]["note"] for r in rows] == [None if i % 2 else f"n{i}" for i in range(6)]


# --- keys inside a struct ------------------------------------------------------------------------------------------


def test_evolution_adds_fields_to_structs_inside_lists_and_maps(sqlite_catalog: CatalogConfig) -> None:
    """What the README promises for evolve_schema, without Spark: plan, commit, plan again."""
    from pyiceberg.schema import Schema
    from pyiceberg.types import ListType, LongType, MapType, NestedField, StringType, StructType
    from pyspark.sql import types as st

    from icesink.iceberg.schemas import AddColumn, WidenColumn, apply_schema_changes
    from icesink.sink.projection import plan_schema

    item = StructType(NestedField(4, "qty", LongType()))
    note = StructType(NestedField(6, "text", StringType()))
    schema = Schema(
        NestedField(1, "id", LongType(), required=True),
        NestedField(2, "items", ListType(3, item)),
        NestedField(7, "notes", MapType(8, StringType(), 5, note)),
    )
    table = _create(sqlite_catalog, "shop.baskets", schema)
    item_in = st.StructType([st.StructField("qty", st.LongType()), st.StructField("sku €/%", st.StringType())])
    note_in = st.StructType([st.StructField("text", st.StringType()), st.StructField("n", st.IntegerType())])
    frame = st.StructType(
        [
            st.StructField("id", st.LongType()),
            st.StructField("items", st.ArrayType(item_in)),
            st.StructField("notes", st.MapType(st.StringType(), note_in)),
        ]
    )
    plan = plan_schema(frame, table.schema(), "shop.baskets")
    assert plan.projection is None
    assert [(type(c), c.path) for c in plan.changes] == [
        (AddColumn, "items.element.sku €/%"),
        (AddColumn, "notes.value.n"),
    ]
    assert not any(isinstance(c, WidenColumn) for c in plan.changes)
    table = apply_schema_changes(table, plan.changes)
    table = open_catalog(sqlite_catalog).load_table("shop.baskets")
    assert [f.name for f in table.schema().find_field("items.element").field_type.fields] == ["qty", "sku €/%"]
    assert [f.name for f in table.schema().find_field("notes.value").field_type.fields] == ["text", "n"]
    again = plan_schema(frame, table.schema(), "shop.baskets")
    assert again.changes == () and again.projection is not None
    assert [c.plan.kind for c in again.projection.columns] == ["same", "same", "same"]
