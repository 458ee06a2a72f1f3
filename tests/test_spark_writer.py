"""Appends written by Spark's own Parquet writer: the same table, metadata and rows as icesink's Arrow writer."""

from __future__ import annotations

import datetime
import decimal
import math
import re
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from icesink.catalog.config import CatalogConfig
from icesink.catalog.ledger import Ledger
from icesink.catalog.loader import open_catalog
from icesink.errors import ConfigError
from tests.helpers.outcomes import iceberg_rust_sql, read_with_iceberg_java
from tests.helpers.streams import add_input_files, expected_rows, input_stream, order_for_file_source, run_available

pytestmark = pytest.mark.spark

TYPED_SCHEMA = (
    "b boolean, i int, l long, f float, d double, dec decimal(10,2), big decimal(30,5), "
    "s string, bin binary, dt date, ts timestamp, ntz timestamp_ntz"
)
UTC = datetime.UTC


def typed_rows(count: int) -> pa.Table:
    """Every type the writer takes, with nulls, a NaN, long multi-byte strings and dates before 1582."""
    rows = []
    for n in range(count):
        rows.append(
            {
                "b": None if n % 7 == 3 else n % 2 == 0,
                "i": None if n % 5 == 4 else n - 50,
                "l": n * 1_000_003,
                "f": float(n) / 4,
                "d": math.nan if n == 17 else None if n % 11 == 5 else n * 0.5 - 3,
                "dec": decimal.Decimal(n * 37 - 900) / 100,
                "big": None if n % 13 == 0 else decimal.Decimal(n) * decimal.Decimal("123456789012.34567"),
                "s": None if n % 9 == 1 else f"ünïcode-name-longer-than-sixteen-{n:04d}",
                "bin": bytes([n % 256, 255, 0, 7]) * 5,
                "dt": datetime.date(1000, 1, 1) + datetime.timedelta(days=n * 3000),
                "ts": datetime.datetime(1500, 1, 1, tzinfo=UTC) + datetime.timedelta(days=n * 1000, microseconds=n),
                "ntz": datetime.datetime(2026, 3, 1) + datetime.timedelta(minutes=n),
            }
        )
    schema = pa.schema(
        [
            ("b", pa.bool_()),
            ("i", pa.int32()),
            ("l", pa.int64()),
            ("f", pa.float32()),
            ("d", pa.float64()),
            ("dec", pa.decimal128(10, 2)),
            ("big", pa.decimal128(30, 5)),
            ("s", pa.string()),
            ("bin", pa.binary()),
            ("dt", pa.date32()),
            ("ts", pa.timestamp("us", tz="UTC")),
            ("ntz", pa.timestamp("us")),
        ]
    )
    return pa.Table.from_pylist(rows, schema=schema)


def write_typed_input(directory: Path, count: int) -> pa.Table:
    directory.mkdir(parents=True)
    rows = typed_rows(count)
    pq.write_table(rows, directory / "part-00000.parquet")
    order_for_file_source(directory / "part-00000.parquet", 0)
    return rows


def comparable(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """NaN never equals NaN; compare it as a marker."""
    return [{k: "NaN" if isinstance(v, float) and math.isnan(v) else v for k, v in r.items()} for r in rows]


def stream_new_table(df: Any, catalog: CatalogConfig, tmp_path: Path, table: str, writer: str = "spark") -> Any:
    """Run a stream over everything available into a table it creates."""
    return run_available(
        df,
        table=table,
        checkpoint_location=str(tmp_path / f"ckpt-{table}"),
        create_table=True,
        catalog=catalog,
        writer=writer,
    )


def only_data_file(table: Any) -> Any:
    (task,) = list(table.scan().plan_files())
    return task.file


def test_spark_written_files_carry_the_same_metadata_as_the_arrow_writers(
    spark: Any, sqlite_catalog: CatalogConfig, tmp_path: Path
) -> None:
    write_typed_input(tmp_path / "in", 300)
    for writer in ("spark", "arrow"):
        stream_new_table(
            input_stream(spark, tmp_path / "in", TYPED_SCHEMA), sqlite_catalog, tmp_path, f"shop.typed_{writer}", writer
        )
    # Spark's writer settings went to the query's own session, not to the one the test shares.
    assert spark.conf.get("spark.sql.parquet.outputTimestampType") == "INT96"
    catalog = open_catalog(sqlite_catalog)
    ours = only_data_file(catalog.load_table("shop.typed_spark"))
    theirs = only_data_file(catalog.load_table("shop.typed_arrow"))
    d = catalog.load_table("shop.typed_spark").schema().find_field("d").field_id
    f = catalog.load_table("shop.typed_spark").schema().find_field("f").field_id

    assert ours.record_count == theirs.record_count == 300
    assert ours.value_counts == theirs.value_counts
    assert ours.null_value_counts == theirs.null_value_counts
    assert set(ours.column_sizes) == set(theirs.column_sizes)
    # Every bound agrees, strings truncated to 16 code points alike, except the double column holding a NaN:
    # Spark's footer put the NaN in its max, so no bound is claimed there, and no NaN count is guessed.
    assert {k: v for k, v in theirs.lower_bounds.items() if k != d} == ours.lower_bounds
    assert {k: v for k, v in theirs.upper_bounds.items() if k != d} == ours.upper_bounds
    assert f in ours.lower_bounds and d in theirs.lower_bounds
    assert theirs.nan_value_counts[d] == 1 and not ours.nan_value_counts
    assert ours.split_offsets and ours.file_format == theirs.file_format


def test_readers_nobody_here_wrote_read_spark_written_files_exactly(
    spark: Any, sqlite_catalog: CatalogConfig, tmp_path: Path, java_reader: Path
) -> None:
    import icesink

    typed = write_typed_input(tmp_path / "in", 300)
    expected = typed.to_pylist()
    stream_new_table(input_stream(spark, tmp_path / "in", TYPED_SCHEMA), sqlite_catalog, tmp_path, "shop.typed")
    table = open_catalog(sqlite_catalog).load_table("shop.typed")

    assert comparable(table.scan().to_arrow().sort_by("l").to_pylist()) == comparable(expected)
    rust = iceberg_rust_sql(table, "SELECT * FROM t ORDER BY l")
    assert comparable(rust.cast(typed.schema).to_pylist()) == comparable(expected)
    assert comparable(icesink.read(table).sort_by("l").to_pylist()) == comparable(expected)

    columns = ["l", "i", "b", "dec", "s", "dt"]
    java = sorted(read_with_iceberg_java(java_reader, table.metadata_location, columns), key=lambda r: r["l"])
    as_text = ("dec", "dt")  # the reader prints decimals and dates as text
    assert java == [{c: str(r[c]) if c in as_text and r[c] is not None else r[c] for c in columns} for r in expected]

    # Pruning by the footer bounds: a range of l, and a date before 1582.
    assert {t.file.file_path for t in table.scan(row_filter="l >= 1000000000").plan_files()} == set()
    ancient = iceberg_rust_sql(table, "SELECT count(*) AS n FROM t WHERE dt < DATE '1001-01-01'")
    assert ancient.column("n")[0].as_py() == 1


def test_files_get_icesink_names_and_roll_at_the_target_size(
    spark: Any, sqlite_catalog: CatalogConfig, tmp_path: Path
) -> None:
    batches = [(0, 20_000), (20_000, 20_000), (40_000, 20_000)]
    add_input_files(tmp_path / "in", batches[:1])
    options = dict(table="shop.orders", checkpoint_location=str(tmp_path / "ckpt"), catalog=sqlite_catalog)
    run_available(input_stream(spark, tmp_path / "in"), create_table=True, **options)
    table = open_catalog(sqlite_catalog).load_table("shop.orders")
    target = 40_000
    with table.transaction() as tx:
        tx.set_properties({"write.target-file-size-bytes": str(target)})
    add_input_files(tmp_path / "in", batches[1:])
    query = run_available(input_stream(spark, tmp_path / "in"), **options)

    table = open_catalog(sqlite_catalog).load_table("shop.orders")
    files_by_checkpoint: dict[int, list[Any]] = {}
    name = re.compile(rf"^{query.id}-(\d{{10}})-(\d{{5}})-0-[0-9a-f]{{32}}-(\d{{5}})\.parquet$")
    for task in table.scan().plan_files():
        file_name = task.file.file_path.rsplit("/", 1)[1]
        match = name.match(file_name)
        assert match, file_name
        assert task.file.file_path == f"{table.location()}/data/{file_name}"
        files_by_checkpoint.setdefault(int(match.group(1)), []).append(task.file)
    assert sorted(files_by_checkpoint) == [0, 1, 2]
    # The empty table told nothing about bytes per row: one file for the one input split.
    assert len(files_by_checkpoint[0]) == 1
    # Checkpoint 1 (a restarted stream) rolls by the table's totals, checkpoint 2 by what the stream saw.
    for checkpoint in (1, 2):
        sizes = sorted(f.file_size_in_bytes for f in files_by_checkpoint[checkpoint])
        assert len(sizes) >= 4, (checkpoint, sizes)
        assert all(0.5 * target <= size <= 1.5 * target for size in sizes[1:]), (checkpoint, sizes)
    assert iceberg_rust_sql(table, "SELECT count(*) AS n FROM t").column("n")[0].as_py() == 60_000
    data = Path(table.location().removeprefix("file://")) / "data"
    assert not [p.name for p in data.iterdir() if p.name.startswith(".icesink-scratch")]


def test_a_failing_spark_write_leaves_no_scratch_directory_and_stages_nothing(
    spark: Any, sqlite_catalog: CatalogConfig, tmp_path: Path
) -> None:
    from pyspark.errors import StreamingQueryException
    from pyspark.sql import functions as F

    add_input_files(tmp_path / "in", [(0, 500), (500, 500)])
    df = input_stream(spark, tmp_path / "in").withColumn(
        "name", F.when(F.col("id") == 700, F.raise_error(F.lit("bad row 700"))).otherwise(F.col("name"))
    )
    with pytest.raises(StreamingQueryException, match="bad row 700"):
        stream_new_table(df, sqlite_catalog, tmp_path, "shop.orders")
    table = open_catalog(sqlite_catalog).load_table("shop.orders")
    assert [r.checkpoint_id for r in Ledger(sqlite_catalog).for_table("shop.orders")] == [0]
    assert table.scan().to_arrow().sort_by("id").to_pylist() == expected_rows([(0, 500)]).to_pylist()
    data = Path(table.location().removeprefix("file://")) / "data"
    assert len(list(data.iterdir())) == 1  # the first checkpoint's file, nothing else


def test_writer_spark_where_spark_cannot_write_is_refused_with_the_reason(
    spark: Any, sqlite_catalog: CatalogConfig, tmp_path: Path
) -> None:
    import icesink

    add_input_files(tmp_path / "in", [(0, 10)])
    with pytest.raises(ConfigError, match=r"shop\.orders: writer='spark' .*partitioned"):
        icesink.stream(
            input_stream(spark, tmp_path / "in"),
            table="shop.orders",
            checkpoint_location=str(tmp_path / "ckpt"),
            create_table=True,
            partition_by=["day(ts)"],
            catalog=sqlite_catalog,
            writer="spark",
        )
    with pytest.raises(ConfigError, match="writer must be one of"):
        icesink.stream(
            input_stream(spark, tmp_path / "in"),
            table="shop.orders",
            checkpoint_location=str(tmp_path / "ckpt"),
            catalog=sqlite_catalog,
            writer="jvm",
        )


def test_an_empty_micro_batch_adds_no_file_and_no_snapshot(
    spark: Any, sqlite_catalog: CatalogConfig, tmp_path: Path
) -> None:
    from pyspark.sql import functions as F

    add_input_files(tmp_path / "in", [(0, 300), (300, 300), (600, 300)])
    df = input_stream(spark, tmp_path / "in").where((F.col("id") < 300) | (F.col("id") >= 600))
    stream_new_table(df, sqlite_catalog, tmp_path, "shop.orders")
    table = open_catalog(sqlite_catalog).load_table("shop.orders")
    assert len(table.metadata.snapshots) == 2
    assert [r.checkpoint_id for r in Ledger(sqlite_catalog).for_table("shop.orders")] == [0, 1, 2]
    data = Path(table.location().removeprefix("file://")) / "data"
    assert len(list(data.iterdir())) == 2
    assert table.scan().to_arrow().sort_by("id").to_pylist() == expected_rows([(0, 300), (600, 300)]).to_pylist()


def test_what_spark_cannot_write_is_named(spark: Any) -> None:
    from dataclasses import replace

    from pyspark.sql import functions as F

    from icesink.sink.spark_writer import spark_writer_refusal
    from icesink.writer.spec import ChangeSpec, ColumnSpec, Compression, PartitionFieldSpec, WriterSpec

    spec = WriterSpec("shop.t", "file:///tmp/t/data", (ColumnSpec(1, "id", "long", True),), (), 0, "job")
    required = spark.range(3)  # Spark knows id is never null
    nullable = required.select(F.when(F.col("id") > 0, F.col("id")).alias("id"))
    assert spark_writer_refusal(spec, required) is None
    assert spark_writer_refusal(replace(spec, compression=Compression("snappy")), required) is None
    assert spark_writer_refusal(replace(spec, compression=Compression("zstd", 9)), required) is None
    assert spark_writer_refusal(replace(spec, compression=Compression("gzip")), required) is None
    refusals = {
        "partitioned": spark_writer_refusal(
            replace(spec, partition_fields=(PartitionFieldSpec(1000, "b", 1, "bucket[4]"),)), required
        ),
        "not a file system path": spark_writer_refusal(replace(spec, data_location="s3://bucket/t/data"), required),
        "change stream": spark_writer_refusal(replace(spec, changes=ChangeSpec((1,))), required),
        "'brotli' codec": spark_writer_refusal(replace(spec, compression=Compression("brotli")), required),
        "cannot set a gzip level": spark_writer_refusal(replace(spec, compression=Compression("gzip", 9)), required),
        "required column(s) 'id'": spark_writer_refusal(spec, nullable),
    }
    for expected, refusal in refusals.items():
        assert refusal is not None and expected in refusal, (expected, refusal)


def test_both_writers_compress_at_the_tables_level_and_iceberg_javas_by_default(
    spark: Any, sqlite_catalog: CatalogConfig, tmp_path: Path
) -> None:
    add_input_files(tmp_path / "in", [(0, 3000)])
    catalog = open_catalog(sqlite_catalog)
    sizes: dict[tuple[str, str], int] = {}
    codecs: dict[tuple[str, str], set[str]] = {}
    settings: dict[str, dict[str, str]] = {
        "default": {},
        "level 1": {"write.parquet.compression-level": "1"},
        "level 3": {"write.parquet.compression-level": "3"},
        "uncompressed": {"write.parquet.compression-codec": "uncompressed"},
        "lz4": {"write.parquet.compression-codec": "lz4"},
    }
    for writer in ("spark", "arrow"):
        for label, properties in settings.items():
            name = f"shop.{writer} {label}"
            run_available(
                input_stream(spark, tmp_path / "in"),
                table=name,
                checkpoint_location=str(tmp_path / f"ckpt-{writer}-{label}"),
                create_table=True,
                table_properties=properties,
                catalog=sqlite_catalog,
                writer=writer,
            )
            table = catalog.load_table(name)
            assert table.scan().to_arrow().sort_by("id").to_pylist() == expected_rows([(0, 3000)]).to_pylist()
            data_file = only_data_file(table)
            sizes[(writer, label)] = data_file.file_size_in_bytes
            footer = pq.ParquetFile(data_file.file_path.removeprefix("file://")).metadata
            codecs[(writer, label)] = {footer.row_group(0).column(i).compression for i in range(footer.num_columns)}
    for writer in ("spark", "arrow"):
        # No level set: zstd at level 3, as Iceberg Java writes it, not at pyarrow's own default of 1
        # (parquet-mr's default is 3 already: for Spark's writer, level 1 shows the level reaches it).
        assert sizes[(writer, "default")] == sizes[(writer, "level 3")] != sizes[(writer, "level 1")], sizes
        assert sizes[(writer, "uncompressed")] > sizes[(writer, "level 1")], sizes
        assert codecs[(writer, "default")] == {"ZSTD"} and codecs[(writer, "uncompressed")] == {"UNCOMPRESSED"}
    # Both writers write lz4 as the same Parquet codec (LZ4_RAW), whichever wrote the file.
    assert codecs[("spark", "lz4")] == codecs[("arrow", "lz4")] != codecs[("spark", "default")], codecs


CHANGE_IT = r"change it in table_properties \(no table was created\)"


@pytest.mark.parametrize(
    ("properties", "named"),
    [
        ({"write.parquet.compression-level": "fast"}, r"write\.parquet\.compression-level='fast' is not a zstd level"),
        (
            {"write.parquet.compression-codec": "gzip", "write.parquet.compression-level": "12"},
            r"write\.parquet\.compression-level='12' is not a gzip level; "
            + CHANGE_IT
            + r" to a whole number from 0 to 9 or one of Hadoop's names",
        ),
        (
            {"write.parquet.compression-codec": "lzo"},
            r"write\.parquet\.compression-codec='lzo' cannot be written; " + CHANGE_IT + " to one of",
        ),
    ],
)
def test_a_compression_setting_no_writer_can_honour_is_refused_before_the_table_exists(
    spark: Any, sqlite_catalog: CatalogConfig, tmp_path: Path, properties: dict[str, str], named: str
) -> None:
    import icesink

    add_input_files(tmp_path / "in", [(0, 10)])
    with pytest.raises(ConfigError, match=rf"table shop\.orders ü%/x: {named}"):
        icesink.stream(
            input_stream(spark, tmp_path / "in"),
            table="shop.orders ü%/x",
            checkpoint_location=str(tmp_path / "ckpt"),
            create_table=True,
            table_properties=properties,
            catalog=sqlite_catalog,
        )
    assert not open_catalog(sqlite_catalog).table_exists("shop.orders ü%/x")


def test_spark_written_files_get_the_bloom_filters_the_table_asks_for(
    spark: Any, sqlite_catalog: CatalogConfig, tmp_path: Path
) -> None:
    """What the table's bloom filter properties ask of the Arrow writer, parquet-mr writes too: a filter that
    holds every value written (and few others) on the columns named and no other, except where a column chunk
    is dictionary-encoded throughout (``name``: 97 distinct values), for which parquet-mr writes none."""
    import struct

    from icesink.iceberg.bloom_filters import hashes, may_hold_any, read_bitset

    add_input_files(tmp_path / "in", [(0, 500)])
    stream_new_table(input_stream(spark, tmp_path / "in"), sqlite_catalog, tmp_path, "shop.orders")
    table = open_catalog(sqlite_catalog).load_table("shop.orders")
    with table.transaction() as transaction:
        transaction.set_properties(
            {
                "write.parquet.bloom-filter-enabled.column.id": "true",
                "write.parquet.bloom-filter-fpp.column.id": "0.001",
                "write.parquet.bloom-filter-enabled.column.name": "true",
            }
        )
    add_input_files(tmp_path / "in", [(500, 500)])
    stream_new_table(input_stream(spark, tmp_path / "in"), sqlite_catalog, tmp_path, "shop.orders")
    table = open_catalog(sqlite_catalog).load_table("shop.orders")
    oldest, newest = sorted((task.file for task in table.scan().plan_files()), key=lambda f: f.file_path)
    with table.io.new_input(oldest.file_path).open() as stream:
        assert not any(c.bloom_filter_offset for c in _chunks(pq.ParquetFile(stream)).values())
    with table.io.new_input(newest.file_path).open() as stream:
        parquet = pq.ParquetFile(stream)
        chunks = _chunks(parquet)
        assert [name for name, chunk in chunks.items() if chunk.bloom_filter_offset] == ["id"]
        assert "PLAIN" not in chunks["name"].encodings and "PLAIN_DICTIONARY" in chunks["name"].encodings
        blocks = read_bitset(stream, chunks["id"].bloom_filter_offset, chunks["id"].bloom_filter_length)
        assert blocks is not None
        assert all(may_hold_any(blocks, hashes([struct.pack("<q", v)])) for v in range(500, 1000))
        assert sum(may_hold_any(blocks, hashes([struct.pack("<q", v)])) for v in range(10_000, 11_000)) < 10
    assert sorted(table.scan().to_arrow().column("id").to_pylist()) == list(range(1000))


def _chunks(parquet: Any) -> dict[str, Any]:
    """The first row group's column chunks, by column name."""
    row_group = parquet.metadata.row_group(0)
    return {name: row_group.column(n) for n, name in enumerate(parquet.schema_arrow.names)}
