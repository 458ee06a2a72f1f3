"""A Spark stream into a branch of its table (``icesink.stream(..., branch="audit")``): every checkpoint moves the
branch, started from main's head, exactly once across a restart, with its watermark; main does not move."""

from __future__ import annotations

import datetime
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import icesink
from icesink.catalog.config import CatalogConfig
from icesink.catalog.loader import open_catalog
from icesink.errors import ConfigError
from icesink.iceberg.marker import committed_marker
from tests.helpers.streams import order_for_file_source
from tests.helpers.support import create_orders_table
from tests.test_watermark_stream import INPUT_SCHEMA, START, add_file

TABLE = "shop.events ü"
AUDIT = "audit ✓"


def ids_on(config: CatalogConfig, branch: str) -> list[int]:
    table = open_catalog(config).load_table(TABLE)
    snapshot = table.metadata.snapshot_by_name(branch)
    assert snapshot is not None, f"no {branch}"
    return ids_of(table, snapshot.snapshot_id)


def ids_of(table: Any, snapshot_id: int) -> list[int]:
    return sorted(table.scan(snapshot_id=snapshot_id, selected_fields=("id",)).to_arrow()["id"].to_pylist())


def test_a_stream_into_a_branch_moves_only_the_branch_exactly_once_across_a_restart(
    spark: Any, sqlite_catalog: CatalogConfig, tmp_path: Path
) -> None:
    config = sqlite_catalog
    table = create_orders_table(config, TABLE, partition_by=("hour(ts)",))
    first = {"id": [100], "name": ["before"], "amount": [1.0], "ts": [START]}
    table.append(pa.table(first, schema=table.schema().as_arrow()))  # main's head, where the branch starts
    main_head = open_catalog(config).load_table(TABLE).current_snapshot().snapshot_id  # type: ignore[union-attr]
    source = tmp_path / "in"
    add_file(source, 0, [(1, 10, "t", 0), (2, 70, "t", 0)])

    def run() -> None:
        df = spark.readStream.schema(INPUT_SCHEMA).option("maxFilesPerTrigger", 1).parquet(str(source))
        icesink.stream(
            df,
            table=TABLE,
            catalog=config,
            checkpoint_location=str(tmp_path / "ck"),
            trigger={"availableNow": True},
            branch=AUDIT,
            event_time="ts",
        ).awaitTermination()

    run()
    add_file(source, 1, [(3, 130, "t", 0)])
    run()  # a restart goes on from the branch's marker
    now = open_catalog(config).load_table(TABLE)
    assert now.current_snapshot().snapshot_id == main_head  # type: ignore[union-attr]
    assert ids_on(config, "main") == [100] and ids_on(config, AUDIT) == [1, 2, 3, 100]
    marker = committed_marker(now.metadata, str(next(iter(_jobs(now)))), AUDIT)
    assert marker is not None and marker.checkpoint_id == 1
    assert icesink.watermark(TABLE, branch=AUDIT, catalog=config) == START + datetime.timedelta(minutes=130)
    assert icesink.watermark(TABLE, catalog=config) is None  # main's history holds none
    assert icesink.wait_for_partition(TABLE, "ts_hour=2026-11-25-10", branch=AUDIT, timeout="0s", catalog=config)
    assert not icesink.wait_for_partition(TABLE, "ts_hour=2026-11-25-10", timeout="0s", catalog=config)


def _jobs(table: Any) -> set[str]:
    return {s.summary["icesink.job-id"] for s in table.metadata.snapshots if s.summary.get("icesink.job-id")}


@pytest.mark.parametrize(
    ("options", "refusal"),
    [
        ({"branch": " "}, r"branch names a branch of the table; it is empty"),
        ({"branch": ["audit"]}, r"branch takes a string, e.g. 'name'"),
    ],
)
def test_what_a_branch_cannot_take_yet_is_refused_before_the_stream_starts(
    spark: Any, sqlite_catalog: CatalogConfig, tmp_path: Path, options: dict[str, Any], refusal: str
) -> None:
    create_orders_table(sqlite_catalog, TABLE)
    df = spark.readStream.schema(INPUT_SCHEMA).parquet(str(tmp_path))
    with pytest.raises(ConfigError, match=rf"table {TABLE}: {refusal}"):
        icesink.stream(df, table=TABLE, catalog=sqlite_catalog, checkpoint_location=str(tmp_path / "ck"), **options)


def _orders_file(directory: Path, number: int, rows: list[tuple[int, float, int]]) -> None:
    """(id, amount, event minute after 10:00) rows as the ``number``-th input file."""
    import pyarrow.parquet as pq

    directory.mkdir(parents=True, exist_ok=True)
    table = pa.table(
        {
            "id": pa.array([r[0] for r in rows], pa.int64()),
            "name": [f"n{r[0]}" for r in rows],
            "amount": pa.array([r[1] for r in rows], pa.float64()),
            "ts": pa.array([START + datetime.timedelta(minutes=r[2]) for r in rows], pa.timestamp("us", tz="UTC")),
            "topic": ["t"] * len(rows),
            "partition": pa.array([0] * len(rows), pa.int32()),
        }
    )
    path = directory / f"part-{number:05d}.parquet"
    pq.write_table(table, path)
    order_for_file_source(path, number)  # files written in one instant would tie, and Spark may take either first


def test_a_stream_with_audits_publishes_to_main_only_what_passed_and_independent_readers_agree(
    spark: Any, sqlite_catalog: CatalogConfig, tmp_path: Path, java_reader: Path
) -> None:
    from icesink import checks
    from tests.helpers.outcomes import read_many_with_iceberg_java, read_with_duckdb, read_with_iceberg_rust

    config = sqlite_catalog
    create_orders_table(config, TABLE, partition_by=("hour(ts)",))
    source = tmp_path / "in"

    def run(**options: Any) -> None:
        df = spark.readStream.schema(INPUT_SCHEMA).option("maxFilesPerTrigger", 1).parquet(str(source))
        icesink.stream(
            df,
            table=TABLE,
            catalog=config,
            checkpoint_location=str(tmp_path / "ck"),
            trigger={"availableNow": True},
            branch=AUDIT,
            event_time="ts",
            audit=[checks.not_null("id"), checks.in_range("amount", min=0), checks.rows_written()],
            **options,
        ).awaitTermination()

    _orders_file(source, 0, [(1, 5.0, 10), (2, 7.0, 70)])
    run()
    assert ids_on(config, "main") == [1, 2] == ids_on(config, AUDIT)
    assert icesink.watermark(TABLE, catalog=config) == START + datetime.timedelta(minutes=70)  # main's, published
    _orders_file(source, 1, [(3, 1.0, 80), (4, -3.0, 90)])  # a negative amount
    run()
    assert ids_on(config, "main") == [1, 2] and ids_on(config, AUDIT) == [1, 2, 3, 4]

    table = open_catalog(config).load_table(TABLE)
    read = read_many_with_iceberg_java(
        java_reader,
        [(table.metadata_location, ["id"], {}), (table.metadata_location, ["id"], {"branch": AUDIT})],
    )
    assert [sorted(r["id"] for r in rows) for rows in read] == [[1, 2], [1, 2, 3, 4]]  # Iceberg Java: main, branch
    (duck,) = read_with_duckdb(table.metadata_location)
    assert sorted(r["id"] for r in duck) == [1, 2]
    assert sorted(read_with_iceberg_rust(config, TABLE, "id").column("id").to_pylist()) == [1, 2]

    with pytest.raises(Exception) as raised:  # told to stop: the next micro-batch fails with the audit's words
        _orders_file(source, 2, [(5, 2.0, 100)])
        run(on_audit_failure="stop")
    assert "failed its audit" in str(raised.value) and "amount outside [0, +inf]" in str(raised.value)
    assert ids_on(config, "main") == [1, 2]

    table.delete("amount < 0", branch=AUDIT)  # the fix, by another tool, on the branch
    with table.transaction() as change:  # compact the small files of an hour after every commit
        change.set_properties({"icesink.maintain.min-commits": "1", "icesink.maintain.min-input-files": "2"})
    _orders_file(source, 3, [(6, 4.0, 130)])
    run(maintain=True)  # on the branch: main follows the compaction at once, as it followed what it compacted
    assert ids_on(config, "main") == [1, 2, 3, 5, 6] == ids_on(config, AUDIT)
    table = open_catalog(config).load_table(TABLE)
    assert table.metadata.refs["main"].snapshot_id == table.metadata.refs[AUDIT].snapshot_id
    assert table.snapshot_by_name("main").summary["icesink.maintenance"] == "compact"
    assert icesink.watermark(TABLE, catalog=config) == START + datetime.timedelta(minutes=130)

    # Two micro-batches under an interval: the second is held back, and published once the interval ends, though the
    # stream has ended and no commit comes after it.
    _orders_file(source, 4, [(7, 1.0, 140)])
    _orders_file(source, 5, [(8, 1.0, 150)])
    run(publish="8 seconds", maintain=True)
    assert ids_on(config, AUDIT) == [1, 2, 3, 5, 6, 7, 8]
    deadline = time.monotonic() + 30
    while ids_on(config, "main") != ids_on(config, AUDIT) and time.monotonic() < deadline:
        time.sleep(0.25)
    assert ids_on(config, "main") == [1, 2, 3, 5, 6, 7, 8]
    # Main's own history, not the clock of this test: it took 7 at once and 8 no sooner than 8 s later.
    table = open_catalog(config).load_table(TABLE)
    moves = [(entry.timestamp_ms, ids_of(table, entry.snapshot_id)) for entry in table.metadata.snapshot_log]
    took_7 = next(at for at, ids in moves if ids == [1, 2, 3, 5, 6, 7])
    took_8 = next(at for at, ids in moves if ids == [1, 2, 3, 5, 6, 7, 8])
    assert took_8 - took_7 >= 8000


def test_a_debezium_stream_into_branches_publishes_every_tables_main_together_once_audited(
    spark: Any, sqlite_catalog: CatalogConfig, tmp_path: Path
) -> None:
    from icesink import checks
    from icesink.catalog.audit_record import AuditRecord
    from tests.helpers.debezium_fixture import record, run_stream, write_batches

    config = sqlite_catalog

    def change(table: str, partition: int, offset: int, key: int, note: str | None, op: str = "c") -> dict[str, Any]:
        after = None if op == "d" else {"id": key, "note": note}
        return record(f"db.public.{table}", partition, offset, {"id": key}, after, None, op)

    batches = [
        [
            *(change("orders", 0, 0, 1, "o1"), change("orders", 1, 0, 2, "o2"), change("lines", 0, 0, 1, "l1")),
            *(change("customers", 0, 0, 1, "c1"), change("customers", 1, 0, 2, "c2")),
        ],
        # An update, a delete, and a bad row in one table: no table's main may move.
        [
            change("orders", 0, 1, 1, "o1b", "u"),
            change("customers", 1, 1, 2, None, "d"),
            change("lines", 1, 0, 2, "bad"),
        ],
        [change("lines", 1, 1, 2, "l2", "u")],  # fixed forward by the source: audited with what it fixes
    ]
    write_batches(tmp_path / "in", batches[:2])
    spec = icesink.debezium("shop", branch=AUDIT, audit=[checks.matches("note != 'bad'"), checks.not_null("id")])

    def notes(table: str, branch: str) -> dict[int, str]:
        rows = icesink.read(f"shop.{table}", catalog=config, branch=branch).to_pylist()
        return {r["id"]: r["note"] for r in rows}

    run_stream(spark, config, tmp_path, spec)
    assert notes("orders", "main") == {1: "o1", 2: "o2"}  # checkpoint 0: the last every table passed
    assert notes("customers", "main") == {1: "c1", 2: "c2"} and notes("lines", "main") == {1: "l1"}
    assert notes("orders", AUDIT) == {1: "o1b", 2: "o2"} and notes("lines", AUDIT) == {1: "l1", 2: "bad"}
    assert notes("customers", AUDIT) == {1: "c1"}
    write_batches(tmp_path / "in", batches)  # the first two again, unchanged, and the fix
    run_stream(spark, config, tmp_path, spec)
    assert notes("lines", AUDIT) == {1: "l1", 2: "l2"}
    # The fix published every table: each main is its branch, moved in one transaction (one moment recorded).
    for table in ("orders", "lines", "customers"):
        assert notes(table, "main") == notes(table, AUDIT)
    moments = set()
    for table in ("orders", "lines", "customers"):
        entries = AuditRecord(config).of_branch(f"shop.{table}", AUDIT).values()
        moments.add(max(e.published_at for e in entries if e.published_at is not None))
        assert any(not e.passed for e in entries) == (table == "lines")
    assert len(moments) == 1


def test_a_stream_whose_committer_is_the_daemon_declares_its_audits_and_the_daemon_publishes(
    spark: Any, sqlite_catalog: CatalogConfig, tmp_path: Path
) -> None:
    from icesink import checks
    from icesink.catalog.publishing_record import PublishingRecord
    from icesink.committer.daemon import CommitterDaemon

    config = sqlite_catalog
    create_orders_table(config, TABLE)
    source = tmp_path / "in"

    def run(**options: Any) -> None:
        read = str(options.pop("source", source))
        df = spark.readStream.schema(INPUT_SCHEMA).option("maxFilesPerTrigger", 1).parquet(read)
        icesink.stream(
            df.drop("topic", "partition"),
            table=TABLE,
            catalog=config,
            checkpoint_location=str(tmp_path / options.pop("ck", "ck")),
            trigger={"availableNow": True},
            branch=AUDIT,
            **{"committer": "daemon", "audit": [checks.not_null("id"), checks.in_range("amount", min=0)], **options},
        ).awaitTermination()

    _orders_file(source, 0, [(1, 5.0, 10), (2, 7.0, 70)])
    run()
    assert open_catalog(config).load_table(TABLE).metadata.refs == {}  # only staged
    daemon = CommitterDaemon(config, lease_ttl=4)
    daemon.run(once=True)
    assert ids_on(config, "main") == [1, 2] == ids_on(config, AUDIT)
    _orders_file(source, 1, [(3, -1.0, 80)])
    run()
    daemon.run(once=True)
    assert ids_on(config, "main") == [1, 2] and ids_on(config, AUDIT) == [1, 2, 3]  # it failed its audit
    (held,) = daemon.audits()
    assert held["table"] == TABLE and held["checkpoint_id"] == 1

    # Another stream takes the table over, committing inline and publishing by hand: the first one's declaration
    # goes, and the daemon no longer moves main for it, with its checks.
    _orders_file(tmp_path / "other", 0, [(4, 1.0, 90)])
    run(source=tmp_path / "other", ck="ck2", committer="inline", publish="manual", audit=[checks.not_null("id")])
    assert PublishingRecord(config).of_tables([TABLE]) == []
    daemon.run(once=True)
    assert ids_on(config, "main") == [1, 2] and ids_on(config, AUDIT) == [1, 2, 3, 4]
