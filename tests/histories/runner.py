"""Histories: generated from a seed, run against a fresh catalog, checked after every step, shrunk on failure.

A history is a list of steps, each carrying its own seed, so that removing a
step while shrinking leaves the others as they were (a step whose target is
gone, a column say, does what it still can).
"""

from __future__ import annotations

import random
import tempfile
import time
import traceback
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from icesink.catalog.config import CatalogConfig
from tests.histories.grammar import TableShape, random_table
from tests.histories.world import FAILPOINTS, Mismatch, World

KINDS = ("write", "write", "write", "write", "alter", "maintain", "expire", "crash", "discard", "replay")


@dataclass(frozen=True)
class Step:
    """One thing a user, another tool or the world does."""

    kind: str
    seed: int
    size: int = 0

    def describe(self) -> str:
        if self.kind == "write":
            return f"write a checkpoint of {self.size} change(s) (seed {self.seed})"
        if self.kind == "crash":
            return f"write a checkpoint, the committer is killed at {FAILPOINTS[self.seed % len(FAILPOINTS)]}"
        if self.kind == "maintain":
            return f"icesink maintain ({('convert', 'compact', 'all')[self.seed % 3]})"
        return {
            "alter": f"another tool changes the schema (seed {self.seed})",
            "expire": "commit a checkpoint with snapshot expiry down to one snapshot",
            "discard": "write a checkpoint, lose its manifest, discard it",
            "replay": "Spark re-delivers the last checkpoint",
        }[self.kind]


@dataclass(frozen=True)
class History:
    seed: int
    shape: TableShape
    steps: tuple[Step, ...]

    def describe(self) -> str:
        lines = [f"seed {self.seed}: table {self.shape.describe()}"]
        lines += [f"  {n + 1}. {step.describe()}" for n, step in enumerate(self.steps)]
        return "\n".join(lines)


def generate(seed: int, length: int) -> History:
    rng = random.Random(seed)
    shape = random_table(rng)
    steps = tuple(Step(rng.choice(KINDS), rng.randrange(2**31), rng.randint(1, 25)) for _ in range(length))
    return History(seed, shape, steps)


@dataclass
class Outcome:
    """What running one history did."""

    steps: Counter[str] = field(default_factory=Counter)
    failure: str | None = None
    failed_at: int | None = None


def run(history: History, directory: Path, readers: bool = True) -> Outcome:
    """Run every step, checking the table against the model after each; the other readers at the end."""
    from icesink.catalog import database

    warehouse = directory / "warehouse"
    warehouse.mkdir(parents=True)
    config = CatalogConfig(
        name=f"hist{history.seed}", uri=f"sqlite:///{warehouse / 'catalog.db'}", warehouse=warehouse.as_uri()
    )
    database.upgrade(config)
    outcome = Outcome()
    try:
        world = World(config, history.shape)
        for number, step in enumerate(history.steps):
            outcome.failed_at = number
            before = _state(world)
            _do(world, step)
            outcome.steps[step.kind] += 1
            _check(world, before, step)
        outcome.failed_at = None
        if readers:
            _check_other_readers(world)
    except Exception as e:  # every failure is a finding: report it with the step
        outcome.failure = f"{type(e).__name__}: {e}\n{traceback.format_exc(limit=-8)}"
    finally:
        database.dispose_engines()
    return outcome


def _do(world: World, step: Step) -> None:
    rng = random.Random(step.seed)
    if step.kind == "write":
        rows, ops = world.changes(rng, step.size)
        _, staged = world.write(rows, ops)
        assert staged
        world.commit()
        world.apply_to_model(rows, ops)
    elif step.kind in ("expire", "crash"):
        rows, ops = world.changes(rng, 5)
        world.write(rows, ops)
        if step.kind == "expire":
            with world.table().transaction() as change:
                change.set_properties(
                    {"history.expire.max-snapshot-age-ms": "1", "history.expire.min-snapshots-to-keep": "1"}
                )
            world.commit(expire=True)
        else:
            world.crash_commit(FAILPOINTS[step.seed % len(FAILPOINTS)])
        world.apply_to_model(rows, ops)
    elif step.kind == "discard":
        rows, ops = world.changes(rng, 5)
        world.lose_and_discard(world.write(rows, ops)[0])
    elif step.kind == "replay":
        _replay(world, rng)
    elif step.kind == "alter":
        world.alter(rng)
    elif step.kind == "maintain":
        world.maintain(("convert", "compact", "all")[step.seed % 3])


def _replay(world: World, rng: random.Random) -> None:
    """Spark re-delivers the last checkpoint after a crash: staging keeps the first, nothing is written twice."""
    if world.next_checkpoint == 0:
        return
    rows, ops = world.changes(rng, 3)
    checkpoint, staged = world.write(rows, ops, again=world.next_checkpoint - 1)
    if staged:
        raise Mismatch(f"checkpoint {checkpoint} was staged a second time")
    world.commit()


def _state(world: World) -> tuple[int | None, list[dict[str, Any]]]:
    snapshot = world.table().current_snapshot()
    return (snapshot.snapshot_id if snapshot else None), world.expected()[1]


def _check(world: World, before: tuple[int | None, list[dict[str, Any]]], step: Step) -> None:
    import icesink

    world.check_reader("icesink.read", icesink.read(world.table()).to_pylist())
    world.check_invariants()
    snapshot_before, rows_before = before
    table = world.table()
    head = table.current_snapshot()
    if step.kind == "alter" or head is None or snapshot_before is None:
        return  # names changed under the rows, or nothing to compare with
    if table.metadata.snapshot_by_id(snapshot_before) is None:
        return  # expired: the changelog refuses to start there, as it should
    changes = icesink.changes(table, snapshot_before).to_pylist()
    _check_changelog(world, rows_before, changes)


def _check_changelog(world: World, rows_before: list[dict[str, Any]], changes: list[dict[str, Any]]) -> None:
    """The rows before, with the changelog applied, are the rows after (each old row it names was there)."""
    import json

    from tests.histories.canon import canon_rows

    schema, rows_after = world.expected()
    names = [f.name for f in schema.fields]
    state = Counter(json.dumps(r, sort_keys=True, default=str) for r in rows_before)
    for change in changes:
        (row,) = canon_rows(schema, [{n: change.get(n) for n in names}])
        text = json.dumps(row, sort_keys=True, default=str)
        if change["_change_type"] in ("delete", "update_before"):
            if state[text] == 0:
                raise Mismatch(f"the changelog deletes {row}, which the table did not hold")
            state[text] -= 1
        else:
            state[text] += 1
    after = Counter(json.dumps(r, sort_keys=True, default=str) for r in rows_after)
    if +state != after:
        raise Mismatch(f"the changelog replayed gives {sum(state.values())} rows, the table holds {len(rows_after)}")


def _check_other_readers(world: World) -> None:
    from tests.outcomes import iceberg_rust_sql, read_with_duckdb

    table = world.table()
    if table.current_snapshot() is None:
        return
    # iceberg-rust 0.11 reads with the current schema but plans with the snapshot's, and fails on a column
    # added since the last snapshot ("Column … not found in table"): a reader limit, not the table's.
    if table.current_snapshot().schema_id == table.schema().schema_id:
        world.check_reader("iceberg-rust", iceberg_rust_sql(table, "SELECT * FROM t").to_pylist())
    if not _partitions_differing_only_in_case(table):
        (duck,) = read_with_duckdb(table.metadata_location)
        world.check_reader("DuckDB", duck)


def _partitions_differing_only_in_case(table: Any) -> bool:
    """DuckDB 1.5 applies the position deletes of partition ``a4`` to the files of partition ``A4`` too (seed
    619845143: icesink, iceberg-rust, pyiceberg and Iceberg Java agree on the rows, DuckDB loses one)."""
    from icesink.iceberg.scan import live_files

    seen: dict[str, str] = {}
    for data in live_files(table).data:
        text = repr(tuple(data.file.partition[i] for i in range(len(data.file.partition))))
        if seen.setdefault(text.lower(), text) != text:
            return True
    return False


def shrink(history: History, fails: Callable[[History], bool], budget_seconds: float = 120) -> History:
    """Fewer steps that still fail: drop halves, then single steps, while the budget lasts."""
    deadline = time.monotonic() + budget_seconds
    steps = list(history.steps)
    chunk = max(1, len(steps) // 2)
    while chunk >= 1 and time.monotonic() < deadline:
        start, changed = 0, False
        while start < len(steps) and time.monotonic() < deadline:
            candidate = steps[:start] + steps[start + chunk :]
            if candidate and fails(History(history.seed, history.shape, tuple(candidate))):
                steps, changed = candidate, True
            else:
                start += chunk
        if not changed:
            chunk //= 2
    return History(history.seed, history.shape, tuple(steps))


def fails(history: History, readers: bool = True) -> bool:
    with tempfile.TemporaryDirectory() as directory:
        return run(history, Path(directory), readers).failure is not None
