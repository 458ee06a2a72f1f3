"""``icesink.read`` at its edges: mistakes a user can make are IcesinkErrors naming the table and the fix."""

from __future__ import annotations

import pytest

import icesink
from icesink.catalog.config import CatalogConfig
from icesink.catalog.ledger import Ledger
from icesink.catalog.loader import open_catalog
from icesink.committer.commit import TableCommitter
from icesink.committer.staging import stage_checkpoint
from icesink.errors import BadFilterError, ConfigError, SnapshotNotFoundError, TableNotFoundError
from icesink.iceberg.describe import writer_spec
from icesink.writer.spec import ChangeSpec
from icesink.writer.task import TaskWriter
from tests.helpers.support import create_orders_table, orders, stage_rows

TABLE = "shop.orders"


@pytest.fixture
def filled(sqlite_catalog: CatalogConfig) -> CatalogConfig:
    create_orders_table(sqlite_catalog)
    stage_rows(sqlite_catalog, TABLE, "job", 0, orders(0, 10))
    TableCommitter.of(sqlite_catalog).commit_pending(TABLE)
    return sqlite_catalog


@pytest.mark.parametrize(
    ("arguments", "error", "says"),
    [
        ({"row_filter": "id >"}, BadFilterError, "cannot be parsed"),
        ({"row_filter": "nope = 1"}, BadFilterError, "does not fit the table (Could not find field with name nope"),
        ({"row_filter": "id = 'seven'"}, BadFilterError, "does not fit the table"),
        ({"snapshot_id": 12345}, SnapshotNotFoundError, "has no snapshot 12345"),
    ],
    ids=["unparsable", "unknown-column", "wrong-type", "unknown-snapshot"],
)
def test_read_mistakes_are_icesink_errors_naming_the_table(
    filled: CatalogConfig, arguments: dict[str, object], error: type[Exception], says: str
) -> None:
    with pytest.raises(error) as raised:
        icesink.read(TABLE, catalog=filled, **arguments)  # type: ignore[arg-type]
    assert TABLE in str(raised.value) and says in str(raised.value)


def test_read_of_a_missing_or_malformed_table_name(filled: CatalogConfig) -> None:
    with pytest.raises(TableNotFoundError, match=r"shop\.nope"):
        icesink.read("shop.nope", catalog=filled)
    with pytest.raises(ConfigError, match=r"namespace\.table"):
        icesink.read("orders", catalog=filled)
    assert icesink.read(TABLE, catalog=filled, row_filter="id >= 5").num_rows == 5


def test_a_delete_only_checkpoint_writes_no_data_file_and_is_a_delete_snapshot(filled: CatalogConfig) -> None:
    import pyarrow as pa

    table = open_catalog(filled).load_table(TABLE)
    changes = ChangeSpec(equality_field_ids=(1,), op_column="op")
    spec = writer_spec(table, TABLE, "cdc", changes).for_checkpoint(0)
    writer = TaskWriter(spec, 0, 0)
    deletes = (
        orders(2, 3)
        .append_column("op", pa.array(["D"] * 3))
        .append_column("__icesink_order", pa.array(range(3), pa.int64()))
    )
    writer.write(deletes)
    result = writer.complete()
    assert result.data_files == () and len(result.delete_files) == 1
    stage_checkpoint(Ledger(filled), table, TABLE, "cdc", 0, [result])
    TableCommitter.of(filled).commit_pending(TABLE)
    snapshot = open_catalog(filled).load_table(TABLE).current_snapshot()
    assert snapshot.summary.operation.value == "delete"
    assert snapshot.summary["added-data-files"] is None and snapshot.summary["added-delete-files"] == "1"
    assert sorted(icesink.read(TABLE, catalog=filled).column("id").to_pylist()) == [0, 1, 5, 6, 7, 8, 9]


def test_deleted_positions_leave_exactly_their_rows_out_of_every_batch_and_the_filter_applies_after() -> None:
    """Batches no position falls in pass as they are; the others lose exactly the positions in them (duplicates
    and positions of several delete files included), and the row filter sees only what is left."""
    import random

    import pyarrow as pa
    import pyarrow.compute as pc

    from icesink.iceberg.file_reads import _sorted_positions, _without_deleted

    rng = random.Random(4)
    for _ in range(30):
        rows = rng.randrange(1, 3000)
        table = pa.table({"n": pa.array(range(rows), pa.int64())})
        deleted = [rng.randrange(rows) for _ in range(rng.randrange(0, 60))]
        files = [pa.chunked_array([pa.array(sorted(deleted[i::2]), pa.int64())]) for i in range(2)]
        wanted_filter = pc.field("n") >= rows // 3 if rng.random() < 0.5 else None
        positions = _sorted_positions(files)
        kept, start = [], 0
        for batch in table.to_batches(max_chunksize=rng.randrange(1, 500)):
            out = _without_deleted(batch, positions, start, wanted_filter)
            if not set(deleted) & set(range(start, start + len(batch))) and wanted_filter is None:
                assert out is batch  # no copy
            kept += out.column("n").to_pylist()
            start += len(batch)
        expected = [n for n in range(rows) if n not in set(deleted) and (wanted_filter is None or n >= rows // 3)]
        assert kept == expected


def test_files_of_one_layout_share_their_schema_work_but_never_across_field_ids_or_types(
    sqlite_catalog: CatalogConfig,
) -> None:
    """Files whose Parquet schemas look alike by name and type but differ in field ids (a column dropped and
    added again under its name) or in type (a promoted int) are each read by their own layout, however often."""
    import pyarrow as pa
    from pyiceberg.schema import Schema
    from pyiceberg.types import IntegerType, LongType, NestedField, StringType

    catalog = open_catalog(sqlite_catalog)
    catalog.create_namespace("evolving")
    readded = catalog.create_table(
        "evolving.readded",
        Schema(NestedField(1, "id", LongType(), required=False), NestedField(2, "v", StringType(), required=False)),
    )
    readded.append(pa.table({"id": pa.array([1, 2], pa.int64()), "v": ["a", "b"]}))
    readded.append(pa.table({"id": pa.array([3], pa.int64()), "v": ["c"]}))  # a second file, same layout
    with readded.update_schema() as update:
        update.delete_column("v")
    with readded.update_schema() as update:
        update.add_column("v", StringType())
    readded = catalog.load_table("evolving.readded")
    readded.append(pa.table({"id": pa.array([4], pa.int64()), "v": ["new"]}))  # same names and types, new id
    promoted = catalog.create_table(
        "evolving.promoted",
        Schema(NestedField(1, "id", LongType(), required=False), NestedField(2, "n", IntegerType(), required=False)),
    )
    promoted.append(pa.table({"id": pa.array([1], pa.int64()), "n": pa.array([7], pa.int32())}))
    with promoted.update_schema() as update:
        update.update_column("n", LongType())
    catalog.load_table("evolving.promoted").append(
        pa.table({"id": pa.array([2], pa.int64()), "n": pa.array([2**40], pa.int64())})
    )
    for _ in range(2):  # the second read finds every layout known
        rows = icesink.read("evolving.readded", catalog=sqlite_catalog).to_pylist()
        assert sorted((r["id"], r["v"]) for r in rows) == [(1, None), (2, None), (3, None), (4, "new")]
        rows = icesink.read("evolving.promoted", catalog=sqlite_catalog).to_pylist()
        assert sorted((r["id"], r["n"]) for r in rows) == [(1, 7), (2, 2**40)]
