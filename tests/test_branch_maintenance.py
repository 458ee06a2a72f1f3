"""Maintenance of a stream's branch: conversion and compaction commit to the branch, main stays an ancestor of it,
and main follows the maintenance snapshots (which change no row) without an audit, exactly when it follows what
they maintained.

Driven without Spark: the real task writer, ledger, committer, publisher and maintainer, on SQLite and PostgreSQL;
the end states are read by icesink, pyiceberg's scan and iceberg-rust, and compared with a model.
"""

from __future__ import annotations

import random
from typing import Any

import pyarrow as pa

import icesink
import tests.test_maintenance
from icesink import checks
from icesink.audit.chain import read_chain
from icesink.audit.publish_policy import PublishSettings
from icesink.catalog.audit_record import AuditRecord
from icesink.catalog.config import CatalogConfig
from icesink.catalog.ledger import Ledger
from icesink.catalog.loader import open_catalog
from icesink.committer.audited_branch import AuditedBranch
from icesink.committer.commit import TableCommitter
from icesink.committer.maintainer import Maintainer
from icesink.committer.publisher import Publisher
from icesink.committer.staging import TableResults, stage_tables
from icesink.iceberg.describe import writer_spec
from icesink.iceberg.marker import committed_marker
from icesink.iceberg.publish import branch_line
from icesink.iceberg.scan import live_files
from icesink.maintenance.policy import MaintenancePolicy
from icesink.maintenance.run import MaintenanceRequest
from icesink.table_ref import TableRef
from icesink.writer.spec import ChangeSpec
from icesink.writer.task import TaskWriter
from tests.helpers.outcomes import iceberg_rust_sql
from tests.test_write_audit_publish import cli_run

TABLE = "shop.kv %ü"
BRANCH = "audit ✓"
JOB = "cdc"
KEEP = {"icesink.equality-deletes.convert-at-commit": "false"}  # leave equality deletes for maintenance


def create(config: CatalogConfig, properties: dict[str, str] | None = None) -> Any:
    return tests.test_maintenance.create(config, {**KEEP, **(properties or {})}, identifier=TABLE)


def append(table: Any, rows: list[tuple[int, str]]) -> None:
    """Rows committed to main by another tool (pyiceberg)."""
    table.append(pa.Table.from_pylist([{"id": k, "v": v} for k, v in rows], table.schema().as_arrow()))


class BranchChanges:
    """A keyed change stream into ``BRANCH``: every checkpoint staged, committed, audited and published."""

    def __init__(self, config: CatalogConfig) -> None:
        self.config = config
        self.model: dict[int, str | None] = {}
        self.checkpoint = 0
        catalog = open_catalog(config)
        ledger = Ledger(config)
        self.publisher = Publisher(
            catalog,
            config,
            ledger,
            [AuditedBranch(TableRef(TABLE, BRANCH), (checks.not_null("v"), checks.rows_written()))],
            PublishSettings.of(None, True, "continue", TABLE),
            atomic=False,
            forget=lambda _: None,
        )

    def batch(self, changes: list[tuple[int, str | None, str]], commit: bool = True) -> Any:
        table = open_catalog(self.config).load_table(TABLE)
        spec = writer_spec(table, TABLE, JOB, ChangeSpec(equality_field_ids=(1,), op_column="op"))
        writer = TaskWriter(spec.for_checkpoint(self.checkpoint), 0, 0)
        writer.write(
            pa.table(
                {
                    "id": pa.array([c[0] for c in changes], pa.int64()),
                    "v": pa.array([c[1] for c in changes], pa.string()),
                    "op": [c[2] for c in changes],
                    "__icesink_order": pa.array(range(len(changes)), pa.int64()),
                }
            )
        )
        written = TableResults(table, TABLE, [writer.complete()], branch=BRANCH)
        assert stage_tables(Ledger(self.config), JOB, self.checkpoint, [written])
        self.checkpoint += 1
        for key, value, op in changes:
            if op == "D":
                self.model.pop(key, None)
            else:
                self.model[key] = value
        if not commit:
            return None
        TableCommitter.of(self.config).commit_pending(TABLE, JOB)
        return self.publisher.after_commit(JOB)

    def random_batch(self, rng: random.Random, size: int = 40) -> Any:
        number = self.checkpoint
        return self.batch([(rng.randrange(60), f"v{number}-{n}", rng.choice("IUUD")) for n in range(size)])


def maintain_branch(config: CatalogConfig, branch: str = BRANCH) -> Any:
    table = open_catalog(config).load_table(TABLE)
    request = MaintenanceRequest(MaintenancePolicy.of(table.properties, TABLE), everything=True)
    return Maintainer(open_catalog(config), config).run(table, TABLE, request, branch)


def head(config: CatalogConfig, ref: str) -> int | None:
    snapshot = open_catalog(config).load_table(TABLE).metadata.snapshot_by_name(ref)
    return snapshot.snapshot_id if snapshot is not None else None


def rows_of_main_by_every_reader(config: CatalogConfig) -> list[list[tuple[int, str]]]:
    """icesink.read, pyiceberg's own scan and iceberg-rust, each reading main."""
    table = open_catalog(config).load_table(TABLE)

    def pairs(rows: pa.Table) -> list[tuple[int, str]]:
        return sorted((r["id"], r["v"]) for r in rows.to_pylist())

    found = [pairs(icesink.read(table)), pairs(iceberg_rust_sql(table, "SELECT id, v FROM t"))]
    if not live_files(table).equality_deletes:  # pyiceberg refuses them
        found.append(pairs(table.scan().to_arrow()))
    return found


def test_maintenance_of_a_branch_keeps_main_its_ancestor_and_main_follows_it_without_an_audit(
    catalog_config: CatalogConfig,
) -> None:
    config = catalog_config
    append(create(config), [(500, "before")])  # main's own row
    stream = BranchChanges(config)
    stream.model[500] = "before"
    rng = random.Random(7)
    for _ in range(4):
        report = stream.random_batch(rng)
        assert not report.failed and report.published == {TABLE: head(config, BRANCH)}
    table = open_catalog(config).load_table(TABLE)
    branch_before = live_files(table, head(config, BRANCH))
    assert len(branch_before.equality_deletes) >= 3  # what maintenance has to do
    main_before = head(config, "main")

    report = maintain_branch(config)
    assert report.branch == BRANCH and report.conversion is not None and report.compaction is not None
    assert report.compaction.groups_committed >= 1 and report.after is not None
    assert report.after.equality_delete_files == 0 and report.after.data_files < report.before.data_files
    table = open_catalog(config).load_table(TABLE)
    assert head(config, "main") == main_before  # maintenance committed to the branch alone
    line = branch_line(table, BRANCH)
    assert not line.diverged and [s.summary["icesink.maintenance"] for s in line.ahead] == [
        "convert-equality-deletes",
        "compact",
    ]
    marker = committed_marker(table.metadata, JOB, BRANCH)
    assert marker is not None and marker.checkpoint_id == 3  # the marker walks the branch through maintenance

    # Main follows the maintenance snapshots without auditing them: they change no row.
    maintained = [s.snapshot_id for s in line.ahead]
    chain = read_chain(table, TABLE, BRANCH, AuditRecord(config))
    assert [(link.maintenance, link.publishable) for link in chain.links] == [(True, True), (True, True)]
    published = stream.publisher.after_commit(JOB)
    assert published.published == {TABLE: maintained[-1]} and published.audited == []
    assert AuditRecord(config).of_snapshots(TABLE, maintained) == []
    expected = sorted((k, v) for k, v in stream.model.items())
    assert rows_of_main_by_every_reader(config) == [expected] * 3
    main = live_files(open_catalog(config).load_table(TABLE))
    assert main.equality_deletes == [] and len(main.data) < len(branch_before.data)

    # The stream goes on from the maintained head: its next checkpoint is audited on what it adds, and only that.
    stream.batch([(1000, "new", "I"), (1001, "new", "I")])
    entries = AuditRecord(config).of_branch(TABLE, BRANCH)
    newest = max(entries.values(), key=lambda e: e.checkpoint_id or -1)
    assert newest.checkpoint_id == 4 and newest.base_snapshot_id == maintained[-1] and newest.rows_checked == 2
    assert head(config, "main") == head(config, BRANCH)
    assert rows_of_main_by_every_reader(config) == [sorted((k, v) for k, v in stream.model.items())] * 2


def test_maintenance_after_a_failed_audit_waits_with_what_it_maintained_and_is_published_with_the_fix(
    sqlite_catalog: CatalogConfig,
) -> None:
    config = sqlite_catalog
    create(config)
    stream = BranchChanges(config)
    stream.batch([(1, "a", "I"), (2, "b", "I")])
    published = head(config, "main")
    report = stream.batch([(3, None, "I"), (1, "a2", "U")])  # a null v fails not_null
    assert report.failed and head(config, "main") == published
    maintain_branch(config)
    table = open_catalog(config).load_table(TABLE)
    chain = read_chain(table, TABLE, BRANCH, AuditRecord(config))
    assert [(link.maintenance, link.publishable) for link in chain.links] == [
        (False, False),
        (True, False),  # maintains rows that failed: held with them
        (True, False),
    ]
    assert not stream.publisher.after_commit(JOB).published and head(config, "main") == published
    shown = cli_run(config, "branches", TABLE, "--json")
    assert shown.exit_code == 0 and shown.output.count('"maintenance, rows unchanged"') == 2

    table.delete("v is null", branch=BRANCH)  # the fix, by another tool (maintenance left no equality delete)
    stream.model.pop(3)
    report = stream.batch([(4, "d", "I")])
    assert not report.failed and report.published == {TABLE: head(config, BRANCH)}
    assert rows_of_main_by_every_reader(config) == [[(1, "a2"), (2, "b"), (4, "d")]] * 2  # and the fix's deletes


def test_icesink_maintain_names_the_branch_main_would_diverge_from(sqlite_catalog: CatalogConfig) -> None:
    config = sqlite_catalog
    create(config)
    stream = BranchChanges(config)
    stream.batch([(1, "a", "I")])
    stream.batch([(1, "b", "U"), (2, "c", "I")])

    def run(*args: str) -> Any:
        return cli_run(config, "maintain", TABLE, *args)

    refused = run("--all")
    assert refused.exit_code == 2 and f"main can be fast-forwarded along branch {BRANCH}" in refused.output
    assert f"--branch '{BRANCH}'" in refused.output and "--branch main" in refused.output
    missing = run("--branch", "nope")
    assert missing.exit_code == 2 and f"has no branch 'nope' (its branches: {BRANCH}, main)" in missing.output
    main_before = head(config, "main")
    done = run("--all", "--branch", BRANCH)
    assert done.exit_code == 0 and f"table {TABLE} branch {BRANCH}: converted" in done.output
    assert head(config, "main") == main_before
    assert stream.publisher.after_commit(JOB).published == {TABLE: head(config, BRANCH)}

    # Asked for by name, main is maintained, and the branch that followed it is then told apart.
    stream.batch([(3, "d", "I")])  # published, with an equality delete for maintenance to convert
    stream.batch([(2, None, "U")])  # fails its audit: main stays behind the branch
    forced = run("--all", "--branch", "main")
    assert forced.exit_code == 0 and f"table {TABLE}: converted 1 equality delete file(s)" in forced.output
    held = stream.publisher.after_commit(JOB)
    assert not held.published and "is not an ancestor of the head" in held.held[0]


def test_the_daemon_maintains_the_branch_it_commits_to_and_main_follows(catalog_config: CatalogConfig) -> None:
    from icesink.committer.daemon import CommitterDaemon
    from icesink.committer.declared_publishing import declare_publishing

    config = catalog_config
    create(config, {"icesink.maintain.min-commits": "2"})
    stream = BranchChanges(config)
    branches = [AuditedBranch(TableRef(TABLE, BRANCH), (checks.not_null("v"),))]
    declare_publishing(config, JOB, branches, PublishSettings.of(None, True, "continue", TABLE), atomic=False)
    daemon = CommitterDaemon(config, lease_ttl=4, maintain=True)
    stream.batch([(1, "a", "I"), (2, "b", "I")], commit=False)
    daemon.run(once=True)
    stream.batch([(1, "a2", "U"), (2, None, "D")], commit=False)
    daemon.run(once=True)
    table = open_catalog(config).load_table(TABLE)
    kinds = [s.summary.get("icesink.maintenance") for s in table.snapshots()]
    assert "convert-equality-deletes" in kinds and "compact" in kinds  # on the branch, after the second commit
    assert head(config, "main") == head(config, BRANCH)  # published at once: the daemon publishes after maintaining
    assert rows_of_main_by_every_reader(config) == [[(1, "a2")]] * 3


def test_a_branch_the_table_does_not_have_is_reported_not_maintained(sqlite_catalog: CatalogConfig) -> None:
    config = sqlite_catalog
    append(create(config), [(1, "a")])
    report = maintain_branch(config, "nowhere")
    assert report.notes == ["it has no branch nowhere"] and report.before.data_files == 0  # not main's files
    assert (
        report.conversion is None
        and report.compaction is None
        and len(list(open_catalog(config).load_table(TABLE).snapshots())) == 1
    )


def test_rows_main_held_before_are_not_audited_again_after_the_branch_is_compacted(
    sqlite_catalog: CatalogConfig,
) -> None:
    config = sqlite_catalog
    table = create(config)
    append(table, [(500, None)])  # main's own row, from before the stream: it fails not_null, and is not the stream's
    append(table, [(501, "x")])
    stream = BranchChanges(config)
    stream.model.update({500: None, 501: "x"})
    stream.batch([(1, "a", "I"), (2, "b", "I")])
    stream.batch([(3, None, "I")])  # fails its audit
    stream.batch([(6, "f", "I")])  # held with it
    report = maintain_branch(config)
    # Main's three files (its two rows and the published checkpoint) and the branch's two are not mixed.
    assert report.compaction is not None and report.compaction.groups_committed == 2
    assert report.compaction.files_rewritten == 5
    table = open_catalog(config).load_table(TABLE)
    main_sequence = table.metadata.snapshot_by_name("main").sequence_number
    compacted = {f.sequence_number for f in live_files(table, head(config, BRANCH)).data}
    assert main_sequence in compacted  # main's rows keep counting as main's

    table.delete("v is null and id < 100", branch=BRANCH)  # the fix of the stream's own row
    stream.model.pop(3)
    fixed = stream.batch([(4, "d", "I")])
    assert not fixed.failed and fixed.published == {TABLE: head(config, BRANCH)}
    assert rows_of_main_by_every_reader(config)[0] == sorted(
        (k, v) for k, v in stream.model.items()
    )  # row 500 is still there: main's rows are main's business

    # Looking again from the command line agrees (the head is checked on everything since main, main's rows aside).
    stream.batch([(5, "e", "I")])
    maintain_branch(config)
    again = cli_run(config, "audit", TABLE, "--branch", BRANCH)
    assert again.exit_code == 0, again.output


def test_a_snapshot_that_only_says_it_is_maintenance_is_audited(sqlite_catalog: CatalogConfig) -> None:
    config = sqlite_catalog
    create(config)
    stream = BranchChanges(config)
    stream.batch([(1, "a", "I")])
    table = open_catalog(config).load_table(TABLE)
    spoofed = pa.Table.from_pylist([{"id": 666, "v": None}], table.schema().as_arrow())
    table.append(spoofed, branch=BRANCH, snapshot_properties={"icesink.maintenance": "compact"})
    report = stream.publisher.after_commit(JOB)
    assert not report.published and [e.problems for e in report.failed] == [
        {"not_null(v)": ["1 of 1 added row(s) have a null v, e.g. {id: 666, v: None}"]}
    ]
    assert rows_of_main_by_every_reader(config)[0] == [(1, "a")]


def test_icesink_maintain_tells_a_tag_from_a_branch_and_a_table_whose_main_is_empty(
    sqlite_catalog: CatalogConfig,
) -> None:
    config = sqlite_catalog
    create(config)
    stream = BranchChanges(config)
    stream.batch([(1, None, "I")])  # fails its audit: main is not created

    def run(*args: str) -> Any:
        return cli_run(config, "maintain", TABLE, *args)

    empty = run()
    assert empty.exit_code == 2 and f"main has no snapshot yet, and its branches do ({BRANCH})" in empty.output
    table = open_catalog(config).load_table(TABLE)
    table.manage_snapshots().create_tag(head(config, BRANCH), "v1").commit()
    tagged = run("--branch", "v1")
    assert tagged.exit_code == 2 and f"table {TABLE}: 'v1' is a tag, not a branch (its branches: {BRANCH})" in (
        tagged.output
    )
