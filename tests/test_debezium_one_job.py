"""A Debezium micro-batch that brings nothing new is written in one Spark job (:mod:`icesink.sink.known_routes`);
one that brings a new source, key or schema, or meets a table another tool changed, goes the general way, and
either way the tables hold what the general way alone would write, with no file left behind."""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

import icesink
import icesink.sink.debezium_router as router_module
from icesink.catalog.config import CatalogConfig
from icesink.catalog.loader import open_catalog
from tests.helpers.debezium_fixture import KAFKA_SCHEMA, record, run_stream, write_batches
from tests.helpers.outcomes import read_with_duckdb

USERS = [{"type": "int64", "optional": False, "field": "id"}, {"type": "string", "optional": True, "field": "n"}]
ITEMS = [{"type": "int64", "optional": False, "field": "sku"}, {"type": "int32", "optional": True, "field": "qty"}]


def _users(partition: int, offset: int, key: int, name: str | None, fields: list[dict[str, Any]] = USERS) -> Any:
    after = None if name is None else {"id": key, "n": name, **({"email": f"{name}@x"} if len(fields) > 2 else {})}
    return record("db.public.users", partition, offset, {"id": key}, after, fields, op="d" if name is None else "u")


def _items(offset: int, sku: int, qty: int) -> Any:
    return record("db.public.items", 0, offset, {"sku": sku}, {"sku": sku, "qty": qty}, ITEMS)


@pytest.fixture
def one_job_writes(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Whether each one-job write the driver tried was taken (True) or missed a route (False)."""
    tried: list[bool] = []
    real = router_module.collected

    def watched(*args: Any) -> Any:
        written = real(*args)
        tried.append(written is not None)
        return written

    monkeypatch.setattr(router_module, "collected", watched)
    return tried


def _files_on_disk(config: CatalogConfig, identifier: str) -> set[str]:
    location = open_catalog(config).load_table(identifier).location().removeprefix("file://")
    return {
        os.path.join(root, name)
        for root, _, names in os.walk(os.path.join(location, "data"))
        for name in names
        if name.endswith(".parquet")
    }


def _files_referenced(config: CatalogConfig, identifier: str) -> set[str]:
    table = open_catalog(config).load_table(identifier)
    return {path.removeprefix("file://") for path in table.inspect.files().column("file_path").to_pylist()}


def _rows(config: CatalogConfig, identifier: str, key: str) -> list[dict[str, Any]]:
    (rows,) = read_with_duckdb(open_catalog(config).load_table(identifier).metadata_location)
    return sorted(rows, key=lambda r: r[key])


def _routed_again(caplog: pytest.LogCaptureFixture) -> list[str]:
    """The handler's word for a one-job write it refused (not the router's for a job that missed a route)."""
    return [r.getMessage() for r in caplog.records if r.name == "icesink.stream" and "routed again" in r.getMessage()]


@contextlib.contextmanager
def running_stream(spark: Any, config: CatalogConfig, tmp_path: Path, first: list[Any]) -> Iterator[Any]:
    """A Debezium stream into ``app`` that keeps running, its first micro-batch ``first`` processed; yields
    ``next_batch(number, records)``, which hands the stream one more micro-batch and waits for it."""
    source = tmp_path / "in"
    write_batches(source, [first])
    events = spark.readStream.schema(KAFKA_SCHEMA).option("maxFilesPerTrigger", 1).json(str(source))
    query = icesink.stream(
        events,
        tables=icesink.debezium("app"),
        checkpoint_location=str(tmp_path / "ckpt"),
        trigger={"processingTime": "100 milliseconds"},
        catalog=config,
    )

    def next_batch(number: int, records: list[Any]) -> None:
        path = source / f"part-{number:05d}.json"
        path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
        query.processAllAvailable()

    try:
        query.processAllAvailable()
        yield next_batch
    finally:
        query.stop()


@pytest.mark.spark
def test_micro_batches_bringing_nothing_new_are_written_in_one_job_and_a_new_schema_or_source_goes_the_general_way(
    spark: Any, sqlite_catalog: CatalogConfig, tmp_path: Path, one_job_writes: list[bool]
) -> None:
    with_email = [*USERS, {"type": "string", "optional": True, "field": "email"}]
    batches = [
        [_users(0, 0, 1, "a"), _users(1, 0, 2, "b"), _users(0, 1, 3, "c")],  # general: the tables are met
        [_users(0, 2, 1, "a2"), _users(1, 1, 2, None)],  # one job
        [_users(1, 2, 4, "d"), _users(0, 3, 3, "c2")],  # one job
        # A new source and a new schema of users, interleaved with the known one: missed, then the general way.
        [_users(0, 4, 5, "e"), _items(0, 10, 1), _users(1, 3, 6, "f", with_email), _users(0, 5, 1, "a3")],
        [_users(0, 6, 7, "g", with_email), _items(1, 10, 2)],  # after a miss: the general way (users' routes new)
        [_users(1, 4, 8, "h", with_email), _items(2, 11, 5)],  # the general way, bringing nothing new
        [_users(0, 7, 3, None, with_email), _items(3, 11, 6)],  # one job again
        [_users(1, 5, 9, "i")],  # a partition still on the old schema: missed, then the general way
    ]
    write_batches(tmp_path / "in", batches)
    run_stream(spark, sqlite_catalog, tmp_path, icesink.debezium("app"))
    assert one_job_writes == [True, True, False, True, False]

    assert _rows(sqlite_catalog, "app.users", "id") == [
        {"id": 1, "n": "a3", "email": None},
        {"id": 4, "n": "d", "email": None},
        {"id": 5, "n": "e", "email": None},
        {"id": 6, "n": "f", "email": "f@x"},
        {"id": 7, "n": "g", "email": "g@x"},
        {"id": 8, "n": "h", "email": "h@x"},
        {"id": 9, "n": "i", "email": None},
    ]
    assert _rows(sqlite_catalog, "app.items", "sku") == [{"sku": 10, "qty": 2}, {"sku": 11, "qty": 6}]
    for identifier in ("app.users", "app.items"):  # the missed job's files are deleted
        assert _files_on_disk(sqlite_catalog, identifier) == _files_referenced(sqlite_catalog, identifier)
    users = open_catalog(sqlite_catalog).load_table("app.users")
    assert [s.summary["icesink.max-committed-checkpoint-id"] for s in users.snapshots()] == [str(c) for c in range(8)]


@pytest.mark.spark
def test_a_table_another_tool_changed_between_micro_batches_is_written_the_general_way(
    spark: Any,
    sqlite_catalog: CatalogConfig,
    tmp_path: Path,
    one_job_writes: list[bool],
    caplog: pytest.LogCaptureFixture,
) -> None:
    from pyiceberg.types import StringType

    caplog.set_level("INFO", logger="icesink.stream")
    with running_stream(spark, sqlite_catalog, tmp_path, [_users(0, 0, 1, "a"), _users(0, 1, 2, "b")]) as next_batch:
        next_batch(1, [_users(0, 2, 1, "a2")])  # one job
        table = open_catalog(sqlite_catalog).load_table("app.users")
        with table.update_schema() as update:  # another tool adds a column
            update.add_column("note", StringType())
        next_batch(2, [_users(0, 3, 3, "c")])  # predicted without the column: the general way
        next_batch(3, [_users(0, 4, 2, "b2")])  # one job, with it
        with open_catalog(sqlite_catalog).load_table("app.users").transaction() as transaction:
            transaction.set_properties({"write.parquet.compression-codec": "snappy"})
        next_batch(4, [_users(0, 5, 4, "d")])  # written zstd by the job, then refused: the general way
        next_batch(5, [_users(0, 6, 5, "e")])  # one job, snappy
    # The second and the fourth were written by the job, then refused by the driver.
    assert one_job_writes == [True, True, True, True, True]
    refused = _routed_again(caplog)
    assert refused == [
        "checkpoint=2: table app.users: its schema or partition spec changed since the micro-batch before; "
        "routed again",
        "checkpoint=4: table app.users: its write was prepared otherwise than predicted; routed again",
    ]
    codecs = {
        pq.ParquetFile(path).metadata.row_group(0).column(0).compression
        for path in _files_referenced(sqlite_catalog, "app.users")
        if not path.endswith("-deletes.parquet")
    }
    assert codecs == {"ZSTD", "SNAPPY"}
    assert _rows(sqlite_catalog, "app.users", "id") == [
        {"id": 1, "n": "a2", "note": None},
        {"id": 2, "n": "b2", "note": None},
        {"id": 3, "n": "c", "note": None},
        {"id": 4, "n": "d", "note": None},
        {"id": 5, "n": "e", "note": None},
    ]
    assert _files_on_disk(sqlite_catalog, "app.users") == _files_referenced(sqlite_catalog, "app.users")


@pytest.mark.spark
def test_a_table_another_tool_dropped_is_created_again_as_a_restarted_stream_would(
    spark: Any,
    sqlite_catalog: CatalogConfig,
    tmp_path: Path,
    one_job_writes: list[bool],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The running stream used to fail (its message said to create the table first) where a restart created it."""
    caplog.set_level("WARNING", logger="icesink.debezium_events.route")
    catalog = open_catalog(sqlite_catalog)
    with running_stream(spark, sqlite_catalog, tmp_path, [_users(0, 0, 1, "a"), _items(0, 10, 1)]) as next_batch:
        next_batch(1, [_users(0, 1, 2, "b"), _items(1, 11, 2)])  # one job
        catalog.drop_table("app.items")
        next_batch(2, [_users(0, 2, 3, "c"), _items(2, 12, 3)])  # one job, then items created again
        catalog.drop_table("app.items")
        other = record(
            "db.public.orders", 0, 0, {"o": 1}, {"o": 1}, [{"type": "int64", "optional": False, "field": "o"}]
        )
        next_batch(3, [_users(0, 3, 4, "d"), _items(3, 13, 4), other])  # the general way (a new source)
        next_batch(4, [_users(0, 4, 5, "e"), _items(4, 14, 5)])
    assert one_job_writes == [True, True, False]  # the last: orders unknown to the job, then the general way
    dropped = [r.getMessage() for r in caplog.records if "dropped while this stream writes it" in r.getMessage()]
    assert [m.split(":")[0] for m in dropped] == ["table=app.items", "table=app.items"]
    assert [r["id"] for r in _rows(sqlite_catalog, "app.users", "id")] == [1, 2, 3, 4, 5]
    assert _rows(sqlite_catalog, "app.items", "sku") == [{"sku": 13, "qty": 4}, {"sku": 14, "qty": 5}]
    assert _rows(sqlite_catalog, "app.orders", "o") == [{"o": 1}]
    items = catalog.load_table("app.items")
    assert [s.summary["icesink.max-committed-checkpoint-id"] for s in items.snapshots()] == ["3", "4"]
    assert _files_on_disk(sqlite_catalog, "app.users") == _files_referenced(sqlite_catalog, "app.users")


@pytest.mark.spark
def test_a_table_whose_records_come_by_fewer_routes_than_its_schema_was_merged_from_goes_the_general_way(
    spark: Any, sqlite_catalog: CatalogConfig, tmp_path: Path, one_job_writes: list[bool]
) -> None:
    """Typed as the general way types them: by the schemas the micro-batch holds, not by those of the one before."""
    # Optional at the source: a required column would be made optional by the first micro-batch's nulls (the
    # records of the schema without it), which alone sends the next micro-batch the general way.
    with_email = [*USERS, {"type": "string", "optional": True, "field": "email"}]
    batches = [
        [_users(0, 0, 1, "a"), _users(1, 0, 2, "b", with_email)],  # both schemas: the rows' schema merges them
        [_users(1, 1, 3, "c", with_email)],  # one job tried: fewer routes, so the general way
        [_users(1, 2, 4, "d", with_email)],  # the general way (the routes changed), bringing nothing new
        [_users(1, 3, 5, "e", with_email)],  # one job
    ]
    write_batches(tmp_path / "in", batches)
    run_stream(spark, sqlite_catalog, tmp_path, icesink.debezium("app"))
    assert one_job_writes == [False, True]
    assert _rows(sqlite_catalog, "app.users", "id") == [
        {"id": 1, "n": "a", "email": None},
        *({"id": i, "n": n, "email": f"{n}@x"} for i, n in ((2, "b"), (3, "c"), (4, "d"), (5, "e"))),
    ]
    assert _files_on_disk(sqlite_catalog, "app.users") == _files_referenced(sqlite_catalog, "app.users")


@pytest.mark.spark
def test_a_column_the_stream_makes_optional_is_learned_again_without_a_wasted_job(
    spark: Any,
    sqlite_catalog: CatalogConfig,
    tmp_path: Path,
    one_job_writes: list[bool],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A source column made nullable (its Connect schema new, a null in it) is made optional when its checkpoint is
    finished, after the write: the micro-batch after goes the general way at once instead of being written in one
    job at the old schema and refused."""
    required = [USERS[0], {**USERS[1], "optional": False}]
    batches = [
        [_users(0, 0, 1, "a", required), _users(1, 0, 2, "b", required)],  # the general way: n required
        [_users(0, 1, 3, "c", required)],  # one job
        [_users(1, 1, 4, "d")],  # a new schema, n optional at the source: missed, then the general way
        [_users(1, 2, 5, "e")],  # the general way, bringing nothing new
        # One job, with a null in n: n is made optional once the micro-batch is written.
        [record("db.public.users", 0, 2, {"id": 6}, {"id": 6, "n": None}, USERS)],
        [_users(1, 3, 7, "g")],  # the general way: the schema learned is the one before
        [_users(0, 3, 8, "h")],  # one job, at the new schema
    ]
    write_batches(tmp_path / "in", batches)
    caplog.set_level("INFO", logger="icesink.stream")
    caplog.set_level("INFO", logger="icesink.debezium_events.route")  # its miss of batch 2 is expected
    run_stream(spark, sqlite_catalog, tmp_path, icesink.debezium("app"))
    assert one_job_writes == [True, False, True, True]
    assert _routed_again(caplog) == []
    users = open_catalog(sqlite_catalog).load_table("app.users")
    assert not users.schema().find_field("n").required
    assert _rows(sqlite_catalog, "app.users", "id") == [
        {"id": 1, "n": "a"},
        {"id": 2, "n": "b"},
        {"id": 3, "n": "c"},
        {"id": 4, "n": "d"},
        {"id": 5, "n": "e"},
        {"id": 6, "n": None},
        {"id": 7, "n": "g"},
        {"id": 8, "n": "h"},
    ]
    assert _files_on_disk(sqlite_catalog, "app.users") == _files_referenced(sqlite_catalog, "app.users")


@pytest.mark.spark
def test_a_burst_of_one_table_kept_whole_in_one_task_goes_the_general_way_and_is_spread(
    spark: Any,
    sqlite_catalog: CatalogConfig,
    tmp_path: Path,
    one_job_writes: list[bool],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The micro-batch before predicts which tables are small enough for one task; a table past twice that (and
    past the floor) in one task gives the micro-batch back, and the general way spreads it by its own counts."""
    import icesink.sink.known_routes as known_routes

    monkeypatch.setattr(known_routes, "MAX_WHOLE_RECORDS", 3)

    def users(batch: int, count: int) -> list[Any]:
        return [_users(i % 2, batch * 100 + i, batch * 100 + i, f"u{batch}") for i in range(count)]

    batches = [
        [*users(0, 8), _items(0, 1, 1)],  # users spread over the tasks, items whole in one
        [*users(1, 8), _items(1, 2, 1)],  # one job
        # Items past 3 in one task: given back, and written the general way, which brings nothing new.
        [*users(2, 1), *(_items(10 + i, 100 + i, i) for i in range(6))],
        [*users(3, 8), _items(20, 3, 1)],  # now users, predicted whole from one record: given back too
        [*users(4, 8), _items(21, 4, 1)],  # one job
    ]
    write_batches(tmp_path / "in", batches)
    run_stream(spark, sqlite_catalog, tmp_path, icesink.debezium("app"))
    assert one_job_writes == [True, False, False, True]
    assert [r["sku"] for r in _rows(sqlite_catalog, "app.items", "sku")] == [1, 2, 3, 4, *range(100, 106)]
    assert len(_rows(sqlite_catalog, "app.users", "id")) == 8 * 4 + 1
    for identifier in ("app.users", "app.items"):
        assert _files_on_disk(sqlite_catalog, identifier) == _files_referenced(sqlite_catalog, identifier)
