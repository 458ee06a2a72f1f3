"""Random histories of one job committing keyed changes across three tables, atomically (no Spark).

Each step stages a checkpoint for a random subset of the tables (inserts, updates and deletes of a small
key space, keys repeating), or commits with another writer appending to a random table just before the
swap (the group is rebuilt), or an operator discards one table's part of a staged checkpoint, or a
staged manifest is lost and its checkpoint discarded. After every commit the tables must equal a model,
read by icesink and by pyiceberg; and every checkpoint committed so far must read back, through
``icesink.read_tables`` at that checkpoint, as the model had the tables then.
"""

from __future__ import annotations

import copy
import datetime
import random
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import icesink
from icesink.catalog.checkpoints import CheckpointState
from icesink.catalog.config import CatalogConfig
from icesink.catalog.ledger import Ledger
from icesink.catalog.loader import open_catalog
from icesink.committer.commit import TableCommitter
from tests.helpers.support import EPOCH, ORDERS_SCHEMA, create_orders_table, staged_in_manifests
from tests.test_group_commit import _stage_changes

TABLES = ("hist.a", "hist.b b", "hist.ç%/")
JOB = "job"
Rows = dict[str, dict[int, tuple[Any, ...]]]


def changes(rng: random.Random, version: int) -> tuple[pa.Table, list[str], dict[int, tuple[Any, ...] | None]]:
    """A checkpoint's changes of one table: rows, their ops, and what each key ends as (None: deleted)."""
    count = rng.randint(1, 5)
    if rng.random() < 0.2:  # deletes of keys the table never held: no snapshot needed, and none made
        ids, ops = [rng.randint(100, 103) for _ in range(count)], ["D"] * count
    else:
        ids = [rng.randint(0, 7) for _ in range(count)]
        ops = [rng.choice("IUD") for _ in ids]
    names = [f"v{version}-{n}" for n in range(count)]
    rows = pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "name": pa.array(names),
            "amount": pa.array([float(version)] * count),
            "ts": pa.array([EPOCH + datetime.timedelta(hours=version)] * count, pa.timestamp("us", tz="UTC")),
        },
        schema=ORDERS_SCHEMA,
    )
    last: dict[int, tuple[Any, ...] | None] = {}
    for key, op, name in zip(ids, ops, names, strict=True):  # the last change of a key wins
        last[key] = None if op == "D" else (name, float(version))
    return rows, ops, last


def table_rows(table: pa.Table) -> dict[int, tuple[Any, ...]]:
    return {r["id"]: (r["name"], r["amount"]) for r in table.to_pylist()}


def run_history(config: CatalogConfig, seed: int, steps: int) -> None:
    rng = random.Random(seed)
    for identifier in TABLES:
        create_orders_table(config, identifier)
    committed: Rows = {t: {} for t in TABLES}  # the tables as the model has them
    pending: dict[int, dict[str, dict[int, tuple[Any, ...] | None]]] = {}  # staged checkpoint -> table -> keys
    history: dict[int, Rows] = {}  # committed checkpoint -> the tables right after it
    checkpoint = 0
    foreign = 1000  # another writer's keys, apart from the job's
    for step in range(steps):
        action = rng.random()
        if action < 0.55:
            touched = [t for t in TABLES if rng.random() < 0.6] or [rng.choice(TABLES)]
            parts, effects = {}, {}
            for identifier in touched:
                rows, ops, last = changes(rng, checkpoint)
                parts[identifier] = (rows, ops)
                effects[identifier] = last
            _stage_changes(config, JOB, checkpoint, parts)
            pending[checkpoint] = effects
            checkpoint += 1
        elif action < 0.65 and pending:
            # An operator discards one table's part of a staged checkpoint (or a lost manifest is given up).
            chosen = rng.choice(sorted(pending))
            identifier = rng.choice(sorted(pending[chosen]))
            row = Ledger(config).get(identifier, JOB, chosen)
            assert row is not None
            if rng.random() < 0.5 and row.manifests.present():  # staged by a release before, its manifest lost
                row = staged_in_manifests(config, identifier, JOB, chosen)
                Path(row.manifest_paths[0].removeprefix("file://")).unlink()
            assert Ledger(config).discard(row.id, "test", "given up")
            del pending[chosen][identifier]
        else:
            victim = rng.choice(TABLES)
            interfered: list[bool] = []

            def another_writer(victim: str = victim, interfered: list[bool] = interfered) -> None:
                nonlocal foreign
                if not interfered and rng.random() < 0.8:
                    interfered.append(True)
                    open_catalog(config).load_table(victim).append(
                        pa.table(
                            {
                                "id": pa.array([foreign], pa.int64()),
                                "name": ["other"],
                                "amount": [0.0],
                                "ts": pa.array([EPOCH], pa.timestamp("us", tz="UTC")),
                            },
                            schema=ORDERS_SCHEMA,
                        )
                    )
                    committed[victim][foreign] = ("other", 0.0)
                    foreign += 1

            committer = TableCommitter.of(config, before_commit=another_writer)
            committer.commit_atomic(JOB)
            for number in sorted(pending):
                for identifier, last in pending[number].items():
                    for key, value in last.items():
                        if value is None:
                            committed[identifier].pop(key, None)
                        else:
                            committed[identifier][key] = value
                history[number] = copy.deepcopy(committed)
            pending.clear()
            check(config, committed, history, f"seed {seed}, step {step}")


def check(config: CatalogConfig, committed: Rows, history: dict[int, Rows], where: str) -> None:
    assert Ledger(config).pending(job_id=JOB) == [], where
    catalog = open_catalog(config)
    for identifier in TABLES:
        assert table_rows(icesink.read(identifier, catalog=config)) == committed[identifier], (where, identifier)
        scanned = catalog.load_table(identifier).scan().to_arrow()
        assert table_rows(scanned) == committed[identifier], (where, identifier, "pyiceberg")
    for number, tables in history.items():
        cut = icesink.read_tables(list(TABLES), job_id=JOB, checkpoint_id=number, catalog=config)
        for identifier in TABLES:
            expected = {k: v for k, v in tables[identifier].items() if v != ("other", 0.0)}
            got = {k: v for k, v in table_rows(cut[identifier]).items() if v != ("other", 0.0)}
            assert got == expected, (where, "at checkpoint", number, identifier)
    # Every snapshot of the job names one commit id, and tables of one checkpoint share it.
    by_checkpoint: dict[str, set[str]] = {}
    for identifier in TABLES:
        for row in Ledger(config).for_table(identifier):
            if row.state == CheckpointState.COMMITTED and row.snapshot_id is not None:
                by_checkpoint.setdefault(str(row.checkpoint_id), set()).add(str(row.commit_id))
    assert all(len(ids) == 1 for ids in by_checkpoint.values()), (where, by_checkpoint)


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_random_group_histories_equal_the_model(sqlite_catalog: CatalogConfig, seed: int) -> None:
    run_history(sqlite_catalog, seed, steps=24)


def test_a_random_group_history_on_postgresql(pg_catalog: CatalogConfig) -> None:
    run_history(pg_catalog, 5, steps=24)
