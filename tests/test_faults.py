"""Crash tests: real processes killed with SIGKILL at chosen and at random moments.

Every case ends with the table holding every input row exactly once.
"""

from __future__ import annotations

import contextlib
import datetime
import os
import random
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from icesink.catalog.checkpoints import CheckpointState
from icesink.catalog.config import CatalogConfig
from icesink.catalog.ledger import Ledger
from icesink.catalog.loader import open_catalog
from icesink.committer.gc import collect_garbage
from icesink.failpoints import ENV, failpoint
from tests.helpers.changes import ChangeModel, random_checkpoint, sorted_rows, write_checkpoint_file
from tests.helpers.outcomes import check_outcome
from tests.helpers.streams import add_input_files
from tests.helpers.support import age_everything, create_orders_table, orders, stage_rows, table_ids, wait_for

pytestmark = pytest.mark.faults
TABLE = "shop.orders"
CDC_TABLE = "shop.inventory"
ROOT = Path(__file__).parent.parent


def _env(failpoints: str = "") -> dict[str, str]:
    # A committer restarted after a SIGKILL waits for the dead one's lease to expire: 4 s, not the default 10,
    # which these small commits renew well within.
    env = {"ICESINK_LEASE_TTL": "4", **os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("ICESINK_FAILPOINTS", None)
    if failpoints:
        env["ICESINK_FAILPOINTS"] = failpoints
        env["ICESINK_FAILPOINT_SCOPE"] = "group"
    return env


def start_stream(
    config: CatalogConfig,
    tmp_path: Path,
    failpoints: str = "",
    committer: str = "inline",
    mode: str = "append",
    env: dict[str, str] | None = None,
    writer: str = "auto",
) -> subprocess.Popen[bytes]:
    table = CDC_TABLE if mode == "cdc" else TABLE
    args = [
        str(tmp_path / "in"),
        str(tmp_path / "ckpt"),
        config.name,
        config.uri,
        config.warehouse,
        table,
        committer,
        mode,
        writer,
    ]
    return subprocess.Popen(
        [sys.executable, "-m", "tests.helpers.fault_stream", *args],
        cwd=ROOT,
        env={**_env(failpoints), **(env or {})},
        start_new_session=True,  # its own process group: killing it takes the JVM and workers too
        stdout=subprocess.DEVNULL,
        stderr=open(tmp_path / "stream.log", "ab"),
    )


def wait(process: subprocess.Popen[bytes], timeout: float = 240) -> int:
    try:
        return process.wait(timeout)
    finally:
        _kill_group(process)


def _kill_group(process: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()


def run_to_completion(config: CatalogConfig, tmp_path: Path, **options: Any) -> None:
    code = wait(start_stream(config, tmp_path, **options))
    assert code == 0, (tmp_path / "stream.log").read_text()[-4000:]


MOMENTS = [
    "writer.after-file",  # an Arrow writer task wrote a data file, the batch is half done
    "spark-writer.after-write",  # Spark's writer finished the batch's files, none moved into the table
    "spark-writer.after-move",  # one of them moved into the table's data directory
    "driver.after-write",  # every file written, nothing staged
    "driver.after-stage",  # staged in the ledger, not committed, Spark did not record the batch
    "committer.after-catalog-commit",  # in the table, ledger not updated, Spark did not record the batch
    "committer.after-ledger-update",  # committed and recorded, Spark did not record the batch
]


def test_stream_killed_at_each_moment_in_turn_writes_every_row_once(pg_catalog: CatalogConfig, tmp_path: Path) -> None:
    """One stream, killed at each moment in turn (a restart of Spark costs ~20 s, so the moments share a
    run): each restart resumes where the last one died, and no row is ever in the table twice. On PostgreSQL,
    the production catalog; on SQLite, a stream is killed after staging and in its commit by the late-rows case
    below, and the committer after the catalog commit by the daemon's."""
    catalog_config, moments = pg_catalog, MOMENTS
    # A batch per killed run (a restart first finishes what the last run staged), and one more.
    batches = [(i * 3000, 3000) for i in range(len(moments) + 2)]
    add_input_files(tmp_path / "in", batches)
    for moment in moments:
        # Appends go to Spark's writer unless told otherwise; the Arrow writer's moment needs the Arrow writer.
        writer = "arrow" if moment.startswith("writer.") else "auto"
        code = wait(start_stream(catalog_config, tmp_path, failpoints=moment, writer=writer))
        if moment.startswith("writer."):
            # Spark's Python workers live in their own process group: the executor dies, the query fails.
            assert code != 0, "the query should have failed when its executor died"
        else:
            assert code == -signal.SIGKILL, f"the stream should have died at {moment}"
        ids = table_ids(catalog_config, TABLE) if open_catalog(catalog_config).table_exists(TABLE) else []
        assert len(ids) == len(set(ids)), f"rows twice in the table after the kill at {moment}"
    run_to_completion(catalog_config, tmp_path)
    expected = list(range(3000 * len(batches)))
    check_outcome(f"stream SIGKILL at {len(moments)} moments in turn", catalog_config, TABLE, expected)
    rows = Ledger(catalog_config).for_table(TABLE)
    assert [r.checkpoint_id for r in rows] == list(range(len(batches)))
    assert all(r.state == CheckpointState.COMMITTED for r in rows)
    if "spark-writer.after-write" in moments:
        # The killed batch's files never left Spark's scratch directory; gc takes them, the table stays whole.
        root = Path(open_catalog(catalog_config).load_table(TABLE).location().removeprefix("file://"))
        left = [p for p in root.rglob("*") if p.is_file() and ".icesink-scratch-" in str(p.parent)]
        assert any(p.name.endswith(".parquet") for p in left)
        age_everything(root)
        report = collect_garbage(open_catalog(catalog_config), catalog_config, TABLE, datetime.timedelta(hours=1))
        assert set(left) <= {Path(uri.removeprefix("file://")) for uri in report.deleted}
        assert not any(p.exists() for p in left)
        check_outcome("stream SIGKILL at each moment in turn, after gc", catalog_config, TABLE, expected)


def test_stream_killed_at_random_moments_writes_every_row_once(pg_catalog: CatalogConfig, tmp_path: Path) -> None:
    catalog_config = pg_catalog  # the chosen moments run on both catalogs; random ones on the production one
    seed = int(os.environ.get("ICESINK_FAULT_SEED", time.time_ns() % 10_000))
    rng = random.Random(seed)
    batches = [(i * 5000, 5000) for i in range(8)]
    add_input_files(tmp_path / "in", batches)
    kills = 0
    for _ in range(3):
        process = start_stream(catalog_config, tmp_path)
        try:
            process.wait(rng.uniform(4.0, 12.0))
        except subprocess.TimeoutExpired:
            kills += 1
        _kill_group(process)
    run_to_completion(catalog_config, tmp_path)
    check_outcome(f"stream SIGKILL x{kills} at random (seed {seed})", catalog_config, TABLE, list(range(40_000)))


def run_committer(config: CatalogConfig, failpoints: str = "") -> int:
    args = [
        "--catalog",
        config.name,
        "--uri",
        config.uri,
        "--warehouse",
        config.warehouse,
        "committer",
        "run",
        "--once",
        "--wait",  # a committer killed before holds its lease until it expires
        "60",
    ]
    process = subprocess.Popen(
        [sys.executable, "-m", "icesink.cli", *args], cwd=ROOT, env=_env(failpoints), start_new_session=True
    )
    return wait(process, timeout=120)


@pytest.mark.parametrize(
    "moment",
    [
        "committer.before-catalog-commit",
        "committer.after-catalog-commit",
        "committer.after-ledger-update",
        "committer.during-cleanup",
    ],
)
def test_committer_daemon_killed_and_restarted_commits_nothing_twice(
    catalog_config: CatalogConfig, tmp_path: Path, moment: str
) -> None:
    create_orders_table(catalog_config)
    for checkpoint in range(3):
        stage_rows(catalog_config, TABLE, "job-a", checkpoint, orders(checkpoint * 100, 100))
    assert run_committer(catalog_config, failpoints=moment) == -signal.SIGKILL
    assert run_committer(catalog_config) == 0
    table = open_catalog(catalog_config).load_table(TABLE)
    assert len(table.metadata.snapshots) == 1
    assert table_ids(catalog_config, TABLE) == list(range(300))
    stage_rows(catalog_config, TABLE, "job-a", 3, orders(300, 100))
    assert run_committer(catalog_config) == 0
    check_outcome(f"committer SIGKILL at {moment}", catalog_config, TABLE, list(range(400)))
    rows = Ledger(catalog_config).for_table(TABLE)
    assert all(r.state == CheckpointState.COMMITTED and r.manifests_deleted for r in rows)


def cdc_input(tmp_path: Path, checkpoints: int = 4) -> ChangeModel:
    rng = random.Random(99)
    model = ChangeModel()
    for checkpoint in range(checkpoints):
        changes = random_checkpoint(rng, checkpoint, keys=200, size=3000)
        write_checkpoint_file(tmp_path / "in", checkpoint, changes)
        model.apply(changes)
    return model


# writer.after-file is covered by the append cases; these are the moments a row delta adds. One stream killed at
# each in turn (a Spark start costs ~20 s): after staging checkpoint 0, then after the catalog took checkpoint 1, a
# row delta of updates and deletes, before the ledger knew.
def test_cdc_stream_killed_mid_batch_in_turn_ends_equal_to_the_model(pg_catalog: CatalogConfig, tmp_path: Path) -> None:
    import icesink

    model = cdc_input(tmp_path)
    for moment in ("driver.after-stage", "committer.after-catalog-commit@2"):
        assert wait(start_stream(pg_catalog, tmp_path, failpoints=moment, mode="cdc")) == -signal.SIGKILL, moment
    committed = open_catalog(pg_catalog).load_table(CDC_TABLE).current_snapshot()
    assert committed is not None and committed.summary["icesink.max-committed-checkpoint-id"] == "1"
    assert int(committed.summary["added-delete-files"] or 0) > 0  # the kill came after a row delta's commit
    run_to_completion(pg_catalog, tmp_path, mode="cdc")
    assert sorted_rows(icesink.read(CDC_TABLE, catalog=pg_catalog)) == model.expected()
    check_outcome("CDC stream SIGKILL at two moments in turn", pg_catalog, CDC_TABLE, expected_rows=model.expected())
    table = open_catalog(pg_catalog).load_table(CDC_TABLE)
    assert sorted(int(s.summary["icesink.max-committed-checkpoint-id"]) for s in table.metadata.snapshots) == [
        0,
        1,
        2,
        3,
    ]


def test_a_changelog_pipeline_with_both_streams_killed_at_random_ends_with_b_equal_to_a(
    pg_catalog: CatalogConfig, tmp_path: Path
) -> None:
    """CDC into A; A's changelog (icesink.read_stream) into B; both SIGKILLed at random and restarted."""
    import icesink

    seed = int(os.environ.get("ICESINK_FAULT_SEED", time.time_ns() % 10_000))
    rng = random.Random(seed)
    model = cdc_input(tmp_path, checkpoints=4)
    copy_path = tmp_path / "copy"
    copy_path.mkdir()

    def start_copy() -> subprocess.Popen[bytes]:
        args = [CDC_TABLE, str(copy_path / "ckpt"), pg_catalog.name, pg_catalog.uri, pg_catalog.warehouse]
        return subprocess.Popen(
            [sys.executable, "-m", "tests.helpers.fault_stream", *args, "shop.copy", "inline", "changelog"],
            cwd=ROOT,
            env=_env(),
            start_new_session=True,
            stdout=subprocess.DEVNULL,
            stderr=open(copy_path / "stream.log", "ab"),
        )

    kills = 0
    source = start_stream(pg_catalog, tmp_path, mode="cdc")
    time.sleep(rng.uniform(3.0, 6.0))
    copy = start_copy()  # reads A while A is written
    for process in (source, copy):
        try:
            process.wait(rng.uniform(3.0, 8.0))
        except subprocess.TimeoutExpired:
            kills += 1
        _kill_group(process)
    run_to_completion(pg_catalog, tmp_path, mode="cdc")
    assert wait(start_copy()) == 0, (copy_path / "stream.log").read_text()[-3000:]
    assert sorted_rows(icesink.read(CDC_TABLE, catalog=pg_catalog)) == model.expected()
    copied = icesink.read("shop.copy", catalog=pg_catalog).drop_columns(["_change_ordinal"])
    assert sorted_rows(copied) == model.expected()
    check_outcome(
        f"changelog pipeline, {kills} SIGKILLs (seed {seed}): A", pg_catalog, CDC_TABLE, expected_rows=model.expected()
    )
    from tests.helpers.outcomes import read_with_iceberg_rust

    rust = read_with_iceberg_rust(pg_catalog, "shop.copy", "region, id, value, seq")
    assert sorted_rows(rust) == model.expected()
    check_outcome(
        f"changelog pipeline, {kills} SIGKILLs (seed {seed}): B",
        pg_catalog,
        "shop.copy",
        [r["id"] for r in model.expected()],
    )


def test_committer_killed_right_after_a_row_delta_commit_applies_no_delete_twice(
    pg_catalog: CatalogConfig, tmp_path: Path
) -> None:
    import icesink

    model = cdc_input(tmp_path)
    run_to_completion(pg_catalog, tmp_path, mode="cdc", committer="daemon")
    assert open_catalog(pg_catalog).load_table(CDC_TABLE).current_snapshot() is None
    assert run_committer(pg_catalog, failpoints="committer.after-catalog-commit") == -signal.SIGKILL
    table = open_catalog(pg_catalog).load_table(CDC_TABLE)
    assert len(table.metadata.snapshots) == 1  # the first row delta landed, the ledger never heard of it
    assert Ledger(pg_catalog).for_table(CDC_TABLE)[0].state == CheckpointState.STAGED
    assert run_committer(pg_catalog) == 0
    table = open_catalog(pg_catalog).load_table(CDC_TABLE)
    assert len(table.metadata.snapshots) == 4
    assert sorted_rows(icesink.read(CDC_TABLE, catalog=pg_catalog)) == model.expected()
    check_outcome("committer SIGKILL after a row-delta commit", pg_catalog, CDC_TABLE, expected_rows=model.expected())


def start_committer(
    config: CatalogConfig, log_path: Path, ttl: float = 2.0, app_name: str = "icesink-committer"
) -> subprocess.Popen[bytes]:
    args = ["--catalog", config.name, "--uri", config.uri, "--warehouse", config.warehouse]
    args += ["committer", "run", "--poll-interval", "0.2", "--lease-ttl", str(ttl)]
    return subprocess.Popen(
        [sys.executable, "-m", "icesink.cli", *args],
        cwd=ROOT,
        env={**_env(), "PGAPPNAME": app_name},  # lets a test find this process's PostgreSQL connections
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=open(log_path, "ab"),
    )


def lease_holder(config: CatalogConfig) -> tuple[int, int] | None:
    """(pid, epoch) of the committer holding the ``*`` lease."""
    import sqlalchemy as sa

    from icesink.catalog.database import engine
    from icesink.catalog.lease import leases

    with engine(config).connect() as connection:
        query = sa.select(leases.c.owner, leases.c.epoch).where(
            leases.c.catalog_name == config.name, leases.c.scope == "*"
        )
        row = connection.execute(query).first()
    return None if row is None else (int(row.owner.split(":")[1]), int(row.epoch))


def all_committed(config: CatalogConfig, table: str = TABLE) -> bool:
    rows = Ledger(config).for_table(table)
    return bool(rows) and all(r.state == CheckpointState.COMMITTED for r in rows)


def test_standby_committer_takes_over_after_sigkill_and_commits_exactly_once(
    catalog_config: CatalogConfig, tmp_path: Path
) -> None:
    create_orders_table(catalog_config)
    committers = [start_committer(catalog_config, tmp_path / f"committer-{i}.log") for i in range(2)]  # together
    try:
        wait_for(lambda: lease_holder(catalog_config) is not None, "a committer holds the lease", 30)
        for checkpoint in range(3):
            stage_rows(catalog_config, TABLE, "job-a", checkpoint, orders(checkpoint * 100, 100))
        wait_for(lambda: all_committed(catalog_config), "the active committer commits", 30)
        pid, epoch = lease_holder(catalog_config)  # type: ignore[misc]
        active = next(p for p in committers if p.pid == pid)
        standby = next(p for p in committers if p.pid != pid)
        os.killpg(active.pid, signal.SIGKILL)
        active.wait()
        for checkpoint in range(3, 5):
            stage_rows(catalog_config, TABLE, "job-a", checkpoint, orders(checkpoint * 100, 100))
        took = wait_for(lambda: all_committed(catalog_config), "the standby takes over and commits", 30)
        assert took < 2.0 + 15.0  # lease TTL + polling + commit, on a machine busy with other tests
        assert lease_holder(catalog_config) == (standby.pid, epoch + 1)
        check_outcome("two committers together, active SIGKILL", catalog_config, TABLE, list(range(500)))
        standby.send_signal(signal.SIGTERM)
        assert standby.wait(30) == 0  # SIGTERM: finish what is in flight, exit cleanly
    finally:
        for process in committers:
            _kill_group(process)


def manifests_cleaned(config: CatalogConfig, table: str = TABLE) -> bool:
    return all(r.manifests_deleted for r in Ledger(config).for_table(table))


def pause_outside_a_write(process: subprocess.Popen[bytes], config: CatalogConfig) -> None:
    """SIGSTOP the process group at a moment it holds no SQLite write lock.

    SQLite has one writer at a time: a process frozen inside a write (the
    committer renews its lease every poll) stops every other writer until it
    resumes, whatever the committer does. PostgreSQL has no such moment to
    avoid, and is paused at once.
    """
    import sqlite3

    os.killpg(process.pid, signal.SIGSTOP)
    if not config.uri.startswith("sqlite:///"):
        return
    rng = random.Random(11)
    for _ in range(20):
        probe = sqlite3.connect(config.uri.removeprefix("sqlite:///"), timeout=0.5, isolation_level=None)
        try:
            probe.execute("BEGIN IMMEDIATE")
            probe.execute("ROLLBACK")
            return
        except sqlite3.OperationalError:
            os.killpg(process.pid, signal.SIGCONT)
            time.sleep(rng.uniform(0.05, 0.15))
            os.killpg(process.pid, signal.SIGSTOP)
        finally:
            probe.close()
    raise AssertionError("the committer held SQLite's write lock at every attempt to pause it")


def test_paused_committer_resumed_after_a_takeover_commits_nothing(
    catalog_config: CatalogConfig, tmp_path: Path
) -> None:
    create_orders_table(catalog_config)
    committers = [start_committer(catalog_config, tmp_path / f"committer-{i}.log") for i in range(2)]
    try:
        wait_for(lambda: lease_holder(catalog_config) is not None, "a committer holds the lease", 30)
        stage_rows(catalog_config, TABLE, "job-a", 0, orders(0, 100))
        wait_for(lambda: all_committed(catalog_config), "the active committer commits", 30)
        wait_for(lambda: manifests_cleaned(catalog_config), "the active committer cleans up", 30)
        pid, epoch = lease_holder(catalog_config)  # type: ignore[misc]
        stale = next(p for p in committers if p.pid == pid)
        pause_outside_a_write(stale, catalog_config)  # a long GC pause, a frozen VM
        wait_for(lambda: lease_holder(catalog_config) != (pid, epoch), "the standby takes over", 30)
        for checkpoint in range(1, 4):
            stage_rows(catalog_config, TABLE, "job-a", checkpoint, orders(checkpoint * 100, 100))
        wait_for(lambda: all_committed(catalog_config), "the new committer commits", 30)
        stale_log = tmp_path / f"committer-{committers.index(stale)}.log"
        before_resume = len(stale_log.read_text())
        os.killpg(stale.pid, signal.SIGCONT)
        # The resumed committer finds its lease gone and stands by.
        wait_for(lambda: "lost its lease" in stale_log.read_text()[before_resume:], "the stale committer yields", 30)
        assert stale.poll() is None
        resumed = stale_log.read_text()[before_resume:]
        assert "snapshot=" not in resumed and "already committed" not in resumed  # fenced before trying
        table = open_catalog(catalog_config).load_table(TABLE)
        snapshots = len(table.metadata.snapshots)
        stage_rows(catalog_config, TABLE, "job-a", 4, orders(400, 100))
        wait_for(lambda: all_committed(catalog_config), "the active committer keeps committing", 30)
        assert len(open_catalog(catalog_config).load_table(TABLE).metadata.snapshots) == snapshots + 1
        check_outcome("stale committer SIGSTOP, SIGCONT after takeover", catalog_config, TABLE, list(range(500)))
        assert lease_holder(catalog_config)[0] != stale.pid  # type: ignore[index]
    finally:
        for process in committers:
            _kill_group(process)


def test_catalog_connections_killed_during_commits_lose_and_duplicate_nothing(
    pg_catalog: CatalogConfig, tmp_path: Path
) -> None:
    """``pg_terminate_backend`` on every connection of the committer, again and again, while it commits."""
    import threading

    import sqlalchemy as sa

    create_orders_table(pg_catalog)
    log_path = tmp_path / "committer.log"
    committer = start_committer(pg_catalog, log_path, app_name="icesink-committer-under-fire")
    admin = sa.create_engine(pg_catalog.uri, isolation_level="AUTOCOMMIT", connect_args={"application_name": "killer"})
    killed = 0
    stop = threading.Event()

    def kill_connections() -> None:
        nonlocal killed
        rng = random.Random(3)
        query = sa.text(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE application_name = 'icesink-committer-under-fire' AND datname = current_database()"
        )
        while not stop.is_set():
            with admin.connect() as connection:
                killed += int(connection.execute(query).scalar() or 0)
            stop.wait(rng.uniform(0.01, 0.08))

    landed = ("commit failed", "cannot reach the lease", "cannot read the ledger")

    def kill_landed() -> bool:
        log = log_path.read_text()
        return any(message in log for message in landed)

    killer = threading.Thread(target=kill_connections)
    checkpoints = 0
    try:
        wait_for(lambda: lease_holder(pg_catalog) is not None, "the committer holds the lease", 30)
        killer.start()
        # A kill lands only while a query runs (an idle pooled connection is replaced unnoticed):
        # keep the committer busy until one has, 30 checkpoints at least, 120 at most.
        while checkpoints < 30 or (checkpoints < 120 and not kill_landed()):
            stage_rows(pg_catalog, TABLE, "job-a", checkpoints, orders(checkpoints * 100, 100))
            checkpoints += 1
            time.sleep(0.1)
        time.sleep(2)
        stop.set()
        killer.join()
        wait_for(lambda: all_committed(pg_catalog), "the committer recovers and commits everything", 60)
        assert committer.poll() is None, "the committer must ride out lost connections, not exit"
    finally:
        stop.set()
        _kill_group(committer)
        admin.dispose()
    assert killed >= 10, f"only {killed} connections were killed"
    assert kill_landed(), "no kill landed while the committer used the database"
    check_outcome(
        f"catalog connections killed x{killed} during commits", pg_catalog, TABLE, list(range(checkpoints * 100))
    )


def test_a_stream_setting_late_rows_aside_killed_mid_commit_lands_every_row_once(
    sqlite_catalog: CatalogConfig, tmp_path: Path
) -> None:
    """The rows on time and the late rows of a micro-batch go into two tables in one catalog transaction (which
    records them committed in the ledger too): a kill before it, in it, or after it and before Spark recorded the
    micro-batch, loses and repeats none of either. One stream killed at each moment in turn, in the same
    checkpoint (a restart commits first what the last run staged)."""
    import json

    import pyarrow as pa
    import pyarrow.parquet as pq

    from tests.helpers.streams import order_for_file_source

    start = datetime.datetime(2026, 11, 25, 10, 0, tzinfo=datetime.UTC)
    minutes = [[30, 30], [0, 40, 5, 45], [10, 50, 39, 60], [50, 70]]  # per file; the watermark: latest - 10 min
    expected_late, expected_on_time, watermark, next_id = [], [], None, 0
    (tmp_path / "in").mkdir()
    for number, times in enumerate(minutes):
        ids = list(range(next_id, next_id + len(times)))
        next_id += len(times)
        for i, m in zip(ids, times, strict=True):
            (expected_late if watermark is not None and m < watermark else expected_on_time).append(i)
        watermark = max([*times, *([watermark + 10] if watermark is not None else [])]) - 10
        ts = [start + datetime.timedelta(minutes=m) for m in times]
        path = tmp_path / "in" / f"part-{number:05d}.parquet"
        pq.write_table(pa.table({"id": pa.array(ids, pa.int64()), "ts": pa.array(ts, pa.timestamp("us", "UTC"))}), path)
        order_for_file_source(path, number)
    assert expected_late == [2, 4, 6]  # 10:00 and 10:05 below 10:20; 10:10 below 10:35

    # Killed in the second micro-batch, the first with late rows (the first has none, so one table only); then, at
    # each restart, while committing that checkpoint again.
    ledger = Ledger(sqlite_catalog)
    staged, committed = CheckpointState.STAGED, CheckpointState.COMMITTED
    for moment, state in (
        ("driver.after-stage@2", staged),
        ("group.during-transaction", staged),  # rolled back with the transaction
        ("group.after-transaction", committed),
    ):
        assert wait(start_stream(sqlite_catalog, tmp_path, failpoints=moment, mode="late")) == -signal.SIGKILL, moment
        for identifier in (TABLE, f"{TABLE} late"):  # checkpoint 1, of both tables, is where the kill landed
            last = max(ledger.for_table(identifier), key=lambda r: r.checkpoint_id)
            assert (last.checkpoint_id, last.state) == (1, state), (moment, identifier)
        catalog = open_catalog(sqlite_catalog)  # the late rows' table is made by its first commit
        late_rows_in = catalog.table_exists(f"{TABLE} late") and catalog.load_table(f"{TABLE} late").current_snapshot()
        assert bool(late_rows_in) == (state == committed), moment
    run_to_completion(sqlite_catalog, tmp_path, mode="late")
    catalog = open_catalog(sqlite_catalog)
    assert sorted(catalog.load_table(TABLE).scan().to_arrow().column("id").to_pylist()) == expected_on_time
    late = catalog.load_table(f"{TABLE} late").scan().to_arrow()
    assert sorted(json.loads(r)["id"] for r in late.column("row").to_pylist()) == expected_late
    check_outcome("late rows set aside, SIGKILL at three moments in turn", sqlite_catalog, TABLE, expected_on_time)


def test_a_failpoint_armed_at_no_number_is_refused_naming_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """``name@N`` dies at the N-th time; any other suffix is a mistake in the test's setting, said as such."""
    monkeypatch.setenv(ENV, "stage.after-ledger,committer.after-catalog-commit@second")
    point = "committer.after-catalog-commit"
    with pytest.raises(ValueError, match=re.escape(f"{point}@second should be {point}@N")):
        failpoint("committer.after-catalog-commit")
    failpoint("committer.after-ledger-update")  # not armed: it goes on
