"""Values never change on the way in: a Debezium micro-batch holding several Connect schemas of one table, on
topics of several partitions, and values their columns cannot hold, judged by Iceberg Java, iceberg-rust and
DuckDB."""

from __future__ import annotations

import base64
import decimal
import json
import struct
from pathlib import Path
from typing import Any

import pytest

import icesink
from icesink.catalog.config import CatalogConfig
from icesink.catalog.ledger import Ledger
from icesink.catalog.loader import open_catalog
from icesink.errors import BadRowError
from tests.helpers.debezium_fixture import record, run_stream, write_batches
from tests.helpers.outcomes import read_many_with_iceberg_java, read_with_duckdb, read_with_iceberg_rust

D = decimal.Decimal
ID = {"type": "int32", "optional": False, "field": "id"}


def numeric(column: str, precision: int, scale: int) -> dict[str, Any]:
    parameters = {"scale": str(scale), "connect.decimal.precision": str(precision)}
    return {
        "type": "bytes",
        "optional": True,
        "name": "org.apache.kafka.connect.data.Decimal",
        "parameters": parameters,
        "field": column,
    }


def unscaled(value: D, scale: int) -> str:
    number = int(value.scaleb(scale))
    return base64.b64encode(number.to_bytes(max(1, (number.bit_length() + 8) // 8), "big", signed=True)).decode()


def as_float32(value: float) -> float:
    return float(struct.unpack("f", struct.pack("f", value))[0])


def every_reader(config: CatalogConfig, java_reader: Path, identifiers: list[str]) -> list[list[Any]]:
    """The tables' rows as each of Iceberg Java (one JVM for all), DuckDB and iceberg-rust reads them: for each
    reader, one list of rows per table."""
    catalog = open_catalog(config)
    locations = [catalog.load_table(i).metadata_location for i in identifiers]
    columns = [[f.name for f in catalog.load_table(i).schema().fields] for i in identifiers]
    java = read_many_with_iceberg_java(
        java_reader, [(loc, cols, {}) for loc, cols in zip(locations, columns, strict=True)]
    )
    duck = read_with_duckdb(*locations)
    rust = [read_with_iceberg_rust(config, i).to_pylist() for i in identifiers]
    return [java, duck, rust]


def by_id(rows: list[dict[str, Any]], column: str, kind: type) -> dict[int, Any]:
    return {r["id"]: (kind(str(r[column])) if r[column] is not None else None) for r in rows}


@pytest.mark.spark
@pytest.mark.interop
def test_two_types_of_one_column_in_a_micro_batch_keep_every_value_for_every_reader(
    spark: Any, sqlite_catalog: CatalogConfig, tmp_path: Path, java_reader: Path
) -> None:
    """Two tables' first micro-batch, each column altered at the source within it:

    * numeric(10,4), then ALTER ... TYPE numeric(10,2): the table takes the type that holds both (12 digits, 4
      after the point), and 5.6789 stays 5.6789 (it was rounded to 5.68);
    * real, then ALTER ... TYPE double precision, the new double at partition 0 and older reals at partition 1:
      the column is a double; a real keeps its exact value (the one Iceberg gives a float widened to double),
      the double every digit (it was narrowed to a float).
    """
    wide, narrow = [ID, numeric("amt", 10, 4)], [ID, numeric("amt", 10, 2)]
    real = [ID, {"type": "float", "optional": True, "field": "x"}]
    double = [ID, {"type": "double", "optional": True, "field": "x"}]
    payments, readings = "db.public.payments", "db.public.readings"
    batch = [
        record(payments, 0, 0, {"id": 1}, {"id": 1, "amt": unscaled(D("5.6789"), 4)}, wide),
        record(payments, 0, 1, {"id": 2}, {"id": 2, "amt": unscaled(D("1.00"), 2)}, narrow),
        record(payments, 1, 0, {"id": 3}, {"id": 3, "amt": unscaled(D("99999999.99"), 2)}, narrow),
        record(readings, 0, 50, {"id": 1}, {"id": 1, "x": 2.000000000001}, double),
        record(readings, 1, 0, {"id": 2}, {"id": 2, "x": 1.1}, real),
        record(readings, 1, 1, {"id": 3}, {"id": 3, "x": 3.4028234663852886e38}, real),
    ]
    write_batches(tmp_path / "in", [batch])
    run_stream(spark, sqlite_catalog, tmp_path, icesink.debezium("app"))
    catalog = open_catalog(sqlite_catalog)
    assert str(catalog.load_table("app.payments").schema().find_field("amt").field_type) == "decimal(12, 4)"
    assert str(catalog.load_table("app.readings").schema().find_field("x").field_type) == "double"
    amounts = {1: D("5.6789"), 2: D("1.0000"), 3: D("99999999.9900")}
    xs = {1: 2.000000000001, 2: as_float32(1.1), 3: 3.4028234663852886e38}
    for payment_rows, reading_rows in every_reader(sqlite_catalog, java_reader, ["app.payments", "app.readings"]):
        assert by_id(payment_rows, "amt", D) == amounts
        assert {r["id"]: float(r["x"]) for r in reading_rows} == xs


@pytest.mark.spark
def test_an_older_schema_on_another_partition_cannot_narrow_a_column(
    spark: Any, sqlite_catalog: CatalogConfig, tmp_path: Path
) -> None:
    """The source widens numeric(10,2) to numeric(12,4); the new 1.2345 at partition 0, offset 100, arrives with
    an older 2.50 at partition 1, offset 0. The table's scale is 2, which Iceberg cannot change: refused, naming
    the column, both types and a record of each, and nothing of the micro-batch is committed (1.2345 was rounded
    to 1.23 before)."""
    topic = "db.public.payments"
    old, new = [ID, numeric("amt", 10, 2)], [ID, numeric("amt", 12, 4)]
    batches = [
        [record(topic, 1, 0, {"id": 9}, {"id": 9, "amt": unscaled(D("7.25"), 2)}, old)],
        [
            record(topic, 0, 100, {"id": 1}, {"id": 1, "amt": unscaled(D("1.2345"), 4)}, new),
            record(topic, 1, 1, {"id": 2}, {"id": 2, "amt": unscaled(D("2.50"), 2)}, old),
        ],
    ]
    write_batches(tmp_path / "in", batches)
    message = (
        r"table app.payments, checkpoint 1: column 'amt' is decimal\(10, 2\) in the table.*"
        r"decimal\(12,4\) from topic db.public.payments, partition 0, offset 100.*"
        r"decimal\(10,2\) from topic db.public.payments, partition 1, offset 1"
    )
    with pytest.raises(Exception, match=message) as raised:
        run_stream(spark, sqlite_catalog, tmp_path, icesink.debezium("app"))
    assert "Traceback" not in _icesink_error(raised.value), _icesink_error(raised.value)
    assert icesink.read("app.payments", catalog=sqlite_catalog).to_pylist() == [{"id": 9, "amt": D("7.25")}]
    assert [r.checkpoint_id for r in Ledger(sqlite_catalog).for_table("app.payments")] == [0]
    # A restart meets the table for the first time in its run: the same account of it.
    with pytest.raises(Exception, match=message.replace(", checkpoint 1", "")):
        run_stream(spark, sqlite_catalog, tmp_path, icesink.debezium("app"))


@pytest.mark.spark
def test_a_decimal_wider_than_its_column_goes_to_the_dead_letter_table_or_stops_naming_it(
    spark: Any, sqlite_catalog: CatalogConfig, tmp_path: Path
) -> None:
    """12345.67 under numeric(5,2) (and 1.234 under its scale of 2): not a value of its column. With a dead-letter
    table it goes there and the rest is committed; without, the stream stops naming the table, column, value and
    record, and nothing is committed, on every restart."""
    topic = "db.public.prices"
    fields = [ID, numeric("p", 5, 2)]
    batch = [
        record(topic, 0, 0, {"id": 1}, {"id": 1, "p": unscaled(D("123.45"), 2)}, fields),
        record(topic, 1, 7, {"id": 2}, {"id": 2, "p": unscaled(D("12345.67"), 2)}, fields),
    ]
    write_batches(tmp_path / "in", [batch])
    message = (
        r"topic db.public.prices, partition 1, offset 7: table app.prices \(source public.prices\): column 'p' "
        r"holds '[^']+', which is 12345.67, more digits than its type decimal\(5, 2\) holds"
    )
    for _ in range(2):  # a restart meets the same record, and says the same
        with pytest.raises(Exception, match=message) as raised:
            run_stream(spark, sqlite_catalog, tmp_path, icesink.debezium("app"))
        assert "Traceback" not in _icesink_error(raised.value)
        assert Ledger(sqlite_catalog).for_table("app.prices") == []
    run_stream(spark, sqlite_catalog, tmp_path, icesink.debezium("app", dead_letter="ops.rejected"))
    assert icesink.read("app.prices", catalog=sqlite_catalog).to_pylist() == [{"id": 1, "p": D("123.45")}]
    (rejected,) = icesink.read("ops.rejected", catalog=sqlite_catalog).to_pylist()
    assert (rejected["partition"], rejected["offset"]) == (1, 7)
    assert json.loads(rejected["value"]) == json.loads(batch[1]["value"])
    assert "column 'p'" in rejected["error"] and "decimal(5, 2)" in rejected["error"]


@pytest.mark.spark
def test_a_value_without_a_schema_is_typed_by_its_column_exactly_or_set_aside(
    spark: Any, sqlite_catalog: CatalogConfig, tmp_path: Path
) -> None:
    """Schemas disabled: the table's decimal(10, 2) column takes 1.5 and 20 but not 1.2345, and its int column
    not 2.5; digits past a double's are kept. Without a dead-letter table the stream stops naming the record; with
    one, those records go there, the others are committed."""
    from pyiceberg.schema import Schema
    from pyiceberg.types import DecimalType, IntegerType, NestedField

    catalog = open_catalog(sqlite_catalog)
    catalog.create_namespace("app")
    schema = Schema(
        NestedField(1, "id", IntegerType(), required=True),
        NestedField(2, "amt", DecimalType(30, 2)),
        NestedField(3, "n", IntegerType()),
        identifier_field_ids=[1],
    )
    catalog.create_table("app.notes", schema)
    topic = "db.public.notes"
    fine = [
        record(topic, 0, 0, {"id": 1}, {"id": 1, "amt": "1.5", "n": 4}, None),
        record(topic, 0, 1, {"id": 2}, {"id": 2, "amt": "20", "n": None}, None),
        record(topic, 0, 2, {"id": 3}, {"id": 3, "amt": "1234567890123456789012.25", "n": 1}, None),
    ]
    for row in fine:  # numbers, not strings, as a schemaless JSON converter writes them
        row["value"] = row["value"].replace('"amt": "', '"amt": ').replace('", "n"', ', "n"')
    bad = [
        record(topic, 1, 3, {"id": 4}, {"id": 4, "amt": 0, "n": 1}, None),
        record(topic, 1, 4, {"id": 5}, {"id": 5, "amt": 0, "n": 2.5}, None),
    ]
    bad[0]["value"] = bad[0]["value"].replace('"amt": 0', '"amt": 1.2345')
    write_batches(tmp_path / "in", [fine + bad])
    # The two records may be in two tasks: whichever fails first is named.
    first = r"offset 3: column 'amt' holds 1.2345, which has more than 2 digit\(s\) after the point"
    second = r"offset 4: column 'n' holds 2.5, which int cannot hold: it is not a whole number"
    with pytest.raises(
        Exception,
        match=rf"table app.notes, checkpoint 0: the record at topic db.public.notes, partition 1, ({first}|{second})",
    ) as raised:
        run_stream(spark, sqlite_catalog, tmp_path, icesink.debezium("app"))
    error = icesink.error_of(raised.value)  # raised in a write task of the one Spark job for every table
    assert isinstance(error, BadRowError)
    assert (error.table, error.checkpoint_id) == ("app.notes", 0)
    assert Ledger(sqlite_catalog).for_table("app.notes") == []
    run_stream(spark, sqlite_catalog, tmp_path, icesink.debezium("app", dead_letter="ops.rejected"))
    rows = sorted(icesink.read("app.notes", catalog=sqlite_catalog).to_pylist(), key=lambda r: r["id"])
    assert rows == [
        {"id": 1, "amt": D("1.50"), "n": 4},
        {"id": 2, "amt": D("20.00"), "n": None},
        {"id": 3, "amt": D("1234567890123456789012.25"), "n": 1},
    ]
    rejected = sorted(icesink.read("ops.rejected", catalog=sqlite_catalog).to_pylist(), key=lambda r: r["offset"])
    assert [(r["offset"], r["value"]) for r in rejected] == [
        (3, bad[0]["value"].encode()),
        (4, bad[1]["value"].encode()),
    ]
    assert "column 'n' holds 2.5" in rejected[1]["error"]


@pytest.mark.spark
def test_a_key_whose_changes_move_to_another_partition_is_applied_in_source_order(
    spark: Any, sqlite_catalog: CatalogConfig, tmp_path: Path
) -> None:
    """Its key's type changed (int32 to int64), so its bytes and its Kafka partition did: the newest change, on
    partition 0 at offset 0, came after the older ones on partition 1; PostgreSQL's source.sequence orders them."""
    topic = "db.public.items"
    fields = [ID, {"type": "string", "optional": True, "field": "state"}]

    def change(partition: int, offset: int, key: int, state: str | None, lsn: int, op: str) -> dict[str, Any]:
        one = record(topic, partition, offset, {"id": key}, {"id": key, "state": state} if state else None, fields, op)
        value = json.loads(one["value"])
        value["payload"]["source"]["sequence"] = json.dumps([str(lsn - 1), str(lsn)])
        one["value"] = json.dumps(value)
        return one

    batch = [
        change(0, 0, 1, "v3-newest", 300, "u"),
        change(0, 1, 2, None, 310, "d"),
        change(1, 0, 1, "v1", 100, "c"),
        change(1, 1, 1, "v2", 200, "u"),
        change(1, 2, 2, "alive", 210, "c"),
    ]
    write_batches(tmp_path / "in", [batch])
    run_stream(spark, sqlite_catalog, tmp_path, icesink.debezium("app"))
    assert icesink.read("app.items", catalog=sqlite_catalog).to_pylist() == [{"id": 1, "state": "v3-newest"}]


@pytest.mark.spark
def test_a_micro_batch_of_rejected_records_only_goes_to_the_dead_letter_table(
    spark: Any, sqlite_catalog: CatalogConfig, tmp_path: Path
) -> None:
    """A lone truncate, or a micro-batch of records without schemas that their decimal column cannot read
    (Debezium's base64 of a decimal; digits that may be base64 too): no source table, only rejects."""
    fields = [ID, numeric("amt", 12, 2)]
    topic = "db.public.prices"
    truncate = record(topic, 0, 1, {"id": 1}, None, fields, op="t")
    batches = [
        [record(topic, 0, 0, {"id": 1}, {"id": 1, "amt": unscaled(D("1.50"), 2)}, fields)],
        [truncate],
        [
            record(topic, 0, 2, {"id": 2}, {"id": 2, "amt": "MDk="}, None),  # base64 of 123.45
            record(topic, 0, 3, {"id": 3}, {"id": 3, "amt": "1234"}, None),  # base64 of -26588.24, or 1234?
        ],
    ]
    write_batches(tmp_path / "in", batches)
    run_stream(spark, sqlite_catalog, tmp_path, icesink.debezium("app", dead_letter="ops.rejected"))
    assert icesink.read("app.prices", catalog=sqlite_catalog).to_pylist() == [{"id": 1, "amt": D("1.50")}]
    rejected = sorted(icesink.read("ops.rejected", catalog=sqlite_catalog).to_pylist(), key=lambda r: r["offset"])
    assert [r["offset"] for r in rejected] == [1, 2, 3]
    assert "TRUNCATE" in rejected[0]["error"]
    assert "only be read with the record's schema" in rejected[1]["error"]
    assert "may be a number or Debezium's base64" in rejected[2]["error"]


def test_a_float_its_type_cannot_hold_is_refused_where_it_is_read() -> None:
    """Connect's float (real): beyond its range, or digits no float has, is not a value of the column."""
    from icesink.debezium_events.decode import DecodeError, decode

    fields = [ID, {"type": "float", "optional": True, "field": "r"}]
    for value, why in ((1e39, "beyond a float's range"), (16777217, "digits a float cannot hold")):
        one = record("db.public.f", 0, 5, {"id": 1}, {"id": 1, "r": value}, fields)
        with pytest.raises(DecodeError, match=f"offset 5: column 'r' holds [0-9.eE+]+, wh.*{why}"):
            decode(one["key"], one["value"], one["topic"], one["partition"], one["offset"])
    good = record("db.public.f", 0, 6, {"id": 1}, {"id": 1, "r": 1.1}, fields)
    change = decode(good["key"], good["value"], good["topic"], good["partition"], good["offset"])
    assert change is not None and change.row["r"] == as_float32(1.1)


def test_two_connectors_capturing_one_table_name_are_told_apart_by_the_connector() -> None:
    from icesink.debezium_events.route import shared_target_message
    from icesink.debezium_events.sources import SourceTable

    first, second = SourceTable("srv1", "shop", "public", "c"), SourceTable("srv2", "shop", "public", "c")
    message = shared_target_message(icesink.debezium("inv"), "inv.c", [first, second])
    assert "tables={'srv1.shop.public.c': '...', 'srv2.shop.public.c': '...'}" in message
    spec = icesink.debezium("inv", tables={"srv2.shop.public.c": "inv.c2"})
    assert (spec.identifier(first), spec.identifier(second)) == ("inv.c", "inv.c2")


def _icesink_error(error: BaseException) -> str:
    """The part of a failed query's message that icesink wrote (from the icesink error's name on)."""
    text = str(error)
    start = text.find("icesink.errors.")
    return text[start : text.find("\n", start)] if start >= 0 else text


@pytest.mark.parametrize(
    ("old", "new", "widest"),
    [
        (numeric("x", 10, 4), numeric("x", 10, 2), "decimal(12,4)"),
        (numeric("x", 12, 4), numeric("x", 10, 2), "decimal(12,4)"),
        (numeric("x", 5, 0), numeric("x", 3, 3), "decimal(8,3)"),
        ({"type": "float", "field": "x"}, {"type": "double", "field": "x"}, "double"),
        ({"type": "int16", "field": "x"}, {"type": "int64", "field": "x"}, "bigint"),
        ({"type": "int32", "field": "x"}, {"type": "string", "field": "x"}, None),
        ({"type": "int64", "field": "x"}, {"type": "double", "field": "x"}, None),
        (numeric("x", 38, 0), numeric("x", 38, 10), None),
    ],
)
def test_the_widest_type_holds_every_value_of_both_or_there_is_none(
    old: dict[str, Any], new: dict[str, Any], widest: str | None
) -> None:
    """In either order of arrival; a refusal names the column, both types and where each comes from."""
    from icesink.debezium_events.connect_types import merge_schemas, struct_type
    from icesink.errors import SchemaMismatchError

    def schema(field: dict[str, Any]) -> Any:
        return struct_type({"type": "struct", "fields": [ID, {**field, "optional": True}]}, "t")

    for first, second in ((old, new), (new, old)):
        typed = [(schema(first), "topic t, partition 0, offset 1"), (schema(second), "topic t, partition 1, offset 0")]
        if widest is None:
            with pytest.raises(
                SchemaMismatchError,
                match=r"column 'x' is .* in records from topic t, partition 0, "
                r"offset 1 and .* in records from topic t, partition 1, offset 0",
            ):
                merge_schemas(typed, "table inv.t (source public.t)")
            continue
        merged, origins = merge_schemas(typed, "table inv.t (source public.t)")
        assert merged["x"].dataType.simpleString() == widest
        assert [where for _, where in origins["x"]] == [w for _, w in typed][: len(origins["x"])]
