"""The committer daemon: in-process, a failing table waits with backoff while others go on, metrics and health;
as real processes, a run ``--once`` beside a daemon that holds the lease."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from icesink.catalog.checkpoints import CheckpointState
from icesink.catalog.config import CatalogConfig
from icesink.catalog.lease import Lease, LeaseHolder
from icesink.catalog.ledger import Ledger
from icesink.committer.daemon import CommitterDaemon
from icesink.committer.observability import StatusServer
from tests.helpers.support import create_orders_table, orders, stage_rows, staged_in_manifests, table_ids, wait_for

ROOT = Path(__file__).resolve().parent.parent
TABLE = "shop.orders"


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def test_terminal_error_stops_one_table_others_commit_and_health_says_why(catalog_config: CatalogConfig) -> None:
    create_orders_table(catalog_config, "shop.broken")
    create_orders_table(catalog_config, "shop.fine")
    stage_rows(catalog_config, "shop.broken", "job", 0, orders(0, 10))
    row = staged_in_manifests(catalog_config, "shop.broken", "job", 0)  # as a release before staged it
    Path(row.manifests.data.path.removeprefix("file://")).unlink()  # a lost staged manifest: retrying cannot help
    daemon = CommitterDaemon(catalog_config, poll_interval=0.1, lease_ttl=5)
    server = StatusServer("127.0.0.1", 0, daemon.metrics, daemon.problems)
    server.start()
    runner = threading.Thread(target=daemon.run)
    runner.start()
    base = f"http://127.0.0.1:{server.port}"
    try:
        assert get(f"{base}/healthz")[0] in (200, 503)
        for checkpoint in range(3):
            stage_rows(catalog_config, "shop.fine", "job", checkpoint, orders(checkpoint * 10, 10))
        deadline = time.monotonic() + 30
        while Ledger(catalog_config).pending("shop.fine") and time.monotonic() < deadline:
            time.sleep(0.1)
        assert table_ids(catalog_config, "shop.fine") == list(range(30))
        status, body = get(f"{base}/healthz")
        assert status == 503
        (problem,) = json.loads(body)["problems"]
        assert "shop.broken failed" in problem and "checkpoint 0" in problem and row.manifests.data.path in problem
        assert [r.state for r in Ledger(catalog_config).for_table("shop.broken")] == [CheckpointState.STAGED]
        time.sleep(0.5)  # one more loop to refresh the gauges
        status, metrics = get(f"{base}/metrics")
        assert status == 200
        assert 'icesink_checkpoints_committed_total{table="shop.fine"}' in metrics
        assert 'icesink_pending_checkpoints{table="shop.broken"} 1.0' in metrics
        assert 'icesink_consecutive_failures{table="shop.broken"} 1.0' in metrics
        assert "icesink_committer_active 1.0" in metrics
        assert "icesink_commit_duration_seconds_count" in metrics
    finally:
        daemon.stop()
        runner.join(30)
        server.stop()
    assert not runner.is_alive()


def test_one_backoff_policy_doubles_to_its_cap_with_jitter() -> None:
    from icesink.retry import Backoff

    backoff = Backoff(first=0.5, cap=4.0)
    for failures, full in ((1, 0.5), (2, 1.0), (3, 2.0), (4, 4.0), (40, 4.0)):
        waits = [backoff.delay(failures) for _ in range(200)]
        assert all(0.5 * full <= w < full for w in waits), (failures, min(waits), max(waits))
        assert max(waits) - min(waits) > 0.1 * full  # spread out, not in step
    assert all(2.0 <= backoff.longest() < 4.0 for _ in range(50))


def test_the_pending_gauge_falls_to_zero_when_a_tables_checkpoints_commit(sqlite_catalog: CatalogConfig) -> None:
    from icesink.committer.commit import TableCommitter

    create_orders_table(sqlite_catalog, "shop.fine")
    stage_rows(sqlite_catalog, "shop.fine", "job", 0, orders(0, 10))
    daemon = CommitterDaemon(sqlite_catalog, poll_interval=0.1, lease_ttl=5)
    gauge = daemon.metrics.pending.labels("shop.fine")
    daemon._update_pending()
    assert gauge._value.get() == 1
    TableCommitter.of(sqlite_catalog).commit_pending("shop.fine")
    daemon._update_pending()
    assert gauge._value.get() == 0, "the gauge kept the count from before the commit"


def test_maintenance_longer_than_the_lease_ttl_still_commits(
    sqlite_catalog: CatalogConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The daemon keeps its commit lease renewed while maintenance runs (a long compaction used to find it
    expired at its own commit and fail, every time)."""
    import icesink.committer.maintainer as maintainer_module
    from icesink.catalog.loader import open_catalog
    from icesink.iceberg.scan import live_files
    from tests.test_maintenance import TABLE, Model, commit_changes, create, rows_by_every_reader

    create(sqlite_catalog, {"icesink.maintain.min-commits": "2", "icesink.maintain.min-input-files": "2"})
    model = Model()
    for checkpoint in range(4):
        changes = [(k, f"v{checkpoint}", "U") for k in range(checkpoint, checkpoint + 20)]
        commit_changes(sqlite_catalog, checkpoint, changes, commit=False)
        model.apply(changes)
    real = maintainer_module.maintain_table

    def slow(*args: Any, **kwargs: Any) -> Any:
        time.sleep(5.0)  # over three lease ttls: the work of a large table
        return real(*args, **kwargs)

    monkeypatch.setattr(maintainer_module, "maintain_table", slow)
    # A renewal a second late (the machine busy with other work) must not fail the maintenance commit.
    daemon = CommitterDaemon(sqlite_catalog, poll_interval=0.05, lease_ttl=1.5, maintain=True)
    daemon.run(once=True)
    assert [r for r in daemon.maintenance_reports if r.compaction is not None and r.compaction.groups_committed], (
        "maintenance compacted"
    )
    table = open_catalog(sqlite_catalog).load_table(TABLE)
    assert len(live_files(table).data) == 1
    for rows in rows_by_every_reader(sqlite_catalog):
        assert rows == model.expected()


def test_a_pass_that_commits_some_checkpoints_then_fails_counts_those_it_committed(
    sqlite_catalog: CatalogConfig,
) -> None:
    create_orders_table(sqlite_catalog, "shop.half")
    stage_rows(sqlite_catalog, "shop.half", "job", 0, orders(0, 10))
    stage_rows(sqlite_catalog, "shop.half", "job", 1, orders(10, 10))
    lost = staged_in_manifests(sqlite_catalog, "shop.half", "job", 1)  # as a release before staged it
    Path(lost.manifests.data.path.removeprefix("file://")).unlink()  # checkpoint 1 can never commit
    daemon = CommitterDaemon(sqlite_catalog, poll_interval=0.1, lease_ttl=5)
    report = daemon.run(once=True)
    assert table_ids(sqlite_catalog, "shop.half") == list(range(10))
    assert (report.snapshots, report.checkpoints) == (1, 1)
    assert "checkpoint 1" in report.failed["shop.half"]
    committed = daemon.metrics.registry.get_sample_value("icesink_checkpoints_committed_total", {"table": "shop.half"})
    assert committed == 1


# --- a run --once beside a daemon ------------------------------------------------------------------------------------


def _committer_args(config: CatalogConfig, *extra: str) -> list[str]:
    base = ["--catalog", config.name, "--uri", config.uri, "--warehouse", config.warehouse]
    return [sys.executable, "-m", "icesink.cli", *base, "committer", "run", "--poll-interval", "0.1", *extra]


def _run_once(config: CatalogConfig, *extra: str) -> tuple[int, str, float]:
    """A real ``committer run --once``: its exit code, its error lines, and how long it took."""
    started = time.monotonic()
    done = subprocess.run(
        _committer_args(config, "--once", *extra), cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    errors = "\n".join(line for line in done.stderr.splitlines() if line.startswith("error:"))
    assert "Traceback" not in done.stderr, done.stderr
    return done.returncode, errors, time.monotonic() - started


def _holder(config: CatalogConfig) -> LeaseHolder | None:
    return Lease(config, "*", "the test, looking").holder()


def test_committer_run_once_beside_a_daemon_holding_the_lease_exits_3_naming_it_and_waits_only_when_told(
    catalog_config: CatalogConfig, tmp_path: Path
) -> None:
    config = catalog_config
    create_orders_table(config, TABLE)
    log = (tmp_path / "daemon.log").open("w")
    daemon = subprocess.Popen(_committer_args(config, "--lease-ttl", "10"), cwd=ROOT, stdout=log, stderr=log, text=True)
    try:
        wait_for(lambda: _holder(config) is not None, "the daemon to hold the lease", 60)
        holder = _holder(config)
        assert holder is not None and holder.scope == "*"
        code, error, seconds = _run_once(config)
        assert code == 3, error
        assert seconds < 30, "it stood by instead of exiting"
        assert f"another committer holds the lease on scope '*': {holder.owner} (scope '*', epoch" in error
        assert f"since {holder.acquired_at.isoformat(timespec='seconds')}, until " in error
        assert "This run committed nothing" in error and "add --wait SECONDS" in error
        # A committer of one table shares it with the daemon's every table: the same answer, saying so.
        code, error, _ = _run_once(config, "--table", TABLE)
        assert code == 3 and f"(it shares tables with scope '{TABLE}')" in error, error
        # --wait: it stands by as long as it was told, then says so.
        code, error, seconds = _run_once(config, "--wait", "2")
        assert code == 3 and "This run stood by for 2s" in error and "raise --wait" in error, error
        assert seconds >= 2
    finally:
        daemon.kill()
        daemon.wait(30)
        log.close()
    # Killed, the daemon never released its lease: a run --once is told so until the lease expires; with
    # --wait it takes over once it has, and commits what waits.
    stage_rows(config, TABLE, "job", 0, orders(0, 10))
    killed = _holder(config)
    code, error, _ = _run_once(config)
    if killed is not None:
        assert code == 3 and killed.owner in error, error
    code, error, _ = _run_once(config, "--wait", "60")
    assert code == 0, error
    assert table_ids(config, TABLE) == list(range(10))
    assert _holder(config) is None  # released on its way out
