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
from icesink.catalog.loader import open_catalog
from icesink.committer.ledger import Ledger
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


def every_reader(config: CatalogConfig, java_reader: Path, identifier: str, columns: list[str]) -> list[Any]:
    """The table's rows, as each of Iceberg Java, DuckDB and iceberg-rust reads them (one list per reader)."""
    location = open_catalog(config).load_table(identifier).metadata_location
    (java,) = read_many_with_iceberg_java(java_reader, [(location, columns, {})])
    (duck,) = read_with_duckdb(location)
    rust = read_with_iceberg_rust(config, identifier).to_pylist()
    return [java, duck, rust]


def by_id(rows: list[dict[str, Any]], column: str, kind: type) -> dict[int, Any]:
    return {r["id"]: (kind(str(r[column])) if r[column] is not None else None) for r in rows}


@pytest.mark.spark
@pytest.mark.interop
def test_two_scales_of_one_decimal_column_in_a_micro_batch_keep_every_digit(
    spark: Any, sqlite_catalog: CatalogConfig, tmp_path: Path, java_reader: Path
) -> None:
    """numeric(10,4) then ALTER TABLE ... TYPE numeric(10,2), in the first micro-batch of a new table: the table
    takes the type that holds both (12 digits, 4 after the point), and 5.6789 stays 5.6789."""
    topic = "db.public.payments"
    wide, narrow = [ID, numeric("amt", 10, 4)], [ID, numeric("amt", 10, 2)]
    batch = [
        record(topic, 0, 0, {"id": 1}, {"id": 1, "amt": unscaled(D("5.6789"), 4)}, wide),
        record(topic, 0, 1, {"id": 2}, {"id": 2, "amt": unscaled(D("1.00"), 2)}, narrow),
        record(topic, 1, 0, {"id": 3}, {"id": 3, "amt": unscaled(D("99999999.99"), 2)}, narrow),
    ]
    write_batches(tmp_path / "in", [batch])
    run_stream(spark, sqlite_catalog, tmp_path, icesink.debezium("app"))
    table = open_catalog(sqlite_catalog).load_table("app.payments")
    assert str(table.schema().find_field("amt").field_type) == "decimal(12, 4)"
    expected = {1: D("5.6789"), 2: D("1.0000"), 3: D("99999999.9900")}
    for rows in every_reader(sqlite_catalog, java_reader, "app.payments", ["id", "amt"]):
        assert by_id(rows, "amt", D) == expected


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


@pytest.mark.spark
@pytest.mark.interop
def test_a_real_column_widened_to_double_on_another_partition_stays_a_double(
    spark: Any, sqlite_catalog: CatalogConfig, tmp_path: Path, java_reader: Path
) -> None:
    """ALTER COLUMN x TYPE double precision: the new double at partition 0 and an older real at partition 1
    come in one micro-batch. The table's column is a double; the real keeps its exact value (the one Iceberg
    gives a float widened to double), the double every digit (it was narrowed to a float before)."""
    topic = "db.public.readings"
    old = [ID, {"type": "float", "optional": True, "field": "x"}]
    new = [ID, {"type": "double", "optional": True, "field": "x"}]
    batch = [
        record(topic, 0, 50, {"id": 1}, {"id": 1, "x": 2.000000000001}, new),
        record(topic, 1, 0, {"id": 2}, {"id": 2, "x": 1.1}, old),
        record(topic, 1, 1, {"id": 3}, {"id": 3, "x": 3.4028234663852886e38}, old),
    ]
    write_batches(tmp_path / "in", [batch])
    run_stream(spark, sqlite_catalog, tmp_path, icesink.debezium("app"))
    table = open_catalog(sqlite_catalog).load_table("app.readings")
    assert str(table.schema().find_field("x").field_type) == "double"
    expected = {1: 2.000000000001, 2: as_float32(1.1), 3: 3.4028234663852886e38}
    for rows in every_reader(sqlite_catalog, java_reader, "app.readings", ["id", "x"]):
        assert {r["id"]: float(r["x"]) for r in rows} == expected


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
        r"holds '[^']+', which has more digits than its type decimal\(5, 2\) holds"
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
    ):
        run_stream(spark, sqlite_catalog, tmp_path, icesink.debezium("app"))
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


def _icesink_error(error: BaseException) -> str:
    """The part of a failed query's message that icesink wrote (from the icesink error's name on)."""
    text = str(error)
    start = text.find("icesink.errors.")
    return text[start : text.find("\n", start)] if start >= 0 else text
