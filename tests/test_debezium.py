"""Debezium change events into one table per source table: the decoder alone, then a real Spark stream
whose tables must equal the fixture's model for icesink, pyiceberg, iceberg-rust, DuckDB and Iceberg Java."""

from __future__ import annotations

import base64
import decimal
import json
import math
from pathlib import Path
from typing import Any

import pytest

import icesink
from icesink.catalog.config import CatalogConfig
from icesink.catalog.loader import open_catalog
from icesink.debezium_events.decode import DELETE, UPSERT, DecodeError, decode
from icesink.errors import ConfigError
from tests.helpers import debezium_fixture as fixture
from tests.helpers.debezium_fixture import KAFKA_SCHEMA, record, run_stream, write_batches
from tests.helpers.outcomes import read_many_with_iceberg_java, read_with_duckdb, read_with_iceberg_rust


def event(after: dict[str, Any] | None, fields: list[dict[str, Any]], op: str = "c", **source: Any) -> str:
    row = {"type": "struct", "fields": fields, "optional": True, "name": "t.Value"}
    schema = {"type": "struct", "fields": [{**row, "field": "before"}, {**row, "field": "after"}], "optional": False}
    payload = {"before": None, "after": after, "op": op, "source": {"schema": "public", "table": "t", **source}}
    return json.dumps({"schema": schema, "payload": payload})


def logical(column: str, kind: str, name: str, **parameters: str) -> dict[str, Any]:
    """An optional field of a logical type, as JsonConverter writes its schema."""
    field: dict[str, Any] = {"type": kind, "optional": True, "name": name, "field": column}
    if parameters:
        field["parameters"] = parameters
    return field


def test_logical_types_decode_to_exact_values() -> None:
    fields = [
        logical("d", "bytes", "org.apache.kafka.connect.data.Decimal", scale="2"),
        logical("day", "int32", "io.debezium.time.Date"),
        logical("ts", "int64", "io.debezium.time.MicroTimestamp"),
        logical("ns", "int64", "io.debezium.time.NanoTimestamp"),
        logical("z", "string", "io.debezium.time.ZonedTimestamp"),
        logical("t", "int32", "org.apache.kafka.connect.data.Time"),
    ]
    after = {
        "d": base64.b64encode((-12345).to_bytes(2, "big", signed=True)).decode(),
        "day": -1,
        "ts": -1,
        "ns": 1_000,
        "z": "2024-03-15T12:30:15.1234+02:00",
        "t": 1,
    }
    change = decode(
        '{"id": 1}', event({"id": 1, **after}, [{"type": "int32", "optional": False, "field": "id"}, *fields])
    )
    assert change is not None and change.op == UPSERT and change.key_names == ("id",)
    assert change.row == {
        "id": 1,
        "d": "-123.45",
        "day": "1969-12-31",
        "ts": "1969-12-31T23:59:59.999999",
        "ns": "1970-01-01T00:00:00.000001",
        "z": "2024-03-15T10:30:15.123400Z",
        "t": 1000,
    }
    assert change.source_table == "public.t"


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ({"ns": 1_001}, "column 'ns' .* finer than microseconds"),
        ({"z": "infinity"}, "column 'z' .*infinity"),
        ({"d": "not base64!"}, "column 'd' .* cannot be read"),
    ],
)
def test_values_that_cannot_be_held_exactly_are_refused_naming_the_column(value: dict[str, Any], message: str) -> None:
    fields = [
        logical("d", "bytes", "org.apache.kafka.connect.data.Decimal", scale="2"),
        logical("ns", "int64", "io.debezium.time.NanoTimestamp"),
        logical("z", "string", "io.debezium.time.ZonedTimestamp"),
    ]
    with pytest.raises(DecodeError, match=f"topic dbz.public.t, partition 0, offset 7: {message}"):
        decode('{"id": 1}', event({"id": 1, **value}, fields), "dbz.public.t", 0, 7)


def test_tombstones_messages_deletes_and_mistakes() -> None:
    assert decode('{"id": 1}', None) is None  # the tombstone after a delete
    assert decode(None, json.dumps({"op": "m", "message": {}})) is None
    delete = decode(
        '{"schema": {"type": "struct", "fields": [{"type": "int64", "field": "id"}]}, "payload": {"id": 5}}',
        event(None, [], op="d"),
    )
    assert delete is not None and delete.op == DELETE and delete.row == {"id": 5}
    with pytest.raises(DecodeError, match=r"TRUNCATE event \(public\.t\).*skipped\.operations=t"):
        decode(None, event(None, [], op="t"), "dbz.public.t", 0, 1)
    with pytest.raises(
        DecodeError, match=r"has no key \(a struct of the primary key columns\); icesink applies changes by primary key"
    ):
        decode(None, event({"a": 1}, []), "dbz.public.t", 0, 2)
    with pytest.raises(DecodeError, match="offset 3: the record's value is not JSON"):
        decode('{"id": 1}', "{oops", "dbz.public.t", 0, 3)
    with pytest.raises(DecodeError, match="'x' is not a Debezium operation"):
        decode('{"id": 1}', json.dumps({"op": "x"}))


def test_positions_sort_as_the_source_order() -> None:
    def position(**source: Any) -> str:
        change = decode('{"id": 1}', event({"id": 1}, [], **source))
        assert change is not None
        return change.position

    # PostgreSQL: (last commit LSN, LSN) from source.sequence, not the LSN alone.
    later_transaction = position(sequence=json.dumps(["200", "150"]), lsn=150)
    earlier_transaction = position(sequence=json.dumps(["100", "180"]), lsn=180)
    assert earlier_transaction < later_transaction
    # MySQL: binlog file number, then position, then row.
    assert position(file="mysql-bin.000009", pos=999, row=0) < position(file="mysql-bin.000010", pos=4, row=0)
    assert position(file="mysql-bin.000010", pos=4, row=1) < position(file="mysql-bin.000010", pos=4, row=2)
    # Kafka's offset, when there is one, comes before anything the source says.
    first = decode('{"id": 1}', event({"id": 1}, [], lsn=9), "t", 1, 9)
    second = decode('{"id": 1}', event({"id": 1}, [], lsn=1), "t", 1, 10)
    assert first is not None and second is not None and first.position < second.position


def _plain(value: Any) -> Any:
    """Values as every reader can be compared: NaN equal to itself, maps as sorted pairs."""
    if isinstance(value, float) and math.isnan(value):
        return "NaN"
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return (
            sorted(map(_plain, value), key=repr)
            if value and isinstance(value[0], tuple)
            else [_plain(v) for v in value]
        )
    if isinstance(value, tuple):
        return tuple(map(_plain, value))
    return value


def expected(history: fixture.History, identifier: str) -> list[dict[str, Any]]:
    return sorted((_plain(row) for row in history.model[identifier].values()), key=repr)


def actual(config: CatalogConfig, identifier: str) -> list[dict[str, Any]]:
    rows = icesink.read(identifier, catalog=config).to_pylist()
    return sorted((_plain(r) for r in rows), key=repr)


@pytest.mark.spark
def test_a_debezium_stream_equals_the_model_for_every_reader(
    spark: Any, catalog_config: CatalogConfig, tmp_path: Path, java_reader: Path
) -> None:
    config = catalog_config
    history = fixture.generate(seed=3)
    fixture.write(history, tmp_path / "in")
    events = spark.readStream.schema(KAFKA_SCHEMA).option("maxFilesPerTrigger", 1).json(str(tmp_path / "in"))
    query = icesink.stream(
        events,
        tables=icesink.debezium("inventory", tables=fixture.MAPPING),
        checkpoint_location=str(tmp_path / "ckpt"),
        trigger={"availableNow": True},
        catalog=config,
    )
    query.awaitTermination()
    for identifier in fixture.TABLES.values():
        assert actual(config, identifier) == expected(history, identifier), identifier
    catalog = open_catalog(config)
    customers = catalog.load_table("inventory.customers")
    assert (
        [f.name for f in customers.schema().identifier_fields]
        if hasattr(customers.schema(), "identifier_fields")
        else True
    )
    assert customers.schema().find_field("email").required is False  # added at the source midway
    lines = catalog.load_table(fixture.TABLES["shop.order_lines"])
    assert lines.schema().identifier_field_names() == {"line", "order_id"}
    # Every micro-batch moved all the tables it touched in one transaction.
    commits = {
        s.summary["icesink.commit-id"] for t in fixture.TABLES.values() for s in catalog.load_table(t).snapshots()
    }
    assert len(commits) == len(history.files)

    # Readers nobody here wrote.
    key_columns = {
        "inventory.customers": ["id", "name", "balance", "updated", "created"],
        "inventory.notes": ["id", "text", "stars"],
    }
    locations = {t: catalog.load_table(t).metadata_location for t in key_columns}
    duck = dict(zip(locations, read_with_duckdb(*locations.values()), strict=True))
    java = dict(
        zip(
            locations,
            read_many_with_iceberg_java(java_reader, [(locations[t], c, {}) for t, c in key_columns.items()]),
            strict=True,
        )
    )
    for identifier in key_columns:
        model_ids = sorted(r["id"] for r in history.model[identifier].values())
        assert sorted(r["id"] for r in duck[identifier]) == model_ids, identifier
        assert sorted(r["id"] for r in java[identifier]) == model_ids, identifier
        rust = read_with_iceberg_rust(config, identifier, "id")
        assert sorted(rust.column("id").to_pylist()) == model_ids, identifier
        pyiceberg_ids = catalog.load_table(identifier).scan(selected_fields=("id",)).to_arrow().column("id").to_pylist()
        assert sorted(pyiceberg_ids) == model_ids, identifier
    by_id = {r["id"]: r for r in history.model["inventory.customers"].values()}
    for row in java["inventory.customers"]:
        model = by_id[row["id"]]
        assert row["name"] == model["name"]
        assert (decimal.Decimal(row["balance"]) if row["balance"] is not None else None) == model["balance"]


def test_the_debezium_page_shows_the_type_mapping_the_code_has() -> None:
    """The page's table is generated from TYPE_TABLE (docs/hooks/reference.py), so it cannot differ from it."""
    page = (Path(__file__).parent.parent / "docs" / "writing" / "debezium.md").read_text(encoding="utf-8")
    assert "<!-- generated: debezium-types -->" in page
    assert "| Connect schema (logical name) |" not in page, "a hand-written copy of the generated table"


@pytest.mark.parametrize(
    ("schema", "spark_type"),
    [
        ({"type": "int8"}, "tinyint"),
        ({"type": "bytes", "name": "io.debezium.data.Bits", "parameters": {"length": "9"}}, "binary"),
        ({"type": "int32", "name": "io.debezium.time.Year"}, "int"),
        ({"type": "string", "name": "io.debezium.data.Uuid"}, "string"),
        ({"type": "int16"}, "smallint"),
        (
            {"type": "bytes", "name": "org.apache.kafka.connect.data.Decimal", "parameters": {"scale": "3"}},
            "decimal(38,3)",
        ),
        ({"type": "int64", "name": "io.debezium.time.MicroTime"}, "bigint"),
        ({"type": "int64", "name": "io.debezium.time.Timestamp"}, "timestamp_ntz"),
        ({"type": "string", "name": "io.debezium.time.ZonedTimestamp"}, "timestamp"),
        (
            {"type": "map", "keys": {"type": "int32"}, "values": {"type": "string"}},
            "array<struct<key:int,value:string>>",
        ),
    ],
)
def test_connect_schemas_map_to_spark_types(schema: dict[str, Any], spark_type: str) -> None:
    from icesink.debezium_events.connect_types import spark_type as mapped

    assert mapped(schema, "t.c").simpleString() == spark_type


def test_a_decimal_iceberg_cannot_hold_is_refused_naming_the_column() -> None:
    from icesink.debezium_events.connect_types import spark_type
    from icesink.errors import SchemaMismatchError

    schema = {
        "type": "bytes",
        "name": "org.apache.kafka.connect.data.Decimal",
        "parameters": {"scale": "0", "connect.decimal.precision": "65"},
    }
    with pytest.raises(
        SchemaMismatchError, match=r"\(source public\.t\)\.amount: decimal\(precision 65, scale 0\) needs 65"
    ):
        spark_type(schema, "table inventory.t (source public.t).amount")


def test_numbers_keep_every_digit_and_odd_records_are_skipped_or_named() -> None:
    fields = [
        logical("d", "bytes", "org.apache.kafka.connect.data.Decimal", scale="2"),
        {"type": "double", "optional": True, "field": "x"},
    ]
    # decimal.format=NUMERIC: a JSON number, every digit kept; a double stays the nearest double.
    value = event({"id": 1, "d": "D", "x": "X"}, fields)
    value = value.replace('"D"', "12345678901234567890.12").replace('"X"', "0.1")
    change = decode('{"id": 1}', value)
    assert change is not None and change.row["d"] == "12345678901234567890.12" and change.row["x"] == 0.1
    # Heartbeats, transaction markers and schema changes share topics with row events by mistake: skipped.
    assert decode(None, json.dumps({"ts_ms": 1})) is None
    assert decode(None, json.dumps({"status": "BEGIN", "id": "571:53195829", "ts_ms": 1})) is None
    assert decode(None, json.dumps({"source": {}, "ddl": "ALTER TABLE t ADD c int", "tableChanges": []})) is None
    for odd in ("null", "[1, 2]", '"text"', '{"schema": {}, "payload": null}'):
        with pytest.raises(DecodeError, match="partition 1, offset 4: the value is JSON but not a Debezium change"):
            decode('{"id": 1}', odd, "dbz.public.t", 1, 4)
    with pytest.raises(DecodeError, match="partition 1, offset 5: the record's value is not JSON"):
        decode('{"id": 1}', "{oops", "dbz.public.t", 1, 5)


def test_a_delete_whose_key_has_no_schema_is_typed_by_the_row_schema() -> None:
    """Key converters often write no schema: a timestamp key then comes raw, which only the row's schema reads."""
    fields = [{"type": "int64", "optional": False, "name": "io.debezium.time.MicroTimestamp", "field": "at"}]
    row = {"type": "struct", "fields": fields, "optional": True, "name": "t.Value"}
    schema = {"type": "struct", "fields": [{**row, "field": "before"}, {**row, "field": "after"}], "optional": False}
    payload = {"before": {"at": 1_000_001}, "after": None, "op": "d", "source": {"schema": "public", "table": "t"}}
    change = decode('{"at": 1000001}', json.dumps({"schema": schema, "payload": payload}))
    assert change is not None and change.op == DELETE and change.row == {"at": "1970-01-01T00:00:01.000001"}


@pytest.mark.spark
def test_columns_the_source_adds_are_kept_with_or_without_schemas(
    spark: Any, sqlite_catalog: CatalogConfig, tmp_path: Path
) -> None:
    """An old-schema event on another partition does not hide a column newer events carry; without schemas a
    table created from a delete, or from a column that was null so far, still gets its columns and types."""
    old = [{"type": "int32", "optional": False, "field": "id"}, {"type": "string", "optional": True, "field": "name"}]
    new = [*old, {"type": "string", "optional": True, "field": "email"}]
    batches = [
        [
            # id 1 with the new column on partition 0; id 2, still the old schema, later on partition 1.
            record("db.public.users", 0, 5, {"id": 1}, {"id": 1, "name": "a", "email": "a@x"}, new),
            record("db.public.users", 1, 9, {"id": 2}, {"id": 2, "name": "b"}, old),
            record("db.public.notes", 0, 0, {"id": 1}, None, None, op="d"),  # schemaless, a delete first
        ],
        [record("db.public.notes", 0, 1, {"id": 2}, {"id": 2, "text": "t", "stars": None}, None)],
        [record("db.public.notes", 0, 2, {"id": 3}, {"id": 3, "text": "u", "stars": 5, "tag": "new"}, None)],
    ]
    write_batches(tmp_path / "in", batches)
    run_stream(spark, sqlite_catalog, tmp_path, icesink.debezium("app"))
    users = icesink.read("app.users", catalog=sqlite_catalog).to_pylist()
    assert sorted(users, key=lambda r: r["id"]) == [
        {"id": 1, "name": "a", "email": "a@x"},
        {"id": 2, "name": "b", "email": None},
    ]
    notes = sorted(icesink.read("app.notes", catalog=sqlite_catalog).to_pylist(), key=lambda r: r["id"])
    assert notes == [
        {"id": 2, "text": "t", "stars": None, "tag": None},
        {"id": 3, "text": "u", "stars": 5, "tag": "new"},
    ]
    stars = open_catalog(sqlite_catalog).load_table("app.notes").schema().find_field("stars")
    assert str(stars.field_type) == "long"  # typed by its first value, not made a string while it was null


@pytest.mark.spark
@pytest.mark.parametrize("case", ["two sources, one table", "the key changes"])
def test_what_would_mix_rows_stops_the_stream_and_stages_nothing(
    spark: Any, sqlite_catalog: CatalogConfig, tmp_path: Path, case: str
) -> None:
    fields = [
        {"type": "int32", "optional": False, "field": "id"},
        {"type": "int32", "optional": True, "field": "tenant"},
    ]
    if case == "two sources, one table":
        batches = [
            [
                record("db.public.users", 0, 0, {"id": 1}, {"id": 1, "tenant": 1}, fields),
                record("db.billing.users", 0, 0, {"id": 1}, {"id": 1, "tenant": 2}, fields),
            ]
        ]
        message = "table app.users: source tables billing.users and public.users both go there"
    else:
        batches = [
            [record("db.public.users", 0, 0, {"id": 1}, {"id": 1, "tenant": 1}, fields)],
            [record("db.public.users", 0, 1, {"id": 1, "tenant": 2}, {"id": 1, "tenant": 2}, fields)],
        ]
        message = r"table app.users: its events are keyed by \(id, tenant\), but the table is keyed by \(id\)"
    write_batches(tmp_path / "in", batches)
    with pytest.raises(Exception, match=message) as raised:
        run_stream(spark, sqlite_catalog, tmp_path, icesink.debezium("app"))
    error = icesink.error_of(raised.value)
    assert error is not None and error.table == "app.users"
    from icesink.catalog.ledger import Ledger

    staged = [r.checkpoint_id for r in Ledger(sqlite_catalog).for_table("app.users")]
    assert staged == ([] if case == "two sources, one table" else [0])


def test_an_unchanged_toasted_value_is_never_written_over_the_real_one() -> None:
    fields = [
        {"type": "string", "optional": True, "field": "body"},
        {"type": "bytes", "optional": True, "field": "blob"},
    ]
    for column, placeholder in (
        ("body", "__debezium_unavailable_value"),
        ("blob", "X19kZWJleml1bV91bmF2YWlsYWJsZV92YWx1ZQ=="),
    ):
        with pytest.raises(
            DecodeError, match=f"offset 8: column '{column}' holds Debezium's placeholder.*REPLICA IDENTITY FULL"
        ):
            decode('{"id": 1}', event({"id": 1, column: placeholder}, fields, op="u"), "dbz.public.t", 0, 8)


@pytest.mark.spark
def test_maintain_has_the_inline_committer_maintain_every_table_of_the_stream(
    spark: Any, sqlite_catalog: CatalogConfig, tmp_path: Path
) -> None:
    fields = [{"type": "int32", "optional": False, "field": "id"}, {"type": "string", "optional": True, "field": "v"}]
    batches = [
        [
            record(f"db.public.{table}", 0, n, {"id": n % 3}, {"id": n % 3, "v": f"{table}{n}"}, fields)
            for table in ("a", "b")
        ]
        for n in range(4)
    ]
    write_batches(tmp_path / "in", batches)
    compact_soon = {"icesink.maintain.min-commits": "1", "icesink.maintain.min-input-files": "2"}
    with pytest.raises(ConfigError, match=r"app\.\* \(Debezium\): icesink.debezium\(maintain=True\).*--maintain"):
        icesink.stream(
            spark.readStream.schema(KAFKA_SCHEMA).json(str(tmp_path / "in")),
            tables=icesink.debezium("app", maintain=True),
            checkpoint_location=str(tmp_path / "ckpt"),
            committer="daemon",
            catalog=sqlite_catalog,
        )
    run_stream(spark, sqlite_catalog, tmp_path, icesink.debezium("app", table_properties=compact_soon, maintain=True))
    for table in ("a", "b"):
        snapshots = open_catalog(sqlite_catalog).load_table(f"app.{table}").snapshots()
        assert "compact" in {s.summary["icesink.maintenance"] for s in snapshots}
        rows = sorted((r["id"], r["v"]) for r in icesink.read(f"app.{table}", catalog=sqlite_catalog).to_pylist())
        assert rows == [(0, f"{table}3"), (1, f"{table}1"), (2, f"{table}2")]


@pytest.mark.spark
def test_tables_the_stream_creates_appear_with_their_first_commit_not_before(
    spark: Any, sqlite_catalog: CatalogConfig, tmp_path: Path
) -> None:
    from icesink.committer.commit import TableCommitter
    from icesink.errors import TableNotFoundError
    from icesink.properties import COMMIT_ID_PROPERTY
    from tests.helpers.support import pointers
    from tests.test_cli import invoke

    fields = [{"type": "int32", "optional": False, "field": "id"}, {"type": "string", "optional": True, "field": "v"}]
    tables = ("orders", "order lines ü%")
    batches = [[record(f"db.public.{t}", 0, n, {"id": n}, {"id": n, "v": t}, fields) for t in tables] for n in range(2)]
    write_batches(tmp_path / "in", batches)
    events = spark.readStream.schema(KAFKA_SCHEMA).option("maxFilesPerTrigger", 1).json(str(tmp_path / "in"))
    icesink.stream(
        events,
        tables=icesink.debezium("app"),
        checkpoint_location=str(tmp_path / "ckpt"),
        trigger={"availableNow": True},
        committer="daemon",
        job_id="dbz",
        catalog=sqlite_catalog,
    ).awaitTermination()
    # Staged, not committed: no reader sees the tables, not even empty; the operator does.
    assert pointers(sqlite_catalog) == {}
    for table in tables:
        with pytest.raises(TableNotFoundError):
            icesink.read(f"app.{table}", catalog=sqlite_catalog)
    code, output = invoke(sqlite_catalog, "--output", "json", "tables", "list")
    assert code == 0 and sorted((r["table"], r["pending"]) for r in json.loads(output)) == [
        ("app.order lines ü%", True),
        ("app.orders", True),
    ], output
    TableCommitter.of(sqlite_catalog).commit_atomic("dbz")
    assert set(pointers(sqlite_catalog)) == {f"app.{t}" for t in tables}
    commit_ids = set()
    for table in tables:
        assert sorted(r["id"] for r in icesink.read(f"app.{table}", catalog=sqlite_catalog).to_pylist()) == [0, 1]
        commit_ids.add(
            open_catalog(sqlite_catalog).load_table(f"app.{table}").current_snapshot().summary[COMMIT_ID_PROPERTY]
        )
    assert len(commit_ids) == 1


def test_a_dead_letter_table_is_a_table_name_of_its_own() -> None:
    for name in ("rejected", "ops..x", ".x", "x."):
        with pytest.raises(ConfigError, match=r"dead_letter must be a table name 'namespace\.table'"):
            icesink.debezium("app", dead_letter=name)
    with pytest.raises(
        ConfigError, match=r"'ops\.x' is both the dead_letter table and where source table 'users' goes"
    ):
        icesink.debezium("app", tables={"users": "ops.x"}, dead_letter="ops.x")


@pytest.mark.spark
def test_a_keyed_dead_letter_table_stops_the_stream_before_it_starts(
    spark: Any, sqlite_catalog: CatalogConfig, tmp_path: Path
) -> None:
    """Rejected records would replace each other in it: said at start, not at the first rejection."""
    from pyiceberg.schema import Schema
    from pyiceberg.types import LongType, NestedField

    from icesink.errors import SchemaMismatchError

    dead = "ops.rejected ü %/x"
    catalog = open_catalog(sqlite_catalog)
    catalog.create_namespace("ops")
    catalog.create_table(dead, Schema(NestedField(1, "offset", LongType(), required=True), identifier_field_ids=[1]))
    fields = [{"type": "int32", "optional": False, "field": "id"}]
    write_batches(tmp_path / "in", [[record("db.public.users", 0, 0, {"id": 1}, {"id": 1}, fields)]])
    message = rf"table {dead}: it is the stream's dead_letter table.*keyed by \(offset\).*did not start"
    with pytest.raises(SchemaMismatchError, match=message):
        run_stream(spark, sqlite_catalog, tmp_path, icesink.debezium("app", dead_letter=dead))
    assert not catalog.table_exists("app.users") and not (tmp_path / "ckpt").exists()


@pytest.mark.spark
def test_records_that_cannot_be_applied_go_to_the_dead_letter_table_and_the_stream_goes_on(
    spark: Any, sqlite_catalog: CatalogConfig, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from icesink.properties import COMMIT_ID_PROPERTY

    fields = [{"type": "int32", "optional": False, "field": "id"}, {"type": "string", "optional": True, "field": "n"}]
    not_json = {"topic": "db.public.users", "partition": 0, "offset": 1, "key": '{"id": 2}', "value": "{ü %/x"}
    truncate = record("db.public.users", 1, 7, {"id": 4}, None, fields, op="t")
    batches = [
        [
            record("db.public.users", 0, 0, {"id": 1}, {"id": 1, "n": "a"}, fields),
            not_json,
            record("db.public.users", 0, 2, {"id": 3}, {"id": 3, "n": "c"}, fields, op="x"),
        ],
        [record("db.public.users", 0, 3, {"id": 1}, {"id": 1, "n": "a2"}, fields, op="u"), truncate],
    ]
    write_batches(tmp_path / "in", batches)
    dead = "ops.rejected ü %/x"
    run_stream(spark, sqlite_catalog, tmp_path, icesink.debezium("app", dead_letter=dead))
    assert icesink.read("app.users", catalog=sqlite_catalog).to_pylist() == [{"id": 1, "n": "a2"}]
    rejected = sorted(icesink.read(dead, catalog=sqlite_catalog).to_pylist(), key=lambda r: r["offset"])
    assert [(r["topic"], r["partition"], r["offset"], r["key"]) for r in rejected] == [
        ("db.public.users", 0, 1, b'{"id": 2}'),
        ("db.public.users", 0, 2, b'{"id": 3}'),
        ("db.public.users", 1, 7, b'{"id": 4}'),
    ]
    assert (
        rejected[0]["value"] == "{ü %/x".encode() and "offset 1: the record's value is not JSON" in rejected[0]["error"]
    )
    assert "'x' is not a Debezium operation" in rejected[1]["error"]
    assert "TRUNCATE" in rejected[2]["error"] and json.loads(rejected[2]["value"]) == json.loads(truncate["value"])
    # The driver's log says so for each micro-batch that had any.
    said = [r.getMessage() for r in caplog.records if r.name == "icesink.debezium_events.route"]
    assert [m.split(" record(s)")[0] for m in said] == ["icesink.debezium: 2", "icesink.debezium: 1"], said
    assert all(f"dead-letter table {dead}," in m for m in said), said
    # Each checkpoint's rejected records were committed with its rows, in one transaction.
    catalog = open_catalog(sqlite_catalog)
    commits = [
        [s.summary[COMMIT_ID_PROPERTY] for s in catalog.load_table(name).snapshots()] for name in ("app.users", dead)
    ]
    assert commits[0] == commits[1] and len(commits[0]) == 2


def test_any_record_decoding_cannot_apply_is_kept_as_it_came_for_the_dead_letter_table() -> None:
    """Bytes that are not UTF-8 (an Avro record on the topic), and a record that makes decoding fail in a way
    it did not foresee, become rejected rows holding the exact bytes; without a dead-letter table they stop."""
    import pyarrow as pa

    from icesink.debezium_events.decode_task import REJECTED, parse_task

    # A row schema whose fields are a number: no check foresees it, decoding fails on its way.
    odd_schema = {"type": "struct", "fields": [{"field": "after", "type": "struct", "fields": 5}]}
    odd_payload = {"op": "c", "after": {"id": 1}, "source": {"table": "t"}}
    odd_source = json.dumps({"schema": odd_schema, "payload": odd_payload}).encode()
    batch = pa.record_batch(
        [
            pa.array([b'{"id": 1}', b"\x00\xff\xfe", b'{"id": 1}'], pa.binary()),
            pa.array([b"\x00\x01avro\xff", json.dumps(odd_payload).encode(), odd_source], pa.binary()),
            pa.array(["db.public.t"] * 3),
            pa.array([0, 0, 1], pa.int32()),
            pa.array([5, 6, 7], pa.int64()),
        ],
        names=["key", "value", "topic", "partition", "offset"],
    )
    columns = ["key", "value", "topic", "partition", "offset"]
    (out,) = list(parse_task(columns, keep_rejected=True)(iter([batch])))
    assert out.column("source").to_pylist() == [REJECTED] * 3
    assert out.column("raw_value").to_pylist() == batch.column("value").to_pylist()
    assert out.column("raw_key").to_pylist() == batch.column("key").to_pylist()
    errors = out.column("row").to_pylist()
    assert "offset 5: the record's value is not JSON" in errors[0]
    assert "offset 6: the record's key is not JSON" in errors[1]
    assert errors[2].startswith("TypeError: ") and out.column("offset").to_pylist()[2] == 7, errors[2]
    with pytest.raises(DecodeError, match="offset 5: the record's value is not JSON"):
        list(parse_task(columns)(iter([batch])))
