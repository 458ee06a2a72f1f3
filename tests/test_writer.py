"""The executor-side writer: Parquet that Iceberg readers accept, metrics, partitions, rolling."""

from __future__ import annotations

import datetime
import struct
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

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


# --- many partitions: at most spec.max_open_files files open at once --------------------------------------------------


class _OpenCounter:
    """Counts the Parquet files open at the same time, by wrapping ParquetFile."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        import icesink.writer.files as files

        self.open = self.peak = self.opened = 0
        original = files.ParquetFile
        counter = self

        class Counted(original):  # type: ignore[misc, valid-type]
            def __init__(self, *args: object, **kwargs: object) -> None:
                super().__init__(*args, **kwargs)
                counter.open += 1
                counter.opened += 1
                counter.peak = max(counter.peak, counter.open)

            def close(self):  # type: ignore[no-untyped-def]
                counter.open -= 1
                return super().close()

            def abort(self) -> None:
                counter.open -= 1
                super().abort()

        monkeypatch.setattr(files, "ParquetFile", Counted)


def _by_id_partition(tmp_path: Path, **overrides: object) -> WriterSpec:
    """Partitioned by id's bucket, so the partition of every row is known from its id."""
    return spec(tmp_path, (PartitionFieldSpec(1000, "id_b", 1, "bucket[997]"),), **overrides)


@given(
    batches=st.lists(st.lists(st.integers(0, 300), min_size=1, max_size=40), min_size=1, max_size=12),
    max_open=st.integers(1, 4),
    buffer_cap=st.sampled_from([1, 4_000, 256 * 1024 * 1024]),
)
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_a_task_over_many_partitions_writes_every_row_once_with_few_files_open(
    tmp_path_factory: pytest.TempPathFactory,
    monkeypatch: pytest.MonkeyPatch,
    batches: list[list[int]],
    max_open: int,
    buffer_cap: int,
) -> None:
    """Rows in any order over many partitions, whatever the open-file limit and the memory bound: every row is in
    exactly one file of its own partition, no name repeats, and no more than the limit is ever open."""
    from pyiceberg.transforms import BucketTransform
    from pyiceberg.types import LongType

    import icesink.writer.task as task

    monkeypatch.setattr(task, "MAX_BUFFERED_BYTES", buffer_cap)
    counter = _OpenCounter(monkeypatch)
    tmp_path = tmp_path_factory.mktemp("fanout")
    writer = TaskWriter(_by_id_partition(tmp_path, max_open_files=max_open), task_id=0, attempt=0)
    written: list[int] = []
    for i, ids in enumerate(batches):
        batch = rows(1).take([0] * len(ids)).set_column(0, "id", pa.array([1000 * i + v for v in ids], pa.int64()))
        writer.write(batch)
        written += batch.column("id").to_pylist()
        assert counter.open <= max_open
    result = writer.complete()
    assert counter.peak <= max_open and counter.open == 0
    bucket = BucketTransform(997).transform(LongType())
    found: list[int] = []
    for f in result.data_files:
        ids = read(f.path).column("id").to_pylist()
        assert {bucket(v) for v in ids} == {f.partition[0]}, f.path
        assert f.record_count == len(ids)
        found += ids
    assert sorted(found) == sorted(written)
    assert len({f.path for f in result.data_files}) == len(result.data_files)
    assert sorted(p.name for p in (tmp_path / "data").rglob("*.parquet")) == sorted(
        f.path.rsplit("/", 1)[1] for f in result.data_files
    )


def test_a_task_forgets_a_partition_it_has_finished(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With one file open at a time and rows written as they come, a partition left behind holds no writer."""
    import icesink.writer.task as task

    monkeypatch.setattr(task, "MAX_BUFFERED_BYTES", 1)
    writer = TaskWriter(_by_id_partition(tmp_path, max_open_files=1), task_id=0, attempt=0)
    for start in range(0, 2_000, 100):
        writer.write(rows(100, start))
    assert len(writer._open) <= 1 and writer._buffer == [], "state kept for partitions no longer written"
    result = writer.complete()
    assert sum(f.record_count for f in result.data_files) == 2_000


def test_a_failed_task_over_many_partitions_leaves_no_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Files closed early to make room are removed with the rest when the attempt fails."""
    import icesink.writer.task as task

    monkeypatch.setattr(task, "MAX_BUFFERED_BYTES", 1)
    good = rows(500)
    bad = good.slice(0, 20).set_column(0, pa.field("id", pa.int64()), pa.array([None] * 20, pa.int64()))
    run = write_task(_by_id_partition(tmp_path, max_open_files=2))
    with pytest.raises(BadRowError):
        list(run(iter([*good.to_batches(max_chunksize=50), *bad.to_batches()])))
    assert not list((tmp_path / "data").rglob("*.parquet"))


def test_max_open_files_is_a_checked_table_property(tmp_path: Path) -> None:
    from icesink.errors import ConfigError
    from icesink.iceberg.describe import check_write_properties

    check_write_properties({"icesink.write.max-open-files": "8"}, "shop.o ü")
    for bad in ("0", "-1", "many", "1.5"):
        with pytest.raises(ConfigError, match=r"table shop\.o ü: table property icesink\.write\.max-open-files="):
            check_write_properties({"icesink.write.max-open-files": bad}, "shop.o ü")
