"""Tables in an ``s3://`` warehouse, on moto's S3 server on 127.0.0.1, with PostgreSQL as the catalog."""

from __future__ import annotations

import datetime
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from icesink.catalog.config import CatalogConfig
from icesink.catalog.loader import open_catalog
from icesink.committer.gc import collect_garbage
from tests.conftest import S3_SECRET
from tests.helpers.outcomes import check_outcome
from tests.helpers.streams import add_input_files, input_stream, run_available
from tests.test_faults import ROOT, run_to_completion, start_stream, wait

pytestmark = [pytest.mark.s3, pytest.mark.spark, pytest.mark.postgres]
TABLE = "shop.orders"


def catalog_env(config: CatalogConfig) -> dict[str, str]:
    """The catalog as PYICEBERG_CATALOG__<NAME>__* variables, the way a deployment configures it."""
    prefix = f"PYICEBERG_CATALOG__{config.name.upper()}__"
    env = {f"{prefix}URI": config.uri, f"{prefix}WAREHOUSE": config.warehouse, "ICESINK_CATALOG": config.name}
    for key, value in config.properties.items():
        env[prefix + key.upper().replace(".", "__").replace("-", "_")] = value
    return env


def icesink_cli(config: CatalogConfig, *args: str) -> subprocess.CompletedProcess[str]:
    """The command line in its own process, configured only through the environment."""
    return subprocess.run(
        [sys.executable, "-m", "icesink.cli", *args],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT), **catalog_env(config)},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_stream_into_s3_committed_by_the_daemon_and_read_by_iceberg_rust(
    spark: Any, s3_catalog: CatalogConfig, tmp_path: Path
) -> None:
    from icesink.iceberg.describe import writer_spec

    batches = [(0, 500), (500, 700)]
    add_input_files(tmp_path / "in", batches)
    run_available(
        input_stream(spark, tmp_path / "in"),
        table=TABLE,
        checkpoint_location=str(tmp_path / "ckpt"),
        create_table=True,
        catalog=s3_catalog,
        committer="daemon",
    )
    assert open_catalog(s3_catalog).load_table(TABLE).current_snapshot() is None  # staged, for the daemon

    committed = icesink_cli(s3_catalog, "committer", "run", "--once")
    assert committed.returncode == 0, committed.stderr
    table = open_catalog(s3_catalog).load_table(TABLE)
    assert table.metadata_location.startswith(s3_catalog.warehouse)
    data_files = [t.file.file_path for t in table.scan().plan_files()]
    assert data_files and all(p.startswith(f"{s3_catalog.warehouse}/shop/orders/data/") for p in data_files)
    check_outcome("S3 warehouse, daemon commit", s3_catalog, TABLE, list(range(1200)))

    # Credentials stay out of logs, snapshot summaries, CLI output and the spec's repr.
    shown = icesink_cli(s3_catalog, "snapshots", "show", TABLE, str(table.current_snapshot().snapshot_id), "--json")
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["summary"]["icesink.max-committed-checkpoint-id"] == "1"
    listed = icesink_cli(s3_catalog, "checkpoints", "list", TABLE)
    spec = writer_spec(table, TABLE, "job")
    assert dict(spec.storage_options)["s3.secret-access-key"] == S3_SECRET  # the executors do get it
    for text in (committed.stdout, committed.stderr, shown.stdout, shown.stderr, listed.stdout, repr(spec)):
        assert S3_SECRET not in text

    # gc lists the bucket with the table's own FileIO: an orphan goes, everything referenced stays.
    from icesink.writer.storage import split_location

    orphan = f"{s3_catalog.warehouse}/shop/orders/data/killed-attempt.parquet"
    filesystem, path = split_location(orphan, spec.storage_options)
    with filesystem.open_output_stream(path) as out:
        out.write(b"PAR1 half a file")
    # In-process: `icesink committer gc` refuses ages under a minute, and the orphan is seconds old.
    report = collect_garbage(open_catalog(s3_catalog), s3_catalog, TABLE, datetime.timedelta(0))
    assert report.deleted == [orphan]
    assert report.referenced >= len(data_files) + 3  # data files, manifest list, manifest, metadata
    check_outcome("S3 warehouse, after gc", s3_catalog, TABLE, list(range(1200)))


def test_stream_killed_on_s3_and_restarted_writes_every_row_once(s3_catalog: CatalogConfig, tmp_path: Path) -> None:
    add_input_files(tmp_path / "in", [(i * 1000, 1000) for i in range(3)])
    env = catalog_env(s3_catalog)
    code = wait(start_stream(s3_catalog, tmp_path, failpoints="driver.after-stage", env=env))
    assert code == -signal.SIGKILL
    run_to_completion(s3_catalog, tmp_path, env=env)
    check_outcome("S3 warehouse, stream SIGKILL after staging", s3_catalog, TABLE, list(range(3000)))


def test_a_misspelt_object_store_setting_is_a_startup_error(s3_catalog: CatalogConfig) -> None:
    env = catalog_env(s3_catalog)
    env[f"PYICEBERG_CATALOG__{s3_catalog.name.upper()}__S3__ENDPIONT"] = "http://127.0.0.1:1"
    done = subprocess.run(
        [sys.executable, "-m", "icesink.cli", "tables", "list"],
        cwd=ROOT,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert "unknown setting 's3.endpiont'" in done.stderr and "did you mean 's3.endpoint'" in done.stderr
    assert "Traceback" not in done.stderr and S3_SECRET not in done.stderr


def test_a_group_commit_on_s3_prepares_its_tables_side_by_side_and_a_refused_one_leaves_nothing(
    s3_catalog: CatalogConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Tables on an object store are prepared on the preparing threads (their requests wait together); a table
    that cannot commit still holds the whole group, and what was prepared for the others is deleted."""
    import threading

    from icesink.committer.build import SnapshotBuilder
    from icesink.committer.commit import TableCommitter
    from icesink.errors import ManifestError
    from tests.helpers.support import create_orders_table, orders, stage_group, staged_in_manifests, table_ids

    tables = [f"shop.t{n}" for n in range(4)]
    for identifier in tables:
        create_orders_table(s3_catalog, identifier)
    threads: set[str] = set()
    real = SnapshotBuilder.try_prepare

    def watched(self: SnapshotBuilder, *args: Any, **kwargs: Any) -> Any:
        threads.add(threading.current_thread().name.split("_")[0])
        return real(self, *args, **kwargs)

    monkeypatch.setattr(SnapshotBuilder, "try_prepare", watched)
    stage_group(s3_catalog, "job", 0, {t: orders(100 * n, 2) for n, t in enumerate(tables)})
    stage_group(s3_catalog, "job", 1, {t: orders(100 * n + 2, 1) for n, t in enumerate(tables)})
    broken = staged_in_manifests(s3_catalog, tables[1], "job", 1)  # as a release before staged it, then lost
    open_catalog(s3_catalog).load_table(tables[1]).io.delete(broken.manifests.data.path)
    with pytest.raises(ManifestError, match=f"table {tables[1]}, job job, checkpoint 1"):
        TableCommitter.of(s3_catalog).commit_pending(tables[0])
    assert threads == {"icesink-prepare"}
    # Checkpoint 0 moved every table; checkpoint 1 none, and nothing written for it is left but what is staged.
    assert [table_ids(s3_catalog, t) for t in tables] == [[100 * n, 100 * n + 1] for n in range(4)]
    for identifier in (tables[0], *tables[2:]):  # the refused table's own gc waits for its checkpoint
        report = collect_garbage(open_catalog(s3_catalog), s3_catalog, identifier, datetime.timedelta(0), True)
        assert report.deleted == [], identifier
