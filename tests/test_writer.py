"""The executor-side writer: Parquet that Iceberg readers accept, metrics, partitions, rolling."""

from __future__ import annotations

import datetime
import struct
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from icesink.errors import BadRowError
from icesink.paths import file_uri
from icesink.results import decode_write_result
from icesink.writer.metrics import truncate_upper_string
from icesink.writer.spec import ColumnSpec, PartitionFieldSpec, WriterSpec
from icesink.writer.task import TaskWriter, write_task

COLUMNS = (
    ColumnSpec(1, "id", "long", required=True),
    ColumnSpec(2, "name", "string", required=False),
    ColumnSpec(3, "amount", "double", required=False),
    ColumnSpec(4, "ts", "timestamptz", required=False),
    ColumnSpec(5, "day", "date", required=False),
    ColumnSpec(6, "price", "decimal(9, 2)", required=False),
)
START = datetime.datetime(2025, 12, 31, 22, tzinfo=datetime.UTC)


def rows(count: int, start: int = 0) -> pa.Table:
    import decimal

    ids = range(start, start + count)
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "name": pa.array([None if i % 10 == 0 else f"name-{i % 7}-{'x' * (i % 30)}" for i in ids]),
            "amount": pa.array([float("nan") if i % 13 == 0 else i / 4 for i in ids]),
            "ts": pa.array([START + datetime.timedelta(minutes=37 * i) for i in ids], pa.timestamp("us", tz="UTC")),
            "day": pa.array([datetime.date(2026, 1, 1) + datetime.timedelta(days=i % 40) for i in ids]),
            "price": pa.array([decimal.Decimal(i) / 100 for i in ids], pa.decimal128(9, 2)),
        }
    )


def spec(tmp_path: Path, partitions: tuple[PartitionFieldSpec, ...] = (), **overrides: object) -> WriterSpec:
    base = WriterSpec(
        table_name="shop.orders",
        data_location=file_uri(tmp_path / "data"),
        columns=COLUMNS,
        partition_fields=partitions,
        spec_id=0,
        job_id="job-1",
        checkpoint_id=42,
    )
    from dataclasses import replace

    return replace(base, **overrides)  # type: ignore[arg-type]


def read(path: str) -> pa.Table:
    return pq.read_table(path.removeprefix("file://"))


def test_parquet_carries_iceberg_field_ids_types_and_nullability(tmp_path: Path) -> None:
    writer = TaskWriter(spec(tmp_path), task_id=3, attempt=1)
    writer.write(rows(100))
    (f,) = writer.complete().data_files
    parquet_schema = pq.ParquetFile(f.path.removeprefix("file://")).schema
    arrow_schema = parquet_schema.to_arrow_schema()
    assert [int(field.metadata[b"PARQUET:field_id"]) for field in arrow_schema] == [1, 2, 3, 4, 5, 6]
    assert not arrow_schema.field("id").nullable
    assert arrow_schema.field("name").nullable
    ts = parquet_schema.column(3)
    assert ts.physical_type == "INT64"  # never INT96
    assert "timeUnit=microseconds" in str(ts.logical_type) and "isAdjustedToUTC=true" in str(ts.logical_type)
    written = read(f.path)
    expected = rows(100).cast(written.schema)
    assert written.drop_columns(["amount"]).to_pylist() == expected.drop_columns(["amount"]).to_pylist()
    assert str(written.column("amount").to_pylist()) == str(expected.column("amount").to_pylist())  # NaN-aware


def test_file_names_carry_job_checkpoint_task_and_attempt(tmp_path: Path) -> None:
    writer = TaskWriter(spec(tmp_path), task_id=3, attempt=1)
    writer.write(rows(10))
    (f,) = writer.complete().data_files
    name = f.path.rsplit("/", 1)[1]
    assert name.startswith("job-1-0000000042-00003-1-")
    other = TaskWriter(spec(tmp_path), task_id=3, attempt=1)
    other.write(rows(10))
    assert other.complete().data_files[0].path != f.path  # a rerun in another process never overwrites


def test_metrics_match_the_data(tmp_path: Path) -> None:
    data = rows(500)
    writer = TaskWriter(spec(tmp_path), task_id=0, attempt=0)
    writer.write(data.slice(0, 200))
    writer.write(data.slice(200))
    (f,) = writer.complete().data_files
    assert f.record_count == 500
    assert f.value_counts == dict.fromkeys(range(1, 7), 500)
    assert f.null_value_counts[2] == 50 and f.null_value_counts[1] == 0
    assert f.nan_value_counts == {3: sum(1 for i in range(500) if i % 13 == 0)}
    assert struct.unpack("<q", f.lower_bounds[1])[0] == 0
    assert struct.unpack("<q", f.upper_bounds[1])[0] == 499
    assert struct.unpack("<d", f.upper_bounds[3])[0] == 499 / 4  # NaN is not a bound
    last_ts = START + datetime.timedelta(minutes=37 * 499)
    assert struct.unpack("<q", f.upper_bounds[4])[0] == int(last_ts.timestamp() * 1_000_000)
    names = [n for n in data.column("name").to_pylist() if n is not None]
    assert f.lower_bounds[2] == min(names)[:16].encode()
    assert f.upper_bounds[2].decode() >= max(names)[:16]
    assert len(f.upper_bounds[2].decode()) <= 16
    assert f.file_size_bytes == Path(f.path.removeprefix("file://")).stat().st_size
    assert sum(f.column_sizes.values()) < f.file_size_bytes


def test_truncated_upper_bound_is_above_every_value_with_the_prefix() -> None:
    assert truncate_upper_string("a" * 20) == "a" * 15 + "b"
    assert truncate_upper_string("short") == "short"
    assert truncate_upper_string("a" * 15 + "\U0010ffff" + "zz") == "a" * 14 + "b"


def test_files_roll_at_the_target_size(tmp_path: Path) -> None:
    writer = TaskWriter(spec(tmp_path, target_file_size_bytes=64 * 1024, row_group_rows=5_000), task_id=0, attempt=0)
    for start in range(0, 60_000, 10_000):
        writer.write(rows(10_000, start))
    files = writer.complete().data_files
    assert len(files) > 3
    assert sum(f.record_count for f in files) == 60_000
    ids = sorted(i for f in files for i in read(f.path).column("id").to_pylist())
    assert ids == list(range(60_000))
    # A file is closed at the first row group that reaches the target.
    assert all(f.file_size_bytes < 64 * 1024 * 3 for f in files)


@pytest.mark.parametrize(
    ("transform", "source"),
    [
        ("identity", "name"),
        ("identity", "day"),
        ("year", "ts"),
        ("month", "ts"),
        ("day", "ts"),
        ("hour", "ts"),
        ("day", "day"),
        ("bucket[8]", "id"),
        ("bucket[5]", "name"),
        ("truncate[10]", "id"),
        ("truncate[3]", "name"),
        ("truncate[50]", "price"),
    ],
)
def test_partition_values_agree_with_pyiceberg(tmp_path: Path, transform: str, source: str) -> None:
    from pyiceberg.transforms import parse_transform
    from pyiceberg.types import DateType, DecimalType, LongType, StringType, TimestamptzType

    iceberg_types = {
        "id": LongType(),
        "name": StringType(),
        "ts": TimestamptzType(),
        "day": DateType(),
        "price": DecimalType(9, 2),
    }
    column = next(c for c in COLUMNS if c.name == source)
    field = PartitionFieldSpec(1000, f"{source}_p", column.field_id, transform)
    writer = TaskWriter(spec(tmp_path, (field,)), task_id=0, attempt=0)
    data = rows(300)
    writer.write(data)
    files = writer.complete().data_files
    assert sum(f.record_count for f in files) == 300
    oracle = parse_transform(transform).transform(iceberg_types[source])
    for f in files:
        content = read(f.path)
        values = content.column(source).to_pylist()
        expected = {oracle(_internal(v)) for v in values}
        assert expected == {f.partition[0]}, (f.path, expected, f.partition)
        assert f"/{source}_p=" in f.path


def _internal(value: object) -> object:
    """Iceberg's internal representation, which pyiceberg's transforms take."""
    if isinstance(value, datetime.datetime):
        return int(value.timestamp() * 1_000_000)
    if isinstance(value, datetime.date):
        return (value - datetime.date(1970, 1, 1)).days
    return value


def test_null_in_required_column_names_table_checkpoint_and_column_and_leaves_no_files(tmp_path: Path) -> None:
    good = rows(20)
    bad = good.set_column(0, pa.field("id", pa.int64()), pa.array([1, None, *range(18)], pa.int64()))
    run = write_task(spec(tmp_path))
    with pytest.raises(BadRowError) as raised:
        list(run(iter([*good.to_batches(), *bad.to_batches()])))
    message = str(raised.value)
    assert "shop.orders" in message and "checkpoint 42" in message and "'id'" in message
    assert not [p for p in (tmp_path / "data").rglob("*.parquet")]


def test_task_yields_one_encoded_result_even_without_rows(tmp_path: Path) -> None:
    (batch,) = list(write_task(spec(tmp_path))(iter([])))
    result = decode_write_result(batch.column(0)[0].as_py())
    assert result.checkpoint_id == 42 and result.data_files == ()


def test_columns_of_nearly_distinct_values_are_not_dictionary_encoded(tmp_path: Path) -> None:
    """ids, timestamps, amounts and prices are all distinct here, names and days repeat: only the latter are
    worth a dictionary, and every value still reads back the same."""
    data = rows(5000)
    writer = TaskWriter(spec(tmp_path), task_id=0, attempt=0)
    writer.write(data)
    (record,) = writer.complete().data_files
    metadata = pq.read_metadata(record.path.removeprefix("file://"))
    group = metadata.row_group(0)
    dictionary = {
        group.column(i).path_in_schema: group.column(i).has_dictionary_page for i in range(metadata.num_columns)
    }
    assert dictionary == {"id": False, "name": True, "amount": False, "ts": False, "day": True, "price": False}
    assert repr(read(record.path).to_pylist()) == repr(data.to_pylist())  # repr: NaN equals NaN


def test_compression_properties_are_read_as_iceberg_java_reads_them() -> None:
    from icesink.errors import ConfigError
    from icesink.iceberg.describe import DATA_CODEC, DATA_LEVEL, DELETE_CODEC, DELETE_LEVEL, _parquet_compression
    from icesink.writer.spec import Compression

    def resolved(properties: dict[str, str]) -> tuple[Compression, Compression]:
        return _parquet_compression(properties, "shop.t ü%")

    zstd = Compression("zstd")
    assert resolved({}) == (zstd, zstd)
    assert resolved({DATA_CODEC: " ZSTD "}) == (zstd, zstd)
    assert resolved({DATA_LEVEL: "-5"}) == (Compression("zstd", -5), Compression("zstd", -5))
    assert resolved({DATA_CODEC: "lz4"})[0] == Compression("lz4_raw")
    assert resolved({DATA_CODEC: "none"})[0] == Compression("none")
    # A level on a codec without levels is ignored, as Iceberg Java ignores it.
    assert resolved({DATA_CODEC: "snappy", DATA_LEVEL: "7"})[0] == Compression("snappy")
    # gzip levels by Hadoop's names (what Iceberg Java takes) and by number.
    for raw, level in (("BEST_COMPRESSION", 9), ("best_speed", 1), ("SIX", 6), ("DEFAULT_COMPRESSION", None), ("0", 0)):
        assert resolved({DATA_CODEC: "gzip", DATA_LEVEL: raw})[0] == Compression("gzip", level), raw
    # Delete files take their own properties and fall back to the data files' ones.
    assert resolved({DATA_LEVEL: "9", DELETE_CODEC: "snappy"}) == (Compression("zstd", 9), Compression("snappy"))
    assert resolved({DATA_CODEC: "gzip", DELETE_LEVEL: "2"}) == (Compression("gzip"), Compression("gzip", 2))

    refused = {
        f"{DATA_CODEC}='lzo' cannot be written": {DATA_CODEC: "lzo"},
        f"{DATA_LEVEL}='1_0' is not a zstd level": {DATA_LEVEL: "1_0"},
        f"{DATA_LEVEL}='23' is not a zstd level": {DATA_LEVEL: "23"},
        f"{DELETE_LEVEL}='x' is not a zstd level": {DELETE_LEVEL: "x"},
        f"{DATA_LEVEL}='10' is not a gzip level": {DATA_CODEC: "gzip", DATA_LEVEL: "10"},
    }
    for expected, properties in refused.items():
        with pytest.raises(ConfigError) as error:
            resolved(properties)
        message = str(error.value)
        assert message.startswith(f"table shop.t ü%: {expected}"), message
        assert "set_properties" in message, message


def test_pyarrow_gets_the_levels_iceberg_javas_writer_uses_when_none_is_set(tmp_path: Path) -> None:
    from icesink.writer.position_deletes import write_position_deletes
    from icesink.writer.spec import Compression

    assert Compression("zstd").for_pyarrow() == ("zstd", 3)
    assert Compression("gzip").for_pyarrow() == ("gzip", 6)
    assert Compression("zstd", 1).for_pyarrow() == ("zstd", 1)
    assert Compression("lz4_raw").for_pyarrow() == ("lz4", None)
    location = file_uri(tmp_path / "pos.parquet")
    write_position_deletes(location, {"file:///t/a.parquet": pa.array([3, 1])}, 0, (), (), Compression("gzip"))
    assert pq.ParquetFile(tmp_path / "pos.parquet").metadata.row_group(0).column(0).compression == "GZIP"
