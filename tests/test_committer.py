"""Staging and committing checkpoints, on SQLite and PostgreSQL catalogs."""

from __future__ import annotations

import json

import pytest

from icesink.catalog.checkpoints import CheckpointState
from icesink.catalog.config import CatalogConfig
from icesink.catalog.ledger import Ledger
from icesink.catalog.loader import open_catalog
from icesink.committer.commit import TableCommitter
from icesink.errors import ManifestError
from icesink.iceberg.manifests import to_data_file
from icesink.iceberg.marker import committed_marker
from icesink.iceberg.snapshots import commit_prepared, prepare_snapshot
from icesink.properties import JOB_ID_PROPERTY, MAX_CHECKPOINT_PROPERTY
from tests.helpers.support import (
    create_orders_table,
    lose_the_ledger_update,
    orders,
    stage_rows,
    staged_files_now,
    staged_in_manifests,
    table_ids,
    write_files,
)

TABLE = "shop.orders"


def max_committed_checkpoint(metadata: object, job_id: str) -> int | None:
    marker = committed_marker(metadata, job_id)  # type: ignore[arg-type]
    return marker.checkpoint_id if marker else None


def committer(config: CatalogConfig) -> TableCommitter:
    return TableCommitter.of(config)


def test_pending_append_checkpoints_become_one_snapshot_with_the_marker(catalog_config: CatalogConfig) -> None:
    create_orders_table(catalog_config)
    for checkpoint in range(3):
        assert stage_rows(catalog_config, TABLE, "job-a", checkpoint, orders(checkpoint * 100, 100))
    outcomes = committer(catalog_config).commit_pending(TABLE)
    assert [o.checkpoint_ids for o in outcomes] == [(0, 1, 2)]
    table = open_catalog(catalog_config).load_table(TABLE)
    assert len(table.metadata.snapshots) == 1
    summary = table.current_snapshot().summary
    assert summary[JOB_ID_PROPERTY] == "job-a"
    assert summary[MAX_CHECKPOINT_PROPERTY] == "2"
    assert summary["added-records"] == "300"
    assert table_ids(catalog_config, TABLE) == list(range(300))
    rows = Ledger(catalog_config).for_table(TABLE)
    assert {r.state for r in rows} == {CheckpointState.COMMITTED}
    assert {r.snapshot_id for r in rows} == {table.current_snapshot().snapshot_id}


def test_temporary_manifests_are_deleted_after_the_commit(catalog_config: CatalogConfig) -> None:
    from pathlib import Path

    create_orders_table(catalog_config)
    stage_rows(catalog_config, TABLE, "job-a", 0, orders(0, 10))
    row = staged_in_manifests(catalog_config, TABLE, "job-a", 0)  # as a release before staged it
    manifest = Path(row.manifests.data.path.removeprefix("file://"))
    assert manifest.exists()
    committer(catalog_config).commit_pending(TABLE)
    assert not manifest.exists()
    (row,) = Ledger(catalog_config).for_table(TABLE)
    assert row.manifests_deleted


def test_staging_writes_no_file_and_a_committed_row_lets_its_files_entries_go(catalog_config: CatalogConfig) -> None:
    from pathlib import Path

    from icesink.catalog.checkpoints import InlineFiles

    create_orders_table(catalog_config)
    table = open_catalog(catalog_config).load_table(TABLE)
    metadata = Path(table.location().removeprefix("file://")) / "metadata"
    before = sorted(metadata.iterdir())
    stage_rows(catalog_config, TABLE, "job-a", 0, orders(0, 10))
    assert sorted(metadata.iterdir()) == before  # nothing beside the table's metadata but its data files
    assert Ledger(catalog_config).pending(TABLE)[0].files is None  # read only by what commits or keeps them
    (row,) = Ledger(catalog_config).pending(TABLE, with_files=True)
    assert row.manifests.data == InlineFiles(1, 10) and row.files is not None and not row.files.deletes
    (staged,) = row.files.data
    assert Path(staged.path.removeprefix("file://")).exists() and not row.manifests_deleted
    committer(catalog_config).commit_pending(TABLE)
    assert table_ids(catalog_config, TABLE) == list(range(10))
    (row,) = Ledger(catalog_config).for_table(TABLE, with_files=True)
    assert row.state == CheckpointState.COMMITTED and row.manifests_deleted
    assert row.manifests.data == InlineFiles(1, 10) and row.files is None  # how many it held, not the files
    assert [f.file.file_path for f in open_catalog(catalog_config).load_table(TABLE).scan().plan_files()] == [
        staged.path
    ]


def test_clean_up_after_committed_checkpoints_goes_on_past_a_dropped_table(
    catalog_config: CatalogConfig, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """What a committer killed before its clean-up left (its successor cleans up when it takes the lease): a table
    dropped since holds back only its own rows."""
    from pathlib import Path

    import icesink.committer.commit as commit_module

    names = ["shop.gone_old", "shop.kept_old", "shop.gone_new", "shop.kept_new"]  # _old: staged as before 0018
    for name in names:
        create_orders_table(catalog_config, name)
        stage_rows(catalog_config, name, "job-a", 0, orders(0, 10))
    manifests = {
        name: Path(staged_in_manifests(catalog_config, name, "job-a", 0).manifests.data.path.removeprefix("file://"))
        for name in names
        if name.endswith("_old")
    }
    with monkeypatch.context() as patched:  # killed before the clean-up
        patched.setattr(commit_module, "clean_staged", lambda *args: None)
        for name in names:
            committer(catalog_config).commit_pending(name)
    catalog = open_catalog(catalog_config)
    catalog.drop_table("shop.gone_old")
    catalog.drop_table("shop.gone_new")
    ledger = Ledger(catalog_config)
    assert sorted(r.identifier for r in ledger.uncleaned()) == sorted(names)

    with caplog.at_level("WARNING", logger="icesink.committer"):
        assert committer(catalog_config).clean_committed() == 3
    assert [r.identifier for r in ledger.uncleaned()] == ["shop.gone_old"]
    assert manifests["shop.gone_old"].exists() and not manifests["shop.kept_old"].exists()
    (warning,) = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert "shop.gone_old" in warning and "1 committed checkpoint" in warning
    assert table_ids(catalog_config, "shop.kept_new") == list(range(10))


def test_a_file_the_tables_partition_spec_cannot_hold_is_refused_before_anything_is_staged(
    catalog_config: CatalogConfig,
) -> None:
    from dataclasses import replace

    from icesink.committer.staging import stage_checkpoint
    from icesink.errors import WriteResultError

    create_orders_table(catalog_config)
    table = open_catalog(catalog_config).load_table(TABLE)
    result = write_files(table, TABLE, "job-a", 0, orders(0, 10))
    (good,) = result.data_files
    for odd in (replace(good, partition=("x",)), replace(good, spec_id=7)):
        with pytest.raises(WriteResultError, match=f"table {TABLE}: checkpoint 0 holds file"):
            stage_checkpoint(Ledger(catalog_config), table, TABLE, "job-a", 0, [replace(result, data_files=(odd,))])
        assert Ledger(catalog_config).for_table(TABLE) == []


@pytest.mark.parametrize(
    ("damaged", "said"),
    [('{"version":1,"data":[{"path":""}],"deletes":[]}', "cannot read"), (None, "missing from its row")],
    ids=["a file with no path", "its files gone"],
)
def test_a_row_whose_staged_files_are_damaged_stops_only_its_table_and_can_be_discarded(
    catalog_config: CatalogConfig, damaged: str | None, said: str
) -> None:
    import datetime

    import sqlalchemy as sa

    from icesink.catalog.database import engine
    from icesink.catalog.ledger import checkpoints
    from icesink.committer.gc import collect_garbage
    from icesink.errors import LedgerFormatError
    from tests.test_cli import invoke

    other = "shop.other ü"
    create_orders_table(catalog_config)
    create_orders_table(catalog_config, other)
    stage_rows(catalog_config, TABLE, "job-a", 0, orders(0, 10))
    stage_rows(catalog_config, other, "job-a", 0, orders(0, 10))
    with engine(catalog_config).begin() as connection:  # a file with no path: by hand, or a bad restore
        connection.execute(
            checkpoints.update().where(checkpoints.c.table_identifier == TABLE).values(staged_files=damaged)
        )
    with pytest.raises(LedgerFormatError) as raised:
        committer(catalog_config).commit_pending(TABLE)
    message = str(raised.value)
    assert "checkpoint 0 of job 'job-a'" in message and repr(TABLE) in message and "discard" in message
    assert said in message
    committer(catalog_config).commit_pending(other)  # another table goes on
    assert table_ids(catalog_config, other) == list(range(10))
    code, output = invoke(catalog_config, "checkpoints", "list", TABLE, "--json")
    (listed,) = json.loads(output)["checkpoints"]
    assert code == 0 and listed["status"] == "unreadable" and listed["data_files"] == 1, output
    assert "files" not in listed  # counts, not the files themselves
    code, output = invoke(catalog_config, "checkpoints", "retry", TABLE, "0")
    assert code == 2 and "cannot be tried again" in output, output
    with pytest.raises(LedgerFormatError, match="gc deletes nothing in this table"):
        collect_garbage(open_catalog(catalog_config), catalog_config, TABLE, datetime.timedelta(hours=1))
    code, output = invoke(catalog_config, "checkpoints", "discard", TABLE, "0", "--yes")
    assert code == 0, output
    assert committer(catalog_config).commit_pending(TABLE) == []
    (row,) = Ledger(catalog_config).for_table(TABLE, with_files=True)
    assert row.state == CheckpointState.DISCARDED and row.files is None
    with engine(catalog_config).connect() as connection:
        mine = checkpoints.c.catalog_name == catalog_config.name
        assert connection.execute(sa.select(checkpoints.c.staged_files).where(mine)).scalars().all() == [None, None]


def test_a_second_run_commits_nothing(catalog_config: CatalogConfig) -> None:
    create_orders_table(catalog_config)
    stage_rows(catalog_config, TABLE, "job-a", 0, orders(0, 10))
    committer(catalog_config).commit_pending(TABLE)
    assert committer(catalog_config).commit_pending(TABLE) == []
    assert table_ids(catalog_config, TABLE) == list(range(10))


def test_checkpoint_already_in_the_table_is_not_committed_again(catalog_config: CatalogConfig) -> None:
    """The state a crash between the catalog commit and the ledger update leaves behind."""

    create_orders_table(catalog_config)
    stage_rows(catalog_config, TABLE, "job-a", 0, orders(0, 10))
    files = staged_files_now(catalog_config)
    committer(catalog_config).commit_pending(TABLE)
    lose_the_ledger_update(catalog_config, files)
    outcomes = committer(catalog_config).commit_pending(TABLE)
    assert [(o.checkpoint_ids, o.already_committed) for o in outcomes] == [((0,), True)]
    assert table_ids(catalog_config, TABLE) == list(range(10))
    assert len(open_catalog(catalog_config).load_table(TABLE).metadata.snapshots) == 1


def test_jobs_keep_separate_markers(catalog_config: CatalogConfig) -> None:
    create_orders_table(catalog_config)
    stage_rows(catalog_config, TABLE, "job-a", 5, orders(0, 10))
    stage_rows(catalog_config, TABLE, "job-b", 1, orders(10, 10))
    committer(catalog_config).commit_pending(TABLE)
    stage_rows(catalog_config, TABLE, "job-a", 6, orders(20, 10))
    committer(catalog_config).commit_pending(TABLE)
    metadata = open_catalog(catalog_config).load_table(TABLE).metadata
    assert max_committed_checkpoint(metadata, "job-a") == 6
    assert max_committed_checkpoint(metadata, "job-b") == 1
    assert max_committed_checkpoint(metadata, "job-c") is None
    assert table_ids(catalog_config, TABLE) == list(range(30))


def test_snapshot_built_on_a_moved_head_is_refused_and_foreign_commits_are_kept(catalog_config: CatalogConfig) -> None:
    """A snapshot prepared on a stale head loses the compare-and-swap; the committer keeps both writes once."""
    from pyiceberg.exceptions import CommitFailedException

    create_orders_table(catalog_config)
    catalog = open_catalog(catalog_config)
    stale = catalog.load_table(TABLE)
    foreign = catalog.load_table(TABLE)
    foreign.append(orders(1000, 5).cast(foreign.schema().as_arrow()))
    result = write_files(stale, TABLE, "job-a", 0, orders(0, 10))
    prepared = prepare_snapshot(stale, [to_data_file(f, 2) for f in result.data_files], {JOB_ID_PROPERTY: "job-a"})
    with pytest.raises(CommitFailedException):
        commit_prepared(stale, prepared)
    # The committer itself, starting from the stale view, ends with both writes exactly once.
    stage_rows(catalog_config, TABLE, "job-a", 0, orders(0, 10))
    committer(catalog_config).commit_pending(TABLE)
    assert table_ids(catalog_config, TABLE) == [*range(10), *range(1000, 1005)]


def test_stale_committer_rechecks_the_marker_after_losing_the_swap(catalog_config: CatalogConfig) -> None:
    """Two committers race for one checkpoint: the loser must find the marker, not append again."""
    from pyiceberg.exceptions import CommitFailedException

    create_orders_table(catalog_config)
    stage_rows(catalog_config, TABLE, "job-a", 0, orders(0, 10))
    files = staged_files_now(catalog_config)
    first, second = committer(catalog_config), committer(catalog_config)
    catalog = open_catalog(catalog_config)
    stale_view = catalog.load_table(TABLE)
    first.commit_pending(TABLE)
    # A commit built on the stale view is refused by the catalog ...
    result = write_files(stale_view, TABLE, "job-a", 0, orders(0, 10))
    prepared = prepare_snapshot(stale_view, [to_data_file(f, 2) for f in result.data_files], {})
    with pytest.raises(CommitFailedException):
        commit_prepared(stale_view, prepared)
    # ... and the second committer, seeing the checkpoint staged again, skips it by the marker.

    lose_the_ledger_update(catalog_config, files, snapshot_id_too=False)
    outcomes = second.commit_pending(TABLE)
    assert all(o.already_committed for o in outcomes)
    assert table_ids(catalog_config, TABLE) == list(range(10))


def test_missing_manifest_is_a_clear_error_and_loses_nothing(catalog_config: CatalogConfig) -> None:
    from pathlib import Path

    create_orders_table(catalog_config)
    stage_rows(catalog_config, TABLE, "job-a", 0, orders(0, 10))
    row = staged_in_manifests(catalog_config, TABLE, "job-a", 0)  # as a release before staged it
    Path(row.manifests.data.path.removeprefix("file://")).unlink()
    with pytest.raises(ManifestError) as raised:
        committer(catalog_config).commit_pending(TABLE)
    message = str(raised.value)
    assert TABLE in message and "job-a" in message and "checkpoint 0" in message and row.manifests.data.path in message
    assert open_catalog(catalog_config).load_table(TABLE).current_snapshot() is None
    assert [r.state for r in Ledger(catalog_config).for_table(TABLE)] == [CheckpointState.STAGED]


def test_staging_twice_keeps_the_first(catalog_config: CatalogConfig) -> None:
    create_orders_table(catalog_config)
    assert stage_rows(catalog_config, TABLE, "job-a", 0, orders(0, 10))
    assert not stage_rows(catalog_config, TABLE, "job-a", 0, orders(0, 10))
    committer(catalog_config).commit_pending(TABLE)
    assert table_ids(catalog_config, TABLE) == list(range(10))


def test_partitioned_table_commits_partition_values_readers_can_filter_on(catalog_config: CatalogConfig) -> None:
    create_orders_table(catalog_config, partition_by=("day(ts)", "bucket(4, id)"))
    stage_rows(catalog_config, TABLE, "job-a", 0, orders(0, 200))
    committer(catalog_config).commit_pending(TABLE)
    table = open_catalog(catalog_config).load_table(TABLE)
    assert table.scan().to_arrow().num_rows == 200
    assert int(table.current_snapshot().summary["changed-partition-count"]) > 8
    one_day = table.scan(row_filter="ts >= '2026-01-02T00:00:00+00:00' and ts < '2026-01-03T00:00:00+00:00'")
    assert sorted(one_day.to_arrow().column("id").to_pylist()) == list(range(24, 48))
    planned = {task.file.file_path for task in one_day.plan_files()}
    assert len(planned) < len({t.file.file_path for t in table.scan().plan_files()})  # pruned by partition


def test_marker_survives_expiry_of_its_snapshot_under_another_writers_snapshot(catalog_config: CatalogConfig) -> None:
    """Invariant 2 after maintenance: the crash-window state must still be recognised as committed."""

    create_orders_table(catalog_config)
    stage_rows(catalog_config, TABLE, "job-a", 4, orders(0, 10))
    files = staged_files_now(catalog_config)
    committer(catalog_config).commit_pending(TABLE)
    catalog = open_catalog(catalog_config)
    table = catalog.load_table(TABLE)
    ours = table.current_snapshot().snapshot_id
    table.append(orders(100, 5).cast(table.schema().as_arrow()))  # another writer on top
    table = catalog.load_table(TABLE)
    table.maintenance.expire_snapshots().by_id(ours).commit()
    metadata = catalog.load_table(TABLE).metadata
    assert metadata.snapshot_by_id(ours) is None
    assert max_committed_checkpoint(metadata, "job-a") == 4
    assert max_committed_checkpoint(metadata, "job-b") is None
    lose_the_ledger_update(catalog_config, files, snapshot_id_too=False)  # the update that a crash lost
    outcomes = committer(catalog_config).commit_pending(TABLE)
    assert [o.already_committed for o in outcomes] == [True]
    assert table_ids(catalog_config, TABLE) == [*range(10), *range(100, 105)]


def set_properties(config: CatalogConfig, **properties: str) -> None:
    table = open_catalog(config).load_table(TABLE)
    with table.transaction() as transaction:
        transaction.set_properties({k.replace("_", "."): v for k, v in properties.items()})


def manifests(config: CatalogConfig) -> list:  # type: ignore[type-arg]
    table = open_catalog(config).load_table(TABLE)
    return list(table.current_snapshot().manifests(table.io))


def test_small_manifests_are_merged_so_the_manifest_list_stays_short(sqlite_catalog: CatalogConfig) -> None:
    create_orders_table(sqlite_catalog)
    set_properties(sqlite_catalog, **{"commit.manifest.min-count-to-merge": "4"})
    committing = committer(sqlite_catalog)
    for checkpoint in range(12):
        stage_rows(sqlite_catalog, TABLE, "job-a", checkpoint, orders(checkpoint * 10, 10))
        committing.commit_pending(TABLE)
        assert len(manifests(sqlite_catalog)) < 4, f"after checkpoint {checkpoint}"
    assert table_ids(sqlite_catalog, TABLE) == list(range(120))
    entries = [
        e
        for m in manifests(sqlite_catalog)
        for e in m.fetch_manifest_entry(open_catalog(sqlite_catalog).load_table(TABLE).io)
    ]
    assert len(entries) == 12
    # Rewritten entries keep the snapshot and sequence number that added them.
    assert sorted(e.sequence_number for e in entries) == list(range(1, 13))


def test_merging_off_keeps_one_manifest_per_commit(sqlite_catalog: CatalogConfig) -> None:
    create_orders_table(sqlite_catalog)
    set_properties(
        sqlite_catalog, **{"commit.manifest.min-count-to-merge": "2", "commit.manifest-merge.enabled": "false"}
    )
    for checkpoint in range(4):
        stage_rows(sqlite_catalog, TABLE, "job-a", checkpoint, orders(checkpoint * 10, 10))
        committer(sqlite_catalog).commit_pending(TABLE)
    assert len(manifests(sqlite_catalog)) == 4


def test_expiry_in_the_commit_keeps_retention_tags_and_the_marker(catalog_config: CatalogConfig) -> None:
    import time

    create_orders_table(catalog_config)
    set_properties(
        catalog_config, **{"history.expire.max-snapshot-age-ms": "1", "history.expire.min-snapshots-to-keep": "2"}
    )
    committing = TableCommitter.of(catalog_config, expire_snapshots=True)
    stage_rows(catalog_config, TABLE, "job-a", 0, orders(0, 10))
    committing.commit_pending(TABLE)
    table = open_catalog(catalog_config).load_table(TABLE)
    tagged = table.current_snapshot().snapshot_id
    table.manage_snapshots().create_tag(tagged, "first").commit()
    for checkpoint in range(1, 6):
        time.sleep(0.01)  # every older snapshot is past the 1 ms maximum age
        stage_rows(catalog_config, TABLE, "job-a", checkpoint, orders(checkpoint * 10, 10))
        committing.commit_pending(TABLE)
    metadata = open_catalog(catalog_config).load_table(TABLE).metadata
    head = metadata.snapshot_by_name("main")
    kept = {s.snapshot_id for s in metadata.snapshots}
    assert kept == {tagged, head.snapshot_id, head.parent_snapshot_id}
    assert table_ids(catalog_config, TABLE) == list(range(60))
    # A committer that remembers nothing still finds the marker and goes on from it.
    assert max_committed_checkpoint(metadata, "job-a") == 5
    stage_rows(catalog_config, TABLE, "job-a", 6, orders(60, 10))
    (outcome,) = committer(catalog_config).commit_pending(TABLE)
    assert outcome.checkpoint_ids == (6,) and not outcome.already_committed
    assert table_ids(catalog_config, TABLE) == list(range(70))


def test_without_expiry_every_snapshot_stays(sqlite_catalog: CatalogConfig) -> None:
    create_orders_table(sqlite_catalog)
    set_properties(sqlite_catalog, **{"history.expire.max-snapshot-age-ms": "1"})
    for checkpoint in range(3):
        stage_rows(sqlite_catalog, TABLE, "job-a", checkpoint, orders(checkpoint * 10, 10))
        committer(sqlite_catalog).commit_pending(TABLE)
    assert len(open_catalog(sqlite_catalog).load_table(TABLE).metadata.snapshots) == 3


def test_known_marker_ends_the_walk_at_the_snapshot_it_was_read_from(sqlite_catalog: CatalogConfig) -> None:
    from icesink.iceberg.marker import CommittedMarker, KnownMarker, committed_marker

    create_orders_table(sqlite_catalog)
    stage_rows(sqlite_catalog, TABLE, "job-a", 3, orders(0, 10))
    committer(sqlite_catalog).commit_pending(TABLE)
    catalog = open_catalog(sqlite_catalog)
    table = catalog.load_table(TABLE)
    ours = table.current_snapshot().snapshot_id
    for start in (100, 200):  # another writer's snapshots on top
        table.append(orders(start, 5).cast(table.schema().as_arrow()))
    metadata = catalog.load_table(TABLE).metadata
    assert max_committed_checkpoint(metadata, "job-a") == 3
    # The walk stops at the remembered snapshot rather than reading its summary (7 here proves which answered).
    remembered = CommittedMarker(7, "stream-x")
    assert committed_marker(metadata, "job-a", known=KnownMarker(ours, remembered)) == remembered
    head = metadata.snapshot_by_name("main").snapshot_id
    assert committed_marker(metadata, "job-a", known=KnownMarker(head, CommittedMarker(9, None))).checkpoint_id == 9


def test_a_committer_that_remembers_the_table_still_sees_what_others_did_in_between(
    catalog_config: CatalogConfig,
) -> None:
    """The committer keeps its last view of the table; a foreign commit or a schema change makes it read again."""
    import pyarrow as pa
    from pyiceberg.types import StringType

    create_orders_table(catalog_config)
    committing = committer(catalog_config)
    stage_rows(catalog_config, TABLE, "job-a", 0, orders(0, 10))
    committing.commit_pending(TABLE)
    table = open_catalog(catalog_config).load_table(TABLE)
    table.append(orders(100, 5).cast(table.schema().as_arrow()))  # another writer moves the head
    stage_rows(catalog_config, TABLE, "job-a", 1, orders(10, 10))
    committing.commit_pending(TABLE)
    assert table_ids(catalog_config, TABLE) == [*range(20), *range(100, 105)]
    table = open_catalog(catalog_config).load_table(TABLE)
    with table.update_schema() as update:  # the head stays, the schema moves
        update.add_column("note", StringType())
    with_note = orders(20, 10).append_column("note", pa.nulls(10, pa.string()))
    stage_rows(catalog_config, TABLE, "job-a", 2, with_note)
    committing.commit_pending(TABLE)
    table = open_catalog(catalog_config).load_table(TABLE)
    assert table.current_snapshot().schema_id == table.schema().schema_id == 1
    assert "note" in table.schema().column_names
    assert table_ids(catalog_config, TABLE) == [*range(30), *range(100, 105)]


def test_a_committer_that_remembers_the_table_takes_files_of_a_partition_spec_another_tool_added(
    catalog_config: CatalogConfig,
) -> None:
    """The writer wrote the files with the spec added after the committer last read the table: it reads again
    (it failed with a KeyError on the spec id)."""
    create_orders_table(catalog_config)
    committing = committer(catalog_config)
    stage_rows(catalog_config, TABLE, "job-a", 0, orders(0, 10))
    committing.commit_pending(TABLE)
    table = open_catalog(catalog_config).load_table(TABLE)
    with table.update_spec() as update:
        update.add_identity("name")
    stage_rows(catalog_config, TABLE, "job-a", 1, orders(10, 10))
    committing.commit_pending(TABLE)
    table = open_catalog(catalog_config).load_table(TABLE)
    assert table_ids(catalog_config, TABLE) == list(range(20))
    assert {f.file.spec_id for f in table.scan().plan_files()} == {0, 1}


def test_files_staged_in_the_ledger_row_are_versioned_values_read_back_exactly() -> None:
    import decimal

    from icesink.catalog.checkpoints import DELTA_MANIFESTS_VERSION, DeltaManifests, InlineFiles, StagedFiles
    from icesink.catalog.checkpoints import StagedManifest as Manifest
    from icesink.results import FileContent, FileRecord

    data = FileRecord(
        path='s3://b/d ü"x%20.parquet',
        content=FileContent.DATA,
        record_count=7,
        file_size_bytes=1000,
        spec_id=3,
        partition=(b"\x00\xff", decimal.Decimal("-1.50"), None, "ü", 2**40, True, 0.1),
        column_sizes={1: 10},
        value_counts={1: 7},
        null_value_counts={1: 0},
        lower_bounds={1: b"\x00"},
        upper_bounds={1: b"\xff" * 3},
        split_offsets=(4,),
    )
    deletes = FileRecord(
        path="/x/eq.parquet",
        content=FileContent.EQUALITY_DELETES,
        record_count=2,
        file_size_bytes=50,
        spec_id=3,
        partition=(),
        equality_ids=(1, 2),
    )
    counts = DeltaManifests(InlineFiles.of((data, data)), InlineFiles.of((deletes,)))
    assert json.loads(counts.encode())["version"] == DELTA_MANIFESTS_VERSION == 2
    assert DeltaManifests.decode(counts.encode()) == counts and counts.paths == []
    assert (counts.data_files, counts.data_records, counts.delete_files, counts.delete_records) == (2, 14, 1, 2)
    assert counts.flat()["data_manifest"] is None and counts.flat()["data_files"] == 2
    mixed = DeltaManifests(Manifest("/d.avro", 1, 1, 1), InlineFiles(1, 2))
    assert DeltaManifests.decode(mixed.encode()) == mixed and mixed.paths == ["/d.avro"]
    files = StagedFiles((data, data), (deletes,))
    assert StagedFiles.decode(files.encode()) == files and files.paths == [data.path, data.path, deletes.path]
    assert not StagedFiles() and files
    body = json.loads(files.encode())
    first, delete = body["data"][0], body["deletes"][0]
    for unreadable in (  # each would commit part of a checkpoint, or the wrong files
        {**body, "version": 2},
        {**body, "more": []},
        {**body, "data": [{**first, "content": 9}]},
        {**body, "data": [delete]},  # a delete file among the data files would be committed as rows
        {**body, "deletes": [first]},
        {**body, "data": [{k: v for k, v in first.items() if k != "path"}]},
        {**body, "data": [{**first, "path": ""}]},
        {**body, "data": [{**first, "partition": [{"z": 1}]}]},
        {**body, "deletes": "none"},
    ):
        with pytest.raises(ValueError):
            StagedFiles.decode(json.dumps(unreadable))
    for unreadable in (
        {"content": "data", "files": 1, "records": -1},
        {"content": "data", "files": 1, "records": 1, "entries": []},
    ):
        with pytest.raises(ValueError):
            DeltaManifests.decode(json.dumps({"version": 2, "manifests": [unreadable]}))


def test_delta_manifests_are_one_versioned_value_in_the_ledger() -> None:
    from icesink.catalog.checkpoints import DELTA_MANIFESTS_VERSION, DeltaManifests, StagedManifest

    both = DeltaManifests(StagedManifest("s3://b/d ü.avro", 10, 2, 7), StagedManifest("/x/del%.avro", 5, 1, 3))
    assert DeltaManifests.decode(both.encode()) == both
    assert json.loads(both.encode())["version"] == 1 < DELTA_MANIFESTS_VERSION  # readable by releases before
    assert both.paths == ["s3://b/d ü.avro", "/x/del%.avro"] and both.data_records == 7 and both.delete_files == 1
    only_deletes = DeltaManifests(deletes=StagedManifest("/x/del.avro", 5, 1, 3))
    assert DeltaManifests.decode(only_deletes.encode()) == only_deletes
    assert only_deletes.flat()["data_manifest"] is None and only_deletes.data_files == 0
    assert only_deletes.flat()["delete_records"] == 3
    assert DeltaManifests().paths == [] and DeltaManifests.decode(DeltaManifests().encode()) == DeltaManifests()
    manifest = {"content": "data", "path": "/d.avro", "length": 1, "files": 1, "records": 1}
    half_understood = [  # each would commit part of a checkpoint, or the wrong part
        {"version": 1, "manifests": [{**manifest, "content": "position-deletes"}]},
        {"version": 1, "manifests": [manifest, {**manifest, "path": "/e.avro"}]},
        {"version": 1, "manifests": [{**manifest, "segments": 2}]},
        {"version": 1, "manifests": [manifest], "more": []},
        {"version": 1, "manifests": [{**manifest, "path": None}]},
        {"version": 1, "manifests": [{**manifest, "records": -1}]},
        {"version": True, "manifests": [manifest]},
        {"version": 1, "manifests": [{"content": "data", "files": 0, "records": 0}]},  # files held: version 2
    ]
    assert DeltaManifests.decode(json.dumps({"version": 1, "manifests": [manifest]})).data_records == 1
    for unreadable in (
        json.dumps({"version": DELTA_MANIFESTS_VERSION + 1, "manifests": []}),
        '{"manifests": []}',
        "[1]",
        '{"version": "1"}',
        "{oops",
        *(json.dumps(v) for v in half_understood),
    ):
        with pytest.raises(ValueError):
            DeltaManifests.decode(unreadable)


def test_rows_read_again_with_their_files_in_queries_of_bounded_size(catalog_config: CatalogConfig) -> None:
    """More staged rows than one query names (a long backlog shown or committed) are all read with their files."""
    from icesink.catalog.checkpoints import DeltaManifests, InlineFiles, StagedCheckpoint, StagedFiles
    from icesink.catalog.ledger import _IDS_PER_QUERY
    from icesink.results import FileContent, FileRecord

    ledger = Ledger(catalog_config)
    count = 2 * _IDS_PER_QUERY + 7
    staged = []
    for checkpoint_id in range(count):
        record = FileRecord(f"file:///wh/ü/{checkpoint_id}.parquet", FileContent.DATA, 1, 10, 0, ())
        files = StagedFiles((record,))
        manifests = DeltaManifests(InlineFiles.of(files.data))
        row = StagedCheckpoint(
            identifier=TABLE, job_id="job", checkpoint_id=checkpoint_id, spec_id=0, manifests=manifests, files=files
        )
        staged.append((row, CheckpointState.STAGED))
    assert ledger.stage_all(staged)
    rows = ledger.pending(TABLE)
    assert len(rows) == count and all(r.files is None for r in rows)
    read = ledger.with_files(rows)
    assert [r.id for r in read] == [r.id for r in rows]
    assert [r.files.data[0].path for r in read if r.files] == [f"file:///wh/ü/{i}.parquet" for i in range(count)]
