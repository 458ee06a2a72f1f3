"""Schemas that change while data flows: evolve_schema, another tool's changes, old checkpoints on new schemas."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import icesink
from icesink.catalog.config import CatalogConfig
from icesink.catalog.ledger import Ledger
from icesink.catalog.loader import open_catalog
from icesink.committer.commit import TableCommitter
from icesink.errors import SchemaMismatchError
from icesink.iceberg.schemas import AddColumn, WidenColumn, written_schema_problem
from icesink.sink.projection import plan_projection, plan_schema
from tests.helpers.outcomes import read_with_duckdb
from tests.helpers.support import add_input_file, create_orders_table, orders, stage_rows, wait_for

TABLE = "shop.events"


def _spark_schema(ddl: str) -> Any:
    """``"id long, qty int, total decimal(7,2)"`` as a Spark schema, without a Spark session."""
    import re

    from pyspark.sql import types as st

    simple = {"long": st.LongType(), "int": st.IntegerType(), "float": st.FloatType(), "double": st.DoubleType()}
    simple["string"] = st.StringType()
    fields = []
    for name, type_name in re.findall(r"(`[^`]+`|\w+) (\w+(?:\(\d+,\d+\))?)", ddl):
        decimal = re.fullmatch(r"decimal\((\d+),(\d+)\)", type_name)
        spark_type = st.DecimalType(int(decimal[1]), int(decimal[2])) if decimal else simple[type_name]
        fields.append(st.StructField(name.strip("`"), spark_type))
    return st.StructType(fields)


def _table_schema(*fields: tuple[int, str, Any, bool]) -> Any:
    from pyiceberg.schema import Schema
    from pyiceberg.types import NestedField

    return Schema(*(NestedField(i, name, t, required=r) for i, name, t, r in fields))


# --- planning, without Spark running --------------------------------------------------------------------------


def test_plan_lists_lossless_changes_and_refuses_the_rest() -> None:
    from pyiceberg.types import DecimalType, DoubleType, FloatType, IntegerType, LongType, StringType

    table = _table_schema(
        (1, "id", LongType(), True),
        (2, "qty", IntegerType(), False),
        (3, "price", FloatType(), False),
        (4, "total", DecimalType(9, 2), False),
        (5, "note", StringType(), False),
    )
    fits = plan_schema(_spark_schema("id long, qty int, price float, total decimal(7,2)"), table, "t")
    assert fits.changes == ()
    assert fits.projection is not None
    assert [(c.name, c.source, c.cast) for c in fits.projection.columns] == [
        ("id", "id", False),
        ("qty", "qty", False),
        ("price", "price", False),
        ("total", "total", True),
        ("note", None, False),  # an optional column the DataFrame lacks: nulls
    ]
    wider = plan_schema(
        _spark_schema("id long, qty long, price double, total decimal(12,2), `new col.x` string"), table, "t"
    )
    assert wider.projection is None
    assert wider.changes == (
        WidenColumn("qty", 2, IntegerType(), LongType()),
        WidenColumn("price", 3, FloatType(), DoubleType()),
        WidenColumn("total", 4, DecimalType(9, 2), DecimalType(12, 2)),
        AddColumn("new col.x", StringType()),
    )
    with pytest.raises(SchemaMismatchError, match=r"DataFrame column 'extra' \(int\).*evolve_schema=True"):
        plan_projection(_spark_schema("id long, extra int"), table, "t")
    with pytest.raises(SchemaMismatchError, match=r"'qty' is int in the table but long.*evolve_schema=True"):
        plan_projection(_spark_schema("id long, qty long"), table, "t")
    for ddl, column in [
        ("id int, qty string", "qty"),  # another type
        ("id long, total decimal(12,3)", "total"),  # another scale
        ("id long, price decimal(5,2)", "price"),
    ]:
        with pytest.raises(SchemaMismatchError, match=f"column '{column}' is .* neither the same type nor a widening"):
            plan_schema(_spark_schema(ddl), table, "t")
    with pytest.raises(SchemaMismatchError, match="required column 'id'"):
        plan_schema(_spark_schema("qty int"), table, "t")


def test_columns_written_before_follow_renames_and_a_dropped_one_is_named() -> None:
    from pyiceberg.types import LongType, StringType

    renamed = _table_schema((1, "id", LongType(), True), (2, "customer", StringType(), False))
    dataframe = _spark_schema("id long, name string")
    with pytest.raises(SchemaMismatchError, match="'name'"):
        plan_projection(dataframe, renamed, "t")  # by name alone, 'name' is a new column
    projection = plan_projection(dataframe, renamed, "t", field_ids={"id": 1, "name": 2})
    assert [(c.name, c.field_id, c.source) for c in projection.columns] == [("id", 1, "id"), ("customer", 2, "name")]
    assert projection.field_ids == {"id": 1, "name": 2}
    dropped = _table_schema((1, "id", LongType(), True))
    with pytest.raises(SchemaMismatchError, match=r"column 'name' \(field id 2\).*dropped from the table"):
        plan_schema(dataframe, dropped, "t", field_ids={"id": 1, "name": 2})
    # Added back under the same name (a new field id), the column is found again.
    added_back = _table_schema((1, "id", LongType(), True), (7, "name", StringType(), False))
    projection = plan_projection(dataframe, added_back, "t", field_ids={"id": 1, "name": 2})
    assert [(c.field_id, c.source) for c in projection.columns] == [(1, "id"), (7, "name")]


def test_two_dataframe_columns_never_fill_one_field() -> None:
    from pyiceberg.types import LongType, StringType

    table = _table_schema((1, "id", LongType(), True), (2, "a", StringType(), False))
    # Exact names win over names ignoring case, whatever the DataFrame's column order.
    with pytest.raises(SchemaMismatchError, match=r"columns 'a' \(by name\) and 'A' \(by name ignoring case\)"):
        plan_schema(_spark_schema("id long, A string, a string"), table, "t")
    assert plan_projection(_spark_schema("id long, A string"), table, "t").field_ids == {"id": 1, "A": 2}
    # A column the stream wrote to a field renamed since, and another column now named like that field.
    renamed = _table_schema((1, "id", LongType(), True), (2, "customer", StringType(), False))
    with pytest.raises(SchemaMismatchError, match=r"columns 'name' \(which this stream has written to it.*'customer'"):
        plan_schema(
            _spark_schema("id long, customer string, name string"), renamed, "t", field_ids={"id": 1, "name": 2}
        )


def test_files_of_an_older_schema_fit_a_newer_one_only_where_readers_get_them_right() -> None:
    from pyiceberg.types import IntegerType, LongType, StringType

    written = _table_schema(
        (1, "id", LongType(), True), (2, "qty", IntegerType(), False), (3, "s", StringType(), False)
    )
    fine = [
        _table_schema((1, "id", LongType(), True), (2, "qty", LongType(), False), (3, "s", StringType(), False)),
        _table_schema((1, "key", LongType(), True), (3, "s", StringType(), False)),  # renamed, dropped
        _table_schema((1, "id", LongType(), True), (2, "qty", IntegerType(), False), (9, "n", StringType(), False)),
    ]
    for current in fine:
        assert written_schema_problem(current, written, {3: 5}, equality_ids=[1]) is None
    added_required = _table_schema((1, "id", LongType(), True), (9, "must", StringType(), True))
    assert "'must' is required now and its files do not have it" in str(
        written_schema_problem(added_required, written, {})
    )
    now_required = _table_schema((1, "id", LongType(), True), (3, "s", StringType(), True))
    assert written_schema_problem(now_required, written, {3: 0}) is None
    problem = written_schema_problem(now_required, written, {3: 2})
    assert "'s' is required now and its files hold 2 null(s)" in str(problem)
    other_type = _table_schema((1, "id", LongType(), True), (2, "qty", StringType(), False))
    assert "'qty' is string now and its files hold int" in str(written_schema_problem(other_type, written, {}))
    without_key = _table_schema((2, "qty", IntegerType(), False))
    assert "keyed on column 'id'" in str(written_schema_problem(without_key, written, {}, equality_ids=[1]))


# --- the committer meets checkpoints staged under an older schema -----------------------------------------------


def test_checkpoint_staged_under_an_older_schema_commits_only_while_it_fits(catalog_config: CatalogConfig) -> None:
    from pyiceberg.types import StringType

    create_orders_table(catalog_config, TABLE)
    assert stage_rows(catalog_config, TABLE, "job", 0, orders(0, 5))
    assert stage_rows(catalog_config, TABLE, "job", 1, orders(5, 5))
    catalog = open_catalog(catalog_config)
    ledger = Ledger(catalog_config)
    # Another tool renames a column and adds an optional one: the staged files still read correctly.
    with catalog.load_table(TABLE).update_schema() as update:
        update.rename_column("name", "customer")
        update.add_column("region", StringType())
    committer = TableCommitter(catalog, catalog_config, ledger)
    committer.commit_pending(TABLE, "job")
    rows = icesink.read(TABLE, catalog=catalog_config).sort_by("id")
    assert rows.column("id").to_pylist() == list(range(10))
    assert rows.column("customer").to_pylist() == orders(0, 10).column("name").to_pylist()
    assert rows.column("region").null_count == 10

    # A required column the staged files cannot have: refused, nothing committed, the checkpoint stays staged.
    later = orders(10, 5).rename_columns(["id", "customer", "amount", "ts"])
    assert stage_rows(catalog_config, TABLE, "job", 2, later.append_column("region", pa.nulls(5, pa.string())))
    with catalog.load_table(TABLE).update_schema(allow_incompatible_changes=True) as update:
        update.add_column("tenant", StringType(), required=True)
    snapshots_before = len(catalog.load_table(TABLE).snapshots())
    committer = TableCommitter(catalog, catalog_config, ledger)
    with pytest.raises(SchemaMismatchError) as refused:
        committer.commit_pending(TABLE, "job")
    message = str(refused.value)
    assert f"table {TABLE}, job job, checkpoint 2" in message
    assert "column 'tenant' is required now and its files do not have it" in message
    assert "stays staged" in message
    assert len(catalog.load_table(TABLE).snapshots()) == snapshots_before
    (row,) = ledger.pending(TABLE, "job")
    assert row.checkpoint_id == 2 and row.status == "failed"
    # Once the table accepts the files again, the same checkpoint commits.
    with catalog.load_table(TABLE).update_schema() as update:
        update.make_column_optional("tenant")
    TableCommitter(catalog, catalog_config, ledger).commit_pending(TABLE, "job")
    assert ledger.pending(TABLE) == []
    rows = icesink.read(TABLE, catalog=catalog_config).sort_by("id")
    assert rows.column("id").to_pylist() == list(range(15))
    assert rows.column("tenant").null_count == 15


def test_a_checkpoint_whose_schema_left_the_metadata_is_checked_by_its_files_field_ids(
    catalog_config: CatalogConfig,
) -> None:
    import shutil

    from pyiceberg.table.update import RemoveSchemasUpdate
    from pyiceberg.types import StringType

    create_orders_table(catalog_config, TABLE)
    assert stage_rows(catalog_config, TABLE, "job", 0, orders(0, 5))
    catalog = open_catalog(catalog_config)
    ledger = Ledger(catalog_config)
    (staged,) = ledger.pending(TABLE, "job")
    # Another tool adds a required column, then expires the schema the checkpoint was written with.
    with catalog.load_table(TABLE).update_schema(allow_incompatible_changes=True) as update:
        update.add_column("tenant", StringType(), required=True)
    table = catalog.load_table(TABLE)
    catalog.commit_table(table, requirements=(), updates=(RemoveSchemasUpdate(schema_ids=[staged.schema_id]),))
    assert staged.schema_id not in {s.schema_id for s in catalog.load_table(TABLE).schemas().values()}

    with pytest.raises(SchemaMismatchError) as refused:
        TableCommitter(catalog, catalog_config, ledger).commit_pending(TABLE, "job")
    assert "checkpoint 0" in str(refused.value)
    assert "column 'tenant' is required now and its files do not have it" in str(refused.value)

    # Its files cannot be read: named, and the checkpoint still stays staged.
    (data_file,) = Path(table.location().removeprefix("file://"), "data").rglob("*.parquet")
    shutil.move(data_file, data_file.with_suffix(".away"))
    with pytest.raises(SchemaMismatchError, match=r"checkpoint 0: .*not in the table's metadata any more, and reading"):
        TableCommitter(catalog, catalog_config, ledger).commit_pending(TABLE, "job")
    shutil.move(data_file.with_suffix(".away"), data_file)
    assert not catalog.load_table(TABLE).snapshots()
    assert [r.checkpoint_id for r in ledger.pending(TABLE, "job")] == [0]

    with catalog.load_table(TABLE).update_schema() as update:
        update.make_column_optional("tenant")
    TableCommitter(catalog, catalog_config, ledger).commit_pending(TABLE, "job")
    assert ledger.pending(TABLE) == []
    rows = catalog.load_table(TABLE).scan().to_arrow().sort_by("id")
    assert rows.column("id").to_pylist() == list(range(5))
    assert rows.column("tenant").null_count == 5


# --- streams ------------------------------------------------------------------------------------------------------


def _events(start: int, count: int, extra: bool = False) -> pa.Table:
    """Events; ``extra``: the producer's later version (a new column, qty as long, price as double)."""
    ids = list(range(start, start + count))
    columns: dict[str, pa.Array] = {
        "id": pa.array(ids, pa.int64()),
        "qty": pa.array([i % 7 for i in ids], pa.int64() if extra else pa.int32()),
        "price": pa.array([i / 4 for i in ids], pa.float64() if extra else pa.float32()),
    }
    if extra:
        columns["coupon code"] = pa.array([f"c{i}" if i % 2 else None for i in ids], pa.string())
    return pa.table(columns)


def _run(spark: Any, directory: Path, ddl: str, config: CatalogConfig, checkpoint: Path, **options: Any) -> None:
    df = spark.readStream.schema(ddl).option("maxFilesPerTrigger", 1).parquet(str(directory))
    query = icesink.stream(
        df, table=TABLE, checkpoint_location=str(checkpoint), trigger={"availableNow": True}, catalog=config, **options
    )
    query.awaitTermination()


@pytest.mark.spark
def test_evolve_schema_adds_columns_and_widens_types_when_the_producer_changes(
    spark: Any, sqlite_catalog: CatalogConfig, tmp_path: Path
) -> None:
    old_ddl = "id long, qty int, price float"
    new_ddl = "id long, qty long, price double, `coupon code` string"
    source, checkpoint = tmp_path / "in", tmp_path / "ckpt"
    add_input_file(source, _events(0, 4))
    _run(spark, source, old_ddl, sqlite_catalog, checkpoint, create_table=True)
    add_input_file(source, _events(4, 4, extra=True))
    # Without the option, the new producer version is refused before anything is written.
    with pytest.raises(
        SchemaMismatchError, match=r"'qty' is int in the table but long in the DataFrame.*evolve_schema"
    ):
        _run(spark, source, new_ddl, sqlite_catalog, checkpoint)
    catalog = open_catalog(sqlite_catalog)
    assert len(catalog.load_table(TABLE).schemas()) == 1
    _run(spark, source, new_ddl, sqlite_catalog, checkpoint, evolve_schema=True)

    table = catalog.load_table(TABLE)
    assert [(f.field_id, f.name, str(f.field_type), f.required) for f in table.schema().fields] == [
        (1, "id", "long", False),
        (2, "qty", "long", False),
        (3, "price", "double", False),
        (4, "coupon code", "string", False),
    ]
    # One schema change, committed before the checkpoint that needed it; each checkpoint one snapshot.
    assert len(table.schemas()) == 2
    snapshots = table.snapshots()
    assert [s.schema_id for s in snapshots] == [0, 1]
    expected = pa.concat_tables(
        [
            _events(0, 4)
            .cast(pa.schema([("id", pa.int64()), ("qty", pa.int64()), ("price", pa.float64())]))
            .append_column("coupon code", pa.nulls(4, pa.string())),
            _events(4, 4, extra=True),
        ]
    )
    ours = icesink.read(TABLE, catalog=sqlite_catalog).sort_by("id")
    assert ours.to_pylist() == expected.to_pylist()
    theirs = table.scan().to_arrow().sort_by("id")  # pyiceberg reads the old files through the new schema
    assert theirs.to_pylist() == expected.to_pylist()


@pytest.mark.spark
def test_evolve_schema_makes_a_required_column_optional_when_nulls_arrive(
    spark: Any, sqlite_catalog: CatalogConfig, tmp_path: Path
) -> None:
    from pyiceberg.schema import Schema
    from pyiceberg.types import IntegerType, LongType, NestedField

    catalog = open_catalog(sqlite_catalog)
    catalog.create_namespace_if_not_exists("shop")
    catalog.create_table(
        TABLE, Schema(NestedField(1, "id", LongType(), required=True), NestedField(2, "qty", IntegerType(), True))
    )
    source = tmp_path / "in"
    add_input_file(source, pa.table({"id": pa.array([1, 2, 3], pa.int64()), "qty": pa.array([5, None, 7], pa.int32())}))
    with pytest.raises(Exception, match=r"column 'qty' is required but 1 row\(s\) have no value.*evolve_schema=True"):
        _run(spark, source, "id long, qty int", sqlite_catalog, tmp_path / "ckpt")
    assert catalog.load_table(TABLE).current_snapshot() is None
    _run(spark, source, "id long, qty int", sqlite_catalog, tmp_path / "ckpt", evolve_schema=True)
    table = catalog.load_table(TABLE)
    assert [f.required for f in table.schema().fields] == [True, False]
    assert table.scan().to_arrow().sort_by("id").column("qty").to_pylist() == [5, None, 7]


@pytest.mark.spark
def test_nulls_arriving_after_a_commit_make_the_column_optional_and_commit_in_the_same_run(
    spark: Any, sqlite_catalog: CatalogConfig, tmp_path: Path
) -> None:
    """The committer keeps its view of the table from its last commit; the column made optional after that must
    not have the checkpoint refused by the view of before (the stream used to fail, and commit only once
    restarted)."""
    from pyiceberg.schema import Schema
    from pyiceberg.types import IntegerType, LongType, NestedField

    catalog = open_catalog(sqlite_catalog)
    catalog.create_namespace_if_not_exists("shop")
    catalog.create_table(
        TABLE, Schema(NestedField(1, "id", LongType(), required=True), NestedField(2, "qty", IntegerType(), True))
    )
    source = tmp_path / "in"
    add_input_file(source, pa.table({"id": pa.array([1, 2], pa.int64()), "qty": pa.array([5, 6], pa.int32())}))
    add_input_file(source, pa.table({"id": pa.array([3, 4], pa.int64()), "qty": pa.array([None, 8], pa.int32())}))
    _run(spark, source, "id long, qty int", sqlite_catalog, tmp_path / "ckpt", evolve_schema=True)
    table = catalog.load_table(TABLE)
    assert [f.required for f in table.schema().fields] == [True, False]
    assert [s.summary["icesink.max-committed-checkpoint-id"] for s in table.snapshots()] == ["0", "1"]
    (rows,) = read_with_duckdb(table.metadata_location)
    assert sorted((r["id"], r["qty"]) for r in rows) == [(1, 5), (2, 6), (3, None), (4, 8)]


@pytest.mark.spark
def test_another_tool_renames_adds_and_drops_columns_while_the_stream_runs(
    spark: Any, sqlite_catalog: CatalogConfig, tmp_path: Path
) -> None:
    from pyiceberg.types import StringType

    ddl = "id long, name string, amount double, ts timestamp"
    source, checkpoint = tmp_path / "in", tmp_path / "ckpt"
    create_orders_table(sqlite_catalog, TABLE)
    catalog = open_catalog(sqlite_catalog)

    def start() -> Any:
        df = spark.readStream.schema(ddl).option("maxFilesPerTrigger", 1).parquet(str(source))
        return icesink.stream(
            df,
            table=TABLE,
            checkpoint_location=str(checkpoint),
            trigger={"processingTime": "200 milliseconds"},
            catalog=sqlite_catalog,
        )

    def committed(count: int) -> bool:
        snapshot = catalog.load_table(TABLE).current_snapshot()
        return snapshot is not None and int(snapshot.summary["total-records"]) == count

    add_input_file(source, orders(0, 3))
    query = start()
    try:
        wait_for(lambda: committed(3), "the first micro-batch")
        with catalog.load_table(TABLE).update_schema() as update:
            update.rename_column("name", "customer")
            update.add_column("region", StringType())
        add_input_file(source, orders(3, 3))
        wait_for(lambda: committed(6), "the micro-batch after the rename")
        with catalog.load_table(TABLE).update_schema() as update:
            update.delete_column("amount")
        add_input_file(source, orders(6, 3))
        with pytest.raises(Exception) as stopped:
            query.awaitTermination(120)
    finally:
        query.stop()
    assert "column 'amount' (field id 3), which this stream writes, was dropped from the table" in str(stopped.value)
    assert committed(6)  # the batch after the drop wrote nothing

    rows = icesink.read(TABLE, catalog=sqlite_catalog).sort_by("id")
    assert rows.column_names == ["id", "customer", "ts", "region"]
    assert rows.column("customer").to_pylist() == orders(0, 6).column("name").to_pylist()
    assert rows.column("region").null_count == 6

    # Restarted without the dropped column (its DataFrame still calls the renamed one 'name'), the stream
    # remembers which field its 'name' went to and lands the batch it stopped at.
    df = spark.readStream.schema(ddl).option("maxFilesPerTrigger", 1).parquet(str(source)).drop("amount")
    icesink.stream(
        df, table=TABLE, checkpoint_location=str(checkpoint), trigger={"availableNow": True}, catalog=sqlite_catalog
    ).awaitTermination()
    rows = icesink.read(TABLE, catalog=sqlite_catalog).sort_by("id")
    assert rows.column("id").to_pylist() == list(range(9))
    assert rows.column("customer").to_pylist() == orders(0, 9).column("name").to_pylist()
    assert len(catalog.load_table(TABLE).schemas()) == 3  # the stream changed no schema itself


@pytest.mark.spark
def test_a_cdc_stream_restarts_after_another_tool_renames_its_key_top_level_or_nested(
    spark: Any, sqlite_catalog: CatalogConfig, tmp_path: Path
) -> None:
    """The DataFrame keeps its names; the key follows its field ids, given by either name or left out."""
    flat_ddl = "id long, value string, op string"
    nested_ddl = "key struct<tenant: string, id: long>, value string, op string"
    flat_schema = pa.schema([("id", pa.int64()), ("value", pa.string()), ("op", pa.string())])
    nested_schema = pa.schema(
        [("key", pa.struct([("tenant", pa.string()), ("id", pa.int64())])), ("value", pa.string()), ("op", pa.string())]
    )
    flat, nested = "shop.flat key", "shop.nested key"
    catalog = open_catalog(sqlite_catalog)

    def run(name: str, ddl: str, rows: list[dict[str, Any]], schema: pa.Schema, **options: Any) -> None:
        add_input_file(tmp_path / name / "in", pa.Table.from_pylist(rows, schema=schema))
        df = spark.readStream.schema(ddl).parquet(str(tmp_path / name / "in"))
        icesink.stream(
            df,
            table=name,
            checkpoint_location=str(tmp_path / name / "ckpt"),
            trigger={"availableNow": True},
            catalog=sqlite_catalog,
            op_column="op",
            **options,
        ).awaitTermination()

    def flat_rows(*changes: tuple[int, str | None, str]) -> list[dict[str, Any]]:
        return [{"id": i, "value": v, "op": op} for i, v, op in changes]

    def nested_rows(*changes: tuple[int, str | None, str]) -> list[dict[str, Any]]:
        return [{"key": {"tenant": "t ü", "id": i}, "value": v, "op": op} for i, v, op in changes]

    run(
        flat,
        flat_ddl,
        flat_rows((1, "a", "I"), (2, "b", "I"), (3, "c", "I")),
        flat_schema,
        create_table=True,
        equality_fields=["id"],
    )
    run(
        nested,
        nested_ddl,
        nested_rows((1, "a", "I"), (2, "b", "I"), (3, "c", "I")),
        nested_schema,
        create_table=True,
        equality_fields=["key.tenant", "key.id"],
    )
    with catalog.load_table(flat).update_schema() as update:
        update.rename_column("id", "order id/%")
    with catalog.load_table(nested).update_schema() as update:
        update.rename_column("key.id", "ident")

    # By the DataFrame's name, by the table's new one, and left out (the table's identifier fields).
    run(flat, flat_ddl, flat_rows((1, "a2", "U"), (2, None, "D")), flat_schema, equality_fields=["id"])
    run(flat, flat_ddl, flat_rows((3, "c2", "U"), (4, "d", "I")), flat_schema, equality_fields=["order id/%"])
    run(flat, flat_ddl, flat_rows((4, None, "D"), (5, "e", "I")), flat_schema)
    run(
        nested,
        nested_ddl,
        nested_rows((1, "a2", "U"), (2, None, "D")),
        nested_schema,
        equality_fields=["key.tenant", "key.id"],
    )
    run(nested, nested_ddl, nested_rows((3, "c2", "U"), (4, "d", "I")), nested_schema)

    got = sorted(icesink.read(flat, catalog=sqlite_catalog).to_pylist(), key=lambda r: r["order id/%"])
    assert got == [{"order id/%": 1, "value": "a2"}, {"order id/%": 3, "value": "c2"}, {"order id/%": 5, "value": "e"}]
    got = sorted(icesink.read(nested, catalog=sqlite_catalog).to_pylist(), key=lambda r: r["key"]["ident"])
    assert got == [{"key": {"tenant": "t ü", "ident": i}, "value": v} for i, v in ((1, "a2"), (3, "c2"), (4, "d"))]
    # Every snapshot came from one job: the restarts kept the stream's identity.
    assert {s.summary["icesink.job-id"] for s in catalog.load_table(flat).snapshots()} == {
        catalog.load_table(flat).current_snapshot().summary["icesink.job-id"]
    }


@pytest.mark.spark
def test_another_tool_partitioning_a_keyed_table_by_another_column_stops_the_stream_naming_it(
    spark: Any, sqlite_catalog: CatalogConfig, tmp_path: Path
) -> None:
    """A partition field on a column outside the key, added while a keyed stream runs: the driver refuses the
    next micro-batch as a restart would (the executors failed with a raw KeyError before), and writes nothing."""
    ddl = "id long, name string, amount double, ts timestamp"
    source, checkpoint = tmp_path / "in", tmp_path / "ckpt"
    create_orders_table(sqlite_catalog, TABLE)
    catalog = open_catalog(sqlite_catalog)
    add_input_file(source, orders(0, 3))
    df = spark.readStream.schema(ddl).option("maxFilesPerTrigger", 1).parquet(str(source))
    query = icesink.stream(
        df,
        table=TABLE,
        checkpoint_location=str(checkpoint),
        equality_fields=["id"],
        trigger={"processingTime": "200 milliseconds"},
        catalog=sqlite_catalog,
    )
    try:
        wait_for(lambda: catalog.load_table(TABLE).current_snapshot() is not None, "the first micro-batch")
        with catalog.load_table(TABLE).update_spec() as update:
            update.add_identity("name")
        add_input_file(source, orders(3, 3))
        with pytest.raises(Exception) as stopped:
            query.awaitTermination(120)
    finally:
        query.stop()
    message = str(stopped.value)
    assert (
        f"table {TABLE}, checkpoint 1: the table is partitioned by identity(name), but 'name' is not among the "
        "equality fields ['id']" in message
    ), message
    assert "KeyError" not in message
    assert [r.checkpoint_id for r in Ledger(sqlite_catalog).for_table(TABLE)] == [0]
    assert sorted(icesink.read(TABLE, catalog=sqlite_catalog).column("id").to_pylist()) == [0, 1, 2]
