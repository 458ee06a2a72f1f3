"""The pyiceberg internals icesink builds on; these fail loudly if a pyiceberg upgrade moves them."""

from __future__ import annotations

from pathlib import Path

import pytest

from icesink.catalog.config import CatalogConfig
from icesink.catalog.loader import open_catalog
from icesink.committer import pyiceberg_internals as internals
from tests.support import create_orders_table, orders, write_files


@pytest.fixture
def table(tmp_path: Path):  # type: ignore[no-untyped-def]
    from icesink.catalog import database

    config = CatalogConfig("t", f"sqlite:///{tmp_path / 'c.db'}", tmp_path.as_uri())
    database.upgrade(config)
    create_orders_table(config)
    return open_catalog(config).load_table("shop.orders")


def test_installed_pyiceberg_is_the_pinned_version() -> None:
    import pyiceberg

    assert pyiceberg.__version__ == internals.PYICEBERG_VERSION


def test_delta_manifest_round_trips_through_pyiceberg_reader(table, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    from pyiceberg.manifest import DataFileContent, FileFormat

    result = write_files(table, "shop.orders", "job", 3, orders(0, 50), task_id=1)
    files = [internals.to_data_file(f, table.metadata.format_version) for f in result.data_files]
    path = (tmp_path / "delta.avro").as_uri()
    manifest = internals.write_delta_manifest(table, path, 0, files)
    back = internals.read_delta_manifest(table.io, manifest)
    assert [f.file_path for f in back] == [f.path for f in result.data_files]
    (f,) = back
    assert f.content == DataFileContent.DATA and f.file_format == FileFormat.PARQUET
    assert f.record_count == 50
    assert f.lower_bounds == result.data_files[0].lower_bounds
    assert f.null_value_counts == result.data_files[0].null_value_counts
    assert f.spec_id == 0


def test_prepared_append_is_a_valid_snapshot_and_commits_once(table) -> None:  # type: ignore[no-untyped-def]
    from pyiceberg.exceptions import CommitFailedException

    result = write_files(table, "shop.orders", "job", 0, orders(0, 20))
    data_files = [internals.to_data_file(f, 2) for f in result.data_files]
    prepared = internals.prepare_snapshot(table, data_files, {"icesink.job-id": "job"})
    committed = internals.commit_prepared(table, prepared)
    snapshot = committed.current_snapshot()
    assert snapshot.snapshot_id == prepared.snapshot_id and snapshot.sequence_number == 1
    assert snapshot.summary["total-records"] == "20" and snapshot.summary["icesink.job-id"] == "job"
    assert committed.scan().to_arrow().num_rows == 20
    # The same prepared snapshot cannot be swapped in twice: the head it asserted is gone.
    with pytest.raises(CommitFailedException):
        internals.commit_prepared(table, prepared)
    again = internals.prepare_snapshot(committed, data_files, {})
    second = internals.commit_prepared(committed, again)
    assert second.current_snapshot().parent_snapshot_id == prepared.snapshot_id
    assert second.current_snapshot().summary["total-records"] == "40"
