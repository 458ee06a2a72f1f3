"""Atomic commits across tables under SIGKILL: a reader of the catalog never sees a torn checkpoint.

While the committer daemon commits a job's checkpoints into several tables and is killed at every
commit failpoint, another process reads every table's pointer in one transaction in a tight loop.
Every state it saw must be a consistent cut: one checkpoint C such that every table holds exactly the
job's checkpoints up to C that touched it, and its rows.
"""

from __future__ import annotations

import json
import random
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from icesink.catalog.checkpoints import CheckpointState
from icesink.catalog.config import CatalogConfig
from icesink.catalog.ledger import Ledger
from icesink.catalog.loader import open_catalog
from icesink.properties import TABLE_PROPERTY_PREFIX
from tests.helpers.support import create_orders_table, orders, stage_group, table_ids
from tests.test_faults import ROOT, _env, run_committer

pytestmark = pytest.mark.faults
TABLES = ("inventory.orders", "inventory.order lines", "inventory.façade %/x", "inventory.Ünïcode")
PENDING = TABLES[1::2]
JOB = "job"
GROUP_FAILPOINTS = [
    "group.before-transaction",  # every table's metadata file written, no pointer moved
    "group.during-transaction",  # the first table's pointer moved, the transaction not committed
    "group.after-transaction",  # committed, the staged manifests not yet deleted
    "committer.during-cleanup",
]


def plan(seed: int, checkpoints: int) -> list[dict[str, list[int]]]:
    """Which tables each checkpoint writes, and the ids it writes there (some checkpoints skip tables)."""
    rng = random.Random(seed)
    result = []
    for checkpoint in range(checkpoints):
        touched = [t for t in TABLES if rng.random() < 0.6] or [rng.choice(TABLES)]
        result.append({t: list(range(checkpoint * 100, checkpoint * 100 + rng.randint(1, 3))) for t in touched})
    # The pending tables get their first rows in checkpoints a committer is killed committing (the first
    # before its transaction, the second with one pointer moved), so that publishing one is interrupted too.
    for table, first in zip(PENDING, (2, 6), strict=True):
        for checkpoint, writes in enumerate(result[: first + 1]):
            if checkpoint < first:
                writes.pop(table, None)
            else:
                writes[table] = list(range(checkpoint * 100 + 50, checkpoint * 100 + 52))
    return result


def stage(config: CatalogConfig, checkpoint: int, writes: dict[str, list[int]]) -> None:
    rows = {t: (orders(writes[t][0], len(writes[t])) if t in writes else None) for t in TABLES}
    assert stage_group(config, JOB, checkpoint, rows)


def start_watcher(config: CatalogConfig, out: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.helpers.catalog_watcher", config.uri, config.name, str(out)],
        cwd=ROOT,
        env=_env(),
        start_new_session=True,
    )


def marker_and_records(metadata_location: str) -> tuple[int, int]:
    """The job's committed checkpoint (-1: none) and the row count of the table at this metadata file."""
    with open(metadata_location.removeprefix("file://"), encoding="utf-8") as f:
        metadata = json.load(f)
    marker = int(metadata.get("properties", {}).get(TABLE_PROPERTY_PREFIX + JOB, -1))
    current = metadata.get("current-snapshot-id")
    snapshots = {s["snapshot-id"]: s for s in metadata.get("snapshots", [])}
    records = int(snapshots[current]["summary"]["total-records"]) if current in snapshots else 0
    return marker, records


def check_cut(state: dict[str, str], checkpoints: list[dict[str, list[int]]]) -> int:
    """The checkpoint every table of ``state`` is at; an AssertionError describing a torn state."""
    # A table not in the catalog yet (created pending by the stream) is at no checkpoint, with no rows.
    seen = {t: marker_and_records(state[t]) if t in state else (-1, 0) for t in TABLES}
    cut = max(marker for marker, _ in seen.values())
    for table, (marker, records) in seen.items():
        touched = [c for c in range(cut + 1) if table in checkpoints[c]]
        expected_marker = touched[-1] if touched else -1
        expected_records = sum(len(checkpoints[c][table]) for c in touched)
        assert (marker, records) == (expected_marker, expected_records), (
            f"torn state at checkpoint {cut}: table {table} holds checkpoint {marker} and {records} rows, "
            f"a cut at {cut} gives checkpoint {expected_marker} and {expected_records} rows: {seen}"
        )
    return cut


def test_a_reader_of_the_catalog_never_sees_a_torn_checkpoint(catalog_config: CatalogConfig, tmp_path: Path) -> None:
    config = catalog_config
    for table in TABLES:  # two of them as a stream creates them: they enter the catalog with their first commit
        create_orders_table(config, table, pending=table in PENDING)
    checkpoints = plan(seed=11, checkpoints=4 * len(GROUP_FAILPOINTS) + 2)
    out = tmp_path / "states.jsonl"
    watcher = start_watcher(config, out)
    try:
        staged = 0
        for moment in GROUP_FAILPOINTS:
            for _ in range(2):  # committed by a daemon that lives
                stage(config, staged, checkpoints[staged])
                staged += 1
            assert run_committer(config) == 0
            for _ in range(2):  # committed by one that is killed at the moment
                stage(config, staged, checkpoints[staged])
                staged += 1
            assert run_committer(config, failpoints=moment) == -signal.SIGKILL, moment
        for _ in range(2):
            stage(config, staged, checkpoints[staged])
            staged += 1
        assert run_committer(config) == 0
    finally:
        watcher.kill()
        watcher.wait()
    states = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    cuts = [check_cut(state, checkpoints) for state in states]
    assert not set(PENDING) & set(states[0]) and set(states[-1]) == set(TABLES)
    # The reader saw the tables move, through several cuts, ending at the last checkpoint.
    assert len(set(cuts)) >= len(GROUP_FAILPOINTS) + 1, cuts
    assert cuts == sorted(cuts), cuts
    assert cuts[-1] == staged - 1
    for table in TABLES:
        expected = sorted(i for c in checkpoints for i in c.get(table, []))
        assert table_ids(config, table) == expected, table
    rows = [r for t in TABLES for r in Ledger(config).for_table(t)]
    assert {r.state for r in rows} == {CheckpointState.COMMITTED}
    assert all(r.manifests_deleted for r in rows)
    # Every snapshot of every table names one commit id, shared with the other tables' snapshots of it.
    catalog = open_catalog(config)
    commits: dict[str, set[str]] = {}
    for table in TABLES:
        for snapshot in catalog.load_table(table).metadata.snapshots:
            commits.setdefault(snapshot.summary["icesink.commit-id"], set()).add(table)
    assert len(commits) >= len(GROUP_FAILPOINTS) + 1
