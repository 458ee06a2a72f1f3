"""A Spark stream with ``event_time``: the watermark per Kafka-shaped split lands in every snapshot, a restart goes
on from the table, late rows are written and counted, and readers nobody here wrote see it (Iceberg Java's
``snapshots`` metadata table, DuckDB reading the metadata file, pyiceberg)."""

from __future__ import annotations

import datetime
import json
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import icesink
from icesink.catalog.config import CatalogConfig
from icesink.catalog.loader import open_catalog
from icesink.completeness.watermark import parse_watermark
from icesink.errors import ConfigError
from tests.helpers.outcomes import read_with_iceberg_java
from tests.helpers.streams import order_for_file_source, run_available
from tests.helpers.support import create_orders_table, wait_for

TABLE = "shop.events ü"
OTHER = "shop.lines"
START = datetime.datetime(2026, 11, 25, 10, 0, tzinfo=datetime.UTC)
INPUT_SCHEMA = "id long, name string, amount double, ts timestamp, topic string, partition int"


def add_file(directory: Path, number: int, rows: list[tuple[int, float | None, str, int]]) -> None:
    """(id, event minute after 10:00, topic, partition) rows, as Spark's Kafka source would split them."""
    directory.mkdir(parents=True, exist_ok=True)
    table = pa.table(
        {
            "id": pa.array([r[0] for r in rows], pa.int64()),
            "name": [f"n{r[0]}" for r in rows],
            "amount": pa.array([1.5] * len(rows)),
            "ts": pa.array(
                [START + datetime.timedelta(minutes=r[1]) if r[1] is not None else None for r in rows],
                pa.timestamp("us", tz="UTC"),
            ),
            "topic": [r[2] for r in rows],
            "partition": pa.array([r[3] for r in rows], pa.int32()),
        }
    )
    path = directory / f"part-{number:05d}.parquet"
    pq.write_table(table, path)
    order_for_file_source(path, number)


def watermarks(config: CatalogConfig, identifier: str = TABLE) -> list[str]:
    table = open_catalog(config).load_table(identifier)
    return [s.summary["icesink.watermark"] for s in table.metadata.snapshots if s.summary is not None]


def test_a_streams_watermark_per_split_is_committed_with_its_data_and_read_by_other_readers(
    spark: Any, sqlite_catalog: CatalogConfig, tmp_path: Path, java_reader: Path
) -> None:
    config = sqlite_catalog
    create_orders_table(config, TABLE, partition_by=("day(ts)",))
    source = tmp_path / "in"
    add_file(source, 0, [(1, 0, "orders ü", 0), (2, 30, "orders ü", 1)])
    add_file(source, 1, [(3, 60, "orders ü", 0), (4, 25, "orders ü", 1), (5, None, "orders ü", 1)])

    done: list[dict[str, Any]] = []

    def run() -> None:
        df = spark.readStream.schema(INPUT_SCHEMA).option("maxFilesPerTrigger", 1).parquet(str(source))
        # "TS": the column as the user spells it; topic and partition are read, not written (the table lacks them).
        run_available(
            df,
            table=TABLE,
            catalog=config,
            checkpoint_location=str(tmp_path / "ck"),
            event_time="TS",
            lateness="10 min",
            on_partition_done=done.append,
        )

    run()
    assert watermarks(config) == ["2026-11-25T09:50:00.000000+00:00", "2026-11-25T10:20:00.000000+00:00"]
    # A restart goes on from what the table and the ledger hold: partition 1 is at 10:20, so 10:05 is late.
    add_file(source, 2, [(6, 5, "orders ü", 1), (7, 90, "orders ü", 1)])
    run()
    table = open_catalog(config).load_table(TABLE)
    head = table.current_snapshot()
    assert head is not None
    assert head.summary["icesink.late-rows"] == "1"  # written all the same
    assert head.summary["icesink.watermark"] == "2026-11-25T10:50:00.000000+00:00"  # partition 0's 11:00 - 10 min
    assert sorted(table.scan().to_arrow().column("id").to_pylist()) == [1, 2, 3, 4, 5, 6, 7]
    assert [f.name for f in table.schema().fields] == ["id", "name", "amount", "ts"]
    assert icesink.watermark(TABLE, catalog=config) == START + datetime.timedelta(minutes=50)
    assert not icesink.wait_for_partition(TABLE, "ts_day=2026-11-25", timeout="0s", catalog=config)
    # The next day's events: the watermark passes the end of the 25th, whose partition the commit makes done.
    add_file(source, 3, [(8, 26 * 60, "orders ü", 0), (9, 26 * 60, "orders ü", 1)])
    run()
    table = open_catalog(config).load_table(TABLE)
    assert table.current_snapshot().summary["icesink.partitions-done"] == '["ts_day=2026-11-25"]'  # type: ignore[union-attr]
    assert icesink.wait_for_partition(TABLE, "ts_day=2026-11-25", timeout="0s", catalog=config)
    assert [d["partition"] for d in done] == ["ts_day=2026-11-25"]  # the stream's own callback, once
    recorded = [parse_watermark(w) for w in watermarks(config)]
    assert recorded == sorted(recorded)

    # Iceberg Java: its snapshots metadata table.
    java = read_with_iceberg_java(java_reader, f"{table.metadata_location}#snapshots", ["snapshot_id", "summary"])
    by_java = {row["snapshot_id"]: row["summary"] for row in java}
    assert {k: v.get("icesink.watermark") for k, v in by_java.items()} == {
        s.snapshot_id: s.summary["icesink.watermark"] for s in table.metadata.snapshots
    }
    assert by_java[table.current_snapshot().snapshot_id]["icesink.partitions-done"] == '["ts_day=2026-11-25"]'  # type: ignore[union-attr]
    # DuckDB, reading the metadata file as JSON.
    import duckdb

    path = table.metadata_location.removeprefix("file://")
    found = duckdb.connect().execute(
        """SELECT json_extract_string(s, '$.summary."icesink.watermark"'),
                  json_extract_string(s, '$.summary."icesink.late-rows"')
           FROM (SELECT unnest(json_extract(json(content), '$.snapshots[*]')) AS s FROM read_text(?))""",
        [path],
    )
    assert ("2026-11-25T10:50:00.000000+00:00", "1") in found.fetchall()


def test_a_stream_of_several_tables_records_one_watermark_in_every_table_of_a_commit(
    spark: Any, sqlite_catalog: CatalogConfig, tmp_path: Path
) -> None:
    config = sqlite_catalog
    for identifier in (TABLE, OTHER):
        create_orders_table(config, identifier)
    source = tmp_path / "in"
    add_file(source, 0, [(1, 0, "t", 0), (2, 20, "t", 1), (3, 40, "t", 0)])
    df = spark.readStream.schema(INPUT_SCHEMA).parquet(str(source))
    run_available(
        df,
        tables={
            TABLE: icesink.Target(lambda d: d.where("id % 2 = 1"), event_time="ts", lateness="5 minutes"),
            OTHER: icesink.Target(lambda d: d.where("id % 2 = 0"), event_time="ts"),
        },
        catalog=config,
        checkpoint_location=str(tmp_path / "ck"),
    )
    heads = [open_catalog(config).load_table(t).current_snapshot() for t in (TABLE, OTHER)]
    summaries = [h.summary for h in heads if h is not None]
    # Split 0: 10:40 - 5 min (TABLE's lateness); split 1: 10:20 (OTHER's, none): the lower is the stream's.
    assert [s["icesink.watermark"] for s in summaries] == ["2026-11-25T10:20:00.000000+00:00"] * 2
    assert summaries[0]["icesink.commit-id"] == summaries[1]["icesink.commit-id"]


def test_a_quiet_table_of_a_stream_of_several_tables_has_its_partitions_done_when_the_others_move_the_watermark(
    spark: Any, sqlite_catalog: CatalogConfig, tmp_path: Path
) -> None:
    """TABLE gets rows of the 25th, then none: when OTHER's rows of the 26th move the stream's watermark past the
    end of the 25th, TABLE gets a snapshot without files that makes the 25th done, in the same commit as OTHER's."""
    config = sqlite_catalog
    for identifier in (TABLE, OTHER):
        create_orders_table(config, identifier, partition_by=("day(ts)",))
    source = tmp_path / "in"
    add_file(source, 0, [(1, 0, "t", 0), (2, 10, "t", 0)])
    add_file(source, 1, [(4, 20, "t", 0)])  # nothing for TABLE, and the 25th goes on: nothing done

    def run() -> None:
        df = spark.readStream.schema(INPUT_SCHEMA).option("maxFilesPerTrigger", 1).parquet(str(source))
        run_available(
            df,
            tables={
                TABLE: icesink.Target(lambda d: d.where("id % 2 = 1"), event_time="ts"),
                OTHER: icesink.Target(lambda d: d.where("id % 2 = 0"), event_time="ts"),
            },
            idle_timeout="1 second",
            catalog=config,
            checkpoint_location=str(tmp_path / "ck"),
        )

    run()
    time.sleep(1.5)  # TABLE's rows are over a second old: idle, it no longer holds the watermark at 10:00
    add_file(source, 2, [(6, 26 * 60, "t", 0)])  # nothing for TABLE; the watermark passes the end of the 25th
    run()
    catalog = open_catalog(config)
    quiet, busy = catalog.load_table(TABLE), catalog.load_table(OTHER)
    # Checkpoint 1 moved no watermark past a partition end and counted no late row: no snapshot for TABLE.
    assert [s.summary["icesink.max-committed-checkpoint-id"] for s in quiet.metadata.snapshots] == ["0", "2"]
    head, other_head = quiet.current_snapshot(), busy.current_snapshot()
    assert head is not None and other_head is not None
    assert "added-data-files" not in head.summary.additional_properties
    assert head.summary["icesink.partitions-done"] == '["ts_day=2026-11-25"]'
    assert head.summary["icesink.commit-id"] == other_head.summary["icesink.commit-id"]
    assert head.summary["icesink.watermark"] == other_head.summary["icesink.watermark"]
    assert sorted(quiet.scan().to_arrow().column("id").to_pylist()) == [1]
    assert icesink.wait_for_partition(TABLE, "ts_day=2026-11-25", timeout="0s", catalog=config)


def test_a_done_callback_that_failed_is_called_again_while_the_stream_has_nothing_to_commit(
    spark: Any, sqlite_catalog: CatalogConfig, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from icesink.committer import done_actions

    monkeypatch.setattr(done_actions, "RETRY_SECONDS", 0.3)
    config = sqlite_catalog
    create_orders_table(config, TABLE, partition_by=("day(ts)",))
    source = tmp_path / "in"
    add_file(source, 0, [(1, 0, "t", 0)])
    add_file(source, 1, [(2, 26 * 60, "t", 0)])  # the 25th done
    calls: list[str] = []
    failures = [2]

    def on_done(partition: dict[str, Any]) -> None:
        if failures[0]:
            failures[0] -= 1
            raise RuntimeError("the scheduler is away")
        calls.append(str(partition["partition"]))

    df = spark.readStream.schema(INPUT_SCHEMA).option("maxFilesPerTrigger", 1).parquet(str(source))
    run_available(
        df.drop("topic", "partition"),
        table=TABLE,
        catalog=config,
        checkpoint_location=str(tmp_path / "ck"),
        event_time="ts",
        on_partition_done=on_done,
    )
    # The stream has ended at the commit that made the 25th done: no commit comes to try the call again after.
    snapshots = open_catalog(config).load_table(TABLE).metadata.snapshots
    assert [s.summary["icesink.max-committed-checkpoint-id"] for s in snapshots] == ["0", "1"]
    wait_for(lambda: calls == ["ts_day=2026-11-25"], "the callback called again", seconds=30)
    assert len(open_catalog(config).load_table(TABLE).metadata.snapshots) == 2  # called without a commit
    time.sleep(1.0)
    assert calls == ["ts_day=2026-11-25"] and failures == [0]  # once it passed, not again


@pytest.mark.parametrize(
    ("options", "refusal"),
    [
        ({"event_time": "name"}, r"event_time column 'name' is string, not a timestamp or a date"),
        ({"event_time": "ordered_at"}, r"event_time names column 'ordered_at', which the DataFrame does not have"),
        ({"event_time": "ts", "split_by": ["shard"]}, r"split_by names column 'shard'"),
        ({"split_by": ["topic"]}, r"split_by applies to a stream with event_time"),
        ({"idle_timeout": "1 minute"}, r"idle_timeout applies to a stream with event_time"),
        ({"lateness": "5 minutes"}, r"lateness applies to a stream with event_time"),
        ({"event_time": "ts", "lateness": "soon"}, r"lateness: 'soon' is not a duration"),
        ({"event_time": "ts", "lateness": 5}, r"lateness takes a duration, e.g. '15 minutes'"),
        ({"event_time": "ts", "split_by": "topic"}, r"split_by takes a list of strings, e.g. \['topic'\]"),
        ({"on_partition_done": print}, r"on_partition_done applies to a stream with event_time"),
        (
            {"event_time": "ts", "on_partition_done": print, "committer": "daemon"},
            r"on_partition_done is called by the inline committer",
        ),
    ],
)
def test_event_time_options_that_cannot_work_are_refused_before_the_stream_starts(
    spark: Any, sqlite_catalog: CatalogConfig, tmp_path: Path, options: dict[str, Any], refusal: str
) -> None:
    create_orders_table(sqlite_catalog, TABLE)
    df = spark.readStream.schema(INPUT_SCHEMA).parquet(str(tmp_path))
    with pytest.raises(ConfigError, match=rf"table {TABLE}: {refusal}") as raised:
        icesink.stream(df, table=TABLE, catalog=sqlite_catalog, checkpoint_location=str(tmp_path / "ck"), **options)
    assert raised.value.table == TABLE


def test_a_debezium_stream_records_one_watermark_by_source_time_in_every_table_of_a_commit(
    spark: Any, sqlite_catalog: CatalogConfig, tmp_path: Path
) -> None:
    from tests.helpers.debezium_fixture import record, run_stream, write_batches

    def change(topic: str, partition: int, offset: int, key: int, minute: int) -> dict[str, Any]:
        made = record(topic, partition, offset, {"id": key}, {"id": key, "note": f"n{key}"}, None)
        value = json.loads(made["value"])
        value["source"]["ts_ms"] = int((START + datetime.timedelta(minutes=minute)).timestamp() * 1000)
        return {**made, "value": json.dumps(value)}

    orders, lines = "db.public.orders", "db.public.lines"
    write_batches(
        tmp_path / "in",
        [
            [change(orders, 0, 0, 1, 0), change(orders, 1, 0, 2, 5), change(lines, 0, 0, 1, 2)],
            [change(orders, 0, 1, 3, 30), change(lines, 0, 1, 2, 20), change(orders, 1, 1, 4, 31)],
        ],
    )
    run_stream(spark, sqlite_catalog, tmp_path, icesink.debezium("shop", event_time="source.ts_ms", lateness="1 min"))
    catalog = open_catalog(sqlite_catalog)
    heads = {name: catalog.load_table(f"shop.{name}").metadata for name in ("orders", "lines")}
    by_commit: dict[str, set[str]] = {}
    for metadata in heads.values():
        for snapshot in metadata.snapshots:
            summary = snapshot.summary
            assert summary is not None
            by_commit.setdefault(summary["icesink.commit-id"], set()).add(summary["icesink.watermark"])
    # Each atomic commit: one watermark in both tables, the lowest split's (orders p0's 10:00, then lines' 10:20)
    # less the minute of lateness.
    assert sorted(by_commit.values(), key=min) == [
        {"2026-11-25T09:59:00.000000+00:00"},
        {"2026-11-25T10:19:00.000000+00:00"},
    ]
    assert icesink.watermark("shop.lines", catalog=sqlite_catalog) == START + datetime.timedelta(minutes=19)
