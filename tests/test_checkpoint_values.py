"""Values a checkpoint carries into its snapshot's summary: staged with it, committed with its rows, under
icesink's own markers (driven without Spark)."""

from __future__ import annotations

import json

import pytest
import sqlalchemy as sa

from icesink import migrations
from icesink.catalog.config import CatalogConfig
from icesink.catalog.database import engine
from icesink.catalog.ledger import Ledger
from icesink.catalog.loader import open_catalog
from icesink.committer.commit import TableCommitter
from icesink.committer.staging import TableResults, stage_tables
from icesink.errors import ConfigError, LedgerFormatError
from icesink.iceberg.marker import committed_marker
from icesink.properties import JOB_ID_PROPERTY, MAX_CHECKPOINT_PROPERTY
from tests.helpers.support import create_orders_table, orders, table_ids, write_files
from tests.test_cli import invoke

TABLE = "shop.orders ü"
OTHER = "shop.lines"


def stage(
    config: CatalogConfig, checkpoint_id: int, values: dict[str, object], *identifiers: str, job: str = "job"
) -> bool:
    catalog = open_catalog(config, pending_tables=True)
    written = []
    for identifier in identifiers or (TABLE,):
        table = catalog.load_table(identifier)
        files = write_files(table, identifier, job, checkpoint_id, orders(checkpoint_id * 10, 2))
        written.append(TableResults(table, identifier, [files], snapshot_properties=values))  # type: ignore[arg-type]
    return stage_tables(Ledger(config), job, checkpoint_id, written, atomic=len(written) > 1)


def summary(config: CatalogConfig, identifier: str = TABLE) -> dict[str, str]:
    snapshot = open_catalog(config).load_table(identifier).current_snapshot()
    assert snapshot is not None
    return dict(snapshot.summary.additional_properties)


def test_a_checkpoints_values_reach_its_snapshot_and_cannot_override_icesinks_markers(
    catalog_config: CatalogConfig,
) -> None:
    config = catalog_config
    create_orders_table(config, TABLE)
    given = {"audit.outcome": "passed ✓", "watermark": "2026-11-26T10:00:00.000000+00:00"}
    hostile = {
        MAX_CHECKPOINT_PROPERTY: "999",  # would make every later checkpoint look committed
        JOB_ID_PROPERTY: "another job",
        "icesink.stream-id": "another stream",  # would make the job's next checkpoint look like another stream's
        "icesink.maintenance": "compact",  # change readers skip maintenance snapshots: the rows would be lost
        "icesink.commit-id": "forged",
    }
    assert stage(config, 0, given)
    # Refused at staging; and a ledger row holding them anyway (written by hand, or by a later release) cannot
    # override what the committer writes.
    table = sa.Table("icesink_checkpoints", sa.MetaData(), autoload_with=engine(config))
    with engine(config).begin() as connection:
        connection.execute(
            table.update().values(snapshot_properties=json.dumps({"version": 1, "properties": {**given, **hostile}}))
        )
    TableCommitter.of(config).commit_pending(TABLE)
    committed = summary(config)
    assert committed["audit.outcome"] == "passed ✓"
    assert committed["watermark"] == "2026-11-26T10:00:00.000000+00:00"
    assert committed[MAX_CHECKPOINT_PROPERTY] == "0" and committed[JOB_ID_PROPERTY] == "job"
    assert not {"icesink.stream-id", "icesink.maintenance", "icesink.commit-id"} & set(committed)
    marker = committed_marker(open_catalog(config).load_table(TABLE).metadata, "job")
    assert marker is not None and marker.checkpoint_id == 0
    # So the next checkpoint still commits: the marker says 0, not 999.
    assert stage(config, 1, {"watermark": "2026-11-26T10:05:00.000000+00:00"})
    TableCommitter.of(config).commit_pending(TABLE)
    assert summary(config)["watermark"] == "2026-11-26T10:05:00.000000+00:00"
    assert summary(config)[MAX_CHECKPOINT_PROPERTY] == "1"
    assert table_ids(config, TABLE) == [0, 1, 10, 11]


def test_checkpoints_merged_into_one_snapshot_give_it_the_later_ones_values(catalog_config: CatalogConfig) -> None:
    config = catalog_config
    create_orders_table(config, TABLE)
    assert stage(config, 0, {"watermark": "a", "first-only": "kept"})
    assert stage(config, 1, {"watermark": "b"})
    assert stage(config, 2, {})
    (outcome,) = TableCommitter.of(config).commit_pending(TABLE)
    assert outcome.checkpoint_ids == (0, 1, 2)
    committed = summary(config)
    assert committed["watermark"] == "b" and committed["first-only"] == "kept"
    assert committed["added-records"] == "6"


def test_an_atomic_checkpoint_gives_every_table_its_own_values(catalog_config: CatalogConfig) -> None:
    config = catalog_config
    create_orders_table(config, TABLE)
    create_orders_table(config, OTHER)
    assert stage(config, 0, {"watermark": "w0"}, TABLE, OTHER)
    TableCommitter.of(config).commit_pending(OTHER)  # any table of the group commits all of them
    assert summary(config, TABLE)["watermark"] == summary(config, OTHER)["watermark"] == "w0"
    assert summary(config, TABLE)["icesink.commit-id"] == summary(config, OTHER)["icesink.commit-id"]


@pytest.mark.parametrize(
    "values",
    [
        {"added-records": "1000000"},
        {"total-records": "0"},
        {"operation": "delete"},
        {"partitions.day=2026-11-26": "x"},
        {"watermark": 7},
        {"": "empty"},
        {"icesink.max-committed-checkpoint-id": "999"},
        {"icesink.maintenance": "compact"},
        {"icesink.commit-id": "x"},
    ],
)
def test_a_value_iceberg_computes_or_no_summary_can_hold_is_refused_and_nothing_is_staged(
    sqlite_catalog: CatalogConfig, values: dict[str, object]
) -> None:
    config = sqlite_catalog
    create_orders_table(config, TABLE)
    with pytest.raises(ConfigError) as refused:
        stage(config, 0, values)
    message = str(refused.value)
    assert f"table {TABLE}: checkpoint 0" in message and "Nothing was staged" in message
    assert repr(next(iter(values))) in message
    assert Ledger(config).for_table(TABLE) == []


def test_values_of_a_later_encoding_make_the_row_unreadable_not_half_committed(sqlite_catalog: CatalogConfig) -> None:
    config = sqlite_catalog
    create_orders_table(config, TABLE)
    assert stage(config, 0, {"watermark": "w"})
    later = json.dumps({"version": 2, "properties": {"watermark": "w"}, "per_split": {}})
    table = sa.Table("icesink_checkpoints", sa.MetaData(), autoload_with=engine(config))
    with engine(config).begin() as connection:
        connection.execute(table.update().values(snapshot_properties=later))
    with pytest.raises(LedgerFormatError) as refused:
        TableCommitter.of(config).commit_pending(TABLE)
    assert "checkpoint 0" in str(refused.value) and "version 2" in str(refused.value)
    assert open_catalog(config).load_table(TABLE).current_snapshot() is None
    code, output = invoke(config, "checkpoints", "list", TABLE)
    assert code == 0 and "unreadable" in output, output


def test_a_downgrade_waits_for_staged_values_to_commit(own_catalog: CatalogConfig) -> None:
    config = own_catalog  # a database of its own: the schema goes back and forth
    create_orders_table(config, TABLE)
    assert stage(config, 0, {"watermark": "w"})
    code, output = invoke(config, "db", "downgrade", "0009")
    assert code != 0 and "Traceback" not in output, output
    assert f"checkpoint 0 of job 'job' for table {TABLE!r}" in output and "committer run --once" in output
    assert migrations.current_revision(engine(config)) == migrations.head_revision()
    TableCommitter.of(config).commit_pending(TABLE)
    assert invoke(config, "db", "downgrade", "0009")[0] == 0
    assert migrations.current_revision(engine(config)) == "0009"
    migrations.upgrade(engine(config), "head")
    row = Ledger(config).get(TABLE, "job", 0)
    assert row is not None and row.snapshot_properties == ()  # dropped with the column, after it was committed
    assert summary(config)["watermark"] == "w"
