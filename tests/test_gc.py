"""``icesink committer gc``: orphans go, nothing a snapshot or a staged checkpoint needs is touched."""

from __future__ import annotations

import datetime
import time
from pathlib import Path

import pytest

from icesink.catalog.config import CatalogConfig
from icesink.catalog.ledger import Ledger
from icesink.catalog.loader import open_catalog
from icesink.committer.commit import TableCommitter
from icesink.committer.gc import collect_garbage, parse_age
from icesink.errors import ManifestError
from tests.helpers.support import (
    age_everything,
    create_orders_table,
    orders,
    stage_rows,
    staged_in_manifests,
    table_ids,
    write_files,
)

TABLE = "shop.orders"
OTHER = "shop.orders ü %/x"  # a name whose audits are another table's, however alike
HOUR = datetime.timedelta(hours=1)


def local(uri: str) -> Path:
    return Path(uri.removeprefix("file://"))


def table_root(config: CatalogConfig) -> Path:
    return local(open_catalog(config).load_table(TABLE).location())


def test_gc_deletes_orphans_and_keeps_everything_referenced(catalog_config: CatalogConfig) -> None:
    create_orders_table(catalog_config)
    committer = TableCommitter.of(catalog_config)
    stage_rows(catalog_config, TABLE, "job-a", 0, orders(0, 10))
    committer.commit_pending(TABLE)
    # A killed task attempt's file that no checkpoint names, and a checkpoint staged but not committed.
    table = open_catalog(catalog_config).load_table(TABLE)
    (orphan,) = write_files(table, TABLE, "job-a", 1, orders(500, 5), task_id=7).data_files
    stage_rows(catalog_config, TABLE, "job-a", 1, orders(10, 10))
    (staged,) = Ledger(catalog_config).pending(TABLE, with_files=True)
    age_everything(table_root(catalog_config))
    (young,) = write_files(table, TABLE, "job-a", 2, orders(900, 5), task_id=8).data_files

    dry = collect_garbage(open_catalog(catalog_config), catalog_config, TABLE, HOUR, dry_run=True)
    assert dry.deleted == [orphan.path] and local(orphan.path).exists()

    report = collect_garbage(open_catalog(catalog_config), catalog_config, TABLE, HOUR)
    assert report.deleted == [orphan.path]
    assert report.too_young == 1 and local(young.path).exists()  # may belong to a batch still being written
    assert not local(orphan.path).exists()
    assert staged.manifests.data is not None and staged.manifests.data.files == 1 and staged.files is not None
    assert all(local(path).exists() for path in staged.files.paths)  # named in its ledger row only
    # The staged checkpoint still commits, and the table reads exactly.
    committer.commit_pending(TABLE)
    assert table_ids(catalog_config, TABLE) == list(range(20))


def test_gc_removes_what_expired_snapshots_and_merges_left_behind(catalog_config: CatalogConfig) -> None:
    create_orders_table(catalog_config)
    table = open_catalog(catalog_config).load_table(TABLE)
    with table.transaction() as transaction:
        transaction.set_properties(
            {
                "history.expire.max-snapshot-age-ms": "1",
                "commit.manifest.min-count-to-merge": "3",
                "write.metadata.previous-versions-max": "2",
            }
        )
    committer = TableCommitter.of(catalog_config, expire_snapshots=True)
    for checkpoint in range(6):
        time.sleep(0.01)
        stage_rows(catalog_config, TABLE, "job-a", checkpoint, orders(checkpoint * 10, 10))
        committer.commit_pending(TABLE)
    assert len(open_catalog(catalog_config).load_table(TABLE).metadata.snapshots) == 1
    metadata_dir = table_root(catalog_config) / "metadata"
    before = {p.name for p in metadata_dir.iterdir()}
    age_everything(table_root(catalog_config))
    report = collect_garbage(open_catalog(catalog_config), catalog_config, TABLE, HOUR)
    deleted = {local(p).name for p in report.deleted}
    assert any(name.startswith("snap-") for name in deleted)  # manifest lists of expired snapshots
    assert any(name.endswith(".metadata.json") for name in deleted)  # beyond previous-versions-max
    assert {p.name for p in metadata_dir.iterdir()} == before - deleted
    # Data files are all still live (appends only), and the table and an independent reader agree.
    assert not any(name.endswith(".parquet") for name in deleted)
    assert table_ids(catalog_config, TABLE) == list(range(60))
    # Ledger rows of long-committed checkpoints are forgotten, the newest per job stays.
    assert report.ledger_rows_pruned == 0  # committed just now
    later = collect_garbage(open_catalog(catalog_config), catalog_config, TABLE, datetime.timedelta(0))
    assert later.ledger_rows_pruned == 5
    assert [r.checkpoint_id for r in Ledger(catalog_config).for_table(TABLE)] == [5]


def test_gc_forgets_the_audits_of_snapshots_the_table_expired(catalog_config: CatalogConfig) -> None:
    """Write-audit-publish records an audit per audited snapshot; once expiry removed a snapshot, gc forgets its
    audit, so the record does not grow for as long as the table lives. Another table's audits are its own."""
    from icesink.catalog.audit_record import AuditEntry, AuditRecord
    from icesink.committer.recorded_checks import recorded_checks

    config = catalog_config
    create_orders_table(config)
    create_orders_table(config, OTHER)
    with open_catalog(config).load_table(TABLE).transaction() as transaction:
        transaction.set_properties({"history.expire.max-snapshot-age-ms": "1"})
    committer, record = TableCommitter.of(config, expire_snapshots=True), AuditRecord(config)

    def audited(
        identifier: str, snapshot_id: int, checkpoint: int, branch: str = "audit", job: str | None = "job-a"
    ) -> None:
        now = datetime.datetime.now(datetime.UTC)
        record.record(AuditEntry(identifier, branch, snapshot_id, None, job, checkpoint, True, 10, {}, [], now))

    committed = []
    for checkpoint in range(6):
        time.sleep(0.01)
        stage_rows(config, TABLE, "job-a", checkpoint, orders(checkpoint * 10, 10))
        committer.commit_pending(TABLE)
        committed.append(open_catalog(config).load_table(TABLE).current_snapshot().snapshot_id)
        audited(TABLE, committed[-1], checkpoint)
    audited(OTHER, 12345, 0)  # a snapshot of another table, which this one never had
    # A branch whose audits are all of snapshots expired since: the newest of each job says which checks it runs
    # (another tool's snapshot, audited without a job, does not stand for the job's).
    audited(TABLE, committed[0], 0, branch="side")
    audited(TABLE, committed[1], 1, branch="side")
    (kept,) = open_catalog(config).load_table(TABLE).metadata.snapshots
    audited(TABLE, kept.snapshot_id, 5, branch="side", job=None)
    assert len(record.of_branch(TABLE, "audit")) == 6
    young = collect_garbage(open_catalog(config), config, TABLE, HOUR)
    assert young.audit_rows_pruned == 0 and len(record.of_branch(TABLE, "audit")) == 6  # recorded just now
    dry = collect_garbage(open_catalog(config), config, TABLE, datetime.timedelta(0), dry_run=True)
    assert dry.audit_rows_pruned == 6 and len(record.of_branch(TABLE, "audit")) == 6  # said, not done
    report = collect_garbage(open_catalog(config), config, TABLE, datetime.timedelta(0))
    assert report.audit_rows_pruned == 6
    assert list(record.of_branch(TABLE, "audit")) == [kept.snapshot_id]
    assert sorted(record.of_branch(TABLE, "side")) == sorted([committed[1], kept.snapshot_id])
    assert recorded_checks(TABLE, "side", config, "job-a") == []  # found (it ran none), not "no audit recorded"
    assert list(record.of_branch(OTHER, "audit")) == [12345]


def test_gc_refuses_to_guess_when_a_staged_manifest_is_missing(sqlite_catalog: CatalogConfig) -> None:
    create_orders_table(sqlite_catalog)
    stage_rows(sqlite_catalog, TABLE, "job-a", 0, orders(0, 10))
    row = staged_in_manifests(sqlite_catalog, TABLE, "job-a", 0)  # as a release before staged it
    local(row.manifests.data.path).unlink()
    age_everything(table_root(sqlite_catalog))
    files_before = sorted(table_root(sqlite_catalog).rglob("*.parquet"))
    with pytest.raises(ManifestError, match="checkpoint 0") as raised:
        collect_garbage(open_catalog(sqlite_catalog), sqlite_catalog, TABLE, HOUR)
    assert row.manifests.data.path in str(raised.value) and TABLE in str(raised.value)
    assert sorted(table_root(sqlite_catalog).rglob("*.parquet")) == files_before


@pytest.mark.parametrize(("text", "seconds"), [("90s", 90), ("30m", 1800), ("12h", 43200), ("3d", 259200)])
def test_ages(text: str, seconds: int) -> None:
    assert parse_age(text).total_seconds() == seconds


@pytest.mark.parametrize("text", ["3", "d", "1.5h", "-1d", "3w"])
def test_bad_ages_name_the_forms(text: str) -> None:
    with pytest.raises(ValueError, match="3d or 12h"):
        parse_age(text)


def test_gc_from_the_command_line(sqlite_catalog: CatalogConfig) -> None:
    import json

    from tests.test_cli import invoke

    create_orders_table(sqlite_catalog)
    table = open_catalog(sqlite_catalog).load_table(TABLE)
    (orphan,) = write_files(table, TABLE, "job-a", 0, orders(0, 5)).data_files
    age_everything(table_root(sqlite_catalog))
    code, output = invoke(sqlite_catalog, "committer", "gc", "--older-than", "1h", "--json")
    assert code == 0, output
    (report,) = json.loads(output)
    assert report["table"] == TABLE and report["deleted"] == [orphan.path]
    code, output = invoke(sqlite_catalog, "committer", "gc", "--older-than", "soon")
    assert code == 2 and "--older-than" in output and "3d or 12h" in output


def test_gc_racing_a_commit_finds_the_files_in_the_table(
    sqlite_catalog: CatalogConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    """gc read the checkpoint as staged; the committer committed it and deleted its manifest before gc read that."""
    create_orders_table(sqlite_catalog)
    stage_rows(sqlite_catalog, TABLE, "job-a", 0, orders(0, 10))
    staged_in_manifests(sqlite_catalog, TABLE, "job-a", 0)  # as a release before staged it: a manifest to delete
    stale_rows = Ledger(sqlite_catalog).for_table(TABLE)
    TableCommitter.of(sqlite_catalog).commit_pending(TABLE)
    assert not local(stale_rows[0].manifests.data.path).exists()
    monkeypatch.setattr(
        Ledger, "for_table", lambda self, identifier, newest=None, unreadable_too=False, with_files=False: stale_rows
    )
    age_everything(table_root(sqlite_catalog))
    report = collect_garbage(open_catalog(sqlite_catalog), sqlite_catalog, TABLE, HOUR)
    assert not any(uri.endswith(".parquet") for uri in report.deleted)
    assert table_ids(sqlite_catalog, TABLE) == list(range(10))


def test_gc_of_a_table_leaves_a_table_inside_its_directory_alone(catalog_config: CatalogConfig) -> None:
    """pyiceberg places ``shop.orders/x ü`` inside ``shop.orders``'s directory: gc of the outer table judges only
    its own files, and each table still reads whole."""
    inner = f"{TABLE}/x ü"
    create_orders_table(catalog_config)
    create_orders_table(catalog_config, inner)
    committer = TableCommitter.of(catalog_config)
    for checkpoint, identifier in enumerate((TABLE, inner, inner)):
        stage_rows(catalog_config, identifier, "job", checkpoint, orders(checkpoint * 10, 10))
        committer.commit_pending(identifier)
    stage_rows(catalog_config, inner, "job", 3, orders(30, 10))  # staged, not committed: only the ledger names it
    inner_root = local(open_catalog(catalog_config).load_table(inner).location())
    assert inner_root.is_relative_to(table_root(catalog_config)), "the layout this test is about"
    (orphan,) = write_files(open_catalog(catalog_config).load_table(TABLE), TABLE, "job", 9, orders(0, 1)).data_files
    age_everything(table_root(catalog_config))
    report = collect_garbage(open_catalog(catalog_config), catalog_config, TABLE, HOUR)
    assert report.deleted == [orphan.path]
    assert all(not local(uri).is_relative_to(inner_root) for uri in report.deleted)
    committer.commit_pending(inner)
    assert table_ids(catalog_config, TABLE) == list(range(10))
    assert table_ids(catalog_config, inner) == list(range(10, 40))
    # And gc of the inner table, from inside the outer one's directory, still finds its own garbage.
    (inner_orphan,) = write_files(
        open_catalog(catalog_config).load_table(inner), inner, "job", 9, orders(0, 1)
    ).data_files
    age_everything(inner_root)
    assert collect_garbage(open_catalog(catalog_config), catalog_config, inner, HOUR).deleted == [inner_orphan.path]
