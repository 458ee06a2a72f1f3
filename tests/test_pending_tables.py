"""A table a stream into several tables creates enters the catalog with its first commit, not before
(driven without Spark, on SQLite and PostgreSQL)."""

from __future__ import annotations

import datetime
import json
from pathlib import Path

import pyarrow as pa
import pytest
import sqlalchemy as sa
from pyiceberg.exceptions import NoSuchTableError

from icesink import migrations, paths
from icesink.catalog.config import CatalogConfig
from icesink.catalog.database import engine
from icesink.catalog.loader import open_catalog
from icesink.committer.checkpoints import CheckpointState
from icesink.committer.commit import TableCommitter
from icesink.committer.gc import collect_garbage
from icesink.committer.ledger import Ledger
from icesink.errors import TableCreatedElsewhereError
from icesink.iceberg.pending_tables import pending_tables
from icesink.properties import COMMIT_ID_PROPERTY
from tests.helpers.support import (
    age_everything,
    create_orders_table,
    orders,
    pointers,
    stage_group,
    stage_rows,
    table_ids,
)
from tests.test_cli import invoke

OLD = "shop.orders"
NEW = "shop.new lines ü %/x"


def _invisible(config: CatalogConfig, identifier: str) -> bool:
    """Whether a reader of the catalog (pyiceberg's own SqlCatalog) cannot see the table."""
    catalog = open_catalog(config)
    names = {".".join(i) for i in catalog.list_tables(identifier.rsplit(".", 1)[0])}
    with pytest.raises(NoSuchTableError):
        catalog.load_table(identifier)
    return identifier not in names and identifier not in pointers(config)


def test_a_new_table_appears_with_the_checkpoint_that_created_it(catalog_config: CatalogConfig) -> None:
    config = catalog_config
    create_orders_table(config, OLD)
    created = create_orders_table(config, NEW, pending=True)
    assert _invisible(config, NEW)
    assert stage_group(config, "job", 0, {OLD: orders(0, 2), NEW: orders(10, 3)})
    assert _invisible(config, NEW)  # staged is not committed
    before = pointers(config)
    TableCommitter.of(config).commit_pending(OLD)
    after = pointers(config)
    assert set(after) == {OLD, NEW} and after[OLD] != before[OLD]  # both moved in the one transaction
    assert table_ids(config, NEW) == [10, 11, 12] and table_ids(config, OLD) == [0, 1]
    catalog = open_catalog(config)
    new, old = catalog.load_table(NEW), catalog.load_table(OLD)
    assert new.metadata.table_uuid == created.metadata.table_uuid
    assert new.current_snapshot().summary[COMMIT_ID_PROPERTY] == old.current_snapshot().summary[COMMIT_ID_PROPERTY]
    # Its first metadata file is its history's first entry, as for any created table.
    assert [e.metadata_file for e in new.metadata.metadata_log] == [created.metadata_location]
    assert pending_tables(engine(config), config.name) == []
    assert {r.state for r in Ledger(config).for_table(NEW)} == {CheckpointState.COMMITTED}


def test_a_pending_table_committed_alone_appears_with_its_first_snapshot(catalog_config: CatalogConfig) -> None:
    config = catalog_config
    create_orders_table(config, NEW, pending=True)
    assert stage_rows(config, NEW, "job", 0, orders(0, 4))
    assert _invisible(config, NEW)
    TableCommitter.of(config).commit_pending(NEW)
    assert table_ids(config, NEW) == [0, 1, 2, 3]
    assert stage_rows(config, NEW, "job", 1, orders(4, 1))  # and on from there, as any table
    TableCommitter.of(config).commit_pending(NEW)
    assert table_ids(config, NEW) == [0, 1, 2, 3, 4]


def test_a_schema_change_before_the_first_commit_stays_out_of_sight(catalog_config: CatalogConfig) -> None:
    from pyiceberg.types import StringType

    config = catalog_config
    table = create_orders_table(config, NEW, pending=True)
    table.update_schema().add_column("note ü", StringType()).commit()
    assert _invisible(config, NEW)
    (row,) = pending_tables(engine(config), config.name)
    assert row[1] == table.metadata_location != open_catalog(config, pending_tables=True).pending_location(OLD)
    rows = orders(0, 2)
    assert stage_rows(config, NEW, "job", 0, rows.append_column("note ü", pa.array(["a", None], pa.string())))
    TableCommitter.of(config).commit_pending(NEW)
    published = open_catalog(config).load_table(NEW)
    assert "note ü" in [f.name for f in published.schema().fields]
    assert len(published.metadata.metadata_log) == 2  # created, column added; then published with its snapshot


def test_a_second_stream_creating_the_same_table_uses_the_first_ones(catalog_config: CatalogConfig) -> None:
    config = catalog_config
    first = create_orders_table(config, NEW, pending=True)
    second = create_orders_table(config, NEW, pending=True)
    assert second.metadata_location == first.metadata_location
    metadata = sorted(p.name for p in (Path(paths.parse(first.location()).path) / "metadata").iterdir())
    assert len(metadata) == 1, metadata  # the loser's metadata file is gone


def test_another_tool_creating_the_name_first_gets_none_of_the_streams_rows(catalog_config: CatalogConfig) -> None:
    config = catalog_config
    create_orders_table(config, OLD)
    create_orders_table(config, NEW, pending=True)
    assert stage_group(config, "job", 0, {OLD: orders(0, 2), NEW: orders(10, 3)})
    before = pointers(config)
    other = create_orders_table(config, NEW)  # pyiceberg, say, with no idea of the stream
    with pytest.raises(TableCreatedElsewhereError) as refused:
        TableCommitter.of(config).commit_pending(OLD)
    message = str(refused.value)
    assert f"table {NEW}" in message and "another tool created" in message and "checkpoints discard" in message
    assert pointers(config)[OLD] == before[OLD]  # atomic: the group's other table did not move either
    assert open_catalog(config).load_table(NEW).metadata_location == other.metadata_location
    assert table_ids(config, NEW) == []
    rows = Ledger(config).for_table(NEW) + Ledger(config).for_table(OLD)
    assert {r.state for r in rows} == {CheckpointState.STAGED}  # nothing lost
    code, output = invoke(config, "tables", "list")
    assert code == 2 and "another tool created" in output, output


def test_the_cli_shows_a_pending_table_and_its_checkpoints(catalog_config: CatalogConfig) -> None:
    config = catalog_config
    create_orders_table(config, NEW, pending=True)
    assert stage_rows(config, NEW, "job", 0, orders(0, 2))
    code, output = invoke(config, "--output", "json", "tables", "list")
    assert code == 0, output
    (row,) = json.loads(output)
    assert row["table"] == NEW and row["pending"] is True and row["snapshots"] == 0
    code, output = invoke(config, "tables", "list")
    assert "pending" in output
    code, output = invoke(config, "--output", "json", "checkpoints", "list", NEW)
    assert code == 0 and [c["checkpoint_id"] for c in json.loads(output)["checkpoints"]] == [0], output
    code, output = invoke(config, "snapshots", "list", NEW)  # a reader's command: not there yet
    assert code == 2 and "a stream created it, and it appears with the commit of its first" in output, output


def test_gc_keeps_a_pending_tables_metadata(catalog_config: CatalogConfig) -> None:
    config = catalog_config
    table = create_orders_table(config, NEW, pending=True)
    assert stage_rows(config, NEW, "job", 0, orders(0, 2))
    age_everything(Path(paths.parse(config.warehouse).path))
    report = collect_garbage(open_catalog(config, pending_tables=True), config, NEW, datetime.timedelta(hours=1))
    assert report.files_seen > 0 and report.deleted == []
    assert table.metadata_location not in report.deleted
    TableCommitter.of(config).commit_pending(NEW)
    assert table_ids(config, NEW) == [0, 1]


def test_a_downgrade_waits_for_pending_tables(own_catalog: CatalogConfig) -> None:
    config = own_catalog
    create_orders_table(config, NEW, pending=True)
    code, output = invoke(config, "db", "downgrade", "0007")
    assert code != 0 and NEW in output and "first commit" in output and "Traceback" not in output, output
    assert migrations.current_revision(engine(config)) == migrations.head_revision()
    assert stage_rows(config, NEW, "job", 0, orders(0, 1))
    TableCommitter.of(config).commit_pending(NEW)
    code, output = invoke(config, "db", "downgrade", "0007")
    assert code == 0, output
    with engine(config).connect() as connection:
        assert not sa.inspect(connection).has_table("icesink_pending_tables")
