"""The production topology started natively: a Spark standalone master and worker as separate processes,
the example job submitted to them with spark-submit, PostgreSQL as catalog, S3 (moto) as warehouse, and the
committer daemon as its own process. Every setting is an environment variable, as in docker-compose.yml.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import os
import signal
import socket
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from icesink.catalog.config import CatalogConfig
from tests.conftest import free_port
from tests.helpers.outcomes import check_outcome
from tests.helpers.support import wait_for
from tests.test_s3 import catalog_env, icesink_cli

pytestmark = [pytest.mark.cluster, pytest.mark.s3, pytest.mark.postgres]
ROOT = Path(__file__).parent.parent
TABLE = "shop.orders"


def spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent


def spark_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ICESINK_", "PYICEBERG_"))}
    env.update(SPARK_HOME=str(spark_home()), PYSPARK_PYTHON=sys.executable, SPARK_LOCAL_IP="127.0.0.1")
    return env


def stop(process: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()


def start_spark_class(args: list[str], more: list[str], log: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [str(spark_home() / "bin" / "spark-class"), *args, *more],
        env=spark_env(),
        start_new_session=True,
        stdout=open(log, "ab"),
        stderr=subprocess.STDOUT,
    )


@pytest.fixture
def standalone_cluster(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """(master URL, worker directory) of a master and one worker on 127.0.0.1."""
    port, master_ui, worker_ui = free_port(), free_port(), free_port()
    logs = tmp_path / "cluster-logs"
    logs.mkdir()
    master = start_spark_class(
        ["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(port)],
        ["--webui-port", str(master_ui)],
        logs / "master.log",
    )
    processes = [master]
    try:
        wait_for(
            lambda: socket.create_connection(("127.0.0.1", port), timeout=1).close() is None,
            "master",
            60,
            tolerate=(OSError, ValueError),
        )
        url = f"spark://127.0.0.1:{port}"
        work = tmp_path / "worker"
        worker = start_spark_class(
            ["org.apache.spark.deploy.worker.Worker", url, "--host", "127.0.0.1", "--cores", "2", "--memory", "2g"],
            ["--webui-port", str(worker_ui), "--work-dir", str(work)],
            logs / "worker.log",
        )
        processes.append(worker)

        def worker_alive() -> bool:
            with urllib.request.urlopen(f"http://127.0.0.1:{master_ui}/json/", timeout=2) as response:
                status = json.load(response)
            return any(w["state"] == "ALIVE" for w in status["workers"])

        wait_for(worker_alive, "the worker registers with the master", 60, tolerate=(OSError, ValueError))
        yield url, work
    finally:
        for process in processes:
            stop(process)


def write_orders(directory: Path, files: int, per_file: int) -> list[int]:
    directory.mkdir(parents=True)
    start = datetime.datetime(2026, 11, 1, tzinfo=datetime.UTC)
    ids = []
    for number in range(files):
        tmp = directory / f".orders-{number}.tmp"
        with tmp.open("w") as f:
            for i in range(number * per_file, (number + 1) * per_file):
                ordered_at = (start + datetime.timedelta(hours=i % 72)).isoformat()
                record = {"order_id": i, "customer": f"c{i % 50}", "amount": i * 0.5, "ordered_at": ordered_at}
                f.write(json.dumps(record) + "\n")
                ids.append(i)
        tmp.rename(directory / f"orders-{number}.json")
    return ids


def test_example_job_on_a_standalone_cluster_with_postgresql_and_s3(
    standalone_cluster: tuple[str, Path], s3_catalog: CatalogConfig, tmp_path: Path
) -> None:
    master, worker_dir = standalone_cluster
    ids = write_orders(tmp_path / "in", files=3, per_file=1000)
    env = {
        **spark_env(),
        **catalog_env(s3_catalog),
        "ICESINK_SOURCE_DIR": str(tmp_path / "in"),
        "ICESINK_TABLE": TABLE,
        "ICESINK_CHECKPOINT_LOCATION": str(tmp_path / "ckpt"),
        "ICESINK_COMMITTER": "daemon",
        "ICESINK_TRIGGER": "available-now",
    }
    submit = [str(spark_home() / "bin" / "spark-submit"), "--master", master]
    for conf in ("spark.executor.memory=1g", "spark.driver.memory=1g", "spark.ui.enabled=false"):
        submit += ["--conf", conf]
    done = subprocess.run(
        [*submit, str(ROOT / "examples" / "stream_job.py")],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    # The executors ran in the worker, not in the driver's process.
    assert list(worker_dir.glob("app-*/*/stderr")), "the worker launched no executor"

    committed = icesink_cli(s3_catalog, "committer", "run", "--once")
    assert committed.returncode == 0, committed.stderr
    check_outcome("standalone cluster + PostgreSQL + S3", s3_catalog, TABLE, ids, id_column="order_id")


def test_example_job_names_a_missing_setting_before_spark_starts(tmp_path: Path) -> None:
    env = {**spark_env(), "ICESINK_TABLE": TABLE}
    done = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "stream_job.py")], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2
    assert done.stderr.startswith("error: ICESINK_SOURCE_DIR is not set")
    assert "Traceback" not in done.stderr
