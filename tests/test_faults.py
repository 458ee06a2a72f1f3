"""Crash tests: real processes killed with SIGKILL at chosen and at random moments.

Every case ends with the table holding every input row exactly once.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from icesink.catalog.config import CatalogConfig
from icesink.catalog.loader import open_catalog
from icesink.committer.ledger import CheckpointState, Ledger
from tests.changes import ChangeModel, random_checkpoint, sorted_rows, write_checkpoint_file
from tests.streams import add_input_files
from tests.support import create_orders_table, orders, stage_rows, table_ids

pytestmark = pytest.mark.faults
TABLE = "shop.orders"
CDC_TABLE = "shop.inventory"
ROOT = Path(__file__).parent.parent
BATCHES = [(i * 3000, 3000) for i in range(4)]
EXPECTED = list(range(12_000))


def _env(failpoints: str = "") -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("ICESINK_FAILPOINTS", None)
    if failpoints:
        env["ICESINK_FAILPOINTS"] = failpoints
        env["ICESINK_FAILPOINT_SCOPE"] = "group"
    return env


def start_stream(
    config: CatalogConfig, tmp_path: Path, failpoints: str = "", committer: str = "inline", mode: str = "append"
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
    ]
    return subprocess.Popen(
        [sys.executable, "-m", "tests.fault_stream", *args],
        cwd=ROOT,
        env=_env(failpoints),
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


def run_to_completion(config: CatalogConfig, tmp_path: Path, **options: str) -> None:
    code = wait(start_stream(config, tmp_path, **options))
    assert code == 0, (tmp_path / "stream.log").read_text()[-4000:]


MOMENTS = [
    "writer.after-file",  # executor wrote a data file, the batch is half done
    "driver.after-write",  # every file written, nothing staged
    "driver.after-stage",  # staged in the ledger, not committed, Spark did not record the batch
    "committer.after-catalog-commit",  # in the table, ledger not updated, Spark did not record the batch
    "committer.after-ledger-update",  # committed and recorded, Spark did not record the batch
]
# Each case starts Spark twice (~20 s): every moment runs on PostgreSQL, the production catalog,
# and the two moments around the catalog commit also on SQLite.
SQLITE_MOMENTS = {"driver.after-stage", "committer.after-catalog-commit"}


@pytest.mark.parametrize("moment", MOMENTS)
def test_stream_killed_mid_batch_and_restarted_writes_every_row_once(
    catalog_config: CatalogConfig, tmp_path: Path, moment: str
) -> None:
    if catalog_config.uri.startswith("sqlite") and moment not in SQLITE_MOMENTS:
        pytest.skip("covered on PostgreSQL; SQLite runs the moments around the catalog commit")
    add_input_files(tmp_path / "in", BATCHES)
    code = wait(start_stream(catalog_config, tmp_path, failpoints=moment))
    if moment.startswith("writer."):
        # Spark's Python workers live in their own process group: the executor dies, the query fails.
        assert code != 0, "the query should have failed when its executor died"
    else:
        assert code == -signal.SIGKILL, f"the stream should have died at {moment}"
    run_to_completion(catalog_config, tmp_path)
    assert table_ids(catalog_config, TABLE) == EXPECTED
    rows = Ledger(catalog_config).for_table(TABLE)
    assert [r.checkpoint_id for r in rows] == [0, 1, 2, 3]
    assert all(r.state == CheckpointState.COMMITTED for r in rows)


def test_stream_killed_at_random_moments_writes_every_row_once(catalog_config: CatalogConfig, tmp_path: Path) -> None:
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
    assert table_ids(catalog_config, TABLE) == list(range(40_000)), f"seed {seed}, {kills} kills"


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
    ]
    process = subprocess.Popen(
        [sys.executable, "-m", "icesink.cli", *args], cwd=ROOT, env=_env(failpoints), start_new_session=True
    )
    return wait(process, timeout=120)


@pytest.mark.parametrize(
    "moment", ["committer.after-catalog-commit", "committer.after-ledger-update", "committer.during-cleanup"]
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
    assert table_ids(catalog_config, TABLE) == list(range(400))
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


@pytest.mark.parametrize("moment", ["writer.after-file", "driver.after-stage", "committer.after-catalog-commit"])
def test_cdc_stream_killed_mid_batch_ends_equal_to_the_model(
    pg_catalog: CatalogConfig, tmp_path: Path, moment: str
) -> None:
    import icesink

    model = cdc_input(tmp_path)
    code = wait(start_stream(pg_catalog, tmp_path, failpoints=moment, mode="cdc"))
    assert code != 0
    run_to_completion(pg_catalog, tmp_path, mode="cdc")
    assert sorted_rows(icesink.read(CDC_TABLE, catalog=pg_catalog)) == model.expected()
    table = open_catalog(pg_catalog).load_table(CDC_TABLE)
    assert sorted(int(s.summary["icesink.max-committed-checkpoint-id"]) for s in table.metadata.snapshots) == [
        0,
        1,
        2,
        3,
    ]


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
