"""Converting equality deletes reads only the files and row groups that may hold a deleted key.

The property: whatever the keys, the files' writers and their metrics, the
positions found with pruning are exactly the rows whose key a delete holds
(found here by reading every file in full). Then: what each test prunes, and
a table converted at commit read back by every reader.
"""

from __future__ import annotations

import dataclasses
import datetime
import decimal
import hashlib
import logging
import random
import tempfile
import uuid
import warnings
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from icesink.catalog.config import CatalogConfig
from icesink.catalog.loader import open_catalog
from icesink.iceberg.deletes import EqualityDeletes
from icesink.iceberg.describe import writer_spec
from icesink.iceberg.key_pruning import KeyPruning
from icesink.iceberg.manifests import to_data_file
from icesink.iceberg.scan import LiveFile, live_files
from icesink.maintenance.positions import deleted_rows, plan_key_reads
from icesink.paths import file_uri
from icesink.results import FileContent
from icesink.writer.files import FileNamer, RollingFileWriter
from icesink.writer.task import row_groups

TABLE = "shop.keys"

# Values chosen to sit at bounds: equal prefixes longer than the 16 characters bounds keep, the largest
# code point, empty strings and bytes, negative decimals, dates around the epoch.
DOMAINS: dict[str, list[Any]] = {
    "long": [-(2**63), -3, -1, 0, 1, 2, 7, 2**31, 2**63 - 1],
    # Parquet keeps no statistics for a row group holding a value over 4 KiB (pyiceberg's bounds then leave it out).
    "string": [
        "",
        "a",
        "b",
        "é",
        "日本",
        "a" * 16,
        "a" * 16 + "b",
        "a" * 16 + "c",
        "\U0010ffff" * 17,
        "z z%/",
        "y" * 5000,
    ],
    "decimal": [decimal.Decimal(v) for v in ("-9999999.99", "-1.00", "0.00", "0.01", "1.50", "9999999.99")],
    # Unscaled values of more than 28 digits, one unit apart: the default decimal context would round them.
    "decimal38": [
        decimal.Decimal(v)
        for v in (
            "123456789012345678901234567890123456.78",
            "123456789012345678901234567890123456.79",
            "-99999999999999999999999999999999999.99",
            "0.01",
        )
    ],
    "date": [datetime.date(1969, 12, 31), datetime.date(1970, 1, 1), datetime.date(2026, 11, 24)],
    "binary": [b"", b"\x00", b"\x00\x01", b"\xff" * 17, b"\xff" * 16 + b"\x00", b"k"],
    "uuid": [uuid.UUID(int=n) for n in (0, 1, 2**64, 2**127, 2**128 - 1)],
}


def iceberg_type(kind: str) -> Any:
    from pyiceberg import types as t

    return {
        "long": t.LongType(),
        "string": t.StringType(),
        "decimal": t.DecimalType(9, 2),
        "decimal38": t.DecimalType(38, 2),
        "date": t.DateType(),
        "binary": t.BinaryType(),
        "uuid": t.UUIDType(),
    }[kind]


def arrow_type(kind: str) -> pa.DataType:
    return {
        "long": pa.int64(),
        "string": pa.string(),
        "decimal": pa.decimal128(9, 2),
        "decimal38": pa.decimal128(38, 2),
        "date": pa.date32(),
        "binary": pa.binary(),
        "uuid": pa.uuid(),
    }[kind]


def arrow_values(kind: str, values: list[Any]) -> pa.Array:
    if kind == "uuid":
        return pa.array([v.bytes if v is not None else None for v in values], pa.binary(16)).cast(pa.uuid())
    return pa.array(values, arrow_type(kind))


@dataclasses.dataclass
class Setup:
    kinds: list[str]  # the key: one field, or two
    files: list[tuple[str, list[tuple[Any, ...]]]]  # (writer, key tuples)
    deleted: list[tuple[Any, ...]]


WRITERS = ("icesink", "pyiceberg", "pyiceberg-without-bounds")


@st.composite
def setups(draw: Any) -> Setup:
    kinds = draw(
        st.sampled_from(
            [["long"], ["string"], ["decimal"], ["decimal38"], ["date"], ["binary"], ["uuid"], ["long", "string"]]
        )
    )

    def key() -> Any:
        return st.tuples(*[st.one_of(st.none(), st.sampled_from(DOMAINS[k])) for k in kinds])

    writers = ("icesink",) if "uuid" in kinds else WRITERS  # pyiceberg 0.12 writes no uuid column
    files = draw(
        st.lists(st.tuples(st.sampled_from(writers), st.lists(key(), min_size=1, max_size=12)), min_size=1, max_size=5)
    )
    held = [k for _, keys in files for k in keys]
    deleted = draw(st.lists(st.one_of(st.sampled_from(held), key()), min_size=1, max_size=6))
    return Setup(kinds, files, deleted)


def key_table(kinds: list[str], keys: list[tuple[Any, ...]]) -> pa.Table:
    return pa.table({f"k{n}": arrow_values(kind, [k[n] for k in keys]) for n, kind in enumerate(kinds)})


def build(work: Path, setup: Setup, row_group_rows: int = 3) -> tuple[Any, EqualityDeletes, Any]:
    """The table with one data file per entry (appended in order), and an equality delete of the keys."""
    from pyiceberg.schema import Schema
    from pyiceberg.types import NestedField

    config = CatalogConfig("test", f"sqlite:///{work / 'catalog.db'}", file_uri(work / "wh"), embedded=True)
    catalog = open_catalog(config)
    catalog.create_namespace("shop")
    fields = [NestedField(n + 1, f"k{n}", iceberg_type(kind), required=False) for n, kind in enumerate(setup.kinds)]
    blooms = {f"write.parquet.bloom-filter-enabled.column.k{n}": "true" for n in range(len(setup.kinds))}
    # pyiceberg's files get several row groups too, so that its bounds are built from row groups' statistics.
    properties = {**blooms, "write.parquet.row-group-limit": str(row_group_rows)}
    table = catalog.create_table(TABLE, Schema(*fields), properties=properties)
    for number, (writer, keys) in enumerate(setup.files):
        rows = key_table(setup.kinds, keys)
        if writer == "icesink":
            spec = dataclasses.replace(
                writer_spec(table, TABLE, "job").for_checkpoint(number), row_group_rows=row_group_rows
            )
            files = RollingFileWriter(spec, FileNamer("job", number, 0, 0), (), spec.data_location, spec.columns)
            for start in range(0, rows.num_rows, row_group_rows):  # small row groups, each of one write
                files.write(rows.slice(start, row_group_rows))
            with table.transaction() as transaction, transaction.update_snapshot().fast_append() as append:
                for record in files.close():
                    append.append_data_file(to_data_file(record, table.metadata.format_version))
        else:
            if writer == "pyiceberg-without-bounds":
                with table.transaction() as transaction:
                    transaction.set_properties({"write.metadata.metrics.default": "counts"})
            with warnings.catch_warnings():  # pyiceberg writes no bloom filters, and says so
                warnings.filterwarnings("ignore", "Parquet writer option")
                table.append(rows.cast(table.schema().as_arrow()))
            if writer == "pyiceberg-without-bounds":
                with table.transaction() as transaction:
                    transaction.remove_properties("write.metadata.metrics.default")
        table = catalog.load_table(TABLE)
    spec = writer_spec(table, TABLE, "deletes").for_checkpoint(99)
    deletes_writer = RollingFileWriter(
        spec,
        FileNamer("deletes", 99, 0, 0),
        (),
        spec.data_location,
        spec.columns,
        content=FileContent.EQUALITY_DELETES,
        equality_ids=tuple(range(1, len(setup.kinds) + 1)),
    )
    deletes_writer.write(key_table(setup.kinds, setup.deleted))
    (record,) = deletes_writer.close()
    delete_file = LiveFile(to_data_file(record, table.metadata.format_version), table.metadata.next_sequence_number())
    return table, EqualityDeletes(table, table.schema(), [delete_file]), catalog


def python_keys(kinds: list[str], rows: pa.Table) -> list[tuple[Any, ...]]:
    columns = []
    for n, kind in enumerate(kinds):
        values = rows.column(f"k{n}").to_pylist()
        if kind == "uuid":
            values = [v if v is None or isinstance(v, uuid.UUID) else uuid.UUID(bytes=v) for v in values]
        columns.append(values)
    return list(zip(*columns, strict=True))


def expected_positions(table: Any, setup: Setup) -> dict[str, list[int]]:
    """Every row whose key a delete holds (null equal to null), found by reading every data file in full."""
    deleted = set(setup.deleted)
    found = {}
    for live in live_files(table).data:
        with table.io.new_input(live.path).open() as stream:
            rows = pq.read_table(stream)
        positions = [n for n, k in enumerate(python_keys(setup.kinds, rows)) if k in deleted]
        if positions:
            found[live.path] = positions
    return found


def found_positions(table: Any, deletes: EqualityDeletes) -> tuple[dict[str, list[int]], KeyPruning]:
    pruning = KeyPruning(table, table.schema(), deletes)
    reads = plan_key_reads(table, pruning.files(live_files(table).data), pruning)
    found = deleted_rows(table, table.schema(), reads, deletes)
    return {f.data.path: sorted(f.positions.to_pylist()) for f in found}, pruning


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(setups(), st.sampled_from([1, 4, 1_000_000]), st.sampled_from([1, 7, 8_000_000]))
# pyiceberg's file bounds leave out the second row group (no statistics: it holds a value over 4 KiB).
@example(Setup(["string"], [("pyiceberg", [("a",), ("b",), ("c",), ("zzz",), ("y" * 5000,)])], [("zzz",)]), 1, 1)
def test_pruning_never_skips_a_row_holding_a_deleted_key(setup: Setup, piece_rows: int, match_rows: int) -> None:
    """Also with keys read and matched a few rows at a time (a file's row groups split among pieces)."""
    from unittest import mock

    from icesink.maintenance import positions

    with (
        tempfile.TemporaryDirectory() as work,
        mock.patch.object(positions, "PIECE_ROWS", piece_rows),
        mock.patch.object(positions, "MATCH_ROWS", match_rows),
    ):
        table, deletes, _ = build(Path(work), setup)
        found, _ = found_positions(table, deletes)
        assert found == expected_positions(table, setup)


def spread_keys(number: int) -> str:
    """Keys with no order to them (bounds of any file span nearly all of them): only bloom filters tell."""
    return hashlib.sha256(str(number).encode()).hexdigest()[:24]


def test_bounds_statistics_and_bloom_filters_each_leave_out_what_cannot_hold_a_key(tmp_path: Path) -> None:
    setup = Setup(
        ["long"],
        [("icesink", [(n,) for n in range(f * 12, f * 12 + 12)]) for f in range(6)],
        [(13,), (14,)],  # in the second file's first row group only
    )
    table, deletes, _ = build(tmp_path / "ordered", setup)
    found, pruning = found_positions(table, deletes)
    assert found == expected_positions(table, setup)
    counts = pruning.counts
    assert (counts.files_in_scope, counts.files_skipped_by_bounds) == (6, 5)
    assert (counts.row_groups_read, counts.row_groups_skipped_by_statistics) == (1, 3)

    unordered = [(spread_keys(n),) for n in range(2000)]
    setup = Setup(["string"], [("icesink", unordered)], [unordered[7], ("not held",)])
    table, deletes, _ = build(tmp_path / "unordered", setup, row_group_rows=200)
    found, pruning = found_positions(table, deletes)
    assert found == expected_positions(table, setup)
    counts = pruning.counts
    # Every row group's statistics span the deleted keys: bloom filters leave out all but the one holding one
    # (a false positive, at 1%, would read one more).
    assert counts.row_groups_skipped_by_statistics == 0
    assert counts.row_groups_read in (1, 2) and counts.row_groups_skipped_by_bloom_filter == 10 - counts.row_groups_read


def test_data_files_get_bloom_filters_on_key_columns_only_unless_the_table_says(tmp_path: Path) -> None:
    from pyiceberg.schema import Schema
    from pyiceberg.types import BooleanType, LongType, NestedField, StringType, StructType

    config = CatalogConfig("test", f"sqlite:///{tmp_path / 'catalog.db'}", file_uri(tmp_path / "wh"), embedded=True)
    catalog = open_catalog(config)
    catalog.create_namespace("shop")
    schema = Schema(
        NestedField(1, "id", LongType(), required=True),
        NestedField(2, "name", StringType()),
        NestedField(3, "flag", BooleanType()),
        NestedField(4, "customer", StructType(NestedField(5, "email é", StringType()))),
        identifier_field_ids=[1],
    )
    properties = {
        "write.parquet.bloom-filter-enabled.column.customer.email é": "TRUE",
        "write.parquet.bloom-filter-fpp.column.customer.email é": "0.05",
        "write.parquet.bloom-filter-enabled.column.flag": "true",  # booleans have none in Parquet
        "write.parquet.bloom-filter-enabled.column.gone": "true",  # no such column: left to whoever set it
    }
    table = catalog.create_table(TABLE, schema, properties=properties)
    spec = writer_spec(table, TABLE, "job")
    assert spec.bloom_filters == (("id", 0.01), ("customer.email é", 0.05))
    files = RollingFileWriter(spec, FileNamer("job", 0, 0, 0), (), spec.data_location, spec.columns)
    files.write(
        pa.table(
            {
                "id": pa.array([1, 2], pa.int64()),
                "name": ["a", None],
                "flag": [True, None],
                "customer": pa.array([{"email é": "x@y"}, None], pa.struct([("email é", pa.string())])),
            }
        ).cast(spec.arrow_schema(spec.columns))
    )
    (record,) = files.close()
    with table.io.new_input(record.path).open() as stream:
        chunks = pq.ParquetFile(stream).metadata.row_group(0)
    with_filter = {
        chunks.column(j).path_in_schema for j in range(chunks.num_columns) if chunks.column(j).bloom_filter_offset
    }
    assert with_filter == {"id", "customer.email é"}

    with table.transaction() as transaction:
        transaction.set_properties({"write.parquet.bloom-filter-enabled.column.id": "false"})
    assert [path for path, _ in writer_spec(catalog.load_table(TABLE), TABLE, "job").bloom_filters] == [
        "customer.email é"
    ]
    from icesink.errors import ConfigError

    with table.transaction() as transaction:
        transaction.set_properties({"write.parquet.bloom-filter-fpp.column.id": "often"})
    with table.transaction() as transaction:
        transaction.set_properties({"write.parquet.bloom-filter-enabled.column.id": "true"})
    with pytest.raises(ConfigError, match=r"shop.keys.*bloom-filter-fpp.column.id='often'.*between 0 and 1"):
        writer_spec(catalog.load_table(TABLE), TABLE, "job")


def commit_files_of_50_keys(config: CatalogConfig, checkpoints: int) -> Any:
    """Checkpoints of 50 new keys each, in key order (one data file each): the model of what they leave."""
    from tests.test_maintenance import Model, commit_changes

    model = Model()
    for checkpoint in range(checkpoints):
        changes = [(k, f"v{checkpoint}", "I") for k in range(checkpoint * 50, checkpoint * 50 + 50)]
        commit_changes(config, checkpoint, changes)
        model.apply(changes)
    return model


@pytest.mark.interop
def test_a_commit_converts_with_pruning_and_every_reader_agrees(
    sqlite_catalog: CatalogConfig, caplog: pytest.LogCaptureFixture, java_reader: Path
) -> None:
    """Upserts of recent keys into a table of many files: the commit reads the keys of one file."""
    from tests.helpers.outcomes import check_outcome, read_with_duckdb, read_with_iceberg_java
    from tests.test_maintenance import TABLE as KV
    from tests.test_maintenance import commit_changes, create, rows_by_every_reader

    create(sqlite_catalog)
    model = commit_files_of_50_keys(sqlite_catalog, 8)
    changes = [(390, "new", "U"), (399, "new", "U"), (395, "", "D"), (1000, "inserted", "I")]
    with caplog.at_level(logging.INFO, logger="icesink.maintenance"):
        commit_changes(sqlite_catalog, 8, changes)
    model.apply(changes)
    assert "read the keys of 1 of 8 data files" in caplog.text
    table = open_catalog(sqlite_catalog).load_table(KV)
    assert live_files(table).equality_deletes == []
    for rows in rows_by_every_reader(sqlite_catalog):
        assert rows == model.expected()
    check_outcome("pruned conversion at commit", sqlite_catalog, KV, sorted(model.rows))
    java = read_with_iceberg_java(java_reader, table.metadata_location, ["id", "v"])
    (duckdb,) = read_with_duckdb(table.metadata_location)
    for rows in (java, duckdb):
        assert sorted((r["id"], r["v"]) for r in rows) == model.expected()


def test_deletes_whose_keys_spread_over_more_rows_than_the_limit_are_kept_and_counted(
    sqlite_catalog: CatalogConfig, caplog: pytest.LogCaptureFixture
) -> None:
    """Over ``convert-max-rows`` after pruning: equality deletes committed as staged, a warning, a metric."""
    from icesink.committer.commit import TableCommitter
    from icesink.committer.observability import CommitterMetrics
    from tests.test_maintenance import TABLE as KV
    from tests.test_maintenance import commit_changes, create, rows_by_every_reader

    create(sqlite_catalog, {"icesink.equality-deletes.convert-max-rows": "60"})
    model = commit_files_of_50_keys(sqlite_catalog, 4)
    recent = [(199, "recent", "U")]  # one file, 50 rows: converted
    commit_changes(sqlite_catalog, 4, recent)
    model.apply(recent)
    assert live_files(open_catalog(sqlite_catalog).load_table(KV)).equality_deletes == []
    spread = [(0, "spread", "U"), (120, "spread", "U")]  # two of five files, 100 rows: over the limit
    with caplog.at_level(logging.WARNING, logger="icesink.maintenance"):
        commit_changes(sqlite_catalog, 5, spread, commit=False)
        (outcome,) = TableCommitter.of(sqlite_catalog).commit_pending(KV)
    model.apply(spread)
    assert "spread over the table: 100 rows in 2 of 5 files" in caplog.text
    assert "icesink.equality-deletes.convert-max-rows=60" in caplog.text
    assert outcome.equality_delete_files == 1
    metrics = CommitterMetrics()
    metrics.committed(KV, 1, 1, 0, [outcome.seconds], outcome.equality_delete_files)
    assert metrics.registry.get_sample_value("icesink_equality_delete_files_committed_total", {"table": KV}) == 1
    assert len(live_files(open_catalog(sqlite_catalog).load_table(KV)).equality_deletes) == 1
    for rows in rows_by_every_reader(sqlite_catalog):
        assert rows == model.expected()


# Partition values as manifests hold them (dates as days since the epoch), with a type each.
PARTITION_DOMAINS: dict[str, list[Any]] = {
    "long": DOMAINS["long"],
    "string": DOMAINS["string"],
    "decimal": DOMAINS["decimal"],
    "date": [(d - datetime.date(1970, 1, 1)).days for d in DOMAINS["date"]],
    "binary": DOMAINS["binary"],
    "boolean": [False, True],
    "double": [-0.0, 0.0, 1.5, float("nan")],  # never judged: NaN and -0.0 have no order to trust
}


def partition_type(kinds: list[str]) -> Any:
    from pyiceberg.types import BooleanType, DoubleType, NestedField, StructType

    extra = {"boolean": BooleanType(), "double": DoubleType()}
    return StructType(
        *[NestedField(1000 + n, f"p{n}", extra.get(k) or iceberg_type(k), required=False) for n, k in enumerate(kinds)]
    )


def summaries(kinds: list[str], partitions: list[tuple[Any, ...]]) -> list[Any]:
    """A manifest's partition summaries as pyiceberg writes them (the lowest and highest value of each field)."""
    from pyiceberg.manifest import PartitionFieldStats

    stats = [PartitionFieldStats(f.field_type) for f in partition_type(kinds).fields]
    for values in partitions:
        for field_stats, value in zip(stats, values, strict=True):
            field_stats.update(value)
    return [s.to_summary() for s in stats]


@settings(max_examples=200, deadline=None)
@given(
    st.sampled_from([[k] for k in PARTITION_DOMAINS] + [["long", "string"], ["date", "binary"]]).flatmap(
        lambda kinds: st.tuples(
            st.just(kinds),
            st.lists(
                st.tuples(*[st.one_of(st.none(), st.sampled_from(PARTITION_DOMAINS[k])) for k in kinds]),
                min_size=1,
                max_size=8,
            ),
        )
    )
)
def test_partition_summaries_never_leave_out_a_manifest_listing_the_partition(
    manifest: tuple[list[str], list[tuple[Any, ...]]],
) -> None:
    from icesink.iceberg.key_pruning import _partitions_may_hold

    kinds, partitions = manifest
    written = summaries(kinds, partitions)
    for values in partitions:
        assert _partitions_may_hold(partition_type(kinds), written, values)


def test_partition_summaries_leave_out_partitions_outside_their_range() -> None:
    from icesink.iceberg.key_pruning import _partitions_may_hold

    kinds = ["long", "string"]
    written = summaries(kinds, [(1, "b"), (7, "é"), (3, None)])
    kind = partition_type(kinds)
    assert not _partitions_may_hold(kind, written, (0, "b"))
    assert not _partitions_may_hold(kind, written, (8, "b"))
    assert not _partitions_may_hold(kind, written, (2, "a"))
    assert not _partitions_may_hold(kind, written, (None, "b"))  # no file with a null first field
    assert _partitions_may_hold(kind, written, (2, "c"))  # within both ranges: may be listed
    assert _partitions_may_hold(kind, written, (2, None))
    doubles = partition_type(["double"])
    assert _partitions_may_hold(doubles, summaries(["double"], [(1.5,)]), (7.0,))  # floats are not judged
    # A summary written before the field's type was promoted (4-byte int bounds, now a long) is read as such;
    # a bound of a length the type cannot have is not judged.
    from pyiceberg.manifest import PartitionFieldSummary

    short = [PartitionFieldSummary(False, False, b"\x05\0\0\0", b"\x05\0\0\0")]
    assert _partitions_may_hold(partition_type(["long"]), short, (5,))
    assert not _partitions_may_hold(partition_type(["long"]), short, (9,))
    wrong = [PartitionFieldSummary(False, False, b"\x05" + b"\0" * 7, b"\x05" + b"\0" * 7)]
    assert _partitions_may_hold(partition_type(["date"]), wrong, (9,))


def test_a_commit_reads_only_the_manifests_whose_partitions_its_deletes_reach(
    sqlite_catalog: CatalogConfig, caplog: pytest.LogCaptureFixture
) -> None:
    """A table partitioned by ranges of its key: upserts of recent keys read the manifests of recent ranges."""
    from tests.test_maintenance import TABLE as KV
    from tests.test_maintenance import commit_changes, create, rows_by_every_reader

    create(sqlite_catalog, {"commit.manifest-merge.enabled": "false"}, partition_by=("truncate(100, id)",))
    model = commit_files_of_50_keys(sqlite_catalog, 8)  # eight manifests; ranges 0, 0, 100, 100, 200, 200, 300, 300
    changes = [(390, "new", "U"), (350, "new", "U"), (395, "", "D"), (1000, "inserted", "I")]
    with caplog.at_level(logging.INFO, logger="icesink.maintenance"):
        commit_changes(sqlite_catalog, 8, changes)
    model.apply(changes)
    assert "manifests: 2 read, 6 skipped by partition" in caplog.text
    table = open_catalog(sqlite_catalog).load_table(KV)
    assert live_files(table).equality_deletes == []
    for rows in rows_by_every_reader(sqlite_catalog):
        assert rows == model.expected()


@pytest.mark.parametrize("earlier", [(), ("bucket(4, id)",)], ids=["unpartitioned", "bucket 4"])
def test_keys_updated_after_the_partition_spec_changed_leave_no_row_of_the_earlier_spec(
    sqlite_catalog: CatalogConfig, earlier: tuple[str, ...]
) -> None:
    """Readers apply an equality delete only to data files of its own spec: rows written before the table's
    spec changed are reached by converting the deletes at commit, whatever the row limit says."""
    from pyiceberg.transforms import BucketTransform

    from icesink.catalog.ledger import Ledger
    from icesink.errors import ConfigError
    from tests.test_maintenance import KEEP, Model, commit_changes, create, rows_by_every_reader
    from tests.test_maintenance import TABLE as KV

    create(sqlite_catalog, {"icesink.equality-deletes.convert-max-rows": "1"}, partition_by=earlier)
    model = Model()
    first = [(k, "a", "I") for k in range(20)]
    commit_changes(sqlite_catalog, 0, first)
    model.apply(first)
    table = open_catalog(sqlite_catalog).load_table(KV)
    with table.update_spec() as update:
        for field in table.spec().fields:
            update.remove_field(field.name)
        update.add_field("id", BucketTransform(8), "id_bucket_8")
    changes = [(2, "B", "U"), (3, "", "D"), (17, "R", "U"), (100, "new", "I")]
    commit_changes(sqlite_catalog, 1, changes)
    model.apply(changes)
    table = open_catalog(sqlite_catalog).load_table(KV)
    assert live_files(table).equality_deletes == []
    for rows in rows_by_every_reader(sqlite_catalog):
        assert rows == model.expected()

    # A table that keeps its equality deletes cannot take such a checkpoint: it stays staged, with the reason.
    with table.transaction() as transaction:
        transaction.set_properties(KEEP)
    with pytest.raises(
        ConfigError, match=r"shop\.kv, job cdc, checkpoint 2: the table holds data files of another partition spec"
    ):
        commit_changes(sqlite_catalog, 2, [(4, "gone?", "D")])
    assert [r.checkpoint_id for r in Ledger(sqlite_catalog).pending(KV)] == [2]
    for rows in rows_by_every_reader(sqlite_catalog):
        assert rows == model.expected()


def commit_keyed(config: CatalogConfig, identifier: str, checkpoint: int, changes: pa.Table) -> None:
    """Write, stage and commit one checkpoint of changes (an ``op`` column beside the table's columns) to a
    table keyed on its identifier fields, as a stream's task and inline committer do."""
    from icesink.catalog.ledger import Ledger
    from icesink.committer.commit import TableCommitter
    from icesink.committer.staging import stage_checkpoint
    from icesink.writer.spec import ChangeSpec
    from icesink.writer.task import TaskWriter

    table = open_catalog(config).load_table(identifier)
    keys = tuple(table.schema().identifier_field_ids)
    spec = writer_spec(table, identifier, "cdc", ChangeSpec(equality_field_ids=keys, op_column="op"))
    writer = TaskWriter(spec.for_checkpoint(checkpoint), 0, 0)
    writer.write(changes.append_column("__icesink_order", pa.array(range(changes.num_rows), pa.int64())))
    stage_checkpoint(Ledger(config), table, identifier, "cdc", checkpoint, [writer.complete()])
    TableCommitter.of(config).commit_pending(identifier)


@pytest.mark.parametrize("transform", ["identity", "bucket[4]"])
def test_a_table_keyed_and_partitioned_on_a_uuid_takes_upserts(sqlite_catalog: CatalogConfig, transform: str) -> None:
    from pyiceberg.partitioning import PartitionField, PartitionSpec
    from pyiceberg.schema import Schema
    from pyiceberg.transforms import parse_transform
    from pyiceberg.types import NestedField, StringType, UUIDType

    from tests.helpers.outcomes import iceberg_rust_sql, read_with_duckdb

    catalog = open_catalog(sqlite_catalog)
    catalog.create_namespace("shop")
    schema = Schema(
        NestedField(1, "u", UUIDType(), required=True), NestedField(2, "v", StringType()), identifier_field_ids=[1]
    )
    spec = PartitionSpec(PartitionField(1, 1000, parse_transform(transform), "u_part"))
    catalog.create_table(TABLE, schema, partition_spec=spec)
    ids = [uuid.UUID(int=n) for n in (0, 1, 2**64, 2**127, 2**128 - 1)]

    def changes(keys: list[uuid.UUID], values: list[str], ops: list[str]) -> pa.Table:
        return pa.table({"u": arrow_values("uuid", keys), "v": values, "op": ops})

    commit_keyed(sqlite_catalog, TABLE, 0, changes(ids, ["a"] * 5, ["I"] * 5))
    commit_keyed(sqlite_catalog, TABLE, 1, changes(ids[1:3], ["B", ""], ["U", "D"]))
    table = catalog.load_table(TABLE)
    assert live_files(table).equality_deletes == []
    expected = sorted([(ids[0], "a"), (ids[1], "B"), (ids[3], "a"), (ids[4], "a")])

    def pairs(rows: list[dict[str, Any]]) -> list[tuple[uuid.UUID, str]]:
        return sorted((r["u"] if isinstance(r["u"], uuid.UUID) else uuid.UUID(bytes=r["u"]), r["v"]) for r in rows)

    assert pairs(table.scan().to_arrow().to_pylist()) == expected
    (duckdb,) = read_with_duckdb(table.metadata_location)
    assert sorted((uuid.UUID(r["u"]), r["v"]) for r in duckdb) == expected
    if transform != "identity":  # iceberg-rust (pyiceberg-core 0.11) fails to load a delete manifest of uuid partitions
        assert pairs(iceberg_rust_sql(table, "SELECT u, v FROM t").to_pylist()) == expected


def test_files_without_field_ids_are_read_by_the_name_mapping_after_the_key_was_renamed(
    sqlite_catalog: CatalogConfig,
) -> None:
    """A file added by ``add_files`` (no field ids) holds the key under its name then; readers find it through
    the table's name mapping, and so does the conversion."""
    from icesink.catalog.ledger import Ledger
    from icesink.committer.commit import TableCommitter
    from icesink.committer.staging import stage_checkpoint
    from icesink.writer.spec import ChangeSpec
    from icesink.writer.task import TaskWriter
    from tests.helpers.outcomes import iceberg_rust_sql
    from tests.test_maintenance import TABLE as KV
    from tests.test_maintenance import create

    table = create(sqlite_catalog)
    external = f"{table.location()}/data/külső fájl %.parquet"
    Path(external.removeprefix("file://")).parent.mkdir(parents=True, exist_ok=True)
    plain = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("v", pa.string())])
    pq.write_table(pa.table({"id": [1, 2, 3], "v": ["a", "b", "c"]}, plain), external.removeprefix("file://"))
    table.add_files([external])
    table = open_catalog(sqlite_catalog).load_table(KV)
    with table.update_schema() as update:
        update.rename_column("id", "key")
    table = open_catalog(sqlite_catalog).load_table(KV)
    spec = writer_spec(table, KV, "cdc", ChangeSpec(equality_field_ids=(1,), op_column="op")).for_checkpoint(0)
    writer = TaskWriter(spec, 0, 0)
    writer.write(
        pa.table({"key": [2, 3], "v": ["B", ""], "op": ["U", "D"], "__icesink_order": pa.array([0, 1], pa.int64())})
    )
    stage_checkpoint(Ledger(sqlite_catalog), table, KV, "cdc", 0, [writer.complete()])
    TableCommitter.of(sqlite_catalog).commit_pending(KV)
    table = open_catalog(sqlite_catalog).load_table(KV)
    assert live_files(table).equality_deletes == []
    expected = [(1, "a"), (2, "B")]
    assert sorted((r["key"], r["v"]) for r in table.scan().to_arrow().to_pylist()) == expected
    rust = iceberg_rust_sql(table, "SELECT key, v FROM t")
    assert sorted((r["key"], r["v"]) for r in rust.to_pylist()) == expected


def test_keys_updated_after_the_source_of_the_earlier_spec_was_dropped_leave_no_row_of_it(
    sqlite_catalog: CatalogConfig,
) -> None:
    """The earlier spec's manifests (here, of position deletes) still need the dropped column's type."""
    from pyiceberg.partitioning import PartitionField, PartitionSpec
    from pyiceberg.schema import Schema
    from pyiceberg.transforms import BucketTransform, IdentityTransform
    from pyiceberg.types import LongType, NestedField, StringType

    import icesink

    catalog = open_catalog(sqlite_catalog)
    catalog.create_namespace("shop")
    schema = Schema(
        NestedField(1, "id", LongType(), required=True),
        NestedField(2, "v", StringType()),
        NestedField(3, "region ü/%", StringType()),
        identifier_field_ids=[1],
    )
    table = catalog.create_table(
        TABLE, schema, partition_spec=PartitionSpec(PartitionField(3, 1000, IdentityTransform(), "region"))
    )
    arrow = pa.schema([pa.field("id", pa.int64(), nullable=False), ("v", pa.string()), ("region ü/%", pa.string())])
    table.append(pa.table({"id": range(6), "v": ["a"] * 6, "region ü/%": ["x", "y", None] * 2}, arrow))
    with table.update_spec() as update:
        update.remove_field("region")
        update.add_field("id", BucketTransform(8), "id_bucket")
    with catalog.load_table(TABLE).update_schema() as update:
        update.delete_column("region ü/%")
    commit_keyed(sqlite_catalog, TABLE, 0, pa.table({"id": [1, 2, 9], "v": ["B", "", "new"], "op": ["U", "D", "I"]}))
    table = catalog.load_table(TABLE)
    expected = [(0, "a"), (1, "B"), (3, "a"), (4, "a"), (5, "a"), (9, "new")]
    assert live_files(table).equality_deletes == []
    assert sorted((r["id"], r["v"]) for r in table.scan().to_arrow().to_pylist()) == expected
    assert sorted((r["id"], r["v"]) for r in icesink.read(table).to_pylist()) == expected
    # Iceberg Java 1.9, DuckDB 1.5 and iceberg-rust (pyiceberg-core 0.11) cannot read a table whose spec lost its
    # source column at all (pyiceberg can): dropping such a column is for tables only pyiceberg reads.


@pytest.mark.parametrize("rows", [1, 250, 70_000])
def test_data_files_bloom_filters_are_the_ones_pyarrow_sizes_by_itself(tmp_path: Path, rows: int) -> None:
    """The writer names ``ndv`` (pyarrow is 10-25 ms a file slower without it): each row group's filter must
    still be byte for byte the one pyarrow writes without it, sized by the row group's own values."""
    from pyiceberg.schema import Schema
    from pyiceberg.types import LongType, NestedField, StringType

    config = CatalogConfig("test", f"sqlite:///{tmp_path / 'catalog.db'}", file_uri(tmp_path / "wh"), embedded=True)
    catalog = open_catalog(config)
    catalog.create_namespace("shop")
    schema = Schema(
        NestedField(1, "id", LongType(), required=True), NestedField(2, "name", StringType()), identifier_field_ids=[1]
    )
    properties = {"write.parquet.bloom-filter-enabled.column.name": "true"}
    table = catalog.create_table(TABLE, schema, properties=properties)
    spec = dataclasses.replace(writer_spec(table, TABLE, "job"), row_group_rows=50_000)
    rng = random.Random(rows)
    ids = rng.sample(range(10 * rows), rows)
    data = pa.table({"id": pa.array(ids, pa.int64()), "name": [f"n{i % 997}" if i % 5 else None for i in ids]}).cast(
        spec.arrow_schema(spec.columns)
    )
    files = RollingFileWriter(spec, FileNamer("job", 0, 0, 0), (), spec.data_location, spec.columns)
    for group in row_groups(data, spec):  # as a write task slices its rows
        files.write(group)
    (record,) = files.close()
    ours = Path(record.path.removeprefix("file://"))
    theirs = tmp_path / "default.parquet"
    defaults = {path: {"fpp": fpp} for path, fpp in spec.bloom_filters}
    with pq.ParquetWriter(theirs, data.schema, bloom_filter_options=defaults, store_schema=False) as writer:
        for start in range(0, rows, spec.row_group_rows):
            writer.write_table(data.slice(start, spec.row_group_rows), row_group_size=spec.row_group_rows)

    def filters(path: Path) -> list[bytes]:
        found = []
        metadata = pq.ParquetFile(path).metadata
        raw = path.read_bytes()
        for group in range(metadata.num_row_groups):
            for column in range(metadata.num_columns):
                chunk = metadata.row_group(group).column(column)
                if chunk.bloom_filter_offset:
                    found.append(raw[chunk.bloom_filter_offset : chunk.bloom_filter_offset + chunk.bloom_filter_length])
        return found

    assert pq.ParquetFile(ours).metadata.num_row_groups == -(-rows // 50_000)
    assert len(filters(ours)) == 2 * pq.ParquetFile(ours).metadata.num_row_groups
    assert filters(ours) == filters(theirs)


def test_a_commit_reads_again_none_of_the_files_an_earlier_commit_read(
    sqlite_catalog: CatalogConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Footers, bloom filters and key columns of committed data files are kept between commits: a commit whose
    deletes reach a file an earlier commit read does not open it again, and finds the same rows in it."""
    from icesink.maintenance import kept_files
    from tests.test_maintenance import TABLE as KV
    from tests.test_maintenance import commit_changes
    from tests.test_maintenance import create as create_kv

    create_kv(sqlite_catalog)
    commit_changes(sqlite_catalog, 0, [(k, f"first-{k}", "I") for k in range(10)])
    first = {f.path for f in live_files(open_catalog(sqlite_catalog).load_table(KV)).data}
    commit_changes(sqlite_catalog, 1, [(1, "second-1", "U")])  # reads the first file's footer, filter and keys
    second = {f.path for f in live_files(open_catalog(sqlite_catalog).load_table(KV)).data} - first
    opened: list[str] = []
    opening = kept_files.KeptFile._open

    def counted(self: kept_files.KeptFile) -> Any:
        opened.append(self.name[1])
        return opening(self)

    monkeypatch.setattr(kept_files.KeptFile, "_open", counted)
    commit_changes(sqlite_catalog, 2, [(2, "third-2", "U"), (1, "third-1", "U"), (7, "", "D")])
    assert set(opened) == second  # the second commit's file only: the first one's reads were kept
    table = open_catalog(sqlite_catalog).load_table(KV)
    assert live_files(table).equality_deletes == []
    expected = sorted([(k, f"first-{k}") for k in (0, 3, 4, 5, 6, 8, 9)] + [(1, "third-1"), (2, "third-2")])
    assert sorted((r["id"], r["v"]) for r in table.scan().to_arrow().to_pylist()) == expected


def test_a_file_regenerated_at_the_same_location_is_converted_against_what_it_holds_now(
    sqlite_catalog: CatalogConfig,
) -> None:
    """An export rewritten at one location (same size, other keys) and attached again with add_files: what a
    commit kept of the first file at that location does not stand for the second."""
    from tests.test_maintenance import TABLE as KV
    from tests.test_maintenance import commit_changes
    from tests.test_maintenance import create as create_kv

    table = create_kv(sqlite_catalog)
    path = Path(table.location().removeprefix("file://")) / "export" / "part-00000.parquet"
    path.parent.mkdir(parents=True)
    plain = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("v", pa.string())])

    def export(keys: range) -> int:
        pq.write_table(pa.table({"id": list(keys), "v": [f"x-{k:04d}" for k in keys]}, plain), path)
        return path.stat().st_size

    size = export(range(10, 20))
    table.add_files([file_uri(path)])
    commit_changes(sqlite_catalog, 0, [(13, "new-13", "U")])  # keeps the first export's keys
    table = open_catalog(sqlite_catalog).load_table(KV)
    table.delete("true")
    assert export(range(20, 30)) == size
    open_catalog(sqlite_catalog).load_table(KV).add_files([file_uri(path)])
    commit_changes(sqlite_catalog, 1, [(23, "new-23", "U"), (14, "new-14", "U")])
    table = open_catalog(sqlite_catalog).load_table(KV)
    expected = sorted([(k, f"x-{k:04d}") for k in range(20, 30) if k != 23] + [(23, "new-23"), (14, "new-14")])
    assert sorted((r["id"], r["v"]) for r in table.scan().to_arrow().to_pylist()) == expected


def test_equality_deletes_written_before_their_key_was_promoted_still_delete(sqlite_catalog: CatalogConfig) -> None:
    """Deletes of an int key kept as equality deletes, the key then promoted to long: readers and the bulk
    conversion read the old delete files' keys as longs, and remove the same rows."""
    from pyiceberg.schema import Schema
    from pyiceberg.types import IntegerType, LongType, NestedField, StringType

    import icesink
    from icesink.catalog.ledger import Ledger
    from icesink.committer.commit import TableCommitter
    from icesink.committer.staging import stage_checkpoint
    from icesink.maintenance.committing import MaintenanceTarget
    from icesink.maintenance.convert import convert_equality_deletes
    from icesink.writer.spec import ChangeSpec
    from icesink.writer.task import TaskWriter

    catalog = open_catalog(sqlite_catalog)
    catalog.create_namespace("shop")
    schema = Schema(
        NestedField(1, "id", IntegerType(), required=True), NestedField(2, "v", StringType()), identifier_field_ids=[1]
    )
    catalog.create_table(TABLE, schema, properties={"icesink.equality-deletes.convert-at-commit": "false"})

    def commit(checkpoint: int, changes: list[tuple[int, str, str]], kind: pa.DataType) -> None:
        table = open_catalog(sqlite_catalog).load_table(TABLE)
        spec = writer_spec(table, TABLE, "cdc", ChangeSpec(equality_field_ids=(1,), op_column="op"))
        writer = TaskWriter(spec.for_checkpoint(checkpoint), 0, 0)
        rows = {"id": pa.array([c[0] for c in changes], kind), "v": [c[1] for c in changes]}
        order = pa.array(range(len(changes)), pa.int64())
        writer.write(pa.table({**rows, "op": [c[2] for c in changes], "__icesink_order": order}))
        stage_checkpoint(Ledger(sqlite_catalog), table, TABLE, "cdc", checkpoint, [writer.complete()])
        TableCommitter.of(sqlite_catalog).commit_pending(TABLE)

    commit(0, [(k, f"a-{k}", "I") for k in range(1, 6)], pa.int32())
    commit(1, [(2, "", "D"), (3, "b-3", "U")], pa.int32())
    table = open_catalog(sqlite_catalog).load_table(TABLE)
    assert live_files(table).equality_deletes  # kept as they are, int keys
    with table.update_schema() as update:
        update.update_column("id", LongType())
    commit(2, [(2**40, "big", "I"), (4, "", "D")], pa.int64())
    expected = [(1, "a-1"), (3, "b-3"), (5, "a-5"), (2**40, "big")]
    assert sorted((r["id"], r["v"]) for r in icesink.read(TABLE, catalog=sqlite_catalog).to_pylist()) == expected
    table = open_catalog(sqlite_catalog).load_table(TABLE)
    kept = len(live_files(table).equality_deletes)  # int and long keys
    target = MaintenanceTarget(open_catalog(sqlite_catalog), sqlite_catalog, TABLE)
    assert convert_equality_deletes(target, table).equality_delete_files == kept >= 2
    table = open_catalog(sqlite_catalog).load_table(TABLE)
    assert live_files(table).equality_deletes == []
    assert sorted((r["id"], r["v"]) for r in table.scan().to_arrow().to_pylist()) == expected


def test_a_checkpoint_touching_many_partitions_is_converted_whole(sqlite_catalog: CatalogConfig) -> None:
    """Sixteen buckets: the checkpoint's sixteen delete files are read, and sixteen position delete files written,
    on several threads; every update and delete lands, in every bucket."""
    from tests.test_maintenance import TABLE as KV
    from tests.test_maintenance import commit_changes
    from tests.test_maintenance import create as create_kv

    create_kv(sqlite_catalog, partition_by=("bucket(16, id)",))
    commit_changes(sqlite_catalog, 0, [(k, f"first-{k}", "I") for k in range(200)])
    changes = [(k, f"second-{k}", "U") for k in range(0, 200, 2)] + [(k, "", "D") for k in range(1, 200, 6)]
    commit_changes(sqlite_catalog, 1, changes)
    table = open_catalog(sqlite_catalog).load_table(KV)
    live = live_files(table)
    assert live.equality_deletes == []
    assert len({f.file.partition[0] for f in live.position_deletes}) == 16
    deleted = set(range(1, 200, 6))
    expected = sorted((k, f"second-{k}" if k % 2 == 0 else f"first-{k}") for k in range(200) if k not in deleted)
    assert sorted((r["id"], r["v"]) for r in table.scan().to_arrow().to_pylist()) == expected
