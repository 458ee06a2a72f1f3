"""Every Iceberg primitive icesink writes, edge values included, read back by readers nobody here wrote.

``uuid``, ``fixed`` and ``time`` have no Spark type (or, for ``time``, none the
Iceberg runtime of Spark 3.5 reads): they come from strings, binaries and
Spark 4's ``TimeType`` and are checked on every row.
"""

from __future__ import annotations

import datetime
import decimal
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import icesink
from icesink.catalog.config import CatalogConfig
from icesink.catalog.loader import open_catalog
from icesink.committer.commit import TableCommitter
from icesink.errors import BadRowError
from icesink.writer import values
from tests.helpers.outcomes import iceberg_rust_sql, read_with_duckdb, read_with_iceberg_java
from tests.helpers.streams import order_for_file_source
from tests.helpers.support import stage_rows, write_files

UTC = datetime.UTC
TYPES = "shop.types"  # every type a Spark 3.5 reader can read too
CLOCK = "shop.clock"  # time: Iceberg's Spark runtime has no time type

UUIDS = [
    "0189F7E8-1A2B-7C3D-8E4F-0123456789AB",
    None,
    "ffffffff-ffff-ffff-ffff-ffffffffffff",
    "00000000-0000-0000-0000-000000000000",
]
ROWS: dict[str, list[Any]] = {
    "id": [1, 2, 3, 4],
    "u": UUIDS,
    "f": [b"\x00\x01\x02\x03", b"\xff\xfe\xfd\xfc", None, b"abcd"],
    "b": [b"", b"\x00\xff", None, b"x" * 40],
    "dec": [
        decimal.Decimal("1234567890123456789012345678.9012345678"),
        decimal.Decimal("-9999999999999999999999999999.9999999999"),
        None,
        decimal.Decimal("0E-10"),
    ],
    "ntz": [
        datetime.datetime(1969, 12, 31, 23, 59, 59, 999999),
        datetime.datetime(1000, 1, 1, 0, 0, 0, 1),
        None,
        datetime.datetime(2262, 4, 11, 23, 47, 16),
    ],
    "tz": [
        datetime.datetime(1582, 10, 4, 12, 0, tzinfo=UTC),
        datetime.datetime(1900, 1, 1, tzinfo=UTC),
        None,
        datetime.datetime(1970, 1, 1, tzinfo=UTC),
    ],
    "d": [datetime.date(1582, 10, 14), datetime.date(1000, 1, 1), None, datetime.date(1969, 12, 31)],
}
TIMES = [datetime.time(0, 0), datetime.time(23, 59, 59, 999999), None, datetime.time(12, 34, 56, 789)]


def _types_schema() -> Any:
    from pyiceberg.schema import Schema
    from pyiceberg.types import (
        BinaryType,
        DateType,
        DecimalType,
        FixedType,
        LongType,
        NestedField,
        TimestampType,
        TimestamptzType,
        UUIDType,
    )

    return Schema(
        NestedField(1, "id", LongType(), required=True),
        NestedField(2, "u", UUIDType()),
        NestedField(3, "f", FixedType(4)),
        NestedField(4, "b", BinaryType()),
        NestedField(5, "dec", DecimalType(38, 10)),
        NestedField(6, "ntz", TimestampType()),
        NestedField(7, "tz", TimestamptzType()),
        NestedField(8, "d", DateType()),
    )


def _clock_schema() -> Any:
    from pyiceberg.schema import Schema
    from pyiceberg.types import LongType, NestedField, TimeType

    return Schema(NestedField(1, "id", LongType(), required=True), NestedField(2, "t", TimeType()))


def _input_rows() -> pa.Table:
    """The rows as Spark hands them to the writer: uuid as strings, fixed as binary."""
    return pa.table(
        {
            "id": pa.array(ROWS["id"], pa.int64()),
            "u": pa.array(ROWS["u"], pa.string()),
            "f": pa.array(ROWS["f"], pa.binary()),
            "b": pa.array(ROWS["b"], pa.binary()),
            "dec": pa.array(ROWS["dec"], pa.decimal128(38, 10)),
            "ntz": pa.array(ROWS["ntz"], pa.timestamp("us")),
            "tz": pa.array(ROWS["tz"], pa.timestamp("us", tz="UTC")),
            "d": pa.array(ROWS["d"], pa.date32()),
        }
    )


def _expected() -> list[dict[str, Any]]:
    rows = [dict(zip(ROWS, values_, strict=True)) for values_ in zip(*ROWS.values(), strict=True)]
    for row in rows:
        row["u"] = uuid.UUID(row["u"]) if row["u"] else None
    return rows


def _plain(value: Any) -> Any:
    """One spelling of a value across readers."""
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, bytes | bytearray):
        return bytes(value).hex()
    if isinstance(value, datetime.datetime | datetime.date | datetime.time):
        return value.isoformat()
    if isinstance(value, decimal.Decimal):
        return str(value)
    return value


def _plain_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    def uuid_text(row: dict[str, Any]) -> dict[str, Any]:
        if isinstance(row.get("u"), bytes):  # iceberg-rust hands uuids over as their 16 bytes
            row = {**row, "u": uuid.UUID(bytes=row["u"])}
        return row

    return sorted(({k: _plain(v) for k, v in uuid_text(r).items()} for r in rows), key=lambda r: r["id"])


def _create(config: CatalogConfig, identifier: str, schema: Any) -> Any:
    catalog = open_catalog(config)
    catalog.create_namespace_if_not_exists("shop")
    return catalog.create_table(identifier, schema=schema)


# --- conversions, without Spark --------------------------------------------------------------------------------------


def test_uuid_fixed_and_time_are_converted_and_checked_on_every_row() -> None:
    text = pa.array(["0189F7E8-1A2B-7C3D-8E4F-0123456789AB", None, "00000000-0000-0000-0000-000000000001"])
    converted = values.convert(text, "uuid", pa.uuid())
    assert converted.type == pa.uuid()
    assert converted.storage.to_pylist() == [
        uuid.UUID("0189f7e8-1a2b-7c3d-8e4f-0123456789ab").bytes,
        None,
        uuid.UUID(int=1).bytes,
    ]
    assert values.convert(pa.array([b"\x01" * 16]), "uuid", pa.uuid()).storage.to_pylist() == [b"\x01" * 16]
    for bad in ["0189f7e8-1a2b-7c3d-8e4f-0123456789a", "{0189f7e8-1a2b-7c3d-8e4f-0123456789ab}"]:
        with pytest.raises(values.BadValues, match=r"1 value.* not UUIDs.*row 1"):
            values.convert(pa.array(["00000000-0000-0000-0000-000000000000", bad]), "uuid", pa.uuid())
    with pytest.raises(values.BadValues, match=r"not exactly 16 bytes.*row 0, has 15"):
        values.convert(pa.array([b"x" * 15]), "uuid", pa.uuid())
    assert values.convert(pa.array([b"abcd", None]), "fixed[4]", pa.binary(4)).to_pylist() == [b"abcd", None]
    with pytest.raises(values.BadValues, match=r"2 value\(s\) are not exactly 4 bytes.*row 1, has 3"):
        values.convert(pa.array([b"abcd", b"abc", b"abcde"]), "fixed[4]", pa.binary(4))
    nanos = pa.array([3_600_000_000_000, None], pa.time64("ns"))
    assert values.convert(nanos, "time", pa.time64("us")).to_pylist() == [datetime.time(1, 0), None]
    with pytest.raises(values.BadValues, match=r"1 value\(s\) have digits below a microsecond.*row 1"):
        values.convert(pa.array([1000, 1001, None], pa.time64("ns")), "time", pa.time64("us"))


def test_a_bad_value_fails_the_task_naming_table_checkpoint_and_column(sqlite_catalog: CatalogConfig) -> None:
    table = _create(sqlite_catalog, TYPES, _types_schema())
    rows = _input_rows().set_column(1, "u", pa.array(["nope", None, None, None], pa.string()))
    with pytest.raises(BadRowError, match=rf"table {TYPES}, checkpoint 0, task 0: column 'u' \(uuid\): 1 value"):
        write_files(table, TYPES, "job", 0, rows)


# --- written by the Arrow writer, read by everyone ----------------------------------------------------------------


def _commit(config: CatalogConfig, identifier: str, rows: pa.Table) -> Any:
    assert stage_rows(config, identifier, "job", 0, rows)
    catalog = open_catalog(config)
    TableCommitter.of(config).commit_pending(identifier)
    return catalog.load_table(identifier)


@pytest.mark.interop
def test_every_primitive_round_trips_through_the_arrow_writer_to_every_reader(
    sqlite_catalog: CatalogConfig, java_reader: Path
) -> None:
    _create(sqlite_catalog, TYPES, _types_schema())
    _create(sqlite_catalog, CLOCK, _clock_schema())
    types = _commit(sqlite_catalog, TYPES, _input_rows())
    # Spark hands TimeType values to Python as nanoseconds.
    clock_rows = pa.table({"id": pa.array([1, 2, 3, 4], pa.int64()), "t": pa.array(TIMES, pa.time64("ns"))})
    clock = _commit(sqlite_catalog, CLOCK, clock_rows)
    expected = _plain_rows(_expected())
    expected_clock = _plain_rows([{"id": i, "t": t} for i, t in zip(ROWS["id"], TIMES, strict=True)])

    assert _plain_rows(icesink.read(types).to_pylist()) == expected
    assert _plain_rows(types.scan().to_arrow().to_pylist()) == expected  # pyiceberg
    assert _plain_rows(iceberg_rust_sql(types, "SELECT * FROM t").to_pylist()) == expected
    assert _plain_rows(icesink.read(clock).to_pylist()) == expected_clock
    assert _plain_rows(clock.scan().to_arrow().to_pylist()) == expected_clock
    assert _plain_rows(iceberg_rust_sql(clock, "SELECT * FROM t").to_pylist()) == expected_clock

    duck_types, duck_clock = read_with_duckdb(types.metadata_location, clock.metadata_location)
    assert _duck(duck_types) == expected
    assert _duck(duck_clock) == expected_clock

    # Iceberg 1.9.2's vectorized Spark reader cannot hand a uuid column to Spark ("Unsupported type:
    # UTF8String", whoever wrote the file); its row-based reader can.
    java = read_with_iceberg_java(java_reader, types.metadata_location, list(ROWS), {"vectorization-enabled": "false"})
    assert _java(java) == expected

    # Metrics: counts for every column, bounds that readers may prune with (none for uuid).
    (task,) = types.scan().plan_files()
    data_file = task.file
    assert data_file.null_value_counts == {1: 0, 2: 1, 3: 1, 4: 1, 5: 1, 6: 1, 7: 1, 8: 1}
    assert 2 not in data_file.lower_bounds and 2 not in data_file.upper_bounds
    assert data_file.lower_bounds[3] == b"\x00\x01\x02\x03" and data_file.upper_bounds[3] == b"\xff\xfe\xfd\xfc"
    assert iceberg_rust_sql(types, "SELECT id FROM t WHERE d < DATE '1000-01-02'").to_pylist() == [{"id": 2}]
    assert [r["id"] for r in clock.scan(row_filter="id >= 4").to_arrow().to_pylist()] == [4]


def _duck(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """DuckDB's JSON: binaries as base64, uuids and times as text, timestamps with a zone as local ISO text."""
    import base64

    out = []
    for row in rows:
        plain = {}
        for key, value in row.items():
            if isinstance(value, dict) and "base64" in value:
                value = base64.b64decode(value["base64"]).hex()
            elif key == "tz" and value is not None:
                value = datetime.datetime.fromisoformat(value).astimezone(UTC).isoformat()
            plain[key] = value
        out.append(plain)
    return sorted(out, key=lambda r: r["id"])


def _java(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Spark 3.5's rows as the Java reader prints them: bytes as base64, naive UTC datetimes, decimals as text."""
    import base64

    out = []
    for row in rows:
        plain = dict(row)
        for key in ("f", "b"):
            if plain[key] is not None:
                plain[key] = base64.b64decode(plain[key]["base64"]).hex()
        for key in ("ntz", "tz"):
            if plain[key] is not None:
                value = datetime.datetime.fromisoformat(plain[key])
                plain[key] = (value.replace(tzinfo=UTC) if key == "tz" else value).isoformat()
        if plain["d"] is not None:
            plain["d"] = datetime.date.fromisoformat(plain["d"]).isoformat()
        if plain["dec"] is not None:
            plain["dec"] = str(decimal.Decimal(plain["dec"]))
        out.append(plain)
    return sorted(out, key=lambda r: r["id"])


# --- through a stream: Spark's writer and the Arrow writer ---------------------------------------------------------


def _write_input(directory: Path, table: pa.Table) -> None:
    directory.mkdir(parents=True)
    pq.write_table(table, directory / "part-00000.parquet")
    order_for_file_source(directory / "part-00000.parquet", 0)


@pytest.mark.spark
@pytest.mark.parametrize("writer", ["spark", "arrow"])
def test_a_stream_writes_every_type_spark_has_through_both_writers(
    spark: Any, sqlite_catalog: CatalogConfig, tmp_path: Path, writer: str
) -> None:
    """Spark's own Parquet writer and the Arrow writer store the same values: binary, decimal(38),
    timestamps with and without zone and dates before 1970 and before the Gregorian reform."""
    rows = _input_rows().drop_columns(["u", "f"])
    _write_input(tmp_path / "in", rows)
    ddl = "id long, b binary, dec decimal(38,10), ntz timestamp_ntz, tz timestamp, d date"
    df = spark.readStream.schema(ddl).parquet(str(tmp_path / "in"))
    icesink.stream(
        df,
        table=TYPES,
        checkpoint_location=str(tmp_path / "ckpt"),
        trigger={"availableNow": True},
        create_table=True,
        catalog=sqlite_catalog,
        writer=writer,
    ).awaitTermination()
    table = open_catalog(sqlite_catalog).load_table(TYPES)
    assert [str(f.field_type) for f in table.schema().fields] == [
        "long",
        "binary",
        "decimal(38, 10)",
        "timestamp",
        "timestamptz",
        "date",
    ]
    expected = _plain_rows([{k: v for k, v in r.items() if k not in ("u", "f")} for r in _expected()])
    assert _plain_rows(icesink.read(table).to_pylist()) == expected
    assert _plain_rows(table.scan().to_arrow().to_pylist()) == expected
    assert _plain_rows(iceberg_rust_sql(table, "SELECT * FROM t").to_pylist()) == expected
    (duck,) = read_with_duckdb(table.metadata_location)
    assert _duck(duck) == expected


@pytest.mark.spark
def test_a_stream_fills_uuid_fixed_and_time_columns_from_spark_types(
    spark: Any, sqlite_catalog: CatalogConfig, tmp_path: Path
) -> None:
    from pyspark.sql import functions as F

    from icesink.errors import ConfigError

    _create(sqlite_catalog, TYPES, _types_schema())
    _write_input(tmp_path / "in", _input_rows())
    ddl = "id long, u string, f binary, b binary, dec decimal(38,10), ntz timestamp_ntz, tz timestamp, d date"
    df = spark.readStream.schema(ddl).parquet(str(tmp_path / "in"))
    with pytest.raises(ConfigError, match=r"writer='spark' cannot write.*'u', 'f'.*uuid, fixed, time"):
        icesink.stream(
            df, table=TYPES, checkpoint_location=str(tmp_path / "c0"), catalog=sqlite_catalog, writer="spark"
        )
    icesink.stream(
        df,
        table=TYPES,
        checkpoint_location=str(tmp_path / "ckpt"),
        trigger={"availableNow": True},
        catalog=sqlite_catalog,
    ).awaitTermination()
    table = open_catalog(sqlite_catalog).load_table(TYPES)
    assert _plain_rows(table.scan().to_arrow().to_pylist()) == _plain_rows(_expected())
    # Read back as a stream, uuids are strings again and fixed values binaries.
    delivered: list[dict[str, Any]] = []
    catalog = {"name": sqlite_catalog.name, "uri": sqlite_catalog.uri, "warehouse": sqlite_catalog.warehouse}
    icesink.read_stream(spark, TYPES, catalog=catalog, mode="append").writeStream.foreachBatch(
        lambda batch, _: delivered.extend(r.asDict() for r in batch.collect())
    ).option("checkpointLocation", str(tmp_path / "read-ckpt")).trigger(availableNow=True).start().awaitTermination()
    keep = ("id", "u", "f", "b", "dec", "d")
    assert _plain_rows([{k: r[k] for k in keep} for r in delivered]) == [
        {k: r[k] for k in keep} for r in _plain_rows(_expected())
    ]

    # time: Spark 4's TimeType, into a new table.
    clock_in = tmp_path / "clock"
    texts = pa.array([t.isoformat() if t else None for t in TIMES], pa.string())
    _write_input(clock_in, pa.table({"id": pa.array([1, 2, 3, 4], pa.int64()), "s": texts}))
    spark.conf.set("spark.sql.timeType.enabled", "true")  # Spark 4.3 still keeps TIME behind a flag
    try:
        clock_df = spark.readStream.schema("id long, s string").parquet(str(clock_in))
        clock_df = clock_df.select("id", F.col("s").cast("time").alias("t"))
        icesink.stream(
            clock_df,
            table=CLOCK,
            checkpoint_location=str(tmp_path / "clock-ckpt"),
            trigger={"availableNow": True},
            create_table=True,
            catalog=sqlite_catalog,
        ).awaitTermination()
    finally:
        spark.conf.unset("spark.sql.timeType.enabled")
    clock = open_catalog(sqlite_catalog).load_table(CLOCK)
    assert str(clock.schema().find_field("t").field_type) == "time"
    expected_clock = _plain_rows([{"id": i, "t": t} for i, t in zip(ROWS["id"], TIMES, strict=True)])
    assert _plain_rows(clock.scan().to_arrow().to_pylist()) == expected_clock


# Enough keys that, were the spellings distributed apart, some pair would land in two tasks.
PAIRED = [uuid.UUID(int=(i + 1) * 0x1F2E3D4C5B6A79880123456789ABCDEF % 2**128) for i in range(12)]


@pytest.mark.spark
def test_a_change_stream_keyed_on_a_uuid_column(spark: Any, sqlite_catalog: CatalogConfig, tmp_path: Path) -> None:
    """uuid keys arrive as text in any case; the same UUID spelled differently is the same key."""
    from pyiceberg.schema import Schema
    from pyiceberg.types import NestedField, StringType, UUIDType

    schema = Schema(NestedField(1, "u", UUIDType(), required=True), NestedField(2, "v", StringType()))
    _create(sqlite_catalog, "shop.keyed_by_uuid", schema)
    first, second = "0189f7e8-1a2b-7c3d-8e4f-0123456789ab", "ffffffff-0000-0000-0000-000000000001"
    batches = [
        [(first, "one", "I"), (second, "two", "I")],
        [(first.upper(), "one v2", "U"), (second, None, "D"), ("00000000-0000-0000-0000-000000000000", "z", "I")],
        # Within one micro-batch too: each of these keys arrives in two spellings, the lower-case one last.
        [(str(k).upper(), "upper", "I") for k in PAIRED] + [(str(k), "lower", "U") for k in PAIRED],
    ]
    source = tmp_path / "in"
    source.mkdir()
    for number, rows in enumerate(batches):
        columns = zip(*rows, strict=True)
        table = pa.table({k: pa.array(v, pa.string()) for k, v in zip(("u", "v", "op"), columns, strict=True)})
        pq.write_table(table, source / f"part-{number:05d}.parquet")
        order_for_file_source(source / f"part-{number:05d}.parquet", number)
        df = spark.readStream.schema("u string, v string, op string").parquet(str(source))
        icesink.stream(
            df,
            table="shop.keyed_by_uuid",
            checkpoint_location=str(tmp_path / "ckpt"),
            trigger={"availableNow": True},
            catalog=sqlite_catalog,
            equality_fields=["u"],
            op_column="op",
        ).awaitTermination()
    table = open_catalog(sqlite_catalog).load_table("shop.keyed_by_uuid")
    expected = sorted([(uuid.UUID(int=0), "z"), (uuid.UUID(first), "one v2"), *((k, "lower") for k in PAIRED)])
    assert (
        sorted(
            (uuid.UUID(bytes=r["u"]) if isinstance(r["u"], bytes) else r["u"], r["v"])
            for r in icesink.read(table).to_pylist()
        )
        == expected
    )
    assert sorted((r["u"], r["v"]) for r in table.scan().to_arrow().to_pylist()) == expected  # pyiceberg
