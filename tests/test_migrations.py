"""Migrations keep what was staged: rows an earlier release wrote read on after an upgrade, and back after a
downgrade, on SQLite and PostgreSQL."""

from __future__ import annotations

import datetime
import json
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from icesink import migrations
from icesink.catalog.checkpoints import DeltaManifests, StagedCheckpoint, StagedManifest
from icesink.catalog.config import CatalogConfig
from icesink.catalog.database import engine
from icesink.catalog.ledger import Ledger
from icesink.errors import LedgerFormatError
from icesink.paths import file_uri
from tests.test_cli import invoke

TABLE = "sales.orders ü%/x"
_PAIR = ("manifest", "manifest_length", "files", "records")
# Before revision 0007, what each checkpoint staged: (data manifest, delete manifest), each (path, length,
# files, records) or None. Paths as hostile as a warehouse may hold.
BEFORE_0007 = {
    0: (("s3://lake/wh/orders ü/metadata/ckpt-0 100%.avro", 4100, 3, 300), None),
    1: (None, ("/wh/sales.db/orders ü%/metadata/del 1.avro", 900, 1, 12)),
    2: (("file:///wh/a b/d-2.avro", 4200, 2, 20), ("file:///wh/a b/e-2.avro", 950, 2, 7)),
    3: (None, None),  # a checkpoint of an empty micro-batch
}
MANY = 5003  # past the migration's chunk of 5,000 rows


def _flat(pair: tuple[Any, Any]) -> dict[str, Any]:
    values: dict[str, Any] = {}
    for prefix, manifest in zip(("data", "delete"), pair, strict=True):
        for name, value in zip(_PAIR, manifest or (None, None, 0, 0), strict=True):
            values[f"{prefix}_{name}"] = value
    return values


def _old_row(checkpoint_id: int, pair: tuple[Any, Any], job: str = "job ü") -> dict[str, Any]:
    return {
        "catalog_name": "main",
        "table_identifier": TABLE,
        "job_id": job,
        "checkpoint_id": checkpoint_id,
        "state": "staged" if checkpoint_id else "committed",
        "spec_id": 0,
        "staged_at": datetime.datetime(2026, 11, 1, tzinfo=datetime.UTC),
        "manifests_deleted": False,
        **_flat(pair),
    }


def _expected(pair: tuple[Any, Any]) -> DeltaManifests:
    return DeltaManifests(*(StagedManifest(*m) if m else None for m in pair))


def _ledger_rows(bound: sa.Engine, *columns: str) -> list[dict[str, Any]]:
    table = sa.Table("icesink_checkpoints", sa.MetaData(), autoload_with=bound)
    with bound.connect() as connection:
        query = sa.select(*(table.c[c] for c in ("job_id", "checkpoint_id", *columns))).order_by(table.c.id)
        return [dict(r._mapping) for r in connection.execute(query)]


@pytest.fixture
def at_0006(empty_database: str) -> sa.Engine:
    """A catalog database at revision 0006, holding checkpoints an earlier release staged."""
    bound = sa.create_engine(empty_database)
    migrations.upgrade(bound, "0006")
    table = sa.Table("icesink_checkpoints", sa.MetaData(), autoload_with=bound)
    many = [_old_row(i, (("/wh/d.avro", 10 + i, 1, i), None), job="bulk") for i in range(MANY)]
    with bound.begin() as connection:
        connection.execute(table.insert(), [_old_row(i, pair) for i, pair in BEFORE_0007.items()] + many)
    return bound


def test_rows_staged_before_the_versioned_encoding_read_on_and_back(at_0006: sa.Engine, tmp_path: Path) -> None:
    migrations.upgrade(at_0006, "head")
    config = CatalogConfig("main", str(at_0006.url.render_as_string(hide_password=False)), file_uri(tmp_path))
    ledger = Ledger(config, at_0006)
    for checkpoint_id, pair in BEFORE_0007.items():
        row = ledger.get(TABLE, "job ü", checkpoint_id)
        assert row is not None and row.manifests == _expected(pair), checkpoint_id
    assert [r.checkpoint_id for r in ledger.pending(TABLE, "job ü")] == [1, 2, 3]
    bulk = ledger.pending(TABLE, "bulk")
    assert len(bulk) == MANY - 1  # checkpoint 0 of each job was staged as committed
    assert all(
        r.manifests == DeltaManifests(StagedManifest("/wh/d.avro", 10 + r.checkpoint_id, 1, r.checkpoint_id))
        for r in bulk
    )
    stored = {
        r["checkpoint_id"]: json.loads(r["delta_manifests"])
        for r in _ledger_rows(at_0006, "delta_manifests")
        if r["job_id"] == "job ü"
    }
    assert stored[1] == {
        "version": 1,
        "manifests": [
            {
                "content": "deletes",
                "path": "/wh/sales.db/orders ü%/metadata/del 1.avro",
                "length": 900,
                "files": 1,
                "records": 12,
            }
        ],
    }
    assert stored[3] == {"version": 1, "manifests": []}

    # Staged by this release, then the database taken back to 0006 for an earlier release: the eight columns
    # hold every row again, this release's included.
    new = _expected((("/wh/new ü.avro", 77, 5, 50), ("/wh/new-del %.avro", 33, 1, 4)))
    assert ledger.stage(StagedCheckpoint(identifier=TABLE, job_id="job ü", checkpoint_id=4, spec_id=0, manifests=new))
    assert invoke(config, "db", "downgrade", "0006")[0] == 0
    back = {
        r["checkpoint_id"]: r
        for r in _ledger_rows(at_0006, *(f"{p}_{n}" for p in ("data", "delete") for n in _PAIR))
        if r["job_id"] == "job ü"
    }
    for checkpoint_id, pair in BEFORE_0007.items():
        assert {k: v for k, v in back[checkpoint_id].items() if k not in ("job_id", "checkpoint_id")} == _flat(pair)
    assert back[4]["data_manifest"] == "/wh/new ü.avro" and back[4]["delete_records"] == 4
    migrations.upgrade(at_0006, "head")
    assert Ledger(config, at_0006).get(TABLE, "job ü", 4).manifests == new  # type: ignore[union-attr]


def test_a_row_of_a_later_encoding_is_refused_by_name_and_left_as_it_is(own_catalog: CatalogConfig) -> None:
    ledger = Ledger(own_catalog)
    staged = StagedCheckpoint(
        identifier=TABLE,
        job_id="job",
        checkpoint_id=7,
        spec_id=0,
        manifests=_expected((("/wh/d.avro", 1, 1, 1), None)),
    )
    assert ledger.stage(staged)
    later = json.dumps({"version": 3, "manifests": [], "segments": [{"path": "/wh/x.avro"}]})
    table = sa.Table("icesink_checkpoints", sa.MetaData(), autoload_with=engine(own_catalog))
    with engine(own_catalog).begin() as connection:
        connection.execute(table.update().values(delta_manifests=later))
    with pytest.raises(LedgerFormatError) as refused:
        ledger.pending(TABLE)
    message = str(refused.value)
    assert "checkpoint 7" in message and repr(TABLE) in message and "version 3" in message
    assert "upgrade icesink" in message
    assert [r["delta_manifests"] for r in _ledger_rows(engine(own_catalog), "delta_manifests")] == [later]


def test_a_downgrade_that_would_lose_a_row_or_names_no_revision_is_refused(own_catalog: CatalogConfig) -> None:
    ledger = Ledger(own_catalog)
    assert ledger.stage(
        StagedCheckpoint(identifier=TABLE, job_id="job", checkpoint_id=0, spec_id=0, manifests=DeltaManifests())
    )
    code, output = invoke(own_catalog, "db", "downgrade", "0042")
    assert code == 2 and "no schema revision '0042'" in output and "0001, 0002" in output
    table = sa.Table("icesink_checkpoints", sa.MetaData(), autoload_with=engine(own_catalog))
    with engine(own_catalog).begin() as connection:
        connection.execute(table.update().values(delta_manifests='{"version": 3, "manifests": []}'))
    code, output = invoke(own_catalog, "db", "downgrade", "0006")  # where a later encoding cannot go
    assert code != 0 and "encoding version 3" in output and "Traceback" not in output, output
    assert f"checkpoint 0 of job 'job' for table {TABLE!r}" in output
    assert migrations.current_revision(engine(own_catalog)) == migrations.head_revision()  # nothing half-done


def test_a_downgrade_goes_only_where_every_row_and_every_process_can_follow(
    own_catalog: CatalogConfig, tmp_path: Path
) -> None:
    from icesink.catalog.lease import Lease

    code, output = invoke(own_catalog, "db", "downgrade", "0005")  # would drop which checkpoints commit together
    assert code == 2 and "goes back to 0006 at the oldest" in output, output
    code, output = invoke(own_catalog, "db", "downgrade", migrations.head_revision())
    assert code == 2 and "nothing to take back" in output, output
    lease = Lease(own_catalog, scope="*", owner="committer-1 ü", ttl=60)
    assert lease.acquire()
    code, output = invoke(own_catalog, "db", "downgrade", "0006")
    assert code == 2 and "committers are running (committer-1 ü" in output, output
    lease.release()
    assert migrations.current_revision(engine(own_catalog)) == migrations.head_revision()
    missing = CatalogConfig("lost", f"sqlite:///{tmp_path / 'nowhere' / 'c.db'}", file_uri(tmp_path))
    code, output = invoke(missing, "db", "downgrade", "0006")
    assert code == 2 and "does not exist" in output and not (tmp_path / "nowhere").exists(), output
    assert invoke(own_catalog, "db", "downgrade", "0006")[0] == 0
    assert migrations.current_revision(engine(own_catalog)) == "0006"


def test_a_database_a_later_release_migrated_says_which_release_to_use(own_catalog: CatalogConfig) -> None:
    with engine(own_catalog).begin() as connection:
        connection.execute(sa.text(f"UPDATE {migrations.VERSION_TABLE} SET version_num = '0042'"))
    code, output = invoke(own_catalog, "tables", "list")
    assert code == 2 and "at schema revision 0042, which a later icesink release made" in output, output
    assert f"icesink db downgrade {migrations.head_revision()}" in output
    code, output = invoke(own_catalog, "db", "downgrade", "0006")
    assert code == 2 and "take it back with that release" in output and "Traceback" not in output, output


def test_the_head_every_catalog_is_compared_with_is_alembics_head() -> None:
    """A new migration must move migrations.HEAD too: a catalog at the new revision would otherwise be refused."""
    assert migrations.HEAD == migrations.head_revision() == migrations.revisions()[-1]


def test_files_staged_in_ledger_rows_go_back_to_the_release_before_only_once_committed(
    own_catalog: CatalogConfig,
) -> None:
    from icesink.catalog.checkpoints import InlineFiles, StagedFiles
    from icesink.results import FileContent, FileRecord

    ledger = Ledger(own_catalog)
    data = FileRecord(f"file:///wh/{TABLE}/d.parquet", FileContent.DATA, 3, 100, 0, ())
    inline = DeltaManifests(InlineFiles.of((data,)))
    for checkpoint_id in (0, 1):
        staged = StagedCheckpoint(
            identifier=TABLE,
            job_id="job ü",
            checkpoint_id=checkpoint_id,
            spec_id=0,
            manifests=inline,
            files=StagedFiles((data,)),
        )
        assert ledger.stage(staged)
    old = _expected((("/wh/d 1.avro", 10, 1, 5), None))  # staged by a release before, still staged
    assert ledger.stage(StagedCheckpoint(identifier=TABLE, job_id="old", checkpoint_id=0, spec_id=0, manifests=old))
    first = ledger.get(TABLE, "job ü", 0)
    assert first is not None and first.manifests == inline
    ledger.mark_committed([first.id], 1)
    ledger.mark_cleaned([first.id])

    code, output = invoke(own_catalog, "db", "downgrade", "0017")  # checkpoint 1 holds files only this release reads
    assert code != 0 and "Traceback" not in output, output
    assert f"checkpoint 1 of job 'job ü' for table {TABLE!r}" in output and "commit it" in output
    assert migrations.current_revision(engine(own_catalog)) == "0018"
    (second,) = [r for r in ledger.pending(TABLE, "job ü", with_files=True)]
    assert second.files == StagedFiles((data,))

    ledger.mark_committed([second.id], 2)
    ledger.mark_cleaned([second.id])
    code, output = invoke(own_catalog, "db", "downgrade", "0017")
    assert code == 0, output
    rows = _ledger_rows(engine(own_catalog), "delta_manifests", "manifests_deleted")
    in_the_row = {"content": "data", "path": "(staged in the ledger row)", "length": 0, "files": 1, "records": 3}
    assert [(r["job_id"], json.loads(r["delta_manifests"]), r["manifests_deleted"]) for r in rows] == [
        ("job ü", {"version": 1, "manifests": [in_the_row]}, True),  # what it held, for the release before
        ("job ü", {"version": 1, "manifests": [in_the_row]}, True),
        ("old", json.loads(old.encode()), False),
    ]
    code, output = invoke(own_catalog, "db", "upgrade")
    assert code == 0, output
    read = Ledger(own_catalog).for_table(TABLE, with_files=True)
    assert [(r.manifests.data_records, r.files) for r in read] == [(3, None), (3, None), (5, None)]
