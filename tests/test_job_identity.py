"""A job id belongs to one stream and one checkpoint history: sharing one by mistake never loses rows.

Every case ends in an error naming both streams, or in every row exactly once
(read back with iceberg-rust into the fault suite's table); never in fewer rows.
"""

from __future__ import annotations

import datetime
import shutil
import threading
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import icesink
from icesink.catalog.checkpoints import CheckpointState, StreamIdentity
from icesink.catalog.config import CatalogConfig
from icesink.catalog.ledger import Ledger
from icesink.catalog.loader import open_catalog
from icesink.committer.commit import TableCommitter
from icesink.committer.daemon import CommitterDaemon
from icesink.committer.staging import stage_checkpoint
from icesink.errors import ConfigError, JobIdConflictError
from icesink.sink.checkpoint_targets import Targets, record_targets, refuse_in, table_identities
from icesink.table_ref import TableRef
from tests.helpers.outcomes import check_outcome
from tests.helpers.streams import add_input_files, input_stream, run_available
from tests.helpers.support import create_orders_table, orders, table_ids, wait_for, write_files

TABLE = "shop.orders"
STREAM_A = StreamIdentity("stream-a", "/checkpoints/a")
STREAM_B = StreamIdentity("stream-b", "/checkpoints/b")


def stage(config: CatalogConfig, checkpoint: int, rows: pa.Table, stream: StreamIdentity, job: str = "orders") -> bool:
    table = open_catalog(config).load_table(TABLE)
    result = write_files(table, TABLE, job, checkpoint, rows)
    return stage_checkpoint(Ledger(config), table, TABLE, job, checkpoint, [result], stream)


def test_a_checkpoint_staged_by_another_stream_is_refused_not_taken_for_a_replay(
    catalog_config: CatalogConfig,
) -> None:
    create_orders_table(catalog_config)
    assert stage(catalog_config, 0, orders(0, 10), STREAM_A)
    assert not stage(catalog_config, 0, orders(0, 10), STREAM_A)  # a replay of the same micro-batch
    with pytest.raises(JobIdConflictError) as raised:
        stage(catalog_config, 0, orders(100, 10), STREAM_B)
    message = str(raised.value)
    assert "stream stream-a (checkpoint location /checkpoints/a)" in message
    assert "stream stream-b (checkpoint location /checkpoints/b)" in message and "job orders" in message
    (row,) = Ledger(catalog_config).for_table(TABLE)
    assert row.stream_id == "stream-a" and row.state == CheckpointState.STAGED
    TableCommitter.of(catalog_config).commit_pending(TABLE)
    assert table_ids(catalog_config, TABLE) == list(range(10))


def test_the_committer_never_takes_another_streams_checkpoint_for_committed(catalog_config: CatalogConfig) -> None:
    """Stream B's checkpoint 1 is below stream A's marker: it is an error, not a silent skip."""
    create_orders_table(catalog_config)
    committer = TableCommitter.of(catalog_config)
    for checkpoint in range(3):
        stage(catalog_config, checkpoint, orders(checkpoint * 10, 10), STREAM_A)
    committer.commit_pending(TABLE)
    # gc forgets old ledger rows (the newest of the job stays), so B's checkpoint 1 stages without a clash.
    Ledger(catalog_config).prune_committed(TABLE, datetime.datetime.now(datetime.UTC) + datetime.timedelta(hours=1))
    assert stage(catalog_config, 1, orders(500, 10), STREAM_B)
    with pytest.raises(JobIdConflictError, match="two streams share the job id"):
        committer.commit_pending(TABLE)
    (row,) = Ledger(catalog_config).pending(TABLE)
    assert row.stream_id == "stream-b" and row.status == "failed" and "stream-a" in (row.error or "")
    assert table_ids(catalog_config, TABLE) == list(range(30))  # nothing lost, nothing of B's taken as done


def test_tables_created_by_racing_streams_are_shared(catalog_config: CatalogConfig) -> None:
    """Eight writers create the same new namespace and table at once: all succeed, with one table."""
    from pyspark.sql.types import LongType, StringType, StructField, StructType

    from icesink.sink.tables import resolve_table

    schema = StructType([StructField("id", LongType(), False), StructField("name", StringType())])
    barrier = threading.Barrier(8)
    found: list[Any] = []
    errors: list[BaseException] = []

    def create() -> None:
        catalog = open_catalog(catalog_config)
        barrier.wait()
        try:
            found.append(resolve_table(catalog, catalog_config, "fresh ns.new table", schema, True, ["bucket(2, id)"]))
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=create) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert len({t.metadata.table_uuid for t in found}) == 1
    assert open_catalog(catalog_config).list_tables("fresh ns") == [("fresh ns", "new table")]


# --- Real streams -------------------------------------------------------------------------------------


def stream_options(config: CatalogConfig, **extra: Any) -> dict[str, Any]:
    return {"table": TABLE, "create_table": True, "catalog": config, **extra}


def rows_of(batches: list[tuple[int, int]]) -> list[int]:
    return [i for start, count in batches for i in range(start, start + count)]


@pytest.mark.spark
@pytest.mark.parametrize("batches_before", [1, 3], ids=["marker-0", "marker-2"])
def test_a_new_checkpoint_location_with_an_explicit_job_id_stops_instead_of_skipping(
    spark: Any, sqlite_catalog: CatalogConfig, tmp_path: Path, batches_before: int
) -> None:
    first = [(i * 10, 10) for i in range(batches_before)]
    add_input_files(tmp_path / "a", first)
    run_available(
        input_stream(spark, tmp_path / "a"),
        checkpoint_location=str(tmp_path / "ckpt-a"),
        **stream_options(sqlite_catalog, job_id="orders"),
    )
    # Another stream (a new checkpoint location) with the same job id: its batch 0 is not a replay.
    add_input_files(tmp_path / "b", [(1000, 7)])
    with pytest.raises(Exception) as raised:
        run_available(
            input_stream(spark, tmp_path / "b"),
            checkpoint_location=str(tmp_path / "ckpt-b"),
            **stream_options(sqlite_catalog, job_id="orders"),
        )
    message = str(raised.value)
    assert "job orders already has checkpoints up to" in message and "ckpt-b" in message
    assert not (tmp_path / "ckpt-b" / "commits" / "0").exists()  # Spark did not record the batch as done
    assert table_ids(sqlite_catalog, TABLE) == rows_of(first)
    # With a job id of its own, the stream writes its rows.
    run_available(
        input_stream(spark, tmp_path / "b"),
        checkpoint_location=str(tmp_path / "ckpt-b"),
        **stream_options(sqlite_catalog, job_id="orders-b"),
    )
    check_outcome(
        f"job id reused, new checkpoint location ({batches_before} batch(es) before)",
        sqlite_catalog,
        TABLE,
        rows_of([*first, (1000, 7)]),
    )


@pytest.mark.spark
def test_two_live_streams_with_one_job_id_the_second_stops_naming_both(
    spark: Any, catalog_config: CatalogConfig, tmp_path: Path
) -> None:
    add_input_files(tmp_path / "a", [(0, 10)])
    first = icesink.stream(
        input_stream(spark, tmp_path / "a"),
        checkpoint_location=str(tmp_path / "ckpt-a"),
        trigger={"processingTime": "200 milliseconds"},
        **stream_options(catalog_config, job_id="shared"),
    )
    try:
        wait_for(lambda: table_ids(catalog_config, TABLE) == list(range(10)), "the first stream's commit", 60)
        add_input_files(tmp_path / "b", [(500, 10)])
        second = icesink.stream(
            input_stream(spark, tmp_path / "b"),
            checkpoint_location=str(tmp_path / "ckpt-b"),
            trigger={"processingTime": "200 milliseconds"},
            **stream_options(catalog_config, job_id="shared"),
        )
        with pytest.raises(Exception) as raised:
            second.awaitTermination(120)
        message = str(raised.value)
        assert f"from stream {first.id}" in message and f"this is stream {second.id}" in message
        # The first stream goes on.
        add_input_files(tmp_path / "a", [(10, 10)])
        wait_for(lambda: table_ids(catalog_config, TABLE) == list(range(20)), "the first stream's next commit", 60)
        assert first.isActive
    finally:
        first.stop()
    check_outcome("two live streams, one job id", catalog_config, TABLE, list(range(20)))


@pytest.mark.spark
def test_a_stale_ledger_row_of_another_run_stops_the_new_stream(
    spark: Any, sqlite_catalog: CatalogConfig, tmp_path: Path
) -> None:
    """Stream A staged for the daemon and lost its checkpoint location; B must not write under A's job id."""
    add_input_files(tmp_path / "a", [(0, 10), (10, 10)])
    run_available(
        input_stream(spark, tmp_path / "a"),
        checkpoint_location=str(tmp_path / "ckpt-a"),
        **stream_options(sqlite_catalog, job_id="orders", committer="daemon"),
    )
    shutil.rmtree(tmp_path / "ckpt-a")
    add_input_files(tmp_path / "b", [(100, 5)])
    with pytest.raises(Exception) as raised:
        run_available(
            input_stream(spark, tmp_path / "b"),
            checkpoint_location=str(tmp_path / "ckpt-b"),
            **stream_options(sqlite_catalog, job_id="orders", committer="daemon"),
        )
    assert "job orders already has staged checkpoints" in str(raised.value)
    rows = Ledger(sqlite_catalog).for_table(TABLE)  # only A's two checkpoints, still staged
    assert [(r.checkpoint_id, r.state) for r in rows] == [(0, CheckpointState.STAGED), (1, CheckpointState.STAGED)]
    assert len({r.stream_id for r in rows}) == 1
    # A's staged checkpoints are A's data: the daemon commits them; B writes under its own job id.
    CommitterDaemon(sqlite_catalog, poll_interval=0.05).run(once=True)
    run_available(
        input_stream(spark, tmp_path / "b"),
        checkpoint_location=str(tmp_path / "ckpt-b"),
        **stream_options(sqlite_catalog, job_id="orders-b"),
    )
    check_outcome("stale ledger row of another run", sqlite_catalog, TABLE, [*range(20), *range(100, 105)])


@pytest.mark.spark
def test_two_streams_racing_to_create_a_table_both_land_every_row(
    spark: Any, catalog_config: CatalogConfig, tmp_path: Path
) -> None:
    identifier = "race ns.orders"
    barrier = threading.Barrier(2)
    failures: list[BaseException] = []

    def run(name: str, start: int) -> None:
        add_input_files(tmp_path / name, [(start, 50)])
        df = input_stream(spark, tmp_path / name)
        barrier.wait()
        try:
            run_available(
                df,
                table=identifier,
                create_table=True,
                catalog=catalog_config,
                checkpoint_location=str(tmp_path / f"ckpt-{name}"),
            )
        except BaseException as e:
            failures.append(e)

    threads = [threading.Thread(target=run, args=(n, s)) for n, s in (("a", 0), ("b", 1000))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []
    check_outcome("two streams creating one table", catalog_config, identifier, [*range(50), *range(1000, 1050)])


@pytest.mark.parametrize("branch", ["main", "audit ✓"])
def test_the_protocol_answers_each_case_of_a_checkpoint_once(sqlite_catalog: CatalogConfig, branch: str) -> None:
    """The one admission decision both sinks act on, case by case, without Spark; on a branch the same, while
    another tool writes to main."""
    from icesink.committer.protocol import Admission, admit
    from icesink.committer.staging import TableResults, stage_tables
    from icesink.errors import CheckpointRewindError

    create_orders_table(sqlite_catalog)
    ledger = Ledger(sqlite_catalog)
    ref = TableRef(TABLE, branch)

    def decide(checkpoint: int, stream: StreamIdentity = STREAM_A, first: bool = False) -> Any:
        table = open_catalog(sqlite_catalog).load_table(TABLE)
        return admit(ledger, table, ref, "orders", checkpoint, stream, first)

    def stage_on(checkpoint: int, rows: pa.Table) -> None:
        table = open_catalog(sqlite_catalog).load_table(TABLE)
        written = TableResults(table, TABLE, [write_files(table, TABLE, "orders", checkpoint, rows)], branch=branch)
        assert stage_tables(ledger, "orders", checkpoint, [written], STREAM_A)

    def other_tool_writes_main(first: int) -> None:
        if branch != "main":
            open_catalog(sqlite_catalog).load_table(TABLE).append(orders(first, 1))

    assert decide(0, first=True).admission == Admission.WRITE
    stage_on(0, orders(0, 5))
    other_tool_writes_main(1000)
    staged = decide(0)
    assert staged.admission == Admission.STAGED and staged.commit_staged and staged.refusal is None
    other = decide(1, STREAM_B, first=True)
    assert other.admission == Admission.ANOTHER_STREAM and isinstance(other.refusal, JobIdConflictError)
    assert "stream stream-a (checkpoint location /checkpoints/a)" in str(other.refusal)
    assert decide(1, STREAM_B).admission == Admission.WRITE  # only a stream's first checkpoint asks the ledger
    TableCommitter.of(sqlite_catalog).commit_pending(TABLE)
    assert decide(0).admission == Admission.COMMITTED
    stage_on(1, orders(5, 5))
    other_tool_writes_main(1001)
    stage_on(2, orders(10, 5))
    TableCommitter.of(sqlite_catalog).commit_pending(TABLE)
    rewind = decide(1)
    assert rewind.admission == Admission.REWIND and isinstance(rewind.refusal, CheckpointRewindError)
    assert "already holds checkpoint 2 of job orders, but the stream is at checkpoint 1" in str(rewind.refusal)
    assert decide(2, STREAM_B).admission == Admission.ANOTHER_STREAM  # the marker names stream A
    assert decide(3).admission == Admission.WRITE
    table = open_catalog(sqlite_catalog).load_table(TABLE)
    on_branch = table.scan(snapshot_id=table.metadata.refs[branch].snapshot_id).to_arrow().column("id").to_pylist()
    assert sorted(i for i in on_branch if i < 1000) == list(range(15))  # every checkpoint once, on its branch
    if branch != "main":  # main holds the other tool's rows alone: the stream never moved it
        assert table_ids(sqlite_catalog, TABLE) == [1000, 1001]


@pytest.mark.spark
def test_a_checkpoint_location_is_never_handed_to_another_table(
    spark: Any, sqlite_catalog: CatalogConfig, tmp_path: Path
) -> None:
    """Spark would resume the location's offsets for any sink: the other table would miss every earlier row."""
    location = str(tmp_path / "ckpt")
    add_input_files(tmp_path / "in", [(0, 10), (10, 10)])
    run_available(input_stream(spark, tmp_path / "in"), checkpoint_location=location, **stream_options(sqlite_catalog))
    add_input_files(tmp_path / "in", [(20, 5)])
    with pytest.raises(ConfigError) as raised:  # the same location, spelled as Spark resolves it
        run_available(
            input_stream(spark, tmp_path / "in"),
            checkpoint_location=f"file://{location}/",
            **stream_options(sqlite_catalog, table="shop.other"),
        )
    message = str(raised.value)
    assert message.startswith("table shop.other: checkpoint location ")
    assert "a stream into table shop.orders, which Spark ran to micro-batch 1" in message
    assert "a checkpoint location of its own" in message and "targets.json" in message
    assert not open_catalog(sqlite_catalog, pending_tables=True).table_exists("shop.other")  # nothing created
    assert sorted(p.name for p in (tmp_path / "ckpt" / "commits").glob("[0-9]*")) == ["0", "1"]
    # The same table renamed is the same table: the stream carries on into it with every row once.
    open_catalog(sqlite_catalog).rename_table(TABLE, "shop.orders_v2")
    run_available(
        input_stream(spark, tmp_path / "in"),
        checkpoint_location=location,
        **stream_options(sqlite_catalog, table="shop.orders_v2"),
    )
    check_outcome("checkpoint location kept across a rename", sqlite_catalog, "shop.orders_v2", rows_of([(0, 25)]))
    # A stream of several tables may gain one; the new table starts at the next micro-batch.
    add_input_files(tmp_path / "in", [(25, 5)])
    run_available(
        input_stream(spark, tmp_path / "in"),
        checkpoint_location=location,
        tables={
            "shop.orders_v2": icesink.Target(),
            "shop.big": icesink.Target(lambda df: df.where("id >= 27"), create_table=True),
        },
        catalog=sqlite_catalog,
    )
    assert table_ids(sqlite_catalog, "shop.orders_v2") == rows_of([(0, 30)])
    assert table_ids(sqlite_catalog, "shop.big") == [27, 28, 29]


def test_what_a_checkpoint_location_records_decides_which_starts_are_refused(
    sqlite_catalog: CatalogConfig, tmp_path: Path
) -> None:
    location, directory = "ckpt", tmp_path / "ckpt"
    catalog = open_catalog(sqlite_catalog)
    catalog.create_namespace("shop")
    for name in ("shop.a", "shop.c"):
        catalog.create_table(name, pa.schema([("id", pa.int64())]))
    record_targets(directory, Targets.of(table_identities(sqlite_catalog, ["shop.a"]), sqlite_catalog))
    # No micro-batch done there yet (a first start that failed): another table may take the location.
    refuse_in(directory, location, Targets({"shop.b": None}), sqlite_catalog)
    (directory / "commits").mkdir()
    (directory / "commits" / "4").write_text("v1\n{}")
    refuse_in(directory, location, Targets({"shop.a": None}), sqlite_catalog)
    refuse_in(directory, location, Targets({"shop.a": None, "shop.c": None}), sqlite_catalog)
    # The same name in another catalog is another table.
    elsewhere = Targets({"shop.a": None}, catalog="catalog 'other' at sqlite:////elsewhere.db")
    with pytest.raises(ConfigError, match=r"shop\.a in catalog '.*' at sqlite.* \(this stream's: catalog 'other'"):
        refuse_in(directory, location, elsewhere, sqlite_catalog)
    for others in (Targets({"shop.b": None}), Targets({"shop.b": None, "shop.c": None}), Targets({}, "inventory")):
        with pytest.raises(ConfigError, match=r"which Spark ran to micro-batch 4; .* would begin at micro-batch 5"):
            refuse_in(directory, location, others, sqlite_catalog)
    # Renamed, the recorded table is the same table; a new table under its old name is not: its rows are elsewhere.
    catalog.rename_table("shop.a", "shop.a_v2")
    refuse_in(directory, location, Targets({"shop.a_v2": None}), sqlite_catalog)
    catalog.create_table("shop.a", pa.schema([("id", pa.int64())]))
    with pytest.raises(ConfigError, match=r"table shop\.a \(table shop\.a is named shop\.a_v2 now\), which Spark"):
        refuse_in(directory, location, Targets({"shop.a": None}), sqlite_catalog)
    with pytest.raises(ConfigError, match=r"tables shop\.a, shop\.c: .* \(table shop\.a is named shop\.a_v2 now\)"):
        refuse_in(directory, location, Targets({"shop.a": None, "shop.c": None}), sqlite_catalog)  # one of several
    # Dropped, its rows went with it: created again, it goes on from the next micro-batch, as after any drop.
    catalog.drop_table("shop.a_v2")
    refuse_in(directory, location, Targets({"shop.a": None}), sqlite_catalog)
    record_targets(directory, Targets({}, "inventory"))
    refuse_in(directory, location, Targets({}, "inventory"), None)
    with pytest.raises(ConfigError, match="holds the progress of the Debezium stream into namespace inventory, which"):
        refuse_in(directory, location, Targets({"shop.a": None}), sqlite_catalog)
    # A record that cannot be read stops the start, saying what to do, rather than skipping the check.
    for damaged in ("{not json", "", '{"tables": []}'):
        (directory / "icesink" / "targets.json").write_text(damaged)
        with pytest.raises(ConfigError, match=r"targets.json\) is unreadable .* Remove the record to start"):
            refuse_in(directory, location, Targets({"shop.a": None}), sqlite_catalog)
    (directory / "icesink" / "targets.json").unlink()
    (directory / "icesink" / "targets.json").mkdir()
    with pytest.raises(ConfigError, match="is unreadable"):
        refuse_in(directory, location, Targets({"shop.a": None}), sqlite_catalog)
