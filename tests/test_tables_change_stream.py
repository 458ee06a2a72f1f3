"""The changes of several tables as one stream: every micro-batch ends at one consistent cut of the catalog."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

import icesink
from icesink.catalog.config import CatalogConfig
from icesink.changelog.tables_source import TablesReadOptions
from icesink.committer.commit import TableCommitter
from icesink.errors import ConfigError
from tests.helpers.support import create_orders_table, orders, stage_group, wait_for

TABLES = ("shop.orders", "shop.order lines ü %/x")


def _start(spark: Any, config: CatalogConfig, checkpoint: Path, seen: list[Any], **trigger: Any) -> Any:
    """The reading query; each micro-batch's rows go to ``seen``, as its foreachBatch gets them."""

    def keep(batch: Any, _: int) -> None:
        seen.append([row.asDict(recursive=True) for row in batch.collect()])

    return (
        icesink.read_stream(spark, tables=list(TABLES), catalog=config)
        .writeStream.foreachBatch(keep)
        .option("checkpointLocation", str(checkpoint))
        .trigger(**trigger)
        .start()
    )


def _batches(spark: Any, config: CatalogConfig, checkpoint: Path) -> list[list[dict[str, Any]]]:
    """The micro-batches of one availableNow run of the reading query."""
    seen: list[list[dict[str, Any]]] = []
    _start(spark, config, checkpoint, seen, availableNow=True).awaitTermination()
    return seen


def _ids(rows: list[dict[str, Any]], table: str) -> list[tuple[int, str]]:
    return sorted((r[table]["id"], r["_change_type"]) for r in rows if r["_table"] == table)


@pytest.mark.spark
def test_each_micro_batch_holds_every_tables_changes_up_to_one_cut(
    spark: Any, sqlite_catalog: CatalogConfig, tmp_path: Path
) -> None:
    config = sqlite_catalog
    create_orders_table(config, TABLES[0])
    create_orders_table(config, TABLES[1], pending=True)  # created by the stream: it appears with its first commit
    assert not any(_batches(spark, config, tmp_path / "read"))  # a pending table reads as empty, not an error
    stage_group(config, "job", 0, {TABLES[0]: orders(0, 2), TABLES[1]: orders(10, 1)})
    TableCommitter.of(config).commit_atomic("job")
    (first,) = _batches(spark, config, tmp_path / "read")
    assert _ids(first, TABLES[0]) == [(0, "insert"), (1, "insert")]
    assert _ids(first, TABLES[1]) == [(10, "insert")]
    line = next(r for r in first if r["_table"] == TABLES[1])
    assert line[TABLES[0]] is None and line[TABLES[1]]["name"] == "name-10"
    assert line["_commit_snapshot_id"] > 0
    stage_group(config, "job", 1, {TABLES[0]: orders(2, 1), TABLES[1]: None})
    stage_group(config, "job", 2, {TABLES[0]: None, TABLES[1]: orders(11, 2)})
    TableCommitter.of(config).commit_atomic("job")
    (second,) = _batches(spark, config, tmp_path / "read")  # on from where the first run stopped
    assert _ids(second, TABLES[0]) == [(2, "insert")]
    assert _ids(second, TABLES[1]) == [(11, "insert"), (12, "insert")]
    assert _batches(spark, config, tmp_path / "read") == []


@pytest.mark.spark
def test_a_stream_read_while_a_job_commits_never_splits_a_checkpoint(
    spark: Any, sqlite_catalog: CatalogConfig, tmp_path: Path
) -> None:
    """Checkpoints commit while the reading query runs: every checkpoint's rows, in all tables it wrote,
    arrive in one micro-batch."""
    config = sqlite_catalog
    for table in TABLES:
        create_orders_table(config, table)
    checkpoints = 20
    # Most checkpoints write both tables (every fourth only one), so a cut read table by table would split one.
    writes = {
        c: {t: orders(c * 100 + 10 * n, 1 + (c + n) % 2) for n, t in enumerate(TABLES) if c % 4 or n == c % 8 // 4}
        for c in range(checkpoints)
    }

    seen: list[list[dict[str, Any]]] = []
    query = _start(spark, config, tmp_path / "read", seen, processingTime="0 seconds")
    try:
        wait_for(lambda: query.lastProgress is not None, "the reading query started")
        committer = TableCommitter.of(config)
        for checkpoint, tables in writes.items():  # while the query reads, at about its pace
            stage_group(config, "job", checkpoint, {t: tables.get(t) for t in TABLES})
            committer.commit_atomic("job")
            time.sleep(0.1)
        expected_rows = sum(t.num_rows for tables in writes.values() for t in tables.values())
        wait_for(lambda: sum(len(b) for b in seen) >= expected_rows, "the reader caught up")
    finally:
        query.stop()  # a failure here leaves no query running into the process's later tests
    where: dict[int, set[int]] = {}  # checkpoint -> the micro-batches its rows came in
    for number, batch in enumerate(seen):
        for row in batch:
            where.setdefault(row[row["_table"]]["id"] // 100, set()).add(number)
    assert sorted(where) == [c for c in range(checkpoints) if writes[c]]
    split = {c: sorted(b) for c, b in where.items() if len(b) > 1}
    assert split == {}, f"checkpoints whose rows came in several micro-batches: {split}"
    assert len([b for b in seen if b]) > 1  # the reader saw the job move, not only its end


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"tables": "shop.a,shop.b"}, "must be a JSON list of table names"),
        ({"tables": "[]"}, "must be a JSON list of table names"),
        ({"tables": '["shop.a", "shop.a"]'}, "names a table twice"),
        ({"tables": '["nonamespace"]'}, "is not a table identifier"),
        ({"tables": '["shop.a"]', "starting": "12345"}, "must be earliest or latest"),
        ({"tables": '["shop.a"]', "max-files-per-trigger": "1"}, "unknown option 'max-files-per-trigger'"),
        ({"tables": '["shop.a"]', "tabels": "x"}, "did you mean 'tables'"),
        ({"tables": '["shop.a"]', "mode": "upsert"}, "mode='upsert' must be one of changelog, append"),
    ],
)
def test_options_of_a_stream_of_several_tables_are_checked(options: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        TablesReadOptions.of(options)


def _reader(config: CatalogConfig, tables: tuple[str, ...] = TABLES) -> Any:
    """The stream reader as Spark's driver drives it (offsets, partitions), and read() as an executor would."""
    import json

    from icesink.changelog.tables_source import TablesStreamReader, tables_schema

    options = TablesReadOptions.of(
        {
            "tables": json.dumps(list(tables)),
            "catalog.name": config.name,
            "catalog.uri": config.uri,
            "catalog.warehouse": config.warehouse,
        }
    )
    return TablesStreamReader(options, tables_schema(options))


def _read(reader: Any, start: dict[str, Any], end: dict[str, Any]) -> list[tuple[str, int, str]]:
    rows = [r for p in reader.partitions(start, end) for b in reader.read(p) for r in b.to_pylist()]
    return sorted((r["_table"], r[r["_table"]]["id"], r["_change_type"]) for r in rows)


def test_a_table_replaced_under_the_reader_is_refused_not_read_from_scratch(sqlite_catalog: CatalogConfig) -> None:
    """Dropped and made again, or another tool's table where the stream's pending one was: the changes of the
    new table cannot be told from the old one's, so the reader stops, before Spark logs an offset."""
    from icesink.catalog.loader import open_catalog
    from icesink.errors import StartingSnapshotExpiredError

    config = sqlite_catalog
    create_orders_table(config, TABLES[0])
    create_orders_table(config, TABLES[1], pending=True)
    stage_group(config, "job", 0, {TABLES[0]: orders(0, 2), TABLES[1]: None})
    TableCommitter.of(config).commit_atomic("job")
    reader = _reader(config)
    start = reader.initialOffset()
    end = reader.latestOffset(start, None)
    assert _read(reader, start, end) == [(TABLES[0], 0, "insert"), (TABLES[0], 1, "insert")]
    catalog = open_catalog(config)
    catalog.drop_table(TABLES[0])
    create_orders_table(config, TABLES[0])  # the same name, another table, empty
    with pytest.raises(StartingSnapshotExpiredError, match=f"table {TABLES[0]} is not the table this query started"):
        reader.latestOffset(end, None)
    # A restarted query (a new reader) on the old checkpoint's offset is refused too.
    with pytest.raises(StartingSnapshotExpiredError, match="not the table the reading query's checkpoint was written"):
        _reader(config).latestOffset(end, None)


def test_a_table_rolled_back_under_the_reader_stops_it_before_the_offset_is_logged(
    sqlite_catalog: CatalogConfig,
) -> None:
    from icesink.catalog.loader import open_catalog
    from icesink.errors import IcesinkError

    config = sqlite_catalog
    for table in TABLES:
        create_orders_table(config, table)
    stage_group(config, "job", 0, {TABLES[0]: orders(0, 1), TABLES[1]: orders(10, 1)})
    TableCommitter.of(config).commit_atomic("job")
    first = open_catalog(config).load_table(TABLES[0]).current_snapshot().snapshot_id
    stage_group(config, "job", 1, {TABLES[0]: orders(1, 1), TABLES[1]: None})
    TableCommitter.of(config).commit_atomic("job")
    reader = _reader(config)
    start = reader.initialOffset()
    end = reader.latestOffset(start, None)
    assert [i for t, i, _ in _read(reader, start, end) if t == TABLES[0]] == [0, 1]
    table = open_catalog(config).load_table(TABLES[0])
    table.manage_snapshots().rollback_to_snapshot(first).commit()
    with pytest.raises(IcesinkError, match=f"table {TABLES[0]}"):
        reader.latestOffset(end, None)


def test_tables_differing_only_in_case_are_refused() -> None:
    with pytest.raises(ConfigError, match="differ only in case"):
        TablesReadOptions.of({"tables": '["shop.orders", "shop.Orders"]'})
