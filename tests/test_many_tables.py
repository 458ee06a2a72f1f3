"""One stream into several tables (``icesink.stream(df, tables={...})``), committed atomically, with real Spark."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

import icesink
from icesink.catalog.config import CatalogConfig
from icesink.catalog.ledger import Ledger
from icesink.catalog.loader import open_catalog
from icesink.errors import BadRowError, ConfigError
from icesink.iceberg.marker import committed_marker
from icesink.properties import COMMIT_ID_PROPERTY
from tests.helpers.outcomes import read_many_with_iceberg_java, read_with_duckdb, read_with_iceberg_rust

pytestmark = pytest.mark.spark
ORDERS, LINES, AUDIT = "shop.orders", "shop.order lines", "shop.audit ü%"
EVENTS_SCHEMA = "kind string, id long, name string, qty int, op string, seq long"


def write_events(directory: Path, number: int, events: list[dict[str, Any]]) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"part-{number:05d}.json"
    path.write_text("".join(json.dumps(e) + "\n" for e in events), encoding="utf-8")
    os.utime(path, (1_750_000_000 + number, 1_750_000_000 + number))  # Spark takes files in time order


def targets() -> dict[str, icesink.Target]:
    from pyspark.sql import functions as F

    return {
        ORDERS: icesink.Target(
            select=lambda df: df.where(F.col("kind") == "order").select("id", "name", "op", "seq"),
            create_table=True,
            equality_fields=["id"],
            op_column="op",
            op_values={"c": "insert", "u": "update", "d": "delete"},
            sequence_by="seq",
        ),
        LINES: icesink.Target(
            select=lambda df: df.where(F.col("kind") == "line").select("id", "qty"),
            create_table=True,
            partition_by=["bucket(2, id)"],
        ),
        AUDIT: icesink.Target(create_table=True),  # every event
    }


def run(spark: Any, config: CatalogConfig, tmp_path: Path, **options: Any) -> None:
    df = spark.readStream.schema(EVENTS_SCHEMA).option("maxFilesPerTrigger", 1).json(str(tmp_path / "in"))
    query = icesink.stream(
        df,
        tables=targets(),
        checkpoint_location=str(tmp_path / "ckpt"),
        trigger={"availableNow": True},
        catalog=config,
        **options,
    )
    query.awaitTermination()


def rows(config: CatalogConfig, identifier: str, *columns: str) -> list[tuple[Any, ...]]:
    table = icesink.read(identifier, catalog=config)
    return sorted(zip(*(table.column(c).to_pylist() for c in columns), strict=True))


BATCHES = [
    [
        {"kind": "order", "id": 1, "name": "a", "op": "c", "seq": 1},
        {"kind": "order", "id": 2, "name": "b", "op": "c", "seq": 2},
        {"kind": "line", "id": 10, "qty": 3},
    ],
    [
        {"kind": "order", "id": 1, "name": "a2", "op": "u", "seq": 3},
        {"kind": "order", "id": 2, "op": "d", "seq": 4},
        {"kind": "line", "id": 11, "qty": 1},
        {"kind": "line", "id": 12, "qty": None},
    ],
    [{"kind": "line", "id": 13, "qty": 7}],  # the orders table is not touched
]


def test_one_stream_commits_every_table_of_a_checkpoint_together(
    spark: Any, catalog_config: CatalogConfig, tmp_path: Path
) -> None:
    config = catalog_config
    for number, batch in enumerate(BATCHES):
        write_events(tmp_path / "in", number, batch)
    run(spark, config, tmp_path)
    assert rows(config, ORDERS, "id", "name") == [(1, "a2")]
    assert rows(config, LINES, "id", "qty") == [(10, 3), (11, 1), (12, None), (13, 7)]
    assert len(rows(config, AUDIT, "kind", "id")) == 8
    catalog = open_catalog(config)
    job = Ledger(config).for_table(ORDERS)[0].job_id
    by_commit: dict[str, set[str]] = {}
    for identifier in (ORDERS, LINES, AUDIT):
        table = catalog.load_table(identifier)
        for snapshot in table.metadata.snapshots:
            by_commit.setdefault(snapshot.summary[COMMIT_ID_PROPERTY], set()).add(identifier)
    # Checkpoints 0 and 1 moved all three tables together; checkpoint 2 two of them.
    assert sorted(map(sorted, by_commit.values())) == sorted(
        [sorted([ORDERS, LINES, AUDIT]), sorted([ORDERS, LINES, AUDIT]), sorted([LINES, AUDIT])]
    )
    markers = {t: committed_marker(catalog.load_table(t).metadata, job).checkpoint_id for t in (ORDERS, LINES, AUDIT)}
    assert markers == {ORDERS: 1, LINES: 2, AUDIT: 2}

    # Spark runs the last micro-batch again (its commit record lost, as a crash leaves it): nothing twice.
    for record in ("2", ".2.crc"):
        (tmp_path / "ckpt" / "commits" / record).unlink(missing_ok=True)
    run(spark, config, tmp_path)
    assert rows(config, LINES, "id", "qty") == [(10, 3), (11, 1), (12, None), (13, 7)]
    assert len(rows(config, AUDIT, "kind", "id")) == 8

    # Readers nobody here wrote see the same tables.
    locations = [catalog.load_table(t).metadata_location for t in (ORDERS, LINES)]
    duck_orders, duck_lines = read_with_duckdb(*locations)
    assert sorted((r["id"], r["name"]) for r in duck_orders) == [(1, "a2")]
    assert sorted((r["id"], r["qty"]) for r in duck_lines) == [(10, 3), (11, 1), (12, None), (13, 7)]
    rust = read_with_iceberg_rust(config, AUDIT, "id")
    assert sorted(rust.column("id").to_pylist()) == [1, 1, 2, 2, 10, 11, 12, 13]


def test_a_bad_row_of_one_table_stops_the_stream_and_its_error_names_that_table(
    spark: Any, sqlite_catalog: CatalogConfig, tmp_path: Path
) -> None:
    write_events(tmp_path / "in", 0, BATCHES[0])
    write_events(tmp_path / "in", 1, [{"kind": "line", "id": 20, "qty": 2}, {"kind": "order", "id": None, "op": "c"}])
    with pytest.raises(Exception) as raised:
        run(spark, sqlite_catalog, tmp_path)
    # Raised in a write task: Spark hands the driver text, and the error is rebuilt with the table it is about.
    error = icesink.error_of(raised.value)
    assert isinstance(error, BadRowError)
    assert (error.table, error.checkpoint_id) == (ORDERS, 1)
    assert "equality field 'id' is null" in str(error)
    assert f"{icesink.errors.TABLE_NOTE}" not in str(error)
    assert rows(sqlite_catalog, LINES, "id", "qty") == [(10, 3)]  # nothing of checkpoint 1, in any table


def test_a_daemon_commits_a_many_table_stream_as_one_group(
    spark: Any, sqlite_catalog: CatalogConfig, tmp_path: Path, java_reader: Path
) -> None:
    from icesink.committer.daemon import CommitterDaemon

    config = sqlite_catalog
    for number, batch in enumerate(BATCHES[:2]):
        write_events(tmp_path / "in", number, batch)
    run(spark, config, tmp_path, committer="daemon")
    catalog = open_catalog(config)
    # Created by the stream, staged, not committed: no reader of the catalog sees them yet, not even empty.
    assert not any(catalog.table_exists(t) for t in (ORDERS, LINES, AUDIT))
    report = CommitterDaemon(config).run(once=True)
    assert report.failed == {}
    assert rows(config, ORDERS, "id", "name") == [(1, "a2")]
    # Two checkpoints with deletes: two transactions, each moving all three tables.
    commits = {s.summary[COMMIT_ID_PROPERTY] for t in (ORDERS, LINES, AUDIT) for s in catalog.load_table(t).snapshots()}
    assert len(commits) == 2
    java_orders, java_lines = read_many_with_iceberg_java(
        java_reader,
        [
            (catalog.load_table(ORDERS).metadata_location, ["id", "name"], {}),
            (catalog.load_table(LINES).metadata_location, ["id", "qty"], {}),
        ],
    )
    assert [(r["id"], r["name"]) for r in java_orders] == [(1, "a2")]
    assert sorted((r["id"], r["qty"]) for r in java_lines) == [(10, 3), (11, 1), (12, None)]


def test_atomic_false_commits_each_table_on_its_own(spark: Any, sqlite_catalog: CatalogConfig, tmp_path: Path) -> None:
    write_events(tmp_path / "in", 0, BATCHES[0])
    run(spark, sqlite_catalog, tmp_path, atomic=False)
    catalog = open_catalog(sqlite_catalog)
    for identifier in (ORDERS, LINES, AUDIT):
        summary = catalog.load_table(identifier).current_snapshot().summary.additional_properties
        assert COMMIT_ID_PROPERTY not in summary
    assert rows(sqlite_catalog, LINES, "id", "qty") == [(10, 3)]


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"table": "shop.x"}, r"takes table= or tables=, not both"),
        ({"equality_fields": ["id"]}, r"equality_fields belong\(s\) to one table; pass it in each icesink.Target"),
        ({"tables": {}}, r"tables= needs at least one table"),
        ({"tables": {"shop.a": {"equality_fields": ["id"]}}}, r"table shop.a: tables= maps each table to an icesink"),
        (
            {"tables": {"shop.a": icesink.Target(select=lambda df: 42)}},
            r"table shop.a: its Target's select returned int",
        ),
    ],
)
def test_mistakes_in_tables_are_refused_before_the_stream_starts(
    spark: Any, sqlite_catalog: CatalogConfig, tmp_path: Path, arguments: dict[str, Any], message: str
) -> None:
    df = spark.readStream.schema(EVENTS_SCHEMA).json(str(tmp_path))
    options = {"tables": {"shop.a": icesink.Target()}, **arguments}
    with pytest.raises(ConfigError, match=message):
        icesink.stream(df, checkpoint_location=str(tmp_path / "ckpt"), catalog=sqlite_catalog, **options)
    assert not open_catalog(sqlite_catalog).table_exists("shop.a")


@pytest.mark.parametrize("query_name", [7, ["q"]])
def test_a_query_name_of_the_wrong_kind_is_refused_before_it_names_the_checkpoint_location(
    spark: Any, sqlite_catalog: CatalogConfig, tmp_path: Path, query_name: object
) -> None:
    """Without a checkpoint location the query name names its directory: checked before it is used."""
    df = spark.readStream.schema(EVENTS_SCHEMA).json(str(tmp_path))
    spark.conf.set("spark.sql.streaming.checkpointLocation", str(tmp_path / "default"))
    try:
        for where in ({"table": ORDERS}, {"tables": {ORDERS: icesink.Target()}}):
            with pytest.raises(ConfigError, match=r"query_name takes a string"):
                icesink.stream(df, catalog=sqlite_catalog, query_name=query_name, **where)  # type: ignore[arg-type]
    finally:
        spark.conf.unset("spark.sql.streaming.checkpointLocation")
    assert not (tmp_path / "default").exists()


def test_a_target_refused_after_another_was_created_leaves_no_pending_table_behind(
    spark: Any, sqlite_catalog: CatalogConfig, tmp_path: Path
) -> None:
    """The second table exists and does not fit the micro-batch; the first, created for the stream a moment
    before, holds no rows and goes again. The error names the table that does not fit, as a field too."""
    from icesink.catalog.database import engine
    from icesink.catalog.ledger import Ledger
    from icesink.errors import SchemaMismatchError
    from icesink.iceberg.pending_tables import pending_tables
    from tests.helpers.support import create_orders_table, orders, stage_rows

    create_orders_table(sqlite_catalog, AUDIT)  # its columns are not the events'
    df = spark.readStream.schema(EVENTS_SCHEMA).json(str(tmp_path))
    with pytest.raises(SchemaMismatchError) as refused:
        icesink.stream(
            df,
            tables={LINES: icesink.Target(create_table=True), AUDIT: icesink.Target()},
            checkpoint_location=str(tmp_path / "ckpt"),
            catalog=sqlite_catalog,
        )
    assert refused.value.table == AUDIT and f"table {AUDIT}" in str(refused.value)
    assert pending_tables(engine(sqlite_catalog), sqlite_catalog.name) == []
    assert not open_catalog(sqlite_catalog, pending_tables=True).table_exists(LINES)
    # A table that was there before (pending, with a checkpoint staged by another stream) is never given up.
    create_orders_table(sqlite_catalog, ORDERS, pending=True)
    assert stage_rows(sqlite_catalog, ORDERS, "other", 0, orders(0, 2))
    with pytest.raises(SchemaMismatchError):
        icesink.stream(
            df,
            tables={ORDERS: icesink.Target(), LINES: icesink.Target(create_table=True), AUDIT: icesink.Target()},
            checkpoint_location=str(tmp_path / "ckpt"),
            catalog=sqlite_catalog,
        )
    assert [name for name, _, _ in pending_tables(engine(sqlite_catalog), sqlite_catalog.name)] == [ORDERS]
    assert [r.checkpoint_id for r in Ledger(sqlite_catalog).pending(ORDERS)] == [0]


def test_a_table_refused_at_its_first_start_takes_the_options_of_the_next_start(
    spark: Any, catalog_config: CatalogConfig, tmp_path: Path
) -> None:
    """A new table partitioned by a column not in its key is refused after the stream created it (pending);
    started again without partition_by, the stream creates it anew instead of refusing again."""
    from pyspark.sql import functions as F

    from icesink.catalog.database import engine
    from icesink.iceberg.pending_tables import pending_tables

    config = catalog_config
    write_events(tmp_path / "in", 0, BATCHES[0])

    def start(**options: Any) -> Any:
        orders = icesink.Target(
            select=lambda df: df.where(F.col("kind") == "order").select("id", "name", "op", "seq"),
            create_table=True,
            equality_fields=["id"],
            op_column="op",
            op_values={"c": "insert", "u": "update", "d": "delete"},
            sequence_by="seq",
            **options,
        )
        return icesink.stream(
            spark.readStream.schema(EVENTS_SCHEMA).json(str(tmp_path / "in")),
            tables={ORDERS: orders},
            checkpoint_location=str(tmp_path / "ckpt"),
            trigger={"availableNow": True},
            catalog=config,
        )

    with pytest.raises(ConfigError) as refused:
        start(partition_by=["name"])
    message = str(refused.value)
    assert f"table {ORDERS} is partitioned by identity(name), but 'name' is not among the equality fields" in message
    assert f"`icesink tables drop-pending {ORDERS}`" in message
    assert [name for name, _, _ in pending_tables(engine(config), config.name)] == [ORDERS]
    start().awaitTermination()
    assert rows(config, ORDERS, "id", "name") == [(1, "a"), (2, "b")]
    assert open_catalog(config).load_table(ORDERS).spec().fields == ()
    assert pending_tables(engine(config), config.name) == []
