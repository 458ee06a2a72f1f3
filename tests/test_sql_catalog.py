"""The catalog icesink opens stages a commit's metadata as pyiceberg does, sharing what did not change instead of
copying the whole metadata."""

from __future__ import annotations

from pyiceberg.serializers import FromInputFile
from pyiceberg.table.update import RemoveSnapshotsUpdate, SetPropertiesUpdate, update_table_metadata

from icesink.catalog.config import CatalogConfig
from icesink.catalog.loader import open_catalog
from icesink.iceberg.snapshots import SnapshotChange, prepare_change
from icesink.iceberg.sql_catalog import IcesinkSqlCatalog, updated_metadata
from tests.helpers.support import create_orders_table, orders, stage_rows


def test_staged_metadata_is_pyicebergs_and_leaves_the_old_metadata_as_it_was(catalog_config: CatalogConfig) -> None:
    from icesink.committer.commit import TableCommitter

    create_orders_table(catalog_config, "shop.orders")
    for checkpoint in range(3):
        stage_rows(catalog_config, "shop.orders", "job", checkpoint, orders(checkpoint * 10, 10))
        TableCommitter.of(catalog_config).commit_pending("shop.orders")
    catalog = open_catalog(catalog_config)
    assert isinstance(catalog, IcesinkSqlCatalog)
    table = catalog.load_table("shop.orders")
    before = table.metadata.model_dump_json()
    # A snapshot, its branch, a property, snapshot expiry: the updates icesink's commits make.
    prepared = prepare_change(table, SnapshotChange(table_properties={"k": "v"}), expire_snapshots=True)
    oldest = min(table.snapshots(), key=lambda s: s.sequence_number).snapshot_id
    updates = (
        *prepared.updates,
        SetPropertiesUpdate(updates={"another": "1"}),
        RemoveSnapshotsUpdate(snapshot_ids=[oldest]),
    )
    assert {type(u).__name__ for u in updates} == {
        "AddSnapshotUpdate",
        "SetSnapshotRefUpdate",
        "SetPropertiesUpdate",
        "RemoveSnapshotsUpdate",
    }
    ours = updated_metadata(table.metadata, updates, table.metadata_location)
    theirs = update_table_metadata(table.metadata, updates, metadata_location=table.metadata_location)
    assert ours.model_dump(exclude={"last_updated_ms"}) == theirs.model_dump(exclude={"last_updated_ms"})
    assert table.metadata.model_dump_json() == before  # nothing of the old metadata changed
    # A commit through the catalog writes what a reader parses back as it was staged, and pyiceberg reads it.
    table = catalog.load_table("shop.orders")
    with table.transaction() as transaction:
        transaction.set_properties(owner="someone")
    table.append(orders(30, 5))
    table = catalog.load_table("shop.orders")
    assert FromInputFile.table_metadata(table.io.new_input(table.metadata_location)) == table.metadata
    assert sorted(table.scan().to_arrow().column("id").to_pylist()) == list(range(35))
