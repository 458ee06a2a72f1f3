"""A table partitioned by a double keeps its partition values exact through icesink's commits, manifest merging
and maintenance, and a filter on the column finds its rows.

pyiceberg 0.12's compiled Avro decoder reads every double at float precision (0.1 comes back as
0.10000000149011612; apache/iceberg-python#3808 fixed it after 0.12). icesink reads manifests with it: its
filtered reads pruned away the files of such a partition, and manifests it writes again (merging, maintenance)
would have stored the rounded values for every reader. These tests judge by DuckDB (the manifests' raw values and
a filtered scan), by pyiceberg's own filter, and by icesink's own reads.
"""

from __future__ import annotations

import glob
import math
import os

import pyarrow as pa
import pytest

from icesink.catalog.config import CatalogConfig
from icesink.catalog.loader import open_catalog
from icesink.committer.maintainer import Maintainer
from icesink.maintenance.policy import MaintenancePolicy
from icesink.maintenance.run import MaintenanceRequest
from tests.helpers.outcomes import query_with_duckdb, read_with_duckdb

TABLE = "shop.readings"
# Values float precision cannot hold: rounded, overflowed to infinity, or flushed to zero.
VALUES = [0.1, 1 / 3, 1e300, 5e-324, -2.5]


def _table(config: CatalogConfig) -> None:
    from pyiceberg.partitioning import PartitionField, PartitionSpec
    from pyiceberg.schema import Schema
    from pyiceberg.transforms import IdentityTransform
    from pyiceberg.types import DoubleType, LongType, NestedField, StringType

    catalog = open_catalog(config)
    catalog.create_namespace("shop")
    schema = Schema(
        NestedField(1, "id", LongType(), required=True),
        NestedField(2, "d", DoubleType()),
        NestedField(3, "v", StringType()),
    )
    spec = PartitionSpec(PartitionField(2, 1000, IdentityTransform(), "d"))
    # Merged at every second manifest: committed entries are read back and written again.
    catalog.create_table(TABLE, schema, partition_spec=spec, properties={"commit.manifest.min-count-to-merge": "2"})


def _local(location: str) -> str:
    return location.removeprefix("file://")


def _append(config: CatalogConfig, checkpoint: int, ids: list[int]) -> None:
    """Write, stage and commit one checkpoint of rows, as a stream's task and inline committer do."""
    from icesink.catalog.ledger import Ledger
    from icesink.committer.commit import TableCommitter
    from icesink.committer.staging import stage_checkpoint
    from icesink.iceberg.describe import writer_spec
    from icesink.writer.task import TaskWriter

    table = open_catalog(config).load_table(TABLE)
    writer = TaskWriter(writer_spec(table, TABLE, "readings").for_checkpoint(checkpoint), 0, 0)
    rows = {
        "id": pa.array(ids, pa.int64()),
        "d": [VALUES[i % len(VALUES)] for i in ids],
        "v": [f"v{checkpoint}"] * len(ids),
    }
    writer.write(pa.table(rows))
    stage_checkpoint(Ledger(config), table, TABLE, "readings", checkpoint, [writer.complete()])
    TableCommitter.of(config).commit_pending(TABLE)


def _partition_values_in_live_manifests(config: CatalogConfig) -> set[float]:
    """The partition values every manifest of the current snapshot holds, as DuckDB reads the Avro."""
    table = open_catalog(config).load_table(TABLE)
    snapshot = table.current_snapshot()
    assert snapshot is not None
    found: set[float] = set()
    for manifest in snapshot.manifests(table.io):
        rows = query_with_duckdb(
            f"SELECT data_file.partition.d AS d FROM read_avro('{_local(manifest.manifest_path)}')"
        )
        found.update(float(r["d"]) for r in rows)
    return found


def test_partition_values_of_doubles_stay_exact_through_commits_merging_and_maintenance(
    sqlite_catalog: CatalogConfig,
) -> None:
    from pyiceberg.expressions import EqualTo

    _table(sqlite_catalog)
    expected: dict[int, str] = {}
    for checkpoint in range(4):
        ids = list(range(checkpoint * 10, checkpoint * 10 + 10))
        _append(sqlite_catalog, checkpoint, ids)
        expected.update({i: f"v{checkpoint}" for i in ids})
    catalog = open_catalog(sqlite_catalog)
    manifests_before = len(glob.glob(os.path.join(_local(catalog.load_table(TABLE).location()), "metadata", "*")))
    assert _partition_values_in_live_manifests(sqlite_catalog) == set(VALUES)

    table = catalog.load_table(TABLE)
    Maintainer(catalog, sqlite_catalog).run(table, TABLE, MaintenanceRequest(MaintenancePolicy(), everything=True))
    table = catalog.load_table(TABLE)
    assert table.current_snapshot() is not None
    assert table.current_snapshot().summary.get("icesink.maintenance") is not None  # type: ignore[union-attr]
    assert len(glob.glob(os.path.join(_local(table.location()), "metadata", "*"))) > manifests_before
    assert _partition_values_in_live_manifests(sqlite_catalog) == set(VALUES)

    def rows_with_d(value: float) -> dict[int, str]:
        return {r["id"]: r["v"] for r in table.scan(row_filter=EqualTo("d", value)).to_arrow().to_pylist()}

    for value in VALUES:
        wanted = {i: v for i, v in expected.items() if VALUES[i % len(VALUES)] == value}
        assert wanted and rows_with_d(value) == wanted, value
        # DuckDB prunes by the manifests' partition values too.
        location = table.metadata_location
        duckdb = query_with_duckdb(f"SELECT id, v FROM iceberg_scan('{location}') WHERE d = {value!r}")
        assert {r["id"]: r["v"] for r in duckdb} == wanted, value
    (everything,) = read_with_duckdb(table.metadata_location)
    assert {r["id"]: r["v"] for r in everything} == expected
    assert all(math.isfinite(float(r["d"])) for r in everything)


@pytest.mark.parametrize("value", VALUES)
def test_pyiceberg_reads_a_double_from_avro_at_full_precision(value: float) -> None:
    """The decoder icesink reads manifests with, against the bytes Avro writes for a double."""
    import struct

    from pyiceberg.avro.decoder import new_decoder
    from pyiceberg.avro.reader import DoubleReader

    import icesink.iceberg  # noqa: F401  # what makes the reading exact

    assert DoubleReader().read(new_decoder(struct.pack("<d", value))) == value
