"""Checkpoints staged for a branch other than main, committed by the committer (driven without Spark): the branch
reaches the commit, the marker lookup, conversion, the group commit, operator commands and consistent-cut reads,
and main does not move."""

from __future__ import annotations

import pyarrow as pa
import pytest
import sqlalchemy as sa

import icesink
from icesink import migrations
from icesink.catalog.checkpoints import CheckpointState
from icesink.catalog.config import CatalogConfig
from icesink.catalog.database import engine
from icesink.catalog.ledger import Ledger, checkpoints
from icesink.catalog.loader import open_catalog
from icesink.committer.commit import TableCommitter
from icesink.committer.protocol import Admission, admit
from icesink.committer.staging import TableResults, stage_tables
from icesink.errors import ConfigError
from icesink.iceberg.describe import writer_spec
from icesink.iceberg.marker import committed_marker, table_property
from icesink.table_ref import TableRef
from icesink.writer.spec import ChangeSpec
from icesink.writer.task import TaskWriter
from tests.helpers.support import (
    create_orders_table,
    lose_the_ledger_update,
    orders,
    stage_rows,
    staged_files_now,
    staged_in_manifests,
    table_ids,
)
from tests.test_cli import invoke

TABLE = "shop.orders ü"
OTHER = "shop.lines"
AUDIT = "audit ✓/x"  # a branch name as hostile as Iceberg allows


def stage_changes(
    config: CatalogConfig,
    checkpoint: int,
    changes: dict[str, tuple[pa.Table, list[str]]],
    branch: str = AUDIT,
    job: str = "job",
) -> bool:
    """One checkpoint of keyed changes (rows, ops) per table, staged for ``branch``."""
    catalog = open_catalog(config, pending_tables=True)
    written = []
    for identifier, (rows, ops) in changes.items():
        table = catalog.load_table(identifier)
        keyed = rows.append_column("op", pa.array(ops)).append_column(
            "__icesink_order", pa.array(range(len(ops)), pa.int64())
        )
        spec = writer_spec(table, identifier, job, ChangeSpec((1,), op_column="op")).for_checkpoint(checkpoint)
        writer = TaskWriter(spec, 0, 0)
        writer.write(keyed)
        written.append(TableResults(table, identifier, [writer.complete()], branch=branch))
    return stage_tables(Ledger(config), job, checkpoint, written, atomic=len(written) > 1)


def ids_on(config: CatalogConfig, identifier: str, branch: str) -> list[int]:
    table = open_catalog(config).load_table(identifier)
    head = table.metadata.snapshot_by_name(branch)
    assert head is not None, f"{identifier} has no branch {branch}"
    return sorted(table.scan(snapshot_id=head.snapshot_id).to_arrow().column("id").to_pylist())


def head_of(config: CatalogConfig, identifier: str, branch: str = "main") -> int | None:
    snapshot = open_catalog(config).load_table(identifier).metadata.snapshot_by_name(branch)
    return snapshot.snapshot_id if snapshot is not None else None


def test_a_branch_starts_at_mains_head_and_takes_the_jobs_checkpoints_while_main_stays(
    catalog_config: CatalogConfig,
) -> None:
    config = catalog_config
    create_orders_table(config, TABLE)
    assert stage_rows(config, TABLE, "loader", 0, orders(0, 3))  # main's own history, by another job
    TableCommitter.of(config).commit_pending(TABLE)
    main_head = head_of(config, TABLE)
    # Upserts on the branch: key 1 is updated, key 2 deleted, key 10 inserted; then key 11 and a delete of 10.
    assert stage_changes(config, 0, {TABLE: (orders(1, 2), ["U", "D"])})
    assert stage_changes(config, 1, {TABLE: (orders(10, 2), ["I", "I"])})
    assert stage_changes(config, 2, {TABLE: (orders(10, 1), ["D"])})
    (row,) = [r for r in Ledger(config).pending(TABLE) if r.checkpoint_id == 0]
    assert row.branch == AUDIT and row.ref == TableRef(TABLE, AUDIT)
    outcomes = TableCommitter.of(config).commit_pending(TABLE)
    assert [o.checkpoint_ids for o in outcomes] == [(0,), (1,), (2,)]
    assert head_of(config, TABLE) == main_head  # main did not move
    assert table_ids(config, TABLE) == [0, 1, 2]
    assert ids_on(config, TABLE, AUDIT) == [0, 1, 11]  # main's rows, then the branch's changes
    metadata = open_catalog(config).load_table(TABLE).metadata
    branch_marker = committed_marker(metadata, "job", AUDIT)
    assert branch_marker is not None and branch_marker.checkpoint_id == 2
    assert committed_marker(metadata, "job") is None  # main holds none of the job's checkpoints
    loader = committed_marker(metadata, "loader", AUDIT)  # the branch's ancestry holds main's history
    assert loader is not None and loader.checkpoint_id == 0
    # The equality deletes were converted against the branch's files, not main's: the branch's snapshots
    # carry position deletes only.
    summaries = [s.summary for s in metadata.snapshots if s.summary.get("icesink.job-id") == "job"]  # type: ignore[union-attr]
    assert all(int(s.get("added-equality-delete-files") or 0) == 0 for s in summaries)  # type: ignore[union-attr]
    # The marker's copy in the table properties (for when expiry removes the snapshots) is the branch's own.
    assert metadata.properties[table_property("job", AUDIT)] == "2"
    assert table_property("job") not in metadata.properties
    # Committed as it says: a second committer finds nothing to do, the admission sees the branch's marker.
    assert TableCommitter.of(config).commit_pending(TABLE) == []
    table = open_catalog(config).load_table(TABLE)
    stream = Ledger(config).get(TABLE, "job", 2).stream  # type: ignore[union-attr]
    assert admit(Ledger(config), table, TableRef(TABLE, AUDIT), "job", 2, stream).admission == Admission.COMMITTED
    assert admit(Ledger(config), table, TableRef(TABLE), "job", 3, stream).admission == Admission.WRITE


def test_a_crash_after_the_branch_moved_is_recovered_from_the_branchs_marker(catalog_config: CatalogConfig) -> None:
    """The state a crash between the catalog commit and the ledger update leaves: the marker read along the
    branch says the checkpoints are in; they are not committed again (on the branch or on main)."""
    config = catalog_config
    create_orders_table(config, TABLE)
    assert stage_changes(config, 0, {TABLE: (orders(0, 2), ["I", "I"])})
    files = staged_files_now(config)
    TableCommitter.of(config).commit_pending(TABLE)
    branch_head = head_of(config, TABLE, AUDIT)
    lose_the_ledger_update(config, files)
    outcomes = TableCommitter.of(config).commit_pending(TABLE)
    assert [(o.checkpoint_ids, o.already_committed) for o in outcomes] == [((0,), True)]
    assert head_of(config, TABLE, AUDIT) == branch_head
    assert head_of(config, TABLE) is None  # main never had a snapshot
    assert ids_on(config, TABLE, AUDIT) == [0, 1]
    # Operators are told the same: the checkpoint is in the table's branch, so it cannot be discarded.
    lose_the_ledger_update(config, files)
    code, output = invoke(config, "checkpoints", "discard", TABLE, "0", "--reason", "test")
    assert code != 0 and "is in the table" in output, output
    assert [r.state for r in Ledger(config).for_table(TABLE)] == [CheckpointState.STAGED]


def test_an_atomic_checkpoint_moves_every_tables_branch_in_one_commit_and_cuts_read_the_branch(
    catalog_config: CatalogConfig,
) -> None:
    config = catalog_config
    create_orders_table(config, TABLE)
    create_orders_table(config, OTHER)
    assert stage_rows(config, OTHER, "loader", 0, orders(100, 1))
    TableCommitter.of(config).commit_pending(OTHER)
    main_heads = {t: head_of(config, t) for t in (TABLE, OTHER)}
    assert stage_changes(config, 0, {TABLE: (orders(0, 2), ["I", "I"]), OTHER: (orders(200, 1), ["I"])})
    assert stage_changes(config, 1, {TABLE: (orders(0, 1), ["D"]), OTHER: (orders(201, 1), ["I"])})
    TableCommitter.of(config).commit_pending(TABLE)  # any table of the job commits all of them
    assert {t: head_of(config, t) for t in (TABLE, OTHER)} == main_heads
    table = open_catalog(config).load_table(TABLE)
    other = open_catalog(config).load_table(OTHER)
    commit_ids = {
        t.metadata.snapshot_by_name(AUDIT).summary["icesink.commit-id"]  # type: ignore[union-attr]
        for t in (table, other)
    }
    assert len(commit_ids) == 1
    assert ids_on(config, TABLE, AUDIT) == [1] and ids_on(config, OTHER, AUDIT) == [100, 200, 201]
    # A consistent cut at a checkpoint of the job reads each table's branch at that checkpoint.
    cut = icesink.read_tables([TABLE, OTHER], job_id="job", checkpoint_id=0, catalog=config)
    assert sorted(cut[TABLE].column("id").to_pylist()) == [0, 1]
    assert sorted(cut[OTHER].column("id").to_pylist()) == [100, 200]
    later = icesink.read_tables([TABLE, OTHER], job_id="job", checkpoint_id=1, catalog=config)
    assert sorted(later[TABLE].column("id").to_pylist()) == [1]


def test_a_job_moved_onto_a_branch_commits_what_it_staged_for_main_to_main_first(sqlite_catalog: CatalogConfig) -> None:
    config = sqlite_catalog
    create_orders_table(config, TABLE)
    assert stage_changes(config, 0, {TABLE: (orders(0, 1), ["I"])}, branch="main")
    assert stage_changes(config, 1, {TABLE: (orders(1, 1), ["I"])}, branch=AUDIT)
    outcomes = TableCommitter.of(config).commit_pending(TABLE)
    assert [o.checkpoint_ids for o in outcomes] == [(0,), (1,)]
    assert table_ids(config, TABLE) == [0]
    assert ids_on(config, TABLE, AUDIT) == [0, 1]


def test_a_downgrade_waits_for_checkpoints_staged_for_another_branch(own_catalog: CatalogConfig) -> None:
    config = own_catalog  # a database of its own: the schema goes back and forth
    create_orders_table(config, TABLE)
    assert stage_changes(config, 0, {TABLE: (orders(0, 1), ["I"])})
    code, output = invoke(config, "db", "downgrade", "0010")  # 0018's downgrade first: its files are in its row
    assert code != 0 and "Traceback" not in output and "releases before revision 0018" in output, output
    staged_in_manifests(config, TABLE, "job", 0)  # as a release before 0018 staged it
    code, output = invoke(config, "db", "downgrade", "0010")
    assert code != 0 and "Traceback" not in output, output
    assert f"checkpoint 0 of job 'job' for table {TABLE!r}" in output and repr(AUDIT) in output
    assert migrations.current_revision(engine(config)) == migrations.head_revision()
    TableCommitter.of(config).commit_pending(TABLE)
    assert invoke(config, "db", "downgrade", "0010")[0] == 0
    migrations.upgrade(engine(config), "head")
    row = Ledger(config).get(TABLE, "job", 0)
    assert row is not None and row.branch == "main"  # committed before the column went; read back as main's


def test_a_commit_on_main_between_two_branch_commits_is_a_conflict_built_again(catalog_config: CatalogConfig) -> None:
    """A committer that remembers the table from its last branch commit builds the next one on a head the branch
    still has, while main moved: the new snapshot would take a sequence number already taken. It is a conflict,
    built again on the table as it is, in either direction."""
    config = catalog_config
    create_orders_table(config, TABLE)
    on_branch = TableCommitter.of(config)
    on_main = TableCommitter.of(config)
    assert stage_changes(config, 0, {TABLE: (orders(0, 1), ["I"])})
    on_branch.commit_pending(TABLE)
    assert stage_rows(config, TABLE, "loader", 0, orders(100, 1))
    on_main.commit_pending(TABLE)
    assert stage_changes(config, 1, {TABLE: (orders(1, 1), ["I"])})
    assert [o.checkpoint_ids for o in on_branch.commit_pending(TABLE)] == [(1,)]
    assert stage_rows(config, TABLE, "loader", 1, orders(101, 1))
    assert [o.checkpoint_ids for o in on_main.commit_pending(TABLE)] == [(1,)]
    assert table_ids(config, TABLE) == [100, 101]
    assert ids_on(config, TABLE, AUDIT) == [0, 1]


def test_a_cut_reads_the_jobs_branch_after_its_older_ledger_rows_were_pruned(sqlite_catalog: CatalogConfig) -> None:
    config = sqlite_catalog
    create_orders_table(config, TABLE)
    assert stage_rows(config, TABLE, "loader", 0, orders(100, 1))
    TableCommitter.of(config).commit_pending(TABLE)
    for checkpoint in range(3):
        assert stage_changes(config, checkpoint, {TABLE: (orders(checkpoint, 1), ["I"])})
        TableCommitter.of(config).commit_pending(TABLE)
    with engine(config).begin() as connection:  # as gc prunes them: the newest row stays
        connection.execute(sa.delete(checkpoints).where(checkpoints.c.job_id == "job", checkpoints.c.checkpoint_id < 2))
    cut = icesink.read_tables([TABLE], job_id="job", checkpoint_id=0, catalog=config)
    assert sorted(cut[TABLE].column("id").to_pylist()) == [0, 100]  # the branch at checkpoint 0, not main


def test_a_tag_of_the_branchs_name_is_refused_and_the_checkpoint_stays_staged(sqlite_catalog: CatalogConfig) -> None:
    config = sqlite_catalog
    create_orders_table(config, TABLE)
    assert stage_rows(config, TABLE, "loader", 0, orders(100, 1))
    TableCommitter.of(config).commit_pending(TABLE)
    table = open_catalog(config).load_table(TABLE)
    table.manage_snapshots().create_tag(table.current_snapshot().snapshot_id, AUDIT).commit()  # type: ignore[union-attr]
    assert stage_changes(config, 0, {TABLE: (orders(0, 1), ["I"])})
    with pytest.raises(ConfigError) as refused:
        TableCommitter.of(config).commit_pending(TABLE)
    assert f"table {TABLE}: {AUDIT!r} is a tag, not a branch" in str(refused.value)
    assert [r.state for r in Ledger(config).for_table(TABLE) if r.job_id == "job"] == [CheckpointState.STAGED]
    tag = open_catalog(config).load_table(TABLE).metadata.refs[AUDIT]
    assert tag.snapshot_ref_type.value == "tag" and tag.snapshot_id == table.current_snapshot().snapshot_id  # type: ignore[union-attr]


def test_an_atomic_job_moved_onto_a_branch_commits_its_main_checkpoints_to_main_first(
    sqlite_catalog: CatalogConfig,
) -> None:
    config = sqlite_catalog
    create_orders_table(config, TABLE)
    create_orders_table(config, OTHER)
    both = {TABLE: (orders(0, 1), ["I"]), OTHER: (orders(10, 1), ["I"])}
    assert stage_changes(config, 0, both, branch="main")
    assert stage_changes(config, 1, {TABLE: (orders(1, 1), ["I"]), OTHER: (orders(11, 1), ["I"])}, branch=AUDIT)
    TableCommitter.of(config).commit_pending(TABLE)
    assert table_ids(config, TABLE) == [0] and table_ids(config, OTHER) == [10]
    assert ids_on(config, TABLE, AUDIT) == [0, 1] and ids_on(config, OTHER, AUDIT) == [10, 11]
    assert {r.state for t in (TABLE, OTHER) for r in Ledger(config).for_table(t)} == {CheckpointState.COMMITTED}
