"""Write-audit-publish: a stream into a branch whose snapshots main follows only once they pass their checks.

Driven without Spark (the real task writer, ledger, committer and publisher; :mod:`tests.helpers.branch_streams`),
on SQLite and PostgreSQL: main follows every audited checkpoint, never past it; a failed audit stops publishing
until a later snapshot passes on everything it adds over main (so a fix is audited with what it fixes); a stream of
several tables publishes them in one transaction at one checkpoint; another tool moving main stops publishing and
loses nothing; and the operator's commands (``branches``, ``audit``, ``publish``).
"""

from __future__ import annotations

import datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from click.testing import CliRunner

from icesink import checks
from icesink.audit.inputs import AuditInput
from icesink.catalog.audit_record import AuditRecord
from icesink.catalog.config import CatalogConfig
from icesink.catalog.loader import open_catalog
from icesink.cli.app import main as cli
from icesink.errors import AuditFailedError, ConfigError
from tests.helpers.branch_streams import BRANCH, BranchStream, another_tools_table, ids_at, main_snapshot
from tests.helpers.support import create_orders_table, orders

TABLE = "shop.orders ü"
SAFE = [checks.not_null("id"), checks.in_range("amount", min=0), checks.rows_written()]


def negative(first: int, count: int, bad: int = 1) -> pa.Table:
    """``count`` orders from ``first`` whose first ``bad`` have a negative amount."""
    rows = orders(first, count)
    amounts = [-5.0] * bad + rows.column("amount").to_pylist()[bad:]
    return rows.set_column(2, "amount", pa.array(amounts, pa.float64()))


def cli_run(config: CatalogConfig, *args: str) -> Any:
    where = ["--catalog", config.name, "--uri", config.uri, "--warehouse", config.warehouse]
    return CliRunner().invoke(cli, [*where, *args], catch_exceptions=False)


# --- the checks -----------------------------------------------------------------------------------------------


@pytest.fixture
def nested_table(sqlite_catalog: CatalogConfig) -> Any:
    from pyiceberg.schema import Schema
    from pyiceberg.types import DoubleType, LongType, NestedField, StringType, StructType

    catalog = open_catalog(sqlite_catalog)
    catalog.create_namespace_if_not_exists("shop")
    schema = Schema(
        NestedField(1, "id", LongType(), required=True),
        NestedField(2, "amount", DoubleType(), required=False),
        NestedField(
            3,
            "customer",
            StructType(NestedField(4, "name", StringType(), required=False), NestedField(5, "x.y", LongType())),
            required=False,
        ),
        NestedField(6, "status", StringType(), required=False),
        identifier_field_ids=[1],
    )
    return catalog.create_table("shop.nested", schema=schema)


def audit_of(table: Any, rows: list[dict[str, Any]]) -> AuditInput:
    arrow = pa.Table.from_pylist(rows, schema=table.schema().as_arrow())
    return AuditInput(added=arrow, table=table, snapshot_id=1, checkpoint_id=7, identifier="shop.nested")


def test_a_check_of_a_field_inside_a_list_or_map_says_so_rather_than_no_column() -> None:
    from icesink.audit.added_rows import missing_column

    rows = pa.table(
        {
            "id": [1],
            "order": [{"items": [{"sku": "a"}], "tags": [("k", "v")]}],
        },
        schema=pa.schema(
            [
                ("id", pa.int64()),
                (
                    "order",
                    pa.struct(
                        [
                            ("items", pa.list_(pa.struct([("sku", pa.string())]))),
                            ("tags", pa.map_(pa.string(), pa.string())),
                        ]
                    ),
                ),
            ]
        ),
    )
    said = missing_column(rows, "order.items.sku", "not_null(order.items.sku)")
    assert "'order.items.sku' is inside 'order.items', a list" in said and "no column" not in said
    assert "'order.tags', a map" in missing_column(rows, "order.tags.k", "not_null")
    assert "no column 'order.nope'" in missing_column(rows, "order.nope", "not_null")


def test_built_in_checks_find_what_they_say_at_every_depth_and_name_the_rows(nested_table: Any) -> None:
    rows = [
        {"id": 1, "amount": 3.0, "customer": {"name": "a", "x.y": 1}, "status": "open"},
        {"id": 2, "amount": -1.0, "customer": None, "status": "paid"},  # a null parent: its fields are null
        {"id": 3, "amount": None, "customer": {"name": None, "x.y": 2}, "status": "lost"},
        {"id": 3, "amount": 9.0, "customer": {"name": "c", "x.y": None}, "status": None},
    ]
    audit = audit_of(nested_table, rows)
    (problem,) = checks.not_null("customer.name")(audit)
    assert problem.startswith("2 of 4 added row(s) have a null customer.name") and "id: 2" in problem
    assert "id: 3" in problem  # the key tells the rows apart
    (problem,) = checks.not_null("customer.x.y")(audit)  # a field whose own name holds a dot
    assert problem.startswith("2 of 4 added row(s) have a null customer.x.y")
    assert checks.not_null("id", "status")(audit) == [checks.not_null("status")(audit)[0]]
    (problem,) = checks.unique("id")(audit)
    assert "1 value(s) of (id) occur more than once" in problem and "(id: 3) 2 times" in problem
    assert checks.unique("id", "status")(audit) == []
    (problem,) = checks.in_range("amount", min=0)(audit)
    assert problem.startswith("1 of 4 added row(s) have amount outside [0, +inf]")  # a null is no value to judge
    assert checks.in_range("amount", min=-1, max=9)(audit) == []
    (problem,) = checks.in_range("id", min=1.5)(audit)  # a float bound against integers stays 1.5
    assert problem.startswith("1 of 4 added row(s) have id outside [1.5, +inf]")
    nan = audit_of(nested_table, [{"id": 9, "amount": float("nan"), "customer": None, "status": "open"}])
    assert checks.in_range("amount", min=0, max=10)(nan)[0].startswith("1 of 1 added row(s) have amount outside")
    (problem,) = checks.matches("status in ('open', 'paid')")(audit)
    assert problem.startswith("2 of 4 added row(s) do not satisfy")  # 'lost', and a null status
    (problem,) = checks.matches("amount >= 0")(audit)
    assert problem.startswith("2 of 4")  # -1.0, and null: not known to satisfy it
    assert checks.matches("id > 0")(audit) == []
    # Mistakes in a check fail the audit with what to do, never let the rows through.
    assert "no column 'amout'" in checks.not_null("amout")(audit)[0]
    assert "cannot be parsed" in checks.matches("amount >>= 0")(audit)[0]
    assert "does not fit the table" in checks.matches("amout >= 0")(audit)[0]
    assert "do not compare" in checks.in_range("status", min=1)(audit)[0]
    (problem,) = checks.unique("customer")(audit)  # a struct cannot be grouped: said, not raised
    assert "cannot be compared for equality" in problem or "occur more than once" in problem
    with pytest.raises(TypeError, match="needs min=, max= or both"):
        checks.in_range("amount")
    with pytest.raises(TypeError, match="one or more column names"):
        checks.not_null()


def test_rows_written_and_schema_checks() -> None:
    rows = pa.table({"id": [1, 2]})
    audit = AuditInput(added=rows, table=None, snapshot_id=2, checkpoint_id=4, written_rows=3, committed_rows=2)  # type: ignore[arg-type]
    assert checks.rows_written()(audit) == [
        "the stream's tasks wrote 3 row(s) for checkpoint(s) up to 4, but the snapshots added 2"
    ]
    same = AuditInput(added=rows, table=None, snapshot_id=2, checkpoint_id=4, written_rows=2, committed_rows=2)  # type: ignore[arg-type]
    assert checks.rows_written()(same) == []


def test_a_check_that_raises_or_returns_nonsense_fails_the_audit(nested_table: Any) -> None:
    from icesink.audit.running import run_checks

    def broken(audit: AuditInput) -> list[str]:
        raise KeyError("amount")

    outcome = run_checks([broken, lambda a: None, lambda a: [], checks.not_null("id")], audit_of(nested_table, []))  # type: ignore[list-item,return-value]
    assert not outcome.passed
    assert outcome.problems["test_a_check_that_raises_or_returns_nonsense_fails_the_audit.<locals>.broken"] == [
        "the check raised KeyError: 'amount'"
    ]
    assert any("returned None" in p[0] for p in outcome.problems.values())
    assert len(outcome.checks) == 4 and outcome.checks[-1] == {"check": "not_null", "columns": ["id"]}

    class Odd:  # a check object describing itself wrongly, and one that exits
        def describe(self) -> str:
            return "odd"

        def __call__(self, audit: AuditInput) -> list[str]:
            raise SystemExit(3)

    outcome = run_checks([Odd()], audit_of(nested_table, []))
    assert not outcome.passed and outcome.problems == {"Odd": ["the check raised SystemExit: 3"]}
    assert outcome.checks == [{"check": "function", "name": "Odd"}]  # not found again by a name: not rebuilt


# --- publishing -------------------------------------------------------------------------------------------------


def test_main_follows_each_audited_checkpoint_and_a_failure_holds_it_until_a_fix_passes(
    catalog_config: CatalogConfig,
) -> None:
    config = catalog_config
    table = create_orders_table(config, TABLE)
    table.append(orders(1000, 2))  # main's rows before the stream: the branch starts from them
    start = main_snapshot(config, TABLE)
    stream = BranchStream(config, [TABLE], SAFE)

    report = stream.batch({TABLE: orders(0, 3)})
    assert report.published == {TABLE: main_snapshot(config, TABLE)} and not report.failed
    assert ids_at(config, TABLE) == [0, 1, 2, 1000, 1001] == ids_at(config, TABLE, BRANCH)
    published_first = main_snapshot(config, TABLE)
    assert published_first != start

    report = stream.batch({TABLE: negative(3, 2)})  # a bad micro-batch
    (failed,) = report.failed
    assert failed.checkpoint_id == 1 and not report.published
    assert list(failed.problems) == ["in_range(amount, [0, +inf])"]
    assert "1 of 2 added row(s) have amount outside [0, +inf]" in failed.problems["in_range(amount, [0, +inf])"][0]
    assert main_snapshot(config, TABLE) == published_first  # main did not move
    stream.batch({TABLE: orders(5, 2)})  # good rows, but audited with the bad ones since main: held
    assert main_snapshot(config, TABLE) == published_first
    assert ids_at(config, TABLE, BRANCH) == [0, 1, 2, 3, 4, 5, 6, 1000, 1001]

    # Another tool fixes the rows on the branch; the next checkpoint is audited with the fix, and main catches up.
    open_catalog(config).load_table(TABLE).delete("amount < 0", branch=BRANCH)
    report = stream.batch({TABLE: orders(7, 1)})
    assert not report.failed and report.published == {TABLE: main_snapshot(config, TABLE)}
    assert ids_at(config, TABLE) == [0, 1, 2, 4, 5, 6, 7, 1000, 1001] == ids_at(config, TABLE, BRANCH)
    assert report.published[TABLE] == open_catalog(config).load_table(TABLE).metadata.refs[BRANCH].snapshot_id

    # The change stream along the branch shows everything, unpublished snapshots too.
    import icesink

    along = icesink.changes(TABLE, published_first, branch=BRANCH, catalog=config).to_pylist()
    assert sorted((c["id"], c["_change_type"]) for c in along) == sorted(
        [*[(i, "insert") for i in (3, 4, 5, 6, 7)], (3, "delete")]
    )

    # The record says it: every snapshot's verdict, what it was compared with, which one main moved to.
    entries = AuditRecord(config).of_branch(TABLE, BRANCH)
    verdicts = sorted(
        (-1 if e.checkpoint_id is None else e.checkpoint_id, e.passed, e.published_at is not None)
        for e in entries.values()
    )
    # The fix (another tool's snapshot, no checkpoint) passed on everything since main; main moved past it.
    assert verdicts == [(-1, True, False), (0, True, True), (1, False, False), (2, False, False), (3, True, True)]
    assert {e.published_by for e in entries.values() if e.published_at} == {"committer"}
    fix = next(e for e in entries.values() if e.job_id is None)
    assert fix.base_snapshot_id == published_first  # audited on everything since main, like what came after


def test_a_restarted_stream_publishes_what_an_earlier_run_committed_but_did_not(sqlite_catalog: CatalogConfig) -> None:
    config = sqlite_catalog
    create_orders_table(config, TABLE)
    stream = BranchStream(config, [TABLE], SAFE, publish="manual")  # commits to the branch, never publishes
    stream.batch({TABLE: orders(0, 2)})
    stream.batch({TABLE: orders(2, 2)})
    assert main_snapshot(config, TABLE) is None and ids_at(config, TABLE, BRANCH) == [0, 1, 2, 3]
    entries = AuditRecord(config).of_branch(TABLE, BRANCH)
    assert sorted(e.passed for e in entries.values()) == [True, True]  # audited all the same

    restarted = BranchStream(config, [TABLE], SAFE, checkpoint=2)
    restarted.commit()  # nothing pending: publishing alone
    assert ids_at(config, TABLE) == [0, 1, 2, 3]  # main created at the branch's audited head


def test_on_audit_failure_stop_raises_naming_table_snapshot_checkpoint_and_rows(catalog_config: CatalogConfig) -> None:
    config = catalog_config
    create_orders_table(config, TABLE)
    stream = BranchStream(config, [TABLE], SAFE, on_audit_failure="stop")
    stream.batch({TABLE: orders(0, 2)})
    with pytest.raises(AuditFailedError) as raised:
        stream.batch({TABLE: negative(10, 3, bad=2)})
    error = raised.value
    branch_head = open_catalog(config).load_table(TABLE).metadata.refs[BRANCH].snapshot_id
    assert (error.table, error.checkpoint_id, error.job_id, error.snapshot_id) == (TABLE, 1, "job", branch_head)
    text = str(error)
    assert f"table {TABLE} (branch {BRANCH}): snapshot {branch_head} (checkpoint 1 of job job) failed" in text
    assert "2 of 3 added row(s) have amount outside [0, +inf], e.g. {id: 10, amount: -5.0}" in text
    assert "`icesink branches 'shop.orders ü'`" in text and f"--branch '{BRANCH}'" in text
    assert ids_at(config, TABLE) == [0, 1]  # the checkpoint is on the branch, not on main
    # A restart writes on; its snapshot is audited with the bad rows since main, and stops again.
    with pytest.raises(AuditFailedError):
        BranchStream(config, [TABLE], SAFE, on_audit_failure="stop", checkpoint=2).batch({TABLE: orders(20, 1)})
    assert ids_at(config, TABLE) == [0, 1]


def test_publish_policies(sqlite_catalog: CatalogConfig) -> None:
    config = sqlite_catalog
    tables = ["shop.every", "shop.interval", "shop.done"]
    for name in tables:
        create_orders_table(config, name, partition_by=("day(ts)",) if name == "shop.done" else ())
    interval = BranchStream(config, ["shop.interval"], SAFE, publish="1 hour")
    interval.batch({"shop.interval": orders(0, 1)})  # the first publishes at once
    interval.batch({"shop.interval": orders(1, 1)})  # the next waits for the hour
    assert ids_at(config, "shop.interval") == [0] and ids_at(config, "shop.interval", BRANCH) == [0, 1]
    moved = interval.publisher._last_publish
    moved.update({name: at - 3600 for name, at in moved.items()})  # an hour later, by the publisher's clock
    interval.commit()
    assert ids_at(config, "shop.interval") == [0, 1]

    with pytest.raises(ConfigError, match="publish takes 'checkpoint', 'manual', 'partition-done' or a duration"):
        BranchStream(config, ["shop.every"], SAFE, publish="sometimes")
    with pytest.raises(ConfigError, match="on_audit_failure takes 'continue', 'stop', not 'halt'"):
        BranchStream(config, ["shop.every"], SAFE, on_audit_failure="halt")


def test_a_quiet_stream_publishes_what_its_interval_held_back_once_it_is_due(sqlite_catalog: CatalogConfig) -> None:
    import threading
    import time

    from icesink.committer.publish_timer import PublishTimer

    config = sqlite_catalog
    create_orders_table(config, TABLE)
    stream = BranchStream(config, [TABLE], SAFE, publish="2 seconds")
    stream.batch({TABLE: orders(0, 1)})  # the first publishes at once
    stream.batch({TABLE: orders(1, 1)})  # held back for the interval; then the source goes quiet
    due = stream.publisher.seconds_until_due()
    assert due is not None and 0 < due <= 2
    timer = PublishTimer(stream.publisher, threading.Lock())
    timer.committed(stream.job)
    assert ids_at(config, TABLE) == [0]  # not before it is due
    deadline = time.monotonic() + due + 10
    while ids_at(config, TABLE) != [0, 1] and time.monotonic() < deadline:
        time.sleep(0.2)
    assert ids_at(config, TABLE) == [0, 1]
    assert stream.publisher.seconds_until_due() is None  # nothing held back: the thread ends
    while timer._thread is not None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert timer._thread is None
    stream.batch({TABLE: orders(2, 1)})  # the interval counts from the timer's publish too
    assert ids_at(config, TABLE) == [0, 1] and stream.publisher.seconds_until_due() is not None


def test_the_committer_daemon_publishes_without_a_commit_of_its_own(sqlite_catalog: CatalogConfig) -> None:
    """A predecessor that died between its commit and its publish, an interval ending on a quiet stream, and
    another tool's fix of a branch: each is published by the daemon's next pass, with nothing left to commit."""
    import time

    from icesink.audit.publish_policy import PublishSettings
    from icesink.committer.audited_branch import AuditedBranch
    from icesink.committer.daemon import CommitterDaemon
    from icesink.committer.declared_publishing import declare_publishing
    from icesink.table_ref import TableRef

    config = sqlite_catalog
    tables = ["db.a", "db.b"]
    for name in tables:
        create_orders_table(config, name)
    branches = [AuditedBranch(TableRef(t, BRANCH), tuple(SAFE)) for t in tables]
    stream = BranchStream(config, tables, SAFE)  # stages only: the daemon commits
    stream.batch({tables[0]: orders(0, 1), tables[1]: orders(0, 1)}, commit=False)
    CommitterDaemon(config, lease_ttl=4).run(once=True)  # committed, but the stream declared no publishing yet
    assert [ids_at(config, t) for t in tables] == [[], []]
    declare_publishing(config, "job", branches, PublishSettings.of("2 seconds", True, "continue", "db"), True)
    daemon = CommitterDaemon(config, lease_ttl=4, publish_check_seconds=0)  # a restarted daemon
    daemon.run(once=True)  # nothing to commit
    assert [ids_at(config, t) for t in tables] == [[0], [0]]

    stream.batch({tables[0]: orders(1, 1), tables[1]: orders(1, 1)}, commit=False)
    daemon.run(once=True)  # committed, held back by the interval
    assert [ids_at(config, t) for t in tables] == [[0], [0]]
    assert [ids_at(config, t, BRANCH) for t in tables] == [[0, 1], [0, 1]]
    time.sleep(2.1)
    daemon.run(once=True)  # nothing to commit; the interval ended
    assert [ids_at(config, t) for t in tables] == [[0, 1], [0, 1]]

    stream.batch({tables[0]: negative(2, 1), tables[1]: orders(2, 1)}, commit=False)
    time.sleep(2.1)
    daemon.run(once=True)
    assert [ids_at(config, t) for t in tables] == [[0, 1], [0, 1]] and daemon.audits()  # a failed audit holds both
    open_catalog(config).load_table(tables[0]).delete("amount < 0", branch=BRANCH)  # another tool's fix
    daemon.run(once=True)
    assert [ids_at(config, t) for t in tables] == [[0, 1], [0, 1, 2]] and daemon.audits() == []


def test_partition_done_publishes_only_with_a_snapshot_that_made_a_partition_done(
    sqlite_catalog: CatalogConfig,
) -> None:
    config = sqlite_catalog
    create_orders_table(config, TABLE, partition_by=("hour(ts)",))
    stream = BranchStream(config, [TABLE], SAFE, publish="partition-done")
    stream.batch({TABLE: orders(0, 1)})  # its commit made no partition done: main stays
    stream.batch({TABLE: orders(1, 1)})
    assert ids_at(config, TABLE) == [] and ids_at(config, TABLE, BRANCH) == [0, 1]
    # A snapshot whose summary lists partitions done (as a watermark's commit does; the Spark test has the real one).
    table = open_catalog(config).load_table(TABLE)
    done = {"icesink.partitions-done": '["ts_hour=2026-01-01-02"]'}
    table.append(orders(2, 1), snapshot_properties=done, branch=BRANCH)
    stream.batch({TABLE: orders(3, 1)})
    # Main goes as far as the snapshot that made the partition done, not past it: checkpoint 2 waits for the next.
    assert ids_at(config, TABLE) == [0, 1, 2] and ids_at(config, TABLE, BRANCH) == [0, 1, 2, 3]


def test_several_tables_publish_in_one_transaction_and_one_failure_holds_them_all(
    catalog_config: CatalogConfig,
) -> None:
    config = catalog_config
    tables = ["db.customers", "db.orders ü", "db.lines %/x"]
    for name in tables:
        create_orders_table(config, name)
    stream = BranchStream(config, tables, SAFE)
    stream.batch({tables[0]: orders(0, 1), tables[1]: orders(0, 2), tables[2]: orders(0, 3)})
    first = {t: main_snapshot(config, t) for t in tables}
    assert all(first.values()) and [len(ids_at(config, t)) for t in tables] == [1, 2, 3]
    commit_ids = {
        open_catalog(config).load_table(t).metadata.snapshot_by_id(s).summary["icesink.commit-id"]  # type: ignore[union-attr]
        for t, s in first.items()
    }
    assert len(commit_ids) == 1  # one checkpoint across the tables

    stream.batch({tables[0]: orders(10, 1), tables[1]: negative(10, 1), tables[2]: orders(10, 1)})
    assert {t: main_snapshot(config, t) for t in tables} == first  # one table failed: none moves
    stream.batch({tables[0]: orders(20, 1), tables[2]: orders(20, 1)})  # the failing table untouched
    assert {t: main_snapshot(config, t) for t in tables} == first
    open_catalog(config).load_table(tables[1]).delete("amount < 0", branch=BRANCH)
    report = stream.batch({tables[1]: orders(30, 1)})
    assert set(report.published) == set(tables)
    assert ids_at(config, tables[0]) == [0, 10, 20] and ids_at(config, tables[1]) == [0, 1, 30]
    assert ids_at(config, tables[2]) == [0, 1, 2, 10, 20]


def test_a_fix_on_a_table_later_checkpoints_do_not_write_releases_the_group(sqlite_catalog: CatalogConfig) -> None:
    config = sqlite_catalog
    tables = ["db.a", "db.b", "db.c"]
    for name in tables:
        create_orders_table(config, name)
    stream = BranchStream(config, tables, SAFE)
    stream.batch({tables[0]: orders(0, 1), tables[1]: orders(0, 1), tables[2]: orders(0, 1)})
    stream.batch({tables[0]: negative(1, 1), tables[1]: orders(1, 1), tables[2]: orders(1, 1)})
    assert ids_at(config, tables[1]) == [0]
    open_catalog(config).load_table(tables[0]).delete("amount < 0", branch=BRANCH)  # fixed; a gets no more rows
    report = stream.batch({tables[1]: orders(2, 1), tables[2]: orders(2, 1)})
    assert set(report.published) == set(tables)
    assert [ids_at(config, t) for t in tables] == [[0], [0, 1, 2], [0, 1, 2]]


def test_a_restarted_atomic_stream_moves_the_tables_it_met_in_an_earlier_run_too(sqlite_catalog: CatalogConfig) -> None:
    config = sqlite_catalog
    tables = ["db.a", "db.b"]
    for name in tables:
        create_orders_table(config, name)
    BranchStream(config, tables, SAFE, publish="manual").batch({tables[0]: orders(0, 1), tables[1]: orders(0, 1)})
    # A new run meets only table b (a Debezium stream meets its tables as their rows come): a moves with it.
    restarted = BranchStream(config, [tables[1]], SAFE, checkpoint=1)
    restarted.batch({tables[1]: orders(1, 1)})
    assert ids_at(config, tables[0]) == [0] and ids_at(config, tables[1]) == [0, 1]


def test_a_restarted_atomic_stream_with_checks_per_table_moves_every_table_or_none(
    sqlite_catalog: CatalogConfig,
) -> None:
    """Its tables met in an earlier run only are audited by the checks recorded for them; one never audited holds
    the group until the stream meets it: a checkpoint reaches every table's main or none."""
    from icesink.audit.publish_policy import PublishSettings
    from icesink.catalog.ledger import Ledger
    from icesink.committer.audited_branch import AuditedBranch
    from icesink.committer.commit import TableCommitter
    from icesink.committer.publisher import Publisher
    from icesink.table_ref import TableRef

    config = sqlite_catalog
    weak = (checks.not_null("id"),)

    def restarted(job: str, met: dict[str, Any]) -> Publisher:
        catalog, ledger = open_catalog(config, pending_tables=True), Ledger(config)
        branches = [AuditedBranch(TableRef(name, BRANCH), tuple(checks_of)) for name, checks_of in met.items()]
        settings = PublishSettings.of(None, True, "continue", ",".join(met))
        return Publisher(catalog, config, ledger, branches, settings, True, TableCommitter.of(config).forget)

    a, b, c, p, q, r = (f"db.{name} ü" for name in "abcpqr")
    for name in (a, b, c, p, q, r):
        create_orders_table(config, name)
    # Job X: checkpoint 0 audited (by SAFE, recorded) but not published; checkpoint 1 committed, never audited.
    x = BranchStream(config, [a, b, c], SAFE, job="X", publish="manual")
    x.batch({a: orders(0, 1), b: orders(0, 1), c: orders(0, 1)})
    x.batch({a: orders(1, 1), b: orders(1, 1), c: orders(1, 1)}, commit=False)
    x.committer.commit_atomic("X")
    report = restarted("X", {a: SAFE, c: weak}).after_commit("X")  # b was met in the earlier run only
    assert [ids_at(config, t) for t in (a, b, c)] == [[0, 1]] * 3 and set(report.published) == {a, b, c}
    assert [e.identifier for e in report.audited if e.checkpoint_id == 1] == sorted([a, b, c])

    # Job Y: committed, its driver died before any audit: no checks of q are recorded anywhere.
    y = BranchStream(config, [p, q, r], SAFE, job="Y")
    y.batch({p: orders(0, 1), q: orders(0, 1), r: orders(0, 1)}, commit=False)
    y.committer.commit_atomic("Y")
    publisher = restarted("Y", {p: SAFE, r: weak})
    report = publisher.after_commit("Y")
    assert [ids_at(config, t) for t in (p, q, r)] == [[], [], []] and not report.published
    assert any(held.startswith(f"table {q}: no audit of branch") and "meets it again" in held for held in report.held)
    publisher.add(AuditedBranch(TableRef(q, BRANCH), tuple(SAFE)))  # the stream meets q
    assert set(publisher.after_commit("Y").published) == {p, q, r}
    assert [ids_at(config, t) for t in (p, q, r)] == [[0]] * 3

    # Job Z: u checked weakly, v strictly. Its restart meets u alone: v is still audited by v's own checks.
    u, v = "db.u ü", "db.v ü"
    for name in (u, v):
        create_orders_table(config, name)
    z = BranchStream(config, [u, v], SAFE, job="Z")
    z.batch({u: orders(0, 1), v: orders(0, 1)}, commit=False)
    z.committer.commit_atomic("Z")
    assert set(restarted("Z", {u: weak, v: SAFE}).after_commit("Z").published) == {u, v}
    z.batch({u: orders(1, 1), v: negative(1, 1)}, commit=False)  # committed; its driver died before the audit
    z.committer.commit_atomic("Z")
    report = restarted("Z", {u: weak}).after_commit("Z")
    assert [(e.identifier, e.passed) for e in report.audited] == [(u, True), (v, False)]
    assert [ids_at(config, t) for t in (u, v)] == [[0], [0]] and not report.published


def test_a_branch_nobody_audits_does_not_publish_what_failed_on_another(sqlite_catalog: CatalogConfig) -> None:
    config = sqlite_catalog
    create_orders_table(config, TABLE)
    stream = BranchStream(config, [TABLE], SAFE)
    stream.batch({TABLE: orders(0, 1)})
    stream.batch({TABLE: negative(1, 1)})
    table = open_catalog(config).load_table(TABLE)
    table.manage_snapshots().create_branch(table.metadata.refs[BRANCH].snapshot_id, "copy").commit()
    result = cli_run(config, "publish", TABLE, "--branch", "copy")
    assert result.exit_code == 2 and f"failed its audit on branch {BRANCH}" in result.output
    assert ids_at(config, TABLE) == [0]
    assert cli_run(config, "publish", TABLE, "--branch", "copy", "--force").exit_code == 0
    assert ids_at(config, TABLE) == [0, 1]


def test_a_table_dropped_and_created_again_under_its_name_keeps_none_of_the_old_ones_audits(
    own_catalog: CatalogConfig,
) -> None:
    """Audits say which table they were of: a table created again under a dropped one's name has a branch no
    stream audited, which publishes as such, has no checks to run again, and gc forgets the old table's audits."""
    import datetime

    from icesink.committer.gc import collect_garbage

    config = own_catalog  # a database of its own: the schema goes back and forth
    create_orders_table(config, TABLE)
    stream = BranchStream(config, [TABLE], SAFE)
    stream.batch({TABLE: orders(0, 1)})
    stream.batch({TABLE: negative(1, 1)})  # failed: the old table's branch held
    catalog = open_catalog(config)
    old_uuid = str(catalog.load_table(TABLE).metadata.table_uuid)
    # Audits recorded before they said which table (a database taken back to 0015 and migrated again) take the uuid
    # of their checkpoint's ledger row.
    result = cli_run(config, "db", "downgrade", "0015")
    assert result.exit_code == 0, result.output
    assert cli_run(config, "db", "upgrade").exit_code == 0
    assert [e.table_uuid for e in AuditRecord(config).of_branch(TABLE, BRANCH).values()] == [old_uuid] * 2
    catalog.drop_table(TABLE)
    uuid = another_tools_table(config, TABLE)  # with a branch of the name nobody audited
    assert AuditRecord(config).of_branch(TABLE, BRANCH, uuid) == {}
    result = cli_run(config, "audit", TABLE, "--branch", BRANCH)  # no old checks run
    assert result.exit_code == 2 and "no audit of branch" in result.output, result.output
    assert "of an earlier table of the name" in result.output
    result = cli_run(config, "publish", TABLE, "--branch", BRANCH)  # never audited: published without --force
    assert result.exit_code == 0, result.output
    assert ids_at(config, TABLE) == [100, 101]
    report = collect_garbage(open_catalog(config), config, TABLE, datetime.timedelta(0))
    assert report.audit_rows_pruned == 2 and AuditRecord(config).of_branch(TABLE, BRANCH) == {}


def test_a_restarted_atomic_stream_does_not_audit_a_table_created_again_since_with_the_old_ones_checks(
    sqlite_catalog: CatalogConfig, caplog: pytest.LogCaptureFixture
) -> None:
    """A table of the group met in an earlier run only, dropped and created again since, is not the job's any
    more: neither audited with the old table's checks nor published with the group, and, like a dropped one,
    it holds no other table back."""
    from icesink.audit.publish_policy import PublishSettings
    from icesink.catalog.ledger import Ledger
    from icesink.committer.audited_branch import AuditedBranch
    from icesink.committer.commit import TableCommitter
    from icesink.committer.publisher import Publisher
    from icesink.table_ref import TableRef

    config = sqlite_catalog
    a, b = "db.a ü", "db.a ü b"
    for name in (a, b):
        create_orders_table(config, name)
    BranchStream(config, [a, b], SAFE, job="X", publish="manual").batch({a: orders(0, 1), b: orders(0, 1)})
    catalog = open_catalog(config)
    catalog.drop_table(b)
    another_tools_table(config, b)  # with a branch of the name nobody audited
    settings = PublishSettings.of(None, True, "continue", a)
    restarted = Publisher(
        open_catalog(config, pending_tables=True),
        config,
        Ledger(config),
        [AuditedBranch(TableRef(a, BRANCH), tuple(SAFE))],  # the restarted stream meets a alone
        settings,
        True,
        TableCommitter.of(config).forget,
    )
    for _ in range(2):  # the same on every pass
        report = restarted.after_commit("X")
        assert b not in report.published
        assert ids_at(config, a) == [0] and ids_at(config, b) == [100] and ids_at(config, b, BRANCH) == [100, 101]
    said = [r.getMessage() for r in caplog.records if "no longer published with the job's other" in r.getMessage()]
    assert len(said) == 1 and f"table={b} (branch " in said[0] and "dropped and created again" in said[0]  # once
    new_uuid = str(catalog.load_table(b).metadata.table_uuid)
    assert AuditRecord(config).of_branch(b, BRANCH, new_uuid) == {}


def test_a_table_that_failed_holds_the_group_at_the_last_checkpoint_every_table_passed(
    sqlite_catalog: CatalogConfig,
) -> None:
    config = sqlite_catalog
    tables = ["db.a", "db.b"]
    for name in tables:
        create_orders_table(config, name)
    stream = BranchStream(config, tables, SAFE, publish="manual")  # audits run, nothing published
    stream.batch({tables[0]: orders(0, 1), tables[1]: orders(0, 1)})  # checkpoint 0: both pass
    stream.batch({tables[0]: orders(1, 1)})  # checkpoint 1: only a, passes
    stream.batch({tables[0]: orders(2, 1), tables[1]: negative(2, 1)})  # checkpoint 2: b fails
    publishing = BranchStream(config, tables, SAFE, checkpoint=3)
    publishing.commit()
    # The cut is checkpoint 1: a at its checkpoint 1, b at its checkpoint 0 (untouched by 1); neither past.
    assert ids_at(config, tables[0]) == [0, 1] and ids_at(config, tables[1]) == [0]


def test_expiry_keeps_every_snapshot_main_has_not_reached(sqlite_catalog: CatalogConfig) -> None:
    config = sqlite_catalog
    table = create_orders_table(config, TABLE)
    with table.transaction() as change:  # expire everything but the head as soon as it is older than 1 ms
        change.set_properties({"history.expire.max-snapshot-age-ms": "1", "history.expire.min-snapshots-to-keep": "1"})
    stream = BranchStream(config, [TABLE], SAFE, expire_snapshots=True)
    stream.batch({TABLE: orders(0, 1)})
    published = main_snapshot(config, TABLE)
    stream.batch({TABLE: negative(1, 1)})  # held: main stays, the branch grows
    for number in range(2, 5):
        stream.batch({TABLE: orders(number, 1)})
    table = open_catalog(config).load_table(TABLE)
    line = [s.snapshot_id for s in table.metadata.snapshots]
    assert published in line and len(line) == 5  # main's head and the four snapshots after it, none expired
    table.delete("amount < 0", branch=BRANCH)
    stream.batch({TABLE: orders(5, 1)})
    assert ids_at(config, TABLE) == [0, 2, 3, 4, 5]
    stream.batch({TABLE: orders(6, 1)})  # the next commit expires, with main caught up
    table = open_catalog(config).load_table(TABLE)
    assert len(table.metadata.snapshots) <= 2  # main's head and the branch's: the line behind them expired


def test_main_moved_by_another_tool_stops_publishing_and_loses_nothing(sqlite_catalog: CatalogConfig) -> None:
    config = sqlite_catalog
    table = create_orders_table(config, TABLE)
    stream = BranchStream(config, [TABLE], SAFE)
    stream.batch({TABLE: orders(0, 1)})
    table = open_catalog(config).load_table(TABLE)
    table.append(orders(500, 1))  # another tool commits to main
    report = stream.batch({TABLE: orders(1, 1)})
    assert not report.published and "is not an ancestor of the head" in report.held[0]
    assert "nothing is lost" in report.held[0].lower()
    assert ids_at(config, TABLE) == [0, 500] and ids_at(config, TABLE, BRANCH) == [0, 1]
    result = cli_run(config, "branches", TABLE)
    assert result.exit_code == 0 and "DIVERGED" in result.output
    result = cli_run(config, "publish", TABLE, "--branch", BRANCH)
    assert result.exit_code == 2 and "is not an ancestor" in result.output


def test_operator_commands_show_audit_again_and_publish(sqlite_catalog: CatalogConfig) -> None:
    import json

    config = sqlite_catalog
    create_orders_table(config, TABLE)
    stream = BranchStream(config, [TABLE], SAFE)
    stream.batch({TABLE: orders(0, 2)})
    stream.batch({TABLE: negative(2, 2)})
    result = cli_run(config, "branches", TABLE, "--json")
    assert result.exit_code == 0, result.output
    (branch,) = json.loads(result.output)["branches"]
    assert branch["branch"] == BRANCH and branch["behind"] == 1 and not branch["diverged"]
    (unpublished,) = branch["unpublished"]
    assert unpublished["audit"] == "failed" and unpublished["checkpoint_id"] == 1
    assert "amount outside" in unpublished["problems"]["in_range(amount, [0, +inf])"][0]
    text = cli_run(config, "branches", TABLE).output
    assert "main is 1 snapshot(s) behind" in text and "failed" in text
    listed = json.loads(cli_run(config, "checkpoints", "list", TABLE, "--json").output)["checkpoints"]
    verdicts = sorted((c["checkpoint_id"], c["audit"]["passed"], bool(c["audit"]["published_at"])) for c in listed)
    assert verdicts == [(0, True, True), (1, False, False)]
    assert "FAILED" in cli_run(config, "checkpoints", "list", TABLE).output

    # Publishing refuses what failed, --snapshot must be on the branch after main, --force publishes anyway.
    result = cli_run(config, "publish", TABLE, "--branch", BRANCH)
    assert result.exit_code == 2 and "has passed its audit" in result.output
    result = cli_run(config, "publish", TABLE, "--branch", BRANCH, "--snapshot", "12345")
    assert result.exit_code == 2 and "is not on the branch after main" in result.output

    # Audit again after a fix: the recorded checks run on everything the head adds over main.
    open_catalog(config).load_table(TABLE).delete("amount < 0", branch=BRANCH)
    result = cli_run(config, "audit", TABLE, "--branch", BRANCH)
    assert result.exit_code == 0 and "passed on 1 row(s)" in result.output, result.output
    result = cli_run(config, "publish", TABLE, "--branch", BRANCH)
    assert result.exit_code == 0 and "main moved from" in result.output
    assert ids_at(config, TABLE) == [0, 1, 3]
    result = cli_run(config, "publish", TABLE, "--branch", BRANCH)
    assert result.exit_code == 2 and "nothing to publish" in result.output
    result = cli_run(config, "audit", TABLE, "--branch", BRANCH)
    assert result.exit_code == 0 and "nothing to audit" in result.output

    stream.batch({TABLE: negative(4, 1)})
    result = cli_run(config, "audit", TABLE, "--branch", BRANCH)
    assert result.exit_code == 1 and "FAILED" in result.output
    result = cli_run(config, "publish", TABLE, "--branch", BRANCH, "--force", "--json")
    assert result.exit_code == 0 and ids_at(config, TABLE) == [0, 1, 3, 4]
    moved = json.loads(result.output)
    assert moved["table"] == TABLE and moved["main_after"] == main_snapshot(config, TABLE) != moved["main_before"]
    published = [e for e in AuditRecord(config).of_branch(TABLE, BRANCH).values() if e.published_at]
    assert any(e.published_by and "@" in e.published_by for e in published)  # the operator, user@host


def test_the_committer_daemon_audits_and_publishes_what_a_stream_declared(catalog_config: CatalogConfig) -> None:
    import json
    import urllib.request

    from prometheus_client import generate_latest

    from icesink.audit.publish_policy import PublishSettings
    from icesink.committer.audited_branch import AuditedBranch
    from icesink.committer.daemon import CommitterDaemon
    from icesink.committer.declared_publishing import declare_publishing
    from icesink.committer.observability import StatusServer
    from icesink.table_ref import TableRef

    config = catalog_config
    tables = ["db.a", "db.b"]
    for name in tables:
        create_orders_table(config, name)
    stream = BranchStream(config, tables, SAFE)  # stages only: the daemon commits, audits and publishes
    settings = PublishSettings.of(None, True, "continue", "db")
    branches = [AuditedBranch(TableRef(t, BRANCH), tuple(SAFE)) for t in tables]
    declare_publishing(config, "job", branches, settings, atomic=True)
    stream.batch({tables[0]: orders(0, 1), tables[1]: orders(0, 1)}, commit=False)
    daemon = CommitterDaemon(config, lease_ttl=4)
    daemon.run(once=True)
    assert [ids_at(config, t) for t in tables] == [[0], [0]]
    stream.batch({tables[0]: negative(1, 1), tables[1]: orders(1, 1)}, commit=False)
    daemon.run(once=True)
    assert [ids_at(config, t) for t in tables] == [[0], [0]]  # one table failed: the group holds
    (held,) = daemon.audits()
    assert held["table"] == tables[0] and "in_range(amount, [0, +inf])" in held["problems"]  # type: ignore[operator]
    server = StatusServer("127.0.0.1", 0, daemon.metrics, daemon.problems, daemon.jobs, daemon.failures, daemon.audits)
    server.start()
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{server.port}/healthz") as answer:
            health = json.loads(answer.read())
    finally:
        server.stop()
    assert health["healthy"] and health["audits"][0]["snapshot_id"] == held["snapshot_id"]
    metrics = generate_latest(daemon.metrics.registry).decode()
    assert 'icesink_audits_total{outcome="failed",table="db.a"} 1.0' in metrics
    open_catalog(config).load_table(tables[0]).delete("amount < 0", branch=BRANCH)
    stream.batch({tables[0]: orders(2, 1), tables[1]: orders(2, 1)}, commit=False)
    daemon.run(once=True)
    assert [ids_at(config, t) for t in tables] == [[0, 2], [0, 1, 2]] and daemon.audits() == []
    assert 'icesink_publishes_total{table="db.b"} 2.0' in generate_latest(daemon.metrics.registry).decode()


def test_checks_a_stream_cannot_hand_over_are_named(sqlite_catalog: CatalogConfig) -> None:
    config = sqlite_catalog
    create_orders_table(config, TABLE)
    stream = BranchStream(config, [TABLE], [lambda audit: ["always"]])
    stream.batch({TABLE: orders(0, 1)})
    result = cli_run(config, "audit", TABLE, "--branch", BRANCH)
    assert result.exit_code == 2 and "cannot be run outside their stream" in result.output
    result = cli_run(config, "audit", TABLE, "--branch", "nope")
    assert result.exit_code == 2 and "it has no branch 'nope'" in result.output
    result = cli_run(config, "audit", TABLE, "--branch", "main")
    assert result.exit_code == 2 and "main is what publishing moves" in result.output


def test_stream_options_refuse_audits_without_a_branch_and_with_the_daemon() -> None:
    from icesink.sink.options import StreamOptions

    def options(**given: Any) -> StreamOptions:
        return StreamOptions(table="shop.t", **given)

    with pytest.raises(ConfigError, match="audit applies to a stream into a branch"):
        options(audit=[checks.not_null("id")])
    with pytest.raises(ConfigError, match="publish applies to a stream into a branch"):
        options(publish="checkpoint", branch="main")
    with pytest.raises(ConfigError, match=r"cannot make .*<lambda> again"):
        options(audit=[lambda audit: []], branch="audit", committer="daemon")
    with pytest.raises(ConfigError, match="on_audit_failure='stop' needs the inline committer"):
        options(audit=[checks.not_null("id")], branch="audit", committer="daemon", on_audit_failure="stop")
    assert options(audit=[checks.not_null("id")], branch="audit", committer="daemon").audit
    with pytest.raises(ConfigError, match="audit takes a list of checks"):
        options(audit=checks.not_null("id"), branch="audit")
    with pytest.raises(ConfigError, match="audit takes a list of checks"):
        options(audit=["id"], branch="audit")
    with pytest.raises(ConfigError, match="audit takes a list of checks"):
        options(audit=[checks.not_null], branch="audit")  # the check's class, not a check
    with pytest.raises(ConfigError, match="on_audit_failure applies to a stream with audit"):
        options(branch="audit", on_audit_failure="stop")
    assert options(audit=[checks.not_null("id")], branch="audit", publish=datetime.timedelta(minutes=1)).audit


@pytest.mark.faults
def test_an_observer_of_main_never_sees_an_unaudited_snapshot_while_publishers_are_killed(
    sqlite_catalog: CatalogConfig, tmp_path: Path
) -> None:
    from tests.helpers.wap_faults import run_killed_publishers

    run_killed_publishers(sqlite_catalog, tmp_path, [TABLE])


@pytest.mark.faults
def test_an_observer_of_three_mains_sees_only_consistent_audited_cuts_while_publishers_are_killed(
    pg_catalog: CatalogConfig, tmp_path: Path
) -> None:
    from tests.helpers.wap_faults import run_killed_publishers

    run_killed_publishers(pg_catalog, tmp_path, ["db.customers", "db.orders ü", "db.lines %/x"])


def test_a_partner_created_again_is_left_out_though_the_ledger_did_not_record_its_uuid(
    catalog_config: CatalogConfig,
) -> None:
    """Checkpoints staged before the ledger recorded table uuids: a partner created again by another tool is told
    apart by holding no snapshot of the job, so a restarted atomic stream neither audits it with the old checks
    nor publishes it, and the rest of the group goes on."""
    import sqlalchemy as sa

    from icesink.catalog.database import engine

    config = catalog_config
    a, b = "db.a ü", "db.a ü b"
    for name in (a, b):
        create_orders_table(config, name)
    BranchStream(config, [a, b], SAFE, job="X").batch({a: orders(0, 1), b: orders(0, 1)})
    with engine(config).begin() as connection:  # as rows staged and audited before 0015 are after the upgrade
        connection.execute(sa.text("UPDATE icesink_checkpoints SET table_uuid = NULL"))
        connection.execute(sa.text("UPDATE icesink_audits SET table_uuid = NULL"))
    catalog = open_catalog(config)
    catalog.drop_table(b)
    another_tools_table(config, b)  # with a branch of the name nobody audited
    restarted = BranchStream(config, [a], SAFE, job="X", checkpoint=1)  # a new driver, meeting a alone
    for checkpoint in (1, 2):
        restarted.batch({a: orders(checkpoint, 1)})
    assert ids_at(config, a) == [0, 1, 2] and ids_at(config, b) == [100]
    new_snapshots = {s.snapshot_id for s in catalog.load_table(b).metadata.snapshots}
    assert not [e for e in AuditRecord(config).of_branch(b, BRANCH).values() if e.snapshot_id in new_snapshots]
