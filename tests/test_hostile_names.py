"""Hostile names through real Spark streams, read back by every reader: nothing lost, nothing hidden.

Random rows whose partition values and strings are drawn from hostile text
(spaces, ``%``, ``/``, ``?``, ``#``, ``=``, non-ASCII, emoji, mixed Unicode
normalisation, long and empty strings, nulls) are streamed, with column names
Spark finds hard (a dot, a backtick, a slash, CJK), into a warehouse under a
directory whose name has a space and non-ASCII letters:

* an append table partitioned by identity, ``truncate`` and ``bucket`` of such
  columns (icesink's Arrow writer);
* an unpartitioned append table (Spark's own Parquet writer);
* an upsert table keyed by such a column and bucketed by it (equality deletes).

Each is read back exactly by ``icesink.read`` and iceberg-rust, and
``committer gc --dry-run --older-than 0s`` lists no file of it; at the end
Iceberg Java 1.9.2 and DuckDB read every table written.
"""

from __future__ import annotations

import datetime
import itertools
import tempfile
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import icesink
from icesink import paths
from icesink.catalog import database
from icesink.catalog.config import CatalogConfig
from icesink.catalog.loader import open_catalog
from icesink.committer.gc import collect_garbage
from tests.helpers.outcomes import check_outcome, iceberg_rust_sql, read_many_with_iceberg_java, read_with_duckdb
from tests.helpers.streams import order_for_file_source
from tests.test_paths import hostile_text

pytestmark = [pytest.mark.spark, pytest.mark.interop]

KEY, CITY, NAME, CODE = "order.id `k`", "city/name é", "名前.`x`", "a.b"
COLUMNS = [KEY, CITY, NAME, CODE]
PARTITIONED = [CITY, "truncate(2, `名前.``x```)", f"bucket(4, {CODE})"]
_numbers = itertools.count()


def _spark_schema() -> Any:
    from pyspark.sql.types import LongType, StringType, StructField, StructType

    return StructType([StructField(KEY, LongType()), *[StructField(c, StringType()) for c in COLUMNS[1:]]])


def _rows(values: list[str | None], first_id: int = 0) -> pa.Table:
    return pa.table(
        {
            KEY: pa.array(range(first_id, first_id + len(values)), pa.int64()),
            CITY: pa.array(values, pa.string()),
            NAME: pa.array(list(reversed(values)), pa.string()),
            CODE: pa.array([None if v is None else v[-2:] for v in values], pa.string()),
        }
    )


def _input(directory: Path, tables: list[pa.Table]) -> None:
    directory.mkdir(parents=True)
    for number, table in enumerate(tables):
        path = directory / f"part-{number:05d}.parquet"
        pq.write_table(table, path)
        order_for_file_source(path, number)


def _stream(spark: Any, directory: Path, config: CatalogConfig, identifier: str, **options: Any) -> None:
    df = spark.readStream.schema(_spark_schema()).option("maxFilesPerTrigger", 1).parquet(str(directory))
    query = icesink.stream(
        df,
        table=identifier,
        checkpoint_location=str(directory.parent / f"ckpt-{identifier}"),
        trigger={"availableNow": True},
        create_table=True,
        catalog=config,
        **options,
    )
    query.awaitTermination()


def _key(row: dict[str, Any]) -> tuple[Any, ...]:
    return tuple(row[c] for c in COLUMNS)


def _sorted(rows: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    return sorted((_key(r) for r in rows), key=repr)


def _check_table(config: CatalogConfig, identifier: str, expected: list[dict[str, Any]]) -> str:
    """icesink.read, iceberg-rust, every manifest path on disk, gc; returns the metadata location."""
    table = open_catalog(config).load_table(identifier)
    for planned in table.inspect.files().column("file_path").to_pylist():
        assert Path(paths.parse(planned).path).is_file(), planned
    want = _sorted(expected)
    assert _sorted(icesink.read(table).to_pylist()) == want, identifier
    assert _sorted(iceberg_rust_sql(table, "SELECT * FROM t").to_pylist()) == want, identifier
    report = collect_garbage(open_catalog(config), config, identifier, datetime.timedelta(0), dry_run=True)
    assert report.deleted == [], report.deleted
    return str(table.metadata_location)


def test_hostile_names_and_values_through_both_writers_and_every_reader(
    spark: Any, tmp_path_factory: pytest.TempPathFactory, java_reader: Path
) -> None:
    written: list[tuple[str, list[dict[str, Any]]]] = []

    @settings(max_examples=3, deadline=None, suppress_health_check=list(HealthCheck))
    @given(
        first=st.lists(st.one_of(st.none(), hostile_text), min_size=1, max_size=8),
        second=st.lists(st.one_of(st.none(), hostile_text), min_size=1, max_size=8),
    )
    def one_example(first: list[str | None], second: list[str | None]) -> None:
        root = Path(tempfile.mkdtemp(dir=tmp_path_factory.getbasetemp(), prefix="my wh é 名 "))
        config = CatalogConfig(
            f"hostile{next(_numbers)}", f"sqlite:///{root / 'catalog.db'}", paths.file_uri(root / "lake")
        )
        database.upgrade(config)
        batches = [_rows(first), _rows(second, first_id=len(first))]
        appended = [r for b in batches for r in b.to_pylist()]

        _input(root / "appends", batches)
        _stream(spark, root / "appends", config, "ns é.partitioned %", partition_by=PARTITIONED, writer="arrow")
        _stream(spark, root / "appends", config, "ns é.spark writer", writer="spark")
        # An upsert: the second batch rewrites the first batch's keys, so equality deletes do the work.
        rewritten = _rows(second[: len(first)] + [None] * (len(first) - len(second)))
        _input(root / "changes", [batches[0], rewritten])
        _stream(
            spark, root / "changes", config, "ns é.keyed", equality_fields=[KEY], partition_by=[f"bucket(2, `{KEY}`)"]
        )
        upserted = rewritten.to_pylist()

        for identifier, expected in [
            ("ns é.partitioned %", appended),
            ("ns é.spark writer", appended),
            ("ns é.keyed", upserted),
        ]:
            written.append((_check_table(config, identifier, expected), expected))
            ids = [r[KEY] for r in expected]
            check_outcome(f"hostile names: {identifier}", config, identifier, ids, id_column=KEY)
        database.dispose_engines()

    one_example()
    java = read_many_with_iceberg_java(java_reader, [(location, COLUMNS) for location, _ in written])
    duck = read_with_duckdb(*[location for location, _ in written])
    for (location, expected), java_rows, duck_rows in zip(written, java, duck, strict=True):
        assert _sorted(java_rows) == _sorted(expected), location
        assert _sorted(duck_rows) == _sorted(expected), location


@pytest.mark.s3
def test_hostile_partition_values_on_object_storage(spark: Any, s3_catalog: CatalogConfig, tmp_path: Path) -> None:
    """The same rule on S3, under a warehouse prefix with a space and non-ASCII letters: keys hold the
    encoded segments, manifests name them exactly."""
    from dataclasses import replace

    s3_catalog = replace(s3_catalog, warehouse=f"{s3_catalog.warehouse.rstrip('/')}/my wh é 名")
    values = ["New York", "São Paulo", "50%", "a/b", "q?h#", "", None, "😀" * 3, "e\u0301", "\u00e9", "x" * 300]
    rows = _rows(values)
    _input(tmp_path / "in", [rows])
    _stream(spark, tmp_path / "in", s3_catalog, "ns é.objects %", partition_by=PARTITIONED)
    table = open_catalog(s3_catalog).load_table("ns é.objects %")
    want = _sorted(rows.to_pylist())
    assert _sorted(icesink.read(table).to_pylist()) == want
    assert _sorted(iceberg_rust_sql(table, "SELECT * FROM t").to_pylist()) == want
    report = collect_garbage(open_catalog(s3_catalog), s3_catalog, "ns é.objects %", datetime.timedelta(0), True)
    assert report.deleted == [] and report.files_seen > len(values)
    check_outcome("hostile names on S3", s3_catalog, "ns é.objects %", list(range(len(values))), id_column=KEY)
