"""A fixed set of random histories, each checked against the model after every step (``make histories`` runs
new seeds for as long as you like; see tests/histories)."""

from __future__ import annotations

import functools
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from tests.histories.runner import Outcome, check_with_iceberg_java, fails, generate, run, shrink, signature

# Seeds whose tables cover, between them: appends and upserts, keys in structs and on uuids, nested types,
# partition transforms, every kind of step, an event-time watermark over the day(...) a table is partitioned by
# (263), a stream into a branch whose audits a poisoned checkpoint fails until a cure, main following (9). Found
# bugs get a seed here (and a named test of their own).
SEEDS = (1, 2, 3, 5, 8, 13, 263, 9)


# And histories written through a real icesink.stream (one JVM: the test session's Spark).
SPARK_SEEDS = (1, 2)
PG_SEED = 4  # and one whose catalog is in PostgreSQL (the committer killed in a process of its own)
_ENDS: dict[tuple[int, bool], Outcome] = {}


def _history(seed: int, spark: bool, directories: pytest.TempPathFactory) -> Outcome:
    """Each seed runs once per test session; Iceberg Java then reads where they all ended, in one JVM."""
    if (seed, spark) not in _ENDS:
        _ENDS[seed, spark] = run(generate(seed, LENGTH, spark), directories.mktemp(f"history-{seed}-{spark}"))
    return _ENDS[seed, spark]


def _passes(seed: int, spark: bool, outcome: Outcome) -> None:
    if outcome.failure is not None:
        like = signature(outcome.failure)
        short = shrink(generate(seed, LENGTH, spark), functools.partial(fails, like=like), budget_seconds=60)
        replay = f"make histories SEED={seed} LENGTH={LENGTH} SPARK={int(spark)}"
        pytest.fail(f"{short.describe()}\nfailed with: {outcome.failure}\nreplay: {replay}")
    assert {"icesink.read", "icesink.changes"} <= set(outcome.readers), outcome.readers


LENGTH = 18


@pytest.mark.interop
@pytest.mark.parametrize("seed", SEEDS)
def test_a_random_history_equals_the_model(seed: int, tmp_path_factory: pytest.TempPathFactory) -> None:
    _passes(seed, False, _history(seed, False, tmp_path_factory))


@pytest.mark.interop
@pytest.mark.parametrize("seed", SPARK_SEEDS)
def test_a_random_history_through_spark_equals_the_model(
    seed: int, spark: Any, tmp_path_factory: pytest.TempPathFactory
) -> None:
    outcome = _history(seed, True, tmp_path_factory)
    _passes(seed, True, outcome)
    assert outcome.steps["evolve"] + outcome.steps["replay"] > 0, "the seed takes no Spark-only step"


@pytest.mark.interop
@pytest.mark.postgres
def test_a_random_history_with_its_catalog_in_postgresql_equals_the_model(pg_database: str, tmp_path: Path) -> None:
    outcome = run(generate(PG_SEED, LENGTH, spark=False), tmp_path, database_url=pg_database)
    if outcome.failure is not None:
        replay = f"make histories SEED={PG_SEED} LENGTH={LENGTH} SPARK=0 CATALOG=postgresql"
        pytest.fail(f"{outcome.failure}\nreplay: {replay}")
    assert outcome.steps["crash"] > 0, "the seed kills no committer"


@pytest.mark.interop
def test_iceberg_java_reads_where_the_histories_end(
    spark: Any, tmp_path_factory: pytest.TempPathFactory, java_reader: Path
) -> None:
    ends = {(seed, False): _history(seed, False, tmp_path_factory) for seed in SEEDS}
    ends.update({(seed, True): _history(seed, True, tmp_path_factory) for seed in SPARK_SEEDS})
    asked = sum((outcome.readers for outcome in ends.values()), Counter[str]())
    assert {"iceberg-rust", "DuckDB", "pyiceberg"} <= set(asked), f"a reader no history could ask: {asked}"
    checks = {name: outcome.java for name, outcome in ends.items() if outcome.java is not None}
    assert len(checks) >= 4, "most of these seeds' tables hold no time column, which Spark 3.5 cannot read"
    problems = check_with_iceberg_java(list(checks.values()))
    pairs = zip(checks, problems, strict=True)
    found = [f"seed {seed} (through Spark: {s}): {problem}" for (seed, s), problem in pairs if problem]
    assert not found, "\n".join(found)


def test_the_fixed_seeds_reach_group_commits_and_kill_their_committer() -> None:
    """Some fixed histories commit a second table with theirs in one transaction, and kill that committer."""
    atomic = [seed for seed in (*SEEDS, PG_SEED) if generate(seed, LENGTH, False).atomic]
    assert atomic, "no fixed seed commits two tables atomically"
    kinds = {step.kind for seed in atomic for step in generate(seed, LENGTH, False).steps}
    assert {"crash", "discard", "alter"} <= kinds, kinds


def test_compaction_of_a_file_whose_rows_are_all_deleted_keeps_a_nested_uuid_column(tmp_path: Path) -> None:
    """Found by seed 1251734539: a file read back with no row left (all deleted) gave columns without chunks,
    and a uuid inside a struct made combining them fail, so ``maintain --all`` crashed."""
    import pyarrow as pa
    from pyiceberg.schema import Schema
    from pyiceberg.types import ListType, LongType, NestedField, StructType, UUIDType

    from icesink.catalog import database
    from icesink.catalog.config import CatalogConfig
    from tests.histories.grammar import TableShape
    from tests.histories.world import World

    schema = Schema(
        NestedField(1, "k", LongType(), required=True),
        NestedField(2, "s", StructType(NestedField(3, "u", ListType(4, UUIDType(), element_required=False)))),
    )
    config = CatalogConfig(name="c", uri=f"sqlite:///{tmp_path / 'c.db'}", warehouse=tmp_path.as_uri())
    database.upgrade(config)
    world = World(config, TableShape(schema, ("k",), None))
    arrow = pa.schema([("k", pa.int64()), ("s", pa.struct([("u", pa.list_(pa.string()))]))])
    uuid_text = "5BC8A3F0-1B2C-4D5E-8F90-0123456789AB"
    for rows, ops in (
        ([{"k": 1, "s": {"u": [uuid_text, None]}}, {"k": 2, "s": None}], ["I", "I"]),
        ([{"k": 1, "s": None}, {"k": 2, "s": None}], ["D", "D"]),  # every row of the first file
        ([{"k": 3, "s": {"u": []}}], ["I"]),
    ):
        table = pa.Table.from_pylist(rows, schema=arrow)
        world.write(table, ops)
        world.commit()
        world.apply_to_model(table, ops)
    world.maintain("all")
    import icesink

    world.check_reader("icesink.read", icesink.read(world.table()).to_pylist())
    assert world.table().current_snapshot().summary.operation.value == "replace"
    database.dispose_engines()


def test_compaction_checks_maps_of_maps_of_uuids(tmp_path: Path) -> None:
    """Found by seed 760936240 (shrunk to these three steps): the rewrite check flattened a map whose values
    are maps of uuids, which Arrow cannot build, so ``maintain --all`` failed on such a table. The history is
    the generator's; if the generator changes, the table still holds ``map<string, map<date, uuid>>``."""
    from tests.histories.runner import History, Step

    shape = generate(760936240, 30).shape
    assert "map<string, map<date, uuid>>" in str(shape.schema)
    steps = (Step("write", 1015216334, 17), Step("write", 531958833, 16), Step("maintain", 2))  # 2: "all"
    outcome = run(History(760936240, shape, steps), tmp_path, readers=False)
    assert outcome.failure is None, outcome.failure


def test_shrinking_leaves_the_steps_and_the_changes_that_fail() -> None:
    """The shrinker alone, on a made-up failure: a maintain after a write of at least 3 changes."""
    from tests.histories.runner import History, Step

    def made_up_failure(history: History) -> bool:
        writes = [n for n, s in enumerate(history.steps) if s.kind == "write" and s.size >= 3]
        return any(s.kind == "maintain" and writes and n > writes[0] for n, s in enumerate(history.steps))

    history = generate(5, 30)
    steps = (Step("alter", 1), Step("write", 2, 20), Step("crash", 3), Step("replay", 4), Step("maintain", 5))
    long_history = History(history.seed, history.shape, steps * 4)
    assert made_up_failure(long_history)
    short = shrink(long_history, made_up_failure)
    assert [(s.kind, s.size) for s in short.steps] == [("write", 5), ("maintain", 0)]
    assert "1. write a checkpoint of 5 change(s)" in short.describe()


def test_a_decimal_widened_past_28_digits_keeps_every_digit(tmp_path: Path) -> None:
    """Seed 679317014, shrunk: a decimal(22, 4) widened by another tool to decimal(30, 4), then written with 30
    digits. (What failed there was the tester: Python's default decimal context keeps 28 digits.)"""
    import decimal

    import pyarrow as pa
    from pyiceberg.schema import Schema
    from pyiceberg.types import DecimalType, LongType, NestedField

    import icesink
    from icesink.catalog import database
    from icesink.catalog.config import CatalogConfig
    from tests.histories.grammar import TableShape
    from tests.histories.world import World

    config = CatalogConfig(name="c", uri=f"sqlite:///{tmp_path / 'c.db'}", warehouse=tmp_path.as_uri())
    database.upgrade(config)
    schema = Schema(NestedField(1, "k", LongType(), required=True), NestedField(2, "d", DecimalType(22, 4)))
    world = World(config, TableShape(schema, (), None))
    before = pa.Table.from_pylist([{"k": 1, "d": decimal.Decimal("-" + "9" * 18 + ".9999")}], schema=_arrow(22))
    world.write_and_commit(before, ["I"])
    world.apply_to_model(before, ["I"])
    with world.table().update_schema() as update:
        update.update_column(("d",), field_type=DecimalType(30, 4))
    wide = decimal.Context(prec=80).create_decimal("9" * 26 + ".9999")
    after = pa.Table.from_pylist([{"k": 2, "d": wide}], schema=_arrow(30))
    world.write_and_commit(after, ["I"])
    world.apply_to_model(after, ["I"])
    world.check_reader("icesink.read", icesink.read(world.table()).to_pylist())
    assert {str(r["d"]) for r in icesink.read(world.table()).to_pylist()} == {"-999999999999999999.9999", str(wide)}
    database.dispose_engines()


def _arrow(precision: int) -> Any:
    import pyarrow as pa

    return pa.schema([("k", pa.int64()), ("d", pa.decimal128(precision, 4))])


@pytest.mark.interop
def test_a_replay_after_another_tool_dropped_a_written_column_is_refused_as_documented(
    spark: Any, tmp_path: Path
) -> None:
    """Found by seeds 1370057369 and 1649503009 (a bug of the tester): Spark re-delivers a batch whose column
    another tool dropped since; icesink refuses the restart (nothing written), and the history goes on."""
    from tests.histories.runner import History, Step

    generated = generate(1370057369, 30, True)
    steps = (Step("write", 814254213, 1), Step("alter", 405675095), Step("replay", 0), Step("write", 7, 3))
    outcome = run(History(1370057369, generated.shape, steps, generated.writer), tmp_path, readers=False)
    assert outcome.failure is None, outcome.failure
    assert outcome.steps["replay"] == 1
