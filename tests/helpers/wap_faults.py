"""Write-audit-publish under SIGKILL: while a driver process commits into a branch, audits and publishes, and is
killed at every audit and publish failpoint, another process reads the catalog's pointers in a tight loop. Every
``main`` it saw must be a snapshot that passed its audit, hold no bad row, never go back, and (for several
tables) be one checkpoint of the job in every table; at the end independent readers agree with the model."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

from icesink.catalog.audit_record import AuditRecord
from icesink.catalog.config import CatalogConfig
from icesink.catalog.loader import open_catalog
from tests.helpers.branch_streams import BRANCH, ids_at
from tests.helpers.support import create_orders_table
from tests.test_faults import ROOT, _env

# Where a driver dies: before its audit is recorded, before main's swap, inside it, after it; and around the
# branch commit itself.
KILLS = [
    "group.after-transaction",  # the branch commit is in, nothing audited
    "audit.before-record",
    "publish.before-swap",
    "publish.before-transaction",
    "publish.during-transaction",  # the first table's main moved, not committed
    "publish.after-transaction",
    "publish.after-swap",
]


def _drive(config: CatalogConfig, plan: dict[str, Any], until: int, failpoint: str = "") -> int:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "tests.helpers.branch_streams",
            json.dumps(asdict(config)),
            json.dumps({**plan, "until": until}),
        ],
        cwd=ROOT,
        env=_env(failpoint),
        capture_output=True,
        text=True,
        timeout=300,
        start_new_session=True,  # a failpoint kills the driver's whole process group, not the tests
    )
    if done.returncode not in (0, -signal.SIGKILL):
        raise AssertionError(f"the driver exited {done.returncode}: {done.stderr[-3000:]}")
    return done.returncode


def _batch(tables: list[str], number: int, bad: bool = False) -> list[list[Any]]:
    return [[t, number * 10 + i * 1000, 2, bad and i == len(tables) - 1] for i, t in enumerate(tables)]


def _bad_ids(tables: list[str], bad_batches: list[int]) -> dict[str, set[int]]:
    """The ids of the rows with a negative amount: both rows of a bad batch in the last table."""
    last = len(tables) - 1
    return {
        t: {b * 10 + i * 1000 + k for b in bad_batches for k in (0, 1)} if i == last else set()
        for i, t in enumerate(tables)
    }


def run_killed_publishers(config: CatalogConfig, tmp_path: Path, tables: list[str]) -> None:
    from tests.test_group_faults import start_watcher

    for table in tables:
        create_orders_table(config, table)
    bad_batch = len(KILLS) + 2
    batches = [_batch(tables, n, bad=n == bad_batch) for n in range(len(KILLS) + 6)]
    plan = {"tables": tables, "batches": batches, "job": "job", "atomic": True}
    out = tmp_path / "states.jsonl"
    watcher = start_watcher(config, out)
    try:
        for at, kill in enumerate(KILLS, start=1):  # each interrupts a checkpoint's commit, audit or publish
            assert _drive(config, plan, at, kill) == -signal.SIGKILL, kill  # (or the recovery of an earlier one)
        at = bad_batch
        assert _drive(config, plan, at) == 0
        heads_before_bad = {t: _main(config, t) for t in tables}
        at += 1  # the bad checkpoint fails its audit; main holds in every table
        assert _drive(config, plan, at) == 0
        assert {t: _main(config, t) for t in tables} == heads_before_bad
        at += 1  # a good one after it, killed while auditing it with the bad rows since main: still held
        assert _drive(config, plan, at, "audit.before-record") == -signal.SIGKILL
        assert _drive(config, plan, at) == 0
        assert {t: _main(config, t) for t in tables} == heads_before_bad
        last = tables[-1]
        open_catalog(config).load_table(last).delete("amount < 0", branch=BRANCH)  # another tool fixes the branch
        at += 1
        assert _drive(config, plan, at, "publish.before-swap") == -signal.SIGKILL
        assert _drive(config, plan, len(batches)) == 0
    finally:
        watcher.send_signal(signal.SIGKILL)
        watcher.wait()
    _check_observed(config, tables, out, _bad_ids(tables, [bad_batch]))
    model = {t: sorted(r[1] + k for b in batches for r in b if r[0] == t for k in range(r[2])) for t in tables}
    for table in tables:
        expected = sorted(set(model[table]) - _bad_ids(tables, [bad_batch])[table])
        main, branch = ids_at(config, table), ids_at(config, table, BRANCH)
        assert main == expected == branch, f"{table}: main {main}, branch {branch}, model {expected}"  # once
    _check_readers(config, tables, {t: sorted(set(model[t]) - _bad_ids(tables, [bad_batch])[t]) for t in tables})


def _main(config: CatalogConfig, table: str) -> int | None:
    snapshot = open_catalog(config).load_table(table).metadata.snapshot_by_name("main")
    return snapshot.snapshot_id if snapshot else None


def _check_observed(config: CatalogConfig, tables: list[str], out: Path, bad: dict[str, set[int]]) -> None:
    """Every state the observer saw: main at a snapshot that passed its audit, without bad rows, never going
    back, and at one checkpoint of the job in every table."""
    catalog = open_catalog(config)
    final = {t: catalog.load_table(t) for t in tables}
    passed = {t: {s for s, e in AuditRecord(config).of_branch(t, BRANCH).items() if e.passed} for t in tables}
    states = [json.loads(line) for line in out.read_text().splitlines() if line.strip()]
    assert len(states) > 10, "the observer saw too little to judge"
    previous: dict[str, int | None] = {t: None for t in tables}
    checked: dict[tuple[str, int], set[int]] = {}
    for state in states:
        checkpoints = set()
        for table in tables:
            if table not in state:
                continue
            with open(state[table].removeprefix("file://"), encoding="utf-8") as f:
                metadata = json.load(f)
            main = metadata.get("refs", {}).get("main", {}).get("snapshot-id")
            if main is None:
                checkpoints.add(-1)
                continue
            assert main in passed[table], f"{table}: main at {main}, which has no passed audit"
            history = _ancestors(final[table], main)
            if previous[table] is not None:
                assert previous[table] in history, f"{table}: main went from {previous[table]} to {main}, not forward"
            previous[table] = main
            if (table, main) not in checked:
                ids = set(final[table].scan(snapshot_id=main, selected_fields=("id",)).to_arrow()["id"].to_pylist())
                checked[(table, main)] = ids
                assert not ids & bad[table], f"{table}: main at {main} shows bad rows {ids & bad[table]}"
            checkpoints.add(_checkpoint_at(final[table], main))
        assert len(checkpoints) <= 1, f"main torn across tables: checkpoints {checkpoints} in one state"
    assert len({main for _, main in checked}) >= 3 * len(tables), f"main moved too little to judge: {checked.keys()}"


def _ancestors(table: Any, snapshot_id: int) -> list[int]:
    found, snapshot = [], table.metadata.snapshot_by_id(snapshot_id)
    while snapshot is not None:
        found.append(snapshot.snapshot_id)
        snapshot = table.metadata.snapshot_by_id(snapshot.parent_snapshot_id) if snapshot.parent_snapshot_id else None
    return found


def _checkpoint_at(table: Any, snapshot_id: int) -> int:
    for ancestor in _ancestors(table, snapshot_id):
        summary = table.metadata.snapshot_by_id(ancestor).summary
        if summary.get("icesink.max-committed-checkpoint-id"):
            return int(summary["icesink.max-committed-checkpoint-id"])
    return -1


def _check_readers(config: CatalogConfig, tables: list[str], published: dict[str, list[int]]) -> None:
    from tests.helpers.outcomes import read_with_duckdb, read_with_iceberg_rust

    catalog = open_catalog(config)
    locations = [catalog.load_table(t).metadata_location for t in tables]
    for table, rows in zip(tables, read_with_duckdb(*locations), strict=True):
        assert sorted(r["id"] for r in rows) == published[table], f"DuckDB reading {table}"
    for table in tables:
        ids = read_with_iceberg_rust(config, table, "id").column("id").to_pylist()
        assert sorted(ids) == published[table], f"iceberg-rust reading {table}"
