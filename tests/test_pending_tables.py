"""A table a stream into several tables creates enters the catalog with its first commit, not before
(driven without Spark, on SQLite and PostgreSQL)."""

from __future__ import annotations

import datetime
import json
import re
from pathlib import Path
from shlex import quote
from typing import Any

import pyarrow as pa
import pytest
import sqlalchemy as sa
from pyiceberg.exceptions import NoSuchTableError

from icesink import migrations, paths
from icesink.catalog.checkpoints import CheckpointState
from icesink.catalog.config import CatalogConfig
from icesink.catalog.database import engine
from icesink.catalog.ledger import Ledger
from icesink.catalog.loader import load_table, load_tables, open_catalog
from icesink.committer.commit import TableCommitter
from icesink.committer.gc import collect_garbage
from icesink.errors import ConfigError, TableCreatedElsewhereError, TableNotFoundError
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
    # Each attempt writes under a directory of its own: the loser's metadata file is gone from the whole namespace.
    namespace = Path(paths.parse(first.location()).path).parent
    metadata = sorted(str(p.relative_to(namespace)) for p in namespace.rglob("*.metadata.json"))
    assert metadata == [str(Path(paths.parse(first.metadata_location).path).relative_to(namespace))], metadata
    assert [p.name for p in namespace.iterdir()] == [Path(paths.parse(first.location()).path).name]


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
    # The two never share files: the stream's table has a directory of its own, which gc of the other leaves.
    pending = open_catalog(config, pending_tables=True).load_own_table(NEW)
    assert pending.location() != other.location() and not pending.location().startswith(other.location() + "/")
    code, output = invoke(config, "tables", "list")
    assert code == 2 and "another tool created" in output, output
    # What the error advises works: the checkpoints listed and discarded, the name given up.
    code, output = invoke(config, "checkpoints", "list", NEW)
    assert code == 0 and "staged" in output, output
    code, output = invoke(config, "tables", "drop-pending", NEW, "--yes")
    assert code == 2 and "checkpoints 0 of it are staged" in output, output
    assert invoke(config, "checkpoints", "discard", NEW, "0", "--yes")[0] == 0
    code, output = invoke(config, "tables", "drop-pending", NEW)
    assert code == 0 and "add --yes" in output and pending_tables(engine(config), config.name), output
    code, output = invoke(config, "tables", "drop-pending", NEW, "--yes")
    assert code == 0 and "dropped pending table" in output, output
    assert pending_tables(engine(config), config.name) == []
    assert not Path(paths.parse(pending.location()).path).exists() or not any(
        p.is_file() for p in Path(paths.parse(pending.location()).path).rglob("*")
    )
    TableCommitter.of(config).commit_pending(OLD)  # the group's other table goes on without it
    assert table_ids(config, OLD) == [0, 1] and table_ids(config, NEW) == []
    code, output = invoke(config, "tables", "drop-pending", NEW, "--yes")
    assert code == 2 and "is not a pending table" in output, output


def test_a_stream_that_missed_a_publish_takes_the_published_table(catalog_config: CatalogConfig) -> None:
    config = catalog_config
    create_orders_table(config, NEW, pending=True)
    assert stage_rows(config, NEW, "job", 0, orders(0, 2))
    TableCommitter.of(config).commit_pending(NEW)
    published = open_catalog(config).load_table(NEW)
    # A second stream that looked before the publish, and creates the table after it: no second table.
    late = create_orders_table(config, NEW, pending=True)
    assert late.metadata_location == published.metadata_location
    assert pending_tables(engine(config), config.name) == []
    assert table_ids(config, NEW) == [0, 1]


def test_a_lost_reply_to_the_publishing_commit_keeps_the_files_the_catalog_names(catalog_config: CatalogConfig) -> None:
    """The database committed, the connection dropped before it said so: the new metadata file must stay."""
    config = catalog_config
    create_orders_table(config, NEW, pending=True)
    assert stage_rows(config, NEW, "job", 0, orders(0, 3))
    dialect = engine(config).dialect
    commit = dialect.do_commit

    def committed_then_lost(connection: object) -> None:
        commit(connection)
        dialect.do_commit = commit  # type: ignore[method-assign]
        raise sa.exc.OperationalError("COMMIT", {}, Exception("server closed the connection unexpectedly"))

    dialect.do_commit = committed_then_lost  # type: ignore[method-assign]
    try:
        with pytest.raises(Exception, match="closed the connection"):
            TableCommitter.of(config).commit_pending(NEW)
    finally:
        dialect.do_commit = commit  # type: ignore[method-assign]
    TableCommitter.of(config).commit_pending(NEW)  # the retry finds it committed
    assert table_ids(config, NEW) == [0, 1, 2]


def test_a_cut_of_several_tables_reads_a_pending_one_as_empty(catalog_config: CatalogConfig) -> None:
    import icesink

    config = catalog_config
    create_orders_table(config, OLD)
    create_orders_table(config, NEW, pending=True)
    assert stage_group(config, "job", 0, {OLD: orders(0, 2), NEW: None})
    TableCommitter.of(config).commit_pending(OLD)
    for cut in (
        icesink.read_tables([OLD, NEW], catalog=config),
        icesink.read_tables([OLD, NEW], job_id="job", checkpoint_id=0, catalog=config),
        icesink.changes_of_tables([OLD, NEW], job_id="job", to_checkpoint=0, catalog=config),
    ):
        assert cut[OLD].num_rows == 2 and cut[NEW].num_rows == 0 and "amount" in cut[NEW].column_names


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
    assert code == 2 and "a stream created it, and it appears with the first commit that brings it rows" in output, (
        output
    )


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


# --- a pending table whose stream asks for other options -------------------------------------------------------------


def _resolve(config: CatalogConfig, columns: tuple[str, ...] = ("id", "name", "amount", "ts"), **options: Any) -> Any:
    """The table a stream into several tables resolves (``deferred``), with the orders' columns as Spark types."""
    from pyspark.sql import types as T

    from icesink.sink.tables import resolve_table

    types = {"id": T.LongType(), "name": T.StringType(), "amount": T.DoubleType(), "ts": T.TimestampType()}
    spark_schema = T.StructType([T.StructField(c, types[c], c != "id") for c in columns])
    catalog = open_catalog(config, pending_tables=True)
    arguments: dict[str, Any] = {"partition_by": (), "identifier_fields": ("id",), "properties": {}} | options
    return resolve_table(catalog, config, NEW, spark_schema, True, deferred=True, **arguments)


def _files_under(location: str) -> list[Path]:
    return [p for p in Path(paths.parse(location).path).rglob("*") if p.is_file()]


def test_a_pending_table_nothing_is_staged_for_is_created_anew_with_the_options_the_restarted_stream_asks(
    catalog_config: CatalogConfig,
) -> None:
    """A stream refused after it created its table (partitioned by a column not in its key, say) is started
    again with other options: its table has no rows yet, so it takes them, instead of refusing again."""
    config = catalog_config
    first = _resolve(config, partition_by=("name",), properties={"icesink.maintain.min-commits": "3"})
    assert [f.name for f in first.spec().fields] == ["name"]
    again = _resolve(config, partition_by=("name",), properties={"icesink.maintain.min-commits": "3"})
    assert again.metadata_location == first.metadata_location  # the same options: the same table
    with again.transaction() as change:  # what icesink sets itself is not the stream's to ask
        change.set_properties({"icesink.stream-id.job": "a query"})
    marked = open_catalog(config, pending_tables=True).load_table(NEW)
    assert _resolve(config, partition_by=("name",), properties={"icesink.maintain.min-commits": "3"}) == marked
    second = _resolve(config)
    assert second.spec().fields == () and "icesink.maintain.min-commits" not in second.properties
    assert second.metadata.table_uuid != first.metadata.table_uuid
    assert _files_under(first.location()) == []  # the first one's files are gone with it
    ((name, location, _),) = pending_tables(engine(config), config.name)
    assert (name, location) == (NEW, second.metadata_location)
    third = _resolve(config, identifier_fields=())  # the key, too
    assert third.schema().identifier_field_names() == set()
    fourth = _resolve(config, columns=("id", "name"), properties={"write.target-file-size-bytes": "1024"})
    assert [f.name for f in fourth.schema().fields] == ["id", "name"]
    assert fourth.properties == {"write.target-file-size-bytes": "1024"}
    assert stage_rows(config, NEW, "job", 0, orders(0, 2).select(["id", "name"]))
    TableCommitter.of(config).commit_pending(NEW)
    assert table_ids(config, NEW) == [0, 1]


def test_a_pending_table_with_a_staged_checkpoint_is_kept_and_a_stream_asking_other_options_is_told_what_to_do(
    catalog_config: CatalogConfig,
) -> None:
    config = catalog_config
    first = _resolve(config, partition_by=("name",))
    assert stage_rows(config, NEW, "job", 0, orders(0, 2))
    for options, differs in (
        ({}, "partition_by: [name] when it was created, [] now"),
        (
            {"partition_by": ("name",), "identifier_fields": ()},
            "its key (equality_fields): [id] when it was created, [] now",
        ),
        (
            {"partition_by": ("name",), "properties": {"icesink.maintain.min-commits": "3"}},
            "table_properties: {} when it was created, {'icesink.maintain.min-commits': '3'} now",
        ),
    ):
        with pytest.raises(ConfigError) as refused:
            _resolve(config, **options)
        message = str(refused.value)
        assert message.startswith(f"table {NEW} is pending (a stream created it; it enters the catalog with its first")
        assert differs in message, message
        assert "checkpoint 0 of job job is staged" in message
        # Commands as a shell takes them: the name quoted, since it holds spaces.
        assert f"`icesink checkpoints discard {quote(NEW)} 0`" in message
        assert f"`icesink tables drop-pending {quote(NEW)}`" in message
    # Columns are the stream's fit to check, as for any table: the DataFrame may lack one the table has.
    assert _resolve(config, columns=("id", "name"), partition_by=("name",)).metadata_location == first.metadata_location
    # What the message says works: the checkpoint given up, the table takes the new options.
    assert invoke(config, "checkpoints", "discard", NEW, "0", "--yes")[0] == 0
    assert _resolve(config).spec().fields == ()


def test_a_pending_table_is_not_created_anew_where_its_recorded_columns_would_land_in_other_fields(
    catalog_config: CatalogConfig,
) -> None:
    """A checkpoint that wrote no row into the table still recorded which field each DataFrame column went to,
    and a stream finds its columns by those ids: created anew from columns in another order, it would write
    them into each other."""
    from icesink.committer.staging import stage_checkpoint

    config = catalog_config
    table = _resolve(config, partition_by=("name",))
    ids = {f.name: f.field_id for f in table.schema().fields}
    assert stage_checkpoint(Ledger(config), table, NEW, "job", 0, [], column_ids=ids)
    with pytest.raises(ConfigError) as refused:
        _resolve(config, columns=("id", "amount", "name", "ts"))
    message = str(refused.value)
    assert "partition_by: [name] when it was created, [] now" in message
    assert "'amount' (field id 3, now 2), 'name' (field id 2, now 3)" in message
    assert "Start the stream with the columns as they were" in message
    assert f"`icesink tables drop-pending {quote(NEW)}`" in message
    # The columns as they were: the other options still change.
    assert _resolve(config).spec().fields == ()
    assert _resolve(config, columns=("id", "name")).schema().find_field("name").field_id == 2


def test_tables_loaded_together_are_the_tables_loaded_one_by_one(catalog_config: CatalogConfig) -> None:
    """A micro-batch loads its tables with one statement: the same tables, pending or not, and the same errors."""
    config = catalog_config
    create_orders_table(config, OLD)
    create_orders_table(config, NEW, pending=True)
    hostile = "shop.'quoted' \"name\""
    create_orders_table(config, hostile)
    catalog = open_catalog(config, pending_tables=True)
    names = [NEW, OLD, hostile, NEW]
    together = load_tables(catalog, config, names)
    alone = [load_table(catalog, config, name) for name in names]
    assert [(type(t), t.name(), t.metadata_location) for t in together] == [
        (type(t), t.name(), t.metadata_location) for t in alone
    ]
    assert type(together[0]).__name__ == "PendingTable" and type(together[1]).__name__ == "Table"
    with pytest.raises(TableNotFoundError) as missing:
        load_tables(catalog, config, [OLD, "shop.absent"])
    assert "'shop.absent' does not exist" in str(missing.value)
    # A view of the pending table's name (Iceberg Java or Rust keep views in the same table): the table could
    # never enter the catalog under it, which a load says (a commit retried forever did not).
    namespace, name = NEW.rsplit(".", 1)
    with engine(config).begin() as connection:
        connection.execute(
            sa.text(
                "INSERT INTO iceberg_tables (catalog_name, table_namespace, table_name, metadata_location, "
                "iceberg_type) VALUES (:catalog, :namespace, :name, :location, 'VIEW')"
            ),
            {"catalog": config.name, "namespace": namespace, "name": name, "location": "file:///nowhere/view.json"},
        )
    for load in (lambda: load_tables(catalog, config, [NEW, OLD]), lambda: load_table(catalog, config, NEW)):
        with pytest.raises(TableCreatedElsewhereError) as viewed:  # its publishing could never take the name
            load()
        assert f"table {NEW}" in str(viewed.value) and "a view of that name" in str(viewed.value)
    with engine(config).begin() as connection:
        connection.execute(sa.text("DELETE FROM iceberg_tables WHERE iceberg_type = 'VIEW'"))
    create_orders_table(config, NEW)  # another tool takes the pending table's name
    with pytest.raises(TableCreatedElsewhereError) as taken:
        load_tables(catalog, config, [OLD, NEW])
    assert f"table {NEW}" in str(taken.value) and "another tool created" in str(taken.value)


def test_a_pending_table_dropped_as_the_router_meets_it_is_not_created_again_published(
    catalog_config: CatalogConfig, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An operator drops the table a Debezium stream has just created pending, before the stream has checked
    its rows against it: the stream must not create it a second time, published and empty."""
    from pyspark.sql import types as T

    import icesink
    from icesink.debezium_events.route import OP_COLUMN, POSITION_COLUMN, RoutedTable
    from icesink.debezium_events.sources import SourceTable
    from icesink.sink import debezium_router
    from icesink.sink.options import StreamWideOptions

    config = catalog_config
    identifier = NEW  # a name a catalog's default layout and a URL would both mangle
    created = debezium_router.resolve_table

    def dropped_at_once(*args: Any, **kwargs: Any) -> Any:
        table = created(*args, **kwargs)
        code, output = invoke(config, "tables", "drop-pending", identifier, "--yes")
        assert code == 0 and "dropped pending table" in output, output
        return table

    monkeypatch.setattr(debezium_router, "resolve_table", dropped_at_once)
    own = StreamWideOptions(checkpoint_location=str(tmp_path / "checkpoint"), catalog=config, job_id="job")
    router = debezium_router.DebeziumRouter(
        icesink.debezium("shop"), own, open_catalog(config, pending_tables=True), config
    )
    rows = T.StructType(
        [
            T.StructField("id", T.LongType(), False),
            T.StructField("name", T.StringType()),
            T.StructField(OP_COLUMN, T.StringType()),
            T.StructField(POSITION_COLUMN, T.StringType()),
        ]
    )
    source = SourceTable("server", "db", "public", "customers")
    settings = router._settings_of(RoutedTable(identifier, source, rows, ("id",), records=1))
    assert settings.table == identifier and settings.changes is not None
    assert pending_tables(engine(config), config.name) == []
    assert _invisible(config, identifier)  # before, the check created it again: published, empty, no source
    # The micro-batch goes on to load its tables, and stops there naming it: nothing is written for it, and the
    # restarted stream (which replays the micro-batch) creates it again.
    with pytest.raises(TableNotFoundError, match=re.escape(f"table {identifier!r} does not exist")):
        load_tables(open_catalog(config, pending_tables=True), config, [identifier, identifier])
