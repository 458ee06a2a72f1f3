"""The SQLite catalog file deleted or replaced under a running stream or committer; a table dropped under a
running stream.

Pooled connections would go on writing into the old (unlinked) file, and a
new connection would create an empty database at the path: either way commits
would land where nobody else looks. Both are detected before the next commit
and stop the process with a clear, terminal error.
"""

from __future__ import annotations

import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import icesink
from icesink.catalog import database
from icesink.catalog.config import CatalogConfig, sqlite_path
from icesink.catalog.loader import open_catalog
from icesink.errors import TableNotFoundError
from tests.helpers.outcomes import check_outcome, read_with_duckdb
from tests.helpers.streams import add_input_files, input_stream
from tests.helpers.support import create_orders_table, orders, stage_rows, table_ids, wait_for

TABLE = "shop.orders"
ROOT = Path(__file__).parent.parent


@pytest.mark.spark
def test_catalog_file_deleted_under_a_running_stream_stops_it_before_the_next_commit(
    spark: Any, sqlite_catalog: CatalogConfig, tmp_path: Path
) -> None:
    database_file = sqlite_path(sqlite_catalog.uri)
    assert database_file is not None
    add_input_files(tmp_path / "in", [(0, 10)])
    query = icesink.stream(
        input_stream(spark, tmp_path / "in"),
        table=TABLE,
        checkpoint_location=str(tmp_path / "ckpt"),
        trigger={"processingTime": "200 milliseconds"},
        create_table=True,
        catalog=sqlite_catalog,
    )
    try:
        wait_for(lambda: (tmp_path / "ckpt" / "commits" / "0").exists(), "the first micro-batch", 60)
        shutil.copy(database_file, tmp_path / "backup.db")
        database_file.unlink()
        add_input_files(tmp_path / "in", [(10, 10)])
        with pytest.raises(Exception) as raised:
            query.awaitTermination(120)
    finally:
        query.stop()
    assert f"the database file {database_file} was deleted" in str(raised.value)
    assert not database_file.exists()  # no empty catalog created in its place
    assert not (tmp_path / "ckpt" / "commits" / "1").exists()  # the batch was not reported done
    # Restored from the backup, the same stream goes on and lands the batch it could not commit.
    database.dispose_engines()
    shutil.copy(tmp_path / "backup.db", database_file)
    rerun = icesink.stream(
        input_stream(spark, tmp_path / "in"),
        table=TABLE,
        checkpoint_location=str(tmp_path / "ckpt"),
        trigger={"availableNow": True},
        catalog=sqlite_catalog,
    )
    rerun.awaitTermination()
    check_outcome("catalog file deleted under a stream, restored", sqlite_catalog, TABLE, list(range(20)))


@pytest.mark.spark
def test_a_table_dropped_under_a_running_stream_stops_it_saying_so_and_a_restart_creates_it_again(
    spark: Any, sqlite_catalog: CatalogConfig, tmp_path: Path
) -> None:
    add_input_files(tmp_path / "in", [(0, 10)])
    options: dict[str, Any] = {
        "table": TABLE,
        "checkpoint_location": str(tmp_path / "ckpt"),
        "create_table": True,
        "catalog": sqlite_catalog,
    }
    query = icesink.stream(
        input_stream(spark, tmp_path / "in"), trigger={"processingTime": "200 milliseconds"}, **options
    )
    try:
        wait_for(lambda: (tmp_path / "ckpt" / "commits" / "0").exists(), "the first micro-batch", 60)
        open_catalog(sqlite_catalog).drop_table(TABLE)
        add_input_files(tmp_path / "in", [(10, 10)])
        with pytest.raises(Exception) as raised:
            query.awaitTermination(120)
    finally:
        query.stop()
    # Not the advice for a table never created ("create it first"), which create_table=True already asks for.
    assert f"table {TABLE}, checkpoint 1: the table is gone from the catalog" in str(raised.value)
    assert "Restart the stream to go on" in str(raised.value)
    # Spark's exception keeps only text; the error itself, with its fields, is kept for the caller.
    error = icesink.error_of(raised.value)
    assert isinstance(error, TableNotFoundError)
    assert (error.table, error.checkpoint_id, error.job_id) == (TABLE, 1, str(query.id))
    assert error.table is not None and not error.transient
    assert icesink.error_of(query).fields() == error.fields()  # type: ignore[union-attr]
    assert not (tmp_path / "ckpt" / "commits" / "1").exists()
    rerun = icesink.stream(input_stream(spark, tmp_path / "in"), trigger={"availableNow": True}, **options)
    rerun.awaitTermination()
    assert rerun.id == query.id  # the same query, restarted: its run did not fail
    assert icesink.error_of(rerun) is None
    assert icesink.error_of(raised.value).fields() == error.fields()  # type: ignore[union-attr]  # that run's
    table = open_catalog(sqlite_catalog).load_table(TABLE)
    (rows,) = read_with_duckdb(table.metadata_location)
    assert sorted(r["id"] for r in rows) == list(range(10, 20))  # the rows of the checkpoint it could not write
    assert [s.summary["icesink.max-committed-checkpoint-id"] for s in table.snapshots()] == ["1"]


def _committer(config: CatalogConfig, *extra: str) -> subprocess.Popen[str]:
    base = ["--catalog", config.name, "--uri", config.uri, "--warehouse", config.warehouse]
    return subprocess.Popen(
        [sys.executable, "-m", "icesink.cli", *base, "committer", "run", "--poll-interval", "0.1", *extra],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_catalog_file_replaced_under_the_daemon_stops_it(sqlite_catalog: CatalogConfig, tmp_path: Path) -> None:
    database_file = sqlite_path(sqlite_catalog.uri)
    assert database_file is not None
    create_orders_table(sqlite_catalog)
    daemon = _committer(sqlite_catalog)
    try:
        stage_rows(sqlite_catalog, TABLE, "job", 0, orders(0, 10))
        wait_for(lambda: table_ids(sqlite_catalog, TABLE) == list(range(10)), "the daemon's first commit", 60)
        # An operator restores the catalog from a copy: a new file at the same path.
        copy = tmp_path / "copy.db"
        with sqlite3.connect(database_file) as source, sqlite3.connect(copy) as target:
            source.backup(target)
        copy.replace(database_file)
        _, stderr = daemon.communicate(timeout=60)
    finally:
        if daemon.poll() is None:
            daemon.kill()
    assert daemon.returncode == 2
    (line,) = [line for line in stderr.splitlines() if line.startswith("error:")]
    assert f"the database file {database_file} was replaced" in line and "Traceback" not in stderr
    # This process opened the old file too: it stops as well, until it reconnects.
    with pytest.raises(icesink.IcesinkError, match="was replaced"):
        stage_rows(sqlite_catalog, TABLE, "job", 1, orders(10, 10))
    database.dispose_engines()
    stage_rows(sqlite_catalog, TABLE, "job", 1, orders(10, 10))
    restarted = _committer(sqlite_catalog, "--once", "--wait", "60")  # the copy holds the first one's lease
    assert restarted.wait(60) == 0, restarted.communicate()[1]
    assert table_ids(sqlite_catalog, TABLE) == list(range(20))
    assert len(open_catalog(sqlite_catalog).load_table(TABLE).metadata.snapshots) == 2
