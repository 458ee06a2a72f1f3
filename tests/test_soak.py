"""Soak: four streaming jobs into two tables, two committers, one of them killed and restarted at random.

Bounded for CI (about two minutes); ``ICESINK_SOAK_FILES`` makes it longer.
"""

from __future__ import annotations

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
from tests.helpers.outcomes import check_outcome
from tests.helpers.soak_streams import JOBS
from tests.helpers.streams import add_input_files
from tests.helpers.support import wait_for
from tests.test_faults import ROOT, _env, _kill_group, all_committed, start_committer

pytestmark = [pytest.mark.faults, pytest.mark.spark]
ROWS_PER_FILE = 2000


def create_tables(config: CatalogConfig) -> None:
    from pyiceberg.schema import Schema
    from pyiceberg.types import DoubleType, LongType, NestedField, StringType, TimestamptzType

    catalog = open_catalog(config)
    catalog.create_namespace("soak")
    schema = Schema(
        NestedField(1, "id", LongType()),
        NestedField(2, "name", StringType()),
        NestedField(3, "amount", DoubleType()),
        NestedField(4, "ts", TimestamptzType()),
    )
    for table in sorted(set(JOBS.values())):
        catalog.create_table(table, schema=schema)


def start_streams(config: CatalogConfig, tmp_path: Path) -> subprocess.Popen[bytes]:
    args = [str(tmp_path / "in"), str(tmp_path / "ckpt"), config.name, config.uri, config.warehouse]
    return subprocess.Popen(
        [sys.executable, "-m", "tests.helpers.soak_streams", *args],
        cwd=ROOT,
        env=_env(),
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=open(tmp_path / "stream.log", "ab"),
    )


def test_four_jobs_two_tables_two_committers_one_killed_at_random(pg_catalog: CatalogConfig, tmp_path: Path) -> None:
    files = int(os.environ.get("ICESINK_SOAK_FILES", "8"))
    seed = int(os.environ.get("ICESINK_FAULT_SEED", time.time_ns() % 10_000))
    rng = random.Random(seed)
    create_tables(pg_catalog)
    expected: dict[str, list[int]] = {table: [] for table in JOBS.values()}
    for number, (job, table) in enumerate(JOBS.items()):
        batches = [(number * 1_000_000 + f * ROWS_PER_FILE, ROWS_PER_FILE) for f in range(files)]
        add_input_files(tmp_path / "in" / job, batches)
        expected[table] += [i for start, count in batches for i in range(start, start + count)]

    logs = [tmp_path / f"committer-{i}.log" for i in range(2)]
    committers = [start_committer(pg_catalog, log) for log in logs]
    stream = start_streams(pg_catalog, tmp_path)
    kills = 0
    try:
        while stream.poll() is None:
            time.sleep(rng.uniform(2.0, 6.0))
            victim = rng.randrange(2)
            os.killpg(committers[victim].pid, signal.SIGKILL)
            committers[victim].wait()
            kills += 1
            time.sleep(rng.uniform(0.0, 1.0))
            committers[victim] = start_committer(pg_catalog, logs[victim])
        assert stream.wait() == 0, (tmp_path / "stream.log").read_text()[-4000:]
        tables = sorted(set(JOBS.values()))
        wait_for(lambda: all(all_committed(pg_catalog, t) for t in tables), "every checkpoint is committed", 60)
    finally:
        _kill_group(stream)
        for process in committers:
            _kill_group(process)
    assert kills >= 1, "the streams finished before any committer was killed"
    for table, ids in expected.items():
        case = f"soak {table}: 4 jobs, 2 committers, {kills} committer kills (seed {seed})"
        check_outcome(case, pg_catalog, table, sorted(ids))
