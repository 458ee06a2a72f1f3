"""``late="dead_letter"``: rows that arrive below the watermark go to the stream's dead-letter table instead of
their own, counted all the same, committed in the same catalog transaction as the rows on time; every input row
lands in exactly one of the two, read back by pyiceberg and DuckDB."""

from __future__ import annotations

import datetime
import json
import random
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import icesink
from icesink.catalog.config import CatalogConfig
from icesink.catalog.loader import open_catalog
from icesink.completeness.watermark import format_watermark
from icesink.errors import ConfigError
from icesink.writer.late_rows import late_mask, late_rows_task, on_time_rows
from icesink.writer.spec import EventTimeSpec
from tests.helpers.outcomes import read_with_duckdb
from tests.helpers.streams import order_for_file_source, run_available

TABLE = "shop.events ü"
LATE = "ops.`late` rows"
START = datetime.datetime(2026, 11, 25, 10, 0, tzinfo=datetime.UTC)
# A column name Spark would parse, a nested struct (null at every depth), Kafka's split columns and offset.
SCHEMA = pa.schema(
    [
        ("id", pa.int64()),
        ("a.b `c`", pa.string()),
        ("info", pa.struct([("x", pa.int32()), ("tags", pa.list_(pa.string()))])),
        ("ts", pa.timestamp("us", tz="UTC")),
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("offset", pa.int64()),
    ]
)
SPARK_SCHEMA = "id long, `a.b ``c``` string, info struct<x:int, tags:array<string>>, ts timestamp, " + (
    "topic string, partition int, offset long"
)


def at(minutes: float | None) -> datetime.datetime | None:
    return None if minutes is None else START + datetime.timedelta(minutes=minutes, microseconds=7)


def add_file(directory: Path, number: int, rows: list[tuple[int, float | None, int]]) -> None:
    """(id, event minute after 10:00, Kafka partition) rows; the other columns follow from the id."""
    directory.mkdir(parents=True, exist_ok=True)
    infos = [None, {"x": None, "tags": None}, {"x": 1, "tags": [None, "t"]}]
    table = pa.table(
        {
            "id": [r[0] for r in rows],
            "a.b `c`": [None if r[0] % 4 == 0 else f"v{r[0]}" for r in rows],
            "info": [infos[(r[0] // 2) % 3] for r in rows],
            "ts": [at(r[1]) for r in rows],
            "topic": ["orders"] * len(rows),
            "partition": [r[2] for r in rows],
            "offset": [1000 + r[0] for r in rows],
        },
        schema=SCHEMA,
    )
    path = directory / f"part-{number:05d}.parquet"
    pq.write_table(table, path)
    order_for_file_source(path, number)


def stream(spark: Any, config: CatalogConfig, tmp_path: Path, **options: Any) -> None:
    df = spark.readStream.schema(SPARK_SCHEMA).option("maxFilesPerTrigger", 1).parquet(str(tmp_path / "in"))
    run_available(
        df,
        catalog=config,
        checkpoint_location=str(tmp_path / "ck"),
        event_time="ts",
        lateness="10 minutes",
        late="dead_letter",
        dead_letter=LATE,
        **options,
    )


def start_with_late_rows_aside(spark: Any, config: CatalogConfig, tmp_path: Path, **options: Any) -> Any:
    """Start a stream into TABLE that sets its late rows aside in LATE (a refusal is what these tests expect)."""
    df = spark.readStream.schema(SPARK_SCHEMA).parquet(str(tmp_path))
    given = {"event_time": "ts", "late": "dead_letter", "dead_letter": LATE, **options}
    return icesink.stream(df, table=TABLE, catalog=config, checkpoint_location=str(tmp_path / "ck"), **given)


def test_late_rows_go_to_the_dead_letter_table_in_the_same_commit_and_every_row_lands_once(
    spark: Any, sqlite_catalog: CatalogConfig, tmp_path: Path
) -> None:
    config = sqlite_catalog
    source = tmp_path / "in"
    add_file(source, 0, [(1, 30, 0), (2, 30, 1)])  # the watermark: 10:20 (both partitions at 10:30, less 10 min)
    add_file(source, 1, [(3, 60, 0), (4, 5, 1), (5, None, 1), (6, 19.9, 0), (7, 20, 1)])
    stream(spark, config, tmp_path, table=TABLE, create_table=True, partition_by=["day(ts)"])

    catalog = open_catalog(config)
    table, late = catalog.load_table(TABLE), catalog.load_table(LATE)
    # 4 and 6 are below 10:20; 5 has no event time and 7 is at the watermark itself: neither is late.
    assert sorted(table.scan().to_arrow().column("id").to_pylist()) == [1, 2, 3, 5, 7]
    assert [f.name for f in table.schema().fields] == SCHEMA.names
    rows = late.scan().to_arrow().sort_by("event_time").to_pylist()
    assert [json.loads(r["row"])["id"] for r in rows] == [4, 6]
    watermark = START + datetime.timedelta(minutes=20, microseconds=7)
    assert {r["watermark"] for r in rows} == {watermark}
    assert [r["event_time"] for r in rows] == [at(5), at(19.9)]
    assert [(r["table"], r["checkpoint_id"], r["topic"], r["partition"], r["offset"]) for r in rows] == [
        (TABLE, 1, "orders", 1, 1004),
        (TABLE, 1, "orders", 0, 1006),
    ]
    assert all(f"table {TABLE}, checkpoint 1" in r["error"] for r in rows)
    # The row as the table would have got it, every value kept: nulls at every depth, times to the microsecond.
    assert json.loads(rows[0]["row"]) == {
        "id": 4,
        "a.b `c`": None,
        "info": {"x": 1, "tags": [None, "t"]},
        "ts": at(5).isoformat(),  # type: ignore[union-attr]
        "topic": "orders",
        "partition": 1,
        "offset": 1004,
    }
    assert {k: v for k, v in json.loads(rows[1]["row"]).items() if k in ("a.b `c`", "info")} == {
        "a.b `c`": "v6",
        "info": None,
    }

    head, late_head = table.current_snapshot(), late.current_snapshot()
    assert head is not None and late_head is not None
    assert head.summary["icesink.late-rows"] == "2"  # counted, wherever they went
    assert head.summary["icesink.commit-id"] == late_head.summary["icesink.commit-id"]  # one transaction
    assert late_head.summary["icesink.watermark"] == head.summary["icesink.watermark"]
    assert len(late.metadata.snapshots) == 1  # the first micro-batch had no late rows: no snapshot
    assert late.spec().is_unpartitioned()

    # Run again over the same input: nothing is written twice.
    stream(spark, config, tmp_path, table=TABLE)
    catalog = open_catalog(config)
    assert len(catalog.load_table(LATE).metadata.snapshots) == 1
    assert catalog.load_table(TABLE).scan().to_arrow().num_rows == 5

    # DuckDB, a reader nobody here wrote.
    duck_late, duck_table = read_with_duckdb(catalog.load_table(LATE).metadata_location, table.metadata_location)
    assert sorted(json.loads(r["row"])["id"] for r in duck_late) == [4, 6]
    assert sorted(r["id"] for r in duck_table) == [1, 2, 3, 5, 7]


def test_a_stream_of_several_tables_sets_aside_the_late_rows_of_the_tables_that_ask(
    spark: Any, sqlite_catalog: CatalogConfig, tmp_path: Path
) -> None:
    config = sqlite_catalog
    source = tmp_path / "in"
    add_file(source, 0, [(1, 0, 0), (2, 30, 0), (3, 31, 0)])
    add_file(source, 1, [(4, 1, 0), (5, 2, 0), (6, 60, 0), (7, 3, 0)])  # every odd row late
    odd, even = f"{TABLE} odd", f"{TABLE} even"
    df = spark.readStream.schema(SPARK_SCHEMA).option("maxFilesPerTrigger", 1).parquet(str(source))
    run_available(
        df,
        tables={
            odd: icesink.Target(
                lambda d: d.where("id % 2 = 1"), event_time="ts", late="dead_letter", create_table=True
            ),
            even: icesink.Target(lambda d: d.where("id % 2 = 0"), event_time="ts", create_table=True),
        },
        dead_letter=LATE,
        split_by=[],
        catalog=config,
        checkpoint_location=str(tmp_path / "ck"),
    )
    catalog = open_catalog(config)
    # The watermark after the first micro-batch: 10:31. 5 and 7 (odd) are set aside; 4 (even) is written.
    assert sorted(catalog.load_table(odd).scan().to_arrow().column("id").to_pylist()) == [1, 3]
    assert sorted(catalog.load_table(even).scan().to_arrow().column("id").to_pylist()) == [2, 4, 6]
    late = catalog.load_table(LATE).scan().to_arrow()
    assert sorted(json.loads(r)["id"] for r in late.column("row").to_pylist()) == [5, 7]
    assert set(late.column("table").to_pylist()) == {odd}
    heads = {t: catalog.load_table(t).current_snapshot() for t in (odd, even, LATE)}
    # Every odd row was set aside: the table has a snapshot without files that counts them.
    assert heads[odd].summary["icesink.late-rows"] == "2"  # type: ignore[union-attr]
    assert heads[odd].summary["icesink.max-committed-checkpoint-id"] == "1"  # type: ignore[union-attr]
    assert "added-data-files" not in heads[odd].summary.additional_properties  # type: ignore[union-attr]
    assert heads[even].summary["icesink.late-rows"] == "1"  # type: ignore[union-attr]
    assert len({h.summary["icesink.commit-id"] for h in heads.values()}) == 1  # type: ignore[union-attr]


def test_a_table_with_identifier_fields_applies_late_changes_rather_than_set_one_aside(
    spark: Any, sqlite_catalog: CatalogConfig, tmp_path: Path
) -> None:
    """Setting aside a late change of a key would let an older change win: a keyed table refuses late="dead_letter"
    (its key given by the table, not the stream), before anything is written or created."""
    from pyiceberg.schema import Schema
    from pyiceberg.types import LongType, NestedField, TimestamptzType

    catalog = open_catalog(sqlite_catalog)
    catalog.create_namespace_if_not_exists("shop")
    fields = [NestedField(1, "id", LongType(), required=True), NestedField(2, "ts", TimestamptzType())]
    catalog.create_table(TABLE, Schema(*fields, identifier_field_ids=[1]))
    with pytest.raises(ConfigError, match=rf"table {TABLE}: late='dead_letter' applies to appends, and the table"):
        start_with_late_rows_aside(spark, sqlite_catalog, tmp_path)
    assert not open_catalog(sqlite_catalog).table_exists(LATE)


@pytest.mark.parametrize(
    ("options", "refusal"),
    [
        ({"late": "dead_letter", "dead_letter": LATE}, r"late='dead_letter' sets aside .* name the event-time column"),
        ({"event_time": "ts", "late": "dead_letter"}, r"late='dead_letter' needs the table that takes the late rows"),
        ({"event_time": "ts", "late": "drop", "dead_letter": LATE}, r"late must be one of \('write', 'dead_letter'\)"),
        ({"event_time": "ts", "dead_letter": LATE}, r"dead_letter takes the late rows of a table with late="),
        ({"event_time": "ts", "late": "dead_letter", "dead_letter": TABLE}, r"dead_letter names the table itself"),
        ({"event_time": "ts", "late": "dead_letter", "dead_letter": 5}, r"dead_letter takes a string"),
        (
            {"event_time": "ts", "late": "dead_letter", "dead_letter": LATE, "equality_fields": ["id"]},
            r"late='dead_letter' applies to appends; a change stream's late changes are applied",
        ),
        (
            {"event_time": "ts", "late": "dead_letter", "dead_letter": LATE, "atomic": False},
            r"late='dead_letter' commits the late rows in the same catalog transaction .* leave atomic out",
        ),
    ],
)
def test_late_options_that_cannot_work_are_refused_before_the_stream_starts(
    spark: Any, sqlite_catalog: CatalogConfig, tmp_path: Path, options: dict[str, Any], refusal: str
) -> None:
    df = spark.readStream.schema(SPARK_SCHEMA).parquet(str(tmp_path))
    with pytest.raises(ConfigError, match=rf"table {TABLE}: {refusal}") as raised:
        icesink.stream(
            df,
            table=TABLE,
            catalog=sqlite_catalog,
            checkpoint_location=str(tmp_path / "ck"),
            create_table=True,
            **options,
        )
    assert raised.value.table == TABLE
    assert not open_catalog(sqlite_catalog).table_exists(TABLE)


def test_a_keyed_dead_letter_table_stops_the_stream_before_it_starts(
    spark: Any, sqlite_catalog: CatalogConfig, tmp_path: Path
) -> None:
    from pyiceberg.schema import Schema
    from pyiceberg.types import IntegerType, LongType, NestedField, StringType, TimestamptzType

    catalog = open_catalog(sqlite_catalog)
    catalog.create_namespace_if_not_exists("ops")
    kinds = [StringType(), TimestamptzType(), TimestamptzType(), LongType(), StringType(), IntegerType()]
    kinds += [LongType(), StringType(), StringType()]
    names = ["table", "event_time", "watermark", "checkpoint_id", "topic", "partition", "offset", "row", "error"]
    fields = [NestedField(i, n, k, required=i == 1) for i, (n, k) in enumerate(zip(names, kinds, strict=True), 1)]
    catalog.create_table(LATE, Schema(*fields, identifier_field_ids=[1]))
    with pytest.raises(ConfigError, match=rf"table {LATE}: it is the stream's dead_letter table.* identifier fields"):
        start_with_late_rows_aside(spark, sqlite_catalog, tmp_path, create_table=True)
    assert not open_catalog(sqlite_catalog).table_exists(TABLE)  # refused before the table was created


def test_a_dead_letter_table_created_for_a_stream_that_is_then_refused_goes_again(
    spark: Any, sqlite_catalog: CatalogConfig, tmp_path: Path
) -> None:
    with pytest.raises(ConfigError, match=rf"table {TABLE}: partition_by"):
        start_with_late_rows_aside(spark, sqlite_catalog, tmp_path, create_table=True, partition_by=["no_such_column"])
    from icesink.iceberg.pending_tables import PendingAwareCatalog

    catalog = open_catalog(sqlite_catalog, pending_tables=True)
    assert isinstance(catalog, PendingAwareCatalog)
    assert not catalog.table_exists(LATE) and not catalog.table_exists(TABLE)


def test_a_debezium_stream_is_told_where_its_dead_letter_table_is_named(spark: Any, tmp_path: Path) -> None:
    df = (
        spark.readStream.format("rate")
        .load()
        .selectExpr("CAST(CAST(value AS string) AS binary) AS key", "CAST(CAST(value AS string) AS binary) AS value")
    )
    with pytest.raises(ConfigError, match=r"names its dead-letter table in icesink.debezium\(dead_letter=...\)"):
        icesink.stream(df, tables=icesink.debezium("shop"), dead_letter=LATE, checkpoint_location=str(tmp_path / "ck"))


# --- the one test of lateness, without Spark ----------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["timestamp_tz", "timestamp_ntz", "timestamp_ns", "date"])
def test_the_write_tasks_and_the_dead_letter_job_split_every_batch_into_two_parts_that_make_it_whole(
    kind: str,
) -> None:
    rng = random.Random(kind)
    day = 86_400_000_000
    base = int(START.timestamp() * 1_000_000)
    for _ in range(50):
        micros = [
            None if rng.random() < 0.1 else base + rng.randint(-3, 3) * day + rng.randint(-5, 5) for _ in range(40)
        ]
        if kind == "date":
            values = pa.array([None if m is None else m // day for m in micros], pa.int32()).cast(pa.date32())
        elif kind == "timestamp_ns":
            values = pa.array([None if m is None else m * 1000 + rng.randint(0, 999) for m in micros], pa.int64())
            values = values.cast(pa.timestamp("ns", tz="UTC"))
        else:
            values = pa.array(micros, pa.int64()).cast(pa.timestamp("us", tz="UTC" if kind == "timestamp_tz" else None))
        batch = pa.record_batch({"id": pa.array(range(40), pa.int64()), "t": values})
        late_before = base + rng.randint(-2, 2) * day + rng.choice([0, 1, -1, day // 2])
        spec = EventTimeSpec("t", late_before=late_before)
        kept = on_time_rows(batch, spec, TABLE)
        task = late_rows_task(spec, TABLE, ["_0", "t"])
        aside = list(task(iter([batch.rename_columns(["_0", "t"])])))
        aside_ids = [i for b in aside for i in b.column(0).to_pylist()]
        assert sorted(kept.column("id").to_pylist() + aside_ids) == list(range(40))
        mask = late_mask(batch, spec, TABLE)
        assert mask is not None and mask.null_count == 0
        for b in aside:  # the event time handed back is the row's, below the watermark
            assert all(m < late_before for m in b.column(2).to_pylist())
        assert on_time_rows(batch, EventTimeSpec("t"), TABLE) is batch  # no watermark yet: nothing is late
    assert format_watermark(base) == "2026-11-25T10:00:00.000000+00:00"
