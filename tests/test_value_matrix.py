"""Every Iceberg type at every nesting level, null apart from empty, read back unchanged by every reader.

One table holds each primitive type at top level, in a struct, as list
elements, as map values, inside structs inside lists and maps, and (for the
types a map key can sensibly be) as map keys; each value is null, empty where
it can be, holding nulls, or full. It is written by the task writer and the
committer (no Spark: Spark adds nothing to what is checked here), with and
without a key, and compared with the input by icesink's reader, ``icesink
scan --json``, the changelog, iceberg-rust, DuckDB and Iceberg Java, before
and after ``icesink maintain --all`` rewrites every file.
"""

from __future__ import annotations

import datetime
import decimal
import json
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from click.testing import CliRunner

import icesink
from icesink.catalog.config import CatalogConfig
from icesink.catalog.ledger import Ledger
from icesink.catalog.loader import open_catalog
from icesink.cli import main
from icesink.committer.commit import TableCommitter
from icesink.committer.staging import stage_checkpoint
from icesink.iceberg.describe import writer_spec
from icesink.writer.spec import ChangeSpec
from icesink.writer.task import TaskWriter
from tests.helpers.outcomes import iceberg_rust_sql, read_many_with_iceberg_java, read_with_duckdb
from tests.histories.canon import canon_rows

UTC = datetime.UTC
TABLE = "shop.every value ü %/x"
# Spark has no time type: Iceberg Java's Spark reader refuses a table with a time column, so it reads a twin without.
JAVA_TABLE = "shop.every value but time ü %/x"

# (name, Iceberg type, Arrow input type, two full values)
PRIMITIVES: list[tuple[str, str, pa.DataType, tuple[Any, Any]]] = [
    ("boolean", "boolean", pa.bool_(), (True, False)),
    ("int", "int", pa.int32(), (7, -3)),
    ("long", "long", pa.int64(), (2**40, -1)),
    ("float", "float", pa.float32(), (1.5, -0.25)),
    ("double", "double", pa.float64(), (2.5e10, -1e-3)),
    ("decimal", "decimal(12, 2)", pa.decimal128(12, 2), (decimal.Decimal("12.30"), decimal.Decimal("-0.01"))),
    ("date", "date", pa.date32(), (datetime.date(2024, 2, 29), datetime.date(1969, 12, 31))),
    ("time", "time", pa.time64("us"), (datetime.time(12, 34, 56, 789000), datetime.time(0, 0))),
    ("timestamp", "timestamp", pa.timestamp("us"), (datetime.datetime(2024, 1, 1, 12), datetime.datetime(1900, 1, 1))),
    (
        "timestamptz",
        "timestamptz",
        pa.timestamp("us", tz="UTC"),
        (datetime.datetime(2024, 1, 1, 12, tzinfo=UTC), datetime.datetime(1582, 10, 20, tzinfo=UTC)),
    ),
    ("string", "string", pa.string(), ("ü %/x", "")),
    (
        "uuid",
        "uuid",
        pa.string(),
        ("5bc8a3f0-1b2c-4d5e-8f90-0123456789ab", "00000000-0000-0000-0000-000000000001"),
    ),
    ("fixed", "fixed[4]", pa.binary(), (b"\x00\x01\x02\xff", b"abcd")),
    ("binary", "binary", pa.binary(), (b"", b"\x00\xff")),
]
MAP_KEYS = ("int", "long", "string", "date")


def _iceberg_type(name: str) -> Any:
    from pyiceberg.types import (
        BinaryType,
        BooleanType,
        DateType,
        DecimalType,
        DoubleType,
        FixedType,
        FloatType,
        IntegerType,
        LongType,
        StringType,
        TimestampType,
        TimestamptzType,
        TimeType,
        UUIDType,
    )

    return {
        "boolean": BooleanType(),
        "int": IntegerType(),
        "long": LongType(),
        "float": FloatType(),
        "double": DoubleType(),
        "decimal(12, 2)": DecimalType(12, 2),
        "date": DateType(),
        "time": TimeType(),
        "timestamp": TimestampType(),
        "timestamptz": TimestamptzType(),
        "string": StringType(),
        "uuid": UUIDType(),
        "fixed[4]": FixedType(4),
        "binary": BinaryType(),
    }[name]


# --- the table: one column per (type, shape) -------------------------------------------------------------------------

SHAPES = ("top", "in struct", "list", "map value", "list of structs", "map of structs", "map key")


def _columns(with_time: bool = True) -> list[tuple[str, str, str]]:
    """(column name, primitive name, shape)."""
    return [
        (f"{name} {shape}", name, shape)
        for name, *_ in PRIMITIVES
        for shape in SHAPES
        if (shape != "map key" or name in MAP_KEYS) and (with_time or name != "time")
    ]


def _schema(keyed: bool, with_time: bool) -> Any:
    from pyiceberg.schema import Schema
    from pyiceberg.types import ListType, LongType, MapType, NestedField, StringType, StructType

    ids = iter(range(2, 10_000))
    types = {name: _iceberg_type(kind) for name, kind, *_ in PRIMITIVES}

    def struct_of(kind: Any) -> StructType:
        return StructType(NestedField(next(ids), "v", kind, required=False))

    fields = [NestedField(1, "id", LongType(), required=True)]
    for column, name, shape in _columns(with_time):
        kind = types[name]
        field_type: Any
        if shape == "top":
            field_type = kind
        elif shape == "in struct":
            field_type = struct_of(kind)
        elif shape == "list":
            field_type = ListType(next(ids), kind, element_required=False)
        elif shape == "map value":
            field_type = MapType(next(ids), StringType(), next(ids), kind, value_required=False)
        elif shape == "list of structs":
            field_type = ListType(next(ids), struct_of(kind), element_required=False)
        elif shape == "map of structs":
            field_type = MapType(next(ids), StringType(), next(ids), struct_of(kind), value_required=False)
        else:
            field_type = MapType(next(ids), kind, next(ids), StringType(), value_required=False)
        fields.append(NestedField(next(ids), column, field_type, required=False))
    return Schema(*fields, identifier_field_ids=[1] if keyed else [])


def _input_schema(with_time: bool) -> pa.Schema:
    arrow = {name: arrow_type for name, _, arrow_type, _ in PRIMITIVES}
    fields = [pa.field("id", pa.int64())]
    for column, name, shape in _columns(with_time):
        kind = arrow[name]
        struct = pa.struct([("v", kind)])
        field_type = {
            "top": kind,
            "in struct": struct,
            "list": pa.list_(kind),
            "map value": pa.map_(pa.string(), kind),
            "list of structs": pa.list_(struct),
            "map of structs": pa.map_(pa.string(), struct),
            "map key": pa.map_(kind, pa.string()),
        }[shape]
        fields.append(pa.field(column, field_type))
    return pa.schema(fields)


def _value(name: str, shape: str, variant: int, generation: int) -> Any:
    """Variant 0: null; 1: empty (or a struct of nulls); 2: holding nulls; 3: full."""
    full = next(values for n, _, _, values in PRIMITIVES if n == name)
    a, b = full if generation % 2 == 0 else full[::-1]
    if variant == 0:
        return None
    if shape == "top":
        return a if variant == 3 else b
    if shape == "in struct":
        return {"v": None} if variant in (1, 2) else {"v": a}
    if shape == "list":
        return [] if variant == 1 else [None] if variant == 2 else [a, None, b]
    if shape == "map value":
        return [] if variant == 1 else [("k", None)] if variant == 2 else [("k", a), ("", b)]
    if shape == "list of structs":
        return [] if variant == 1 else [None, {"v": None}] if variant == 2 else [{"v": a}, None, {"v": b}]
    if shape == "map of structs":
        return [] if variant == 1 else [("n", None), ("v", {"v": None})] if variant == 2 else [("k", {"v": a})]
    return [] if variant == 1 else [(a, None)] if variant == 2 else [(a, "x"), (b, "y")]


def _rows(ids: range, generation: int, with_time: bool = True) -> list[dict[str, Any]]:
    return [
        {
            "id": i,
            **{
                column: _value(name, shape, (i + j) % 4, generation)
                for j, (column, name, shape) in enumerate(_columns(with_time))
            },
        }
        for i in ids
    ]


# --- one spelling of every value: tests/histories/canon.py -----------------------------------------------------------


def _assert_same(actual: list[dict[str, Any]], expected: list[dict[str, Any]], reader: str) -> None:
    """Name the reader, the row and the column of the first difference (a whole-row diff is unreadable here)."""
    assert [r["id"] for r in actual] == [r["id"] for r in expected], f"{reader}: other rows"
    for got, want in zip(actual, expected, strict=True):
        for column, value in want.items():
            assert got[column] == value, f"{reader}, id {want['id']}, column {column!r}: {got[column]!r} != {value!r}"


def _canon_rows(schema: Any, rows: list[dict[str, Any]], columns: list[str] | None = None) -> list[dict[str, Any]]:
    return sorted(canon_rows(schema, rows, columns), key=lambda r: r["id"])


# --- writing without Spark -------------------------------------------------------------------------------------------


def _write(
    config: CatalogConfig, identifier: str, checkpoint: int, rows: list[dict[str, Any]], deleted: list[int], keyed: bool
) -> None:
    catalog = open_catalog(config)
    table = catalog.load_table(identifier)
    input_schema = _input_schema(with_time=identifier == TABLE)
    batch = pa.Table.from_pylist(rows, schema=input_schema)
    changes = None
    if keyed:
        changes = ChangeSpec(equality_field_ids=(1,), op_column="op")
        ops = ["U"] * len(rows) + ["D"] * len(deleted)
        gone = pa.Table.from_pylist([{"id": i} for i in deleted], schema=input_schema)
        batch = pa.concat_tables([batch, gone]).append_column("op", pa.array(ops))
        batch = batch.append_column("__icesink_order", pa.array(range(batch.num_rows), pa.int64()))
    spec = writer_spec(table, identifier, "job", changes).for_checkpoint(checkpoint)
    writer = TaskWriter(spec, task_id=0, attempt=0)
    writer.write(batch)
    assert stage_checkpoint(Ledger(config), table, identifier, "job", checkpoint, [writer.complete()])
    TableCommitter.of(config).commit_pending(identifier)


def _fill(config: CatalogConfig, identifier: str, keyed: bool) -> list[dict[str, Any]]:
    """Two checkpoints into a new table; the rows the table must then hold."""
    with_time = identifier == TABLE
    catalog = open_catalog(config)
    catalog.create_namespace_if_not_exists("shop")
    catalog.create_table(identifier, schema=_schema(keyed, with_time))
    first = _rows(range(12), 0, with_time)
    _write(config, identifier, 0, first, [], keyed)
    if keyed:  # the second checkpoint rewrites half the keys with other values and deletes one
        second = _rows(range(6, 12), 1, with_time)
        _write(config, identifier, 1, second, [0], keyed)
        return list(({r["id"]: r for r in first if r["id"] != 0} | {r["id"]: r for r in second}).values())
    second = _rows(range(12, 20), 1, with_time)
    _write(config, identifier, 1, second, [], keyed)
    return first + second


def _cli(config: CatalogConfig, *args: str) -> str:
    base = ["--catalog", config.name, "--uri", config.uri, "--warehouse", config.warehouse]
    result = CliRunner().invoke(main, [*base, *args])
    assert result.exit_code == 0, result.output
    return result.stdout  # progress lines go to stderr


def _read_by_everyone(
    config: CatalogConfig, java_reader: Path, expected: list[dict[str, Any]], java_expected: list[dict[str, Any]]
) -> None:
    table = open_catalog(config).load_table(TABLE)
    schema = table.schema()
    _assert_same(_canon_rows(schema, icesink.read(table).to_pylist()), expected, "icesink.read")
    scanned = [json.loads(line) for line in _cli(config, "scan", TABLE, "--json", "--limit", "1000").splitlines()]
    _assert_same(_canon_rows(schema, scanned), expected, "icesink scan --json")
    _assert_same(_canon_rows(schema, iceberg_rust_sql(table, "SELECT * FROM t").to_pylist()), expected, "iceberg-rust")
    (duck,) = read_with_duckdb(table.metadata_location)
    _assert_same(_canon_rows(schema, duck), expected, "DuckDB")
    twin = open_catalog(config).load_table(JAVA_TABLE)
    columns = [f.name for f in twin.schema().fields]
    (java,) = read_many_with_iceberg_java(java_reader, [(twin.metadata_location, columns)])
    _assert_same(_canon_rows(twin.schema(), java), java_expected, "Iceberg Java")


@pytest.mark.interop
@pytest.mark.parametrize("keyed", [False, True], ids=["appends", "upserts"])
def test_every_type_at_every_depth_reads_back_unchanged_before_and_after_maintenance(
    sqlite_catalog: CatalogConfig, java_reader: Path, keyed: bool
) -> None:
    catalog = open_catalog(sqlite_catalog)
    model = _fill(sqlite_catalog, TABLE, keyed)
    java_model = _fill(sqlite_catalog, JAVA_TABLE, keyed)
    table = catalog.load_table(TABLE)
    schema = table.schema()
    expected = _canon_rows(schema, model)
    java_expected = _canon_rows(catalog.load_table(JAVA_TABLE).schema(), java_model)
    nulls_and_empties = [r["long list of structs"] for r in expected]
    assert None in nulls_and_empties and [] in nulls_and_empties

    _read_by_everyone(sqlite_catalog, java_reader, expected, java_expected)
    net = icesink.changes(table, None, net_changes=keyed, catalog=sqlite_catalog).to_pylist()
    assert {r["_change_type"] for r in net} == {"insert"}
    _assert_same(_canon_rows(schema, net), expected, "the changelog")

    before = table.current_snapshot().snapshot_id
    for identifier in (TABLE, JAVA_TABLE):
        report = json.loads(_cli(sqlite_catalog, "maintain", identifier, "--all", "--json"))
        assert report["compaction"]["files_rewritten"] >= 2, report
    _read_by_everyone(sqlite_catalog, java_reader, expected, java_expected)
    assert icesink.changes(TABLE, before, catalog=sqlite_catalog).num_rows == 0, "a rewrite changes no row"


def test_a_rewrite_that_would_change_a_value_is_refused_and_leaves_the_table_as_it_was(
    sqlite_catalog: CatalogConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Maintenance compares what it read and wrote with the raw Parquet files, null lists apart from empty ones."""
    from pyiceberg.io.pyarrow import ArrowProjectionVisitor

    from icesink.iceberg import file_reads
    from icesink.maintenance.verify import RewriteCheckError

    model = _fill(sqlite_catalog, TABLE, keyed=False)
    table = open_catalog(sqlite_catalog).load_table(TABLE)
    head = table.current_snapshot().snapshot_id
    files_before = {p.name for p in Path(table.location().removeprefix("file://")).rglob("*.parquet")}
    # Put back pyiceberg 0.12's projection, which reads a null list of structs as [] (the bug this guards).
    monkeypatch.setattr(file_reads._ValueKeepingProjection, "list", ArrowProjectionVisitor.list)
    with pytest.raises(RewriteCheckError, match=r"table shop.every value ü %/x: reading .* changed values \(field id"):
        from icesink.committer.maintainer import Maintainer
        from icesink.maintenance.policy import MaintenancePolicy
        from icesink.maintenance.run import MaintenanceRequest

        Maintainer(open_catalog(sqlite_catalog), sqlite_catalog).run(
            table, TABLE, MaintenanceRequest(MaintenancePolicy(), everything=True)
        )
    monkeypatch.undo()
    table = open_catalog(sqlite_catalog).load_table(TABLE)
    assert table.current_snapshot().snapshot_id == head
    assert {p.name for p in Path(table.location().removeprefix("file://")).rglob("*.parquet")} == files_before
    _assert_same(
        _canon_rows(table.schema(), icesink.read(table).to_pylist()), _canon_rows(table.schema(), model), "icesink.read"
    )


def test_written_files_that_differ_from_the_rows_handed_to_the_writer_are_refused(tmp_path: Path) -> None:
    import pyarrow.parquet as pq
    from pyiceberg.io.pyarrow import PyArrowFileIO

    from icesink.maintenance.verify import RewriteCheckError, check_written
    from icesink.results import FileContent, FileRecord

    ids = {b"PARQUET:field_id": b"2"}
    element = pa.field(
        "element",
        pa.struct([pa.field("v", pa.int64(), metadata={b"PARQUET:field_id": b"4"})]),
        metadata={b"PARQUET:field_id": b"3"},
    )
    schema = pa.schema([pa.field("items", pa.list_(element), metadata=ids)])
    rows = pa.table({"items": [None, [], [{"v": 1}]]}, schema=schema)
    lossy = pa.table({"items": [[], [], [{"v": 1}]]}, schema=schema)
    pq.write_table(lossy, tmp_path / "out.parquet")
    record = FileRecord(
        path=f"file://{tmp_path}/out.parquet",
        content=FileContent.DATA,
        record_count=3,
        file_size_bytes=(tmp_path / "out.parquet").stat().st_size,
        spec_id=0,
        partition=(),
    )
    with pytest.raises(
        RewriteCheckError, match=r"table shop.t: the rewritten files .*field id 2: nulls expected 1, found 0"
    ):
        check_written(PyArrowFileIO(), "shop.t", rows, [record])
    check_written(PyArrowFileIO(), "shop.t", lossy, [record])  # the same values pass


@pytest.mark.parametrize("producer", ["pyarrow", "spark"])
def test_fields_under_a_null_struct_at_any_depth_are_neither_converted_nor_refused(
    sqlite_catalog: CatalogConfig, producer: str
) -> None:
    """Found by the history tester (seeds 1917144125, 489091336): under a null struct two levels up, pyarrow
    leaves "" (not a uuid, not 3 bytes) and Spark leaves nulls (in required fields too, which Parquet refuses).
    Seed 763556720: the stand-in for a required date there could not be made (Arrow casts no int64 to date32)."""
    import datetime
    import decimal

    from pyiceberg.schema import Schema
    from pyiceberg.types import (
        BinaryType,
        BooleanType,
        DateType,
        DecimalType,
        FixedType,
        FloatType,
        IntegerType,
        LongType,
        NestedField,
        StructType,
        TimestampType,
        UUIDType,
    )

    inner = StructType(
        NestedField(4, "u", UUIDType(), required=False),
        NestedField(5, "f", FixedType(3), required=False),
        NestedField(6, "req", BinaryType(), required=True),
        NestedField(7, "req uuid", UUIDType(), required=True),
        NestedField(8, "req date", DateType(), required=True),
        NestedField(9, "req ts", TimestampType(), required=True),
        NestedField(10, "req int", IntegerType(), required=True),
        NestedField(11, "req float", FloatType(), required=True),
        NestedField(12, "req dec", DecimalType(9, 2), required=True),
        NestedField(13, "req bool", BooleanType(), required=True),
    )
    schema = Schema(
        NestedField(1, "id", LongType(), required=True),
        NestedField(2, "outer", StructType(NestedField(3, "inner", inner, required=True)), required=False),
    )
    catalog = open_catalog(sqlite_catalog)
    catalog.create_namespace_if_not_exists("shop")
    table = catalog.create_table(TABLE, schema=schema)
    inner_type = pa.struct(
        [
            ("u", pa.string()),
            ("f", pa.binary()),
            ("req", pa.binary()),
            ("req uuid", pa.string()),
            ("req date", pa.date32()),
            ("req ts", pa.timestamp("us")),
            ("req int", pa.int32()),
            ("req float", pa.float32()),
            ("req dec", pa.decimal128(9, 2)),
            ("req bool", pa.bool_()),
        ]
    )
    outer_type = pa.struct([("inner", inner_type)])
    value = {
        "u": "5BC8A3F0-1B2C-4D5E-8F90-0123456789AB",
        "f": b"abc",
        "req": b"",
        "req uuid": str(uuid.UUID(int=7)),
        "req date": datetime.date(1999, 12, 31),
        "req ts": datetime.datetime(2000, 1, 1, 0, 0, 1),
        "req int": -(2**31),
        "req float": 0.5,
        "req dec": decimal.Decimal("-1234567.89"),
        "req bool": True,
    }
    if producer == "pyarrow":  # pyarrow fills the fields of a null struct with "" and b""
        outer = pa.array([{"inner": value}, None], outer_type)
    else:  # Spark's Arrow writer sets every field under a null struct to null, required or not
        children = [pa.array([value[name], None], inner_type.field(name).type) for name in value]
        inner_array = pa.StructArray.from_arrays(children, fields=list(inner_type))
        outer = pa.StructArray.from_arrays([inner_array], fields=list(outer_type), mask=pa.array([False, True]))
    rows = pa.table({"id": pa.array([1, 2], pa.int64()), "outer": outer})
    spec = writer_spec(table, TABLE, "job").for_checkpoint(0)
    writer = TaskWriter(spec, task_id=0, attempt=0)
    writer.write(rows)
    assert stage_checkpoint(Ledger(sqlite_catalog), table, TABLE, "job", 0, [writer.complete()])
    TableCommitter.of(sqlite_catalog).commit_pending(TABLE)
    table = catalog.load_table(TABLE)
    expected = canon_rows(table.schema(), [{"id": 1, "outer": {"inner": value}}, {"id": 2, "outer": None}])
    assert canon_rows(table.schema(), icesink.read(table).to_pylist()) == expected
    assert canon_rows(table.schema(), iceberg_rust_sql(table, "SELECT * FROM t").to_pylist()) == expected
