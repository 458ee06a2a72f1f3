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
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from icesink.catalog.config import CatalogConfig
from tests.histories.branches import BRANCH, CURE, POISON
from tests.histories.grammar import PRIMITIVES, SPARK_PRIMITIVES, TableShape, random_table
from tests.histories.group import COMPANION, GROUP_FAILPOINTS
from tests.histories.spark_world import SparkWorld
from tests.histories.world import FAILPOINTS, Mismatch, World

# "merge": thresholds under which no file is rewritten, so the position deletes of a keyed table are merged.
MAINTAIN_MODES = ("convert", "compact", "all", "merge")
KINDS = ("write", "write", "write", "write", "alter", "maintain", "expire", "crash", "discard", "replay")


@dataclass(frozen=True)
class Step:
    """One thing a user, another tool or the world does."""

    kind: str
    seed: int
    size: int = 0

    def describe(self, failpoints: tuple[str, ...] = FAILPOINTS) -> str:
        if self.kind == "write":
            return f"write a checkpoint of {self.size} change(s) (seed {self.seed})"
        if self.kind == "crash":
            return f"write a checkpoint, the committer is killed at {failpoints[self.seed % len(failpoints)]}"
        if self.kind == "maintain":
            return f"icesink maintain ({MAINTAIN_MODES[self.seed % len(MAINTAIN_MODES)]})"
        return {
            "poison": f"write a checkpoint its audit refuses ({self.size} change(s))",
            "cure": f"write a checkpoint that cures the poison ({self.size} change(s))",
            "alter": f"another tool changes the schema (seed {self.seed})",
            "expire": "commit a checkpoint with snapshot expiry down to one snapshot",
            "discard": "write a checkpoint, lose its manifest, discard it",
            "replay": "Spark re-delivers the last checkpoint",
            "evolve": f"the stream's input gains a column, evolve_schema=True ({self.size} change(s))",
        }[self.kind]


@dataclass(frozen=True)
class History:
    seed: int
    shape: TableShape
    steps: tuple[Step, ...]
    writer: str | None = None  # through a real icesink.stream with this writer; None: the task writer directly
    atomic: bool = False  # every checkpoint also writes a companion table, committed with it in one transaction
    branch: bool = False  # every checkpoint commits to a branch, audited; main follows (tests/histories/branches.py)

    def describe(self) -> str:
        through = f", written through icesink.stream (writer={self.writer!r})" if self.writer else ""
        group = f", committed atomically with {COMPANION!r}" if self.atomic else ""
        group += f", into branch {BRANCH!r} with audits, main following" if self.branch else ""
        failpoints = GROUP_FAILPOINTS if self.atomic else FAILPOINTS
        lines = [f"seed {self.seed}: table {self.shape.describe()}{through}{group}"]
        lines += [f"  {n + 1}. {step.describe(failpoints)}" for n, step in enumerate(self.steps)]
        return "\n".join(lines)


# One history in this many runs through Spark (its own draw, so that the other histories of a seed stay as
# they were); ``spark=True`` or ``False`` decides it.
SPARK_SHARE = 6
# One history in this many of those without Spark commits a second table with its own (its own draw too).
ATOMIC_SHARE = 3
SPARK_KINDS = ("write", "write", "write", "alter", "maintain", "expire", "crash", "discard", "replay", "evolve")
# One history in this many of those without Spark nor a companion writes into a branch with audits (its own draw).
BRANCH_SHARE = 3
# Maintenance and expiry work on main only: a branch history poisons and cures instead.
BRANCH_KINDS = ("write", "write", "write", "poison", "cure", "alter", "crash", "discard", "replay")


def generate(seed: int, length: int, spark: bool | None = None) -> History:
    rng = random.Random(seed)
    through = random.Random(seed ^ 0x5EED)
    drawn = through.randrange(SPARK_SHARE) == 0  # drawn even when forced: the writer's draw comes next
    if spark is None:
        spark = drawn
    shape = random_table(rng, SPARK_PRIMITIVES if spark else PRIMITIVES)
    atomic = not spark and random.Random(seed ^ 0xA7031C).randrange(ATOMIC_SHARE) == 0
    branch = not spark and not atomic and random.Random(seed ^ 0xB4A2DA).randrange(BRANCH_SHARE) == 0
    kinds = SPARK_KINDS if spark else BRANCH_KINDS if branch else KINDS
    steps = tuple(Step(rng.choice(kinds), rng.randrange(2**31), rng.randint(1, 25)) for _ in range(length))
    return History(seed, shape, steps, through.choice(("auto", "arrow")) if spark else None, atomic, branch)


@dataclass
class Outcome:
    """What running one history did."""

    steps: Counter[str] = field(default_factory=Counter)
    readers: Counter[str] = field(default_factory=Counter)  # how often each reader was compared with the model
    maintenance: Counter[str] = field(default_factory=Counter)  # the snapshots maintenance made, by kind
    failure: str | None = None
    failed_at: int | None = None
    java: JavaCheck | None = None  # what Iceberg Java must read at the end, asked in one JVM for many histories


@dataclass(frozen=True)
class JavaCheck:
    metadata_location: str
    schema: Any
    expected: list[dict[str, Any]]


def run(history: History, directory: Path, readers: bool = True, database_url: str | None = None) -> Outcome:
    """Run every step, checking the table against the model after each; the other readers at the end.

    The catalog is a new SQLite file, or, with ``database_url`` (a migrated PostgreSQL database), a catalog
    of a new name in that database.
    """
    import uuid

    from icesink.catalog import database

    warehouse = directory / "warehouse"
    warehouse.mkdir(parents=True)
    name = f"hist{history.seed}_{uuid.uuid4().hex[:8]}"
    config = CatalogConfig(
        name=name, uri=database_url or f"sqlite:///{warehouse / 'catalog.db'}", warehouse=warehouse.as_uri()
    )
    database.upgrade(config)
    outcome = Outcome()
    world: World | None = None
    try:
        world = (
            SparkWorld(config, history.shape, directory, history.writer)
            if history.writer
            else World(config, history.shape, history.atomic, history.branch)
        )
        seen: list[State] = []
        for number, step in enumerate(history.steps):
            outcome.failed_at = number
            _do(world, step)
            if step.kind == "alter":
                world.notes[-1] = f"step {number + 1}: another tool did: {world.notes[-1]}"
            outcome.steps[step.kind] += 1
            seen = _check(world, seen, step)
        outcome.failed_at = None
        world.collect_garbage()  # for real, so that the readers below read what gc left
        _check(world, seen, Step("gc", 0))
        if readers:
            _check_other_readers(world)
            outcome.java = _java_check(world)
        outcome.readers = world.readers_asked
        outcome.maintenance = world.maintenance_made
    except Exception as e:  # every failure is a finding: report it with the step
        outcome.failure = f"{type(e).__name__}: {e}\n{traceback.format_exc(limit=-8)}"
        if world is not None and world.notes:
            outcome.failure += "\nschema changes on the way:\n  " + "\n  ".join(world.notes)
    finally:
        database.dispose_engines()
    return outcome


def _do(world: World, step: Step) -> None:
    rng = random.Random(step.seed)
    if step.kind in ("poison", "cure"):
        world.flags = {POISON if step.kind == "poison" else CURE: "1"}
        rows, ops = world.changes(rng, step.size)
        world.write_and_commit(rows, ops)
        world.apply_to_model(rows, ops)
    elif step.kind in ("write", "expire", "crash", "discard"):
        rows, ops = world.changes(rng, step.size if step.kind == "write" else 5)
        if step.kind == "discard":
            world.lose_and_discard(world.stage(rows, ops))
            return
        if step.kind == "crash":
            world.stage(rows, ops)
            world.crash_commit(world.failpoints[step.seed % len(world.failpoints)])
        elif step.kind == "expire":
            with world.table().transaction() as change:
                change.set_properties(
                    {"history.expire.max-snapshot-age-ms": "1", "history.expire.min-snapshots-to-keep": "1"}
                )
            world.write_and_commit(rows, ops, expire=True)
        else:
            world.write_and_commit(rows, ops)
        world.apply_to_model(rows, ops)
    elif step.kind == "evolve":
        world.evolve(rng, step.size)
    elif step.kind == "replay":
        world.replay(rng)
    elif step.kind == "alter":
        world.notes.append(world.alter(rng))
    elif step.kind == "maintain":
        mode = MAINTAIN_MODES[step.seed % len(MAINTAIN_MODES)]
        if mode in ("compact", "merge"):  # the thresholds that choose between rewriting files and merging deletes
            world.notes.append(world.tune_maintenance(rng, merge_only=mode == "merge"))
        world.maintain("compact" if mode == "merge" else mode)


State = tuple[int, int, list[dict[str, Any]]]  # a snapshot id, the schema id and the model's rows then


def _check(world: World, seen: list[State], step: Step) -> list[State]:
    """The table and every invariant now; the changelog since the state before and since one earlier state
    (under the same schema, not expired); returns the states seen since the schema last changed."""
    import icesink

    world.check_reader("icesink.read", icesink.read(world.table()).to_pylist())
    if world.branch != "main":  # before its first commit the branch does not exist: it holds nothing
        on_branch = icesink.read(world.table(), branch=BRANCH) if BRANCH in world.table().metadata.refs else None
        world.check_reader("icesink.read (branch)", on_branch.to_pylist() if on_branch else [], BRANCH)
    world.check_invariants()
    table = world.table()
    head = table.current_snapshot()
    if head is None:
        return seen
    # Names may have changed under the rows: a changelog across a schema change is not compared.
    schema_id = table.schema().schema_id
    alive = [s for s in seen if s[1] == schema_id and table.metadata.snapshot_by_id(s[0]) is not None]
    if alive:
        earlier = random.Random(step.seed).choice(alive)
        for since, _, rows_then in {id(s): s for s in (alive[-1], earlier)}.values():
            _check_changelog(world, rows_then, icesink.changes(table, since).to_pylist())
            if world.key_ids:  # a key's net change, whatever passed through the range
                net = icesink.changes(table, since, net_changes=True).to_pylist()
                _check_changelog(world, rows_then, net, net=True)
    return [*alive, (head.snapshot_id, schema_id, world.expected()[1])]


def _check_changelog(
    world: World, rows_before: list[dict[str, Any]], changes: list[dict[str, Any]], net: bool = False
) -> None:
    """The rows before, with the changelog applied, are the rows after (each old row it names was there); with
    ``net``, each key changes once over the whole range."""
    import json

    from tests.histories.canon import canon_rows

    schema, rows_after = world.expected()
    world.readers_asked["icesink.changes (net)" if net else "icesink.changes"] += 1
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
    if world.key_ids:
        _check_update_pairs(world, schema, changes, net)


# What one snapshot may say of one key of a keyed table: a row deleted and one inserted with the same key in
# one snapshot are an update_before / update_after pair, never a delete and an insert.
KEY_CHANGES = ({"insert"}, {"delete"}, {"update_before", "update_after"})


def _check_update_pairs(world: World, schema: Any, changes: list[dict[str, Any]], net: bool = False) -> None:
    by_key: dict[tuple[Any, ...], list[str]] = {}
    for change in changes:
        key = (None if net else change["_commit_snapshot_id"], *world.key_of(schema, change))
        by_key.setdefault(key, []).append(change["_change_type"])
    for key, kinds in by_key.items():
        if len(kinds) != len(set(kinds)) or set(kinds) not in KEY_CHANGES:
            where = "the net changes say" if net else f"snapshot {key[0]} says"
            raise Mismatch(f"{where} {sorted(kinds)} of key {list(key[1:])}")


def _check_other_readers(world: World) -> None:
    from icesink.iceberg.scan import live_files
    from tests.helpers.outcomes import iceberg_rust_sql, read_with_duckdb

    table = world.table()
    if table.current_snapshot() is None:
        return
    # iceberg-rust 0.11 reads with the current schema but plans with the snapshot's, and fails on a column
    # added since the last snapshot ("Column … not found in table"); and it matches the members of a struct by
    # position, not field id, so a file written before a nested field was added or dropped fails to read
    # (apache/iceberg-rust#2617). Reader limits, not the table's: such tables are not asked about.
    if table.current_snapshot().schema_id == table.schema().schema_id and _nested_fields_never_changed(table):
        world.check_reader("iceberg-rust", iceberg_rust_sql(table, "SELECT * FROM t").to_pylist())
    if not _partitions_differing_only_in_case(table):
        (duck,) = read_with_duckdb(table.metadata_location)
        world.check_reader("DuckDB", duck)
    # pyiceberg 0.12 reads no equality deletes, and reads a null list or map of structs as empty (the reason
    # icesink reads files itself): such tables are not asked about.
    if not live_files(table).equality_deletes and not _holds_list_or_map_of_structs(table.schema()):
        world.check_reader("pyiceberg", table.scan().to_arrow().to_pylist())


def _java_check(world: World) -> JavaCheck | None:
    """Spark 3.5, which Iceberg Java reads through here, has no time type: tables that ever held one are not
    asked (its reader fails on a time field still in a file even once the table dropped it, seed 1828186265)."""
    from pyiceberg.schema import index_by_id
    from pyiceberg.types import TimeType

    table = world.table()
    ever_time = any(
        isinstance(field.field_type, TimeType) for s in table.metadata.schemas for field in index_by_id(s).values()
    )
    if table.current_snapshot() is None or ever_time:
        return None
    schema, expected = world.expected()
    return JavaCheck(table.metadata_location, schema, expected)


def check_with_iceberg_java(checks: list[JavaCheck]) -> list[str | None]:
    """Each table as Iceberg Java reads it, all in one JVM: per check, how it differs from the model, or None."""
    from tests.conftest import JAVA_READER_VENV
    from tests.helpers.outcomes import read_many_with_iceberg_java
    from tests.histories.canon import canon_rows, first_difference

    python = JAVA_READER_VENV / "bin" / "python"
    # Iceberg 1.9.2's vectorized Parquet reader fails on a uuid column of a flat schema ("Unsupported type:
    # UTF8String", seed 1858336720); its row reader reads it.
    tables = [(c.metadata_location, [f.name for f in c.schema.fields], JAVA_OPTIONS) for c in checks]
    try:
        read = read_many_with_iceberg_java(python, tables)
    except AssertionError as e:  # one table the JVM cannot read fails the batch: ask each on its own
        if len(checks) == 1:
            return [f"Iceberg Java cannot read the table: {str(e)[-1500:]}"]
        return [problem for check in checks for problem in check_with_iceberg_java([check])]
    pairs = zip(checks, read, strict=True)
    return [first_difference(canon_rows(c.schema, rows), c.expected, "Iceberg Java") for c, rows in pairs]


JAVA_OPTIONS = {"vectorization-enabled": "false"}


def _holds_list_or_map_of_structs(schema: Any) -> bool:
    from pyiceberg.types import ListType, MapType, StructType

    def walk(kind: Any) -> bool:
        if isinstance(kind, ListType):
            return isinstance(kind.element_type, StructType) or walk(kind.element_type)
        if isinstance(kind, MapType):
            return isinstance(kind.value_type, StructType) or walk(kind.value_type)
        if isinstance(kind, StructType):
            return any(walk(f.field_type) for f in kind.fields)
        return False

    return walk(schema.as_struct())


def _nested_fields_never_changed(table: Any) -> bool:
    """Every schema the table had holds the same struct members, in the same order, below the top level."""

    def members(schema: Any) -> list[list[int]]:
        from pyiceberg.types import ListType, MapType, StructType

        found: list[list[int]] = []

        def walk(kind: Any, top: bool) -> None:
            if isinstance(kind, StructType):
                if not top:
                    found.append([f.field_id for f in kind.fields])
                for member in kind.fields:
                    walk(member.field_type, False)
            elif isinstance(kind, ListType):
                walk(kind.element_type, False)
            elif isinstance(kind, MapType):
                walk(kind.value_type, False)

        walk(schema.as_struct(), True)
        return sorted(found)

    now = members(table.schema())
    return all(members(schema) == now for schema in table.metadata.schemas)


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
    """A smaller history that still fails, while the budget lasts: fewer steps (halves, then single steps),
    then fewer changes in each step that writes."""
    deadline = time.monotonic() + budget_seconds
    steps = list(history.steps)
    chunk = max(1, len(steps) // 2)
    while chunk >= 1 and time.monotonic() < deadline:
        start, changed = 0, False
        while start < len(steps) and time.monotonic() < deadline:
            candidate = steps[:start] + steps[start + chunk :]
            if candidate and fails(replace(history, steps=tuple(candidate))):
                steps, changed = candidate, True
            else:
                start += chunk
        if not changed:
            chunk //= 2
    for number, step in enumerate(steps):
        while step.kind in ("write", "evolve") and step.size > 1 and time.monotonic() < deadline:
            smaller = [*steps[:number], replace(step, size=step.size // 2), *steps[number + 1 :]]
            if not fails(replace(history, steps=tuple(smaller))):
                break
            steps, step = smaller, smaller[number]
    return replace(history, steps=tuple(steps))


def fails(history: History, readers: bool = True, database_url: str | None = None, like: str | None = None) -> bool:
    """Whether ``history`` fails (with ``like``: the same way, so that shrinking does not drift to another bug)."""
    with tempfile.TemporaryDirectory() as directory:
        failure = run(history, Path(directory), readers, database_url).failure
    return failure is not None and (like is None or signature(failure) == like)


def signature(failure: str) -> str:
    """What kind of failure: the exception, and for a mismatch the reader or check that saw it."""
    first = failure.splitlines()[0]
    parts = first.split(": ")
    return ": ".join(parts[:2]) if parts[0] == "Mismatch" else parts[0]
