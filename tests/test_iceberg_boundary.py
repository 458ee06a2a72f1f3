"""The pyiceberg internals icesink builds on (icesink.iceberg); they fail loudly if a pyiceberg upgrade moves them."""

from __future__ import annotations

from pathlib import Path

import pytest

from icesink.catalog.config import CatalogConfig
from icesink.catalog.loader import open_catalog
from icesink.iceberg import PYICEBERG_VERSION
from icesink.iceberg.manifests import read_delta_manifest, to_data_file, write_delta_manifest
from icesink.iceberg.snapshots import commit_prepared, prepare_snapshot
from icesink.paths import file_uri
from tests.helpers.support import create_orders_table, orders, write_files


@pytest.fixture
def table(tmp_path: Path):  # type: ignore[no-untyped-def]
    from icesink.catalog import database

    config = CatalogConfig("t", f"sqlite:///{tmp_path / 'c.db'}", file_uri(tmp_path))
    database.upgrade(config)
    create_orders_table(config)
    return open_catalog(config).load_table("shop.orders")


def test_installed_pyiceberg_is_the_pinned_version() -> None:
    import pyiceberg

    assert pyiceberg.__version__ == PYICEBERG_VERSION


def test_delta_manifest_round_trips_through_pyiceberg_reader(table, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    from pyiceberg.manifest import DataFileContent, FileFormat

    result = write_files(table, "shop.orders", "job", 3, orders(0, 50), task_id=1)
    files = [to_data_file(f, table.metadata.format_version) for f in result.data_files]
    path = file_uri(tmp_path / "delta.avro")
    manifest = write_delta_manifest(table.metadata, table.io, path, 0, files)
    back = read_delta_manifest(table.io, manifest)
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
    data_files = [to_data_file(f, 2) for f in result.data_files]
    prepared = prepare_snapshot(table, data_files, {"icesink.job-id": "job"})
    committed = commit_prepared(table, prepared)
    snapshot = committed.current_snapshot()
    assert snapshot.snapshot_id == prepared.snapshot_id and snapshot.sequence_number == 1
    assert snapshot.summary["total-records"] == "20" and snapshot.summary["icesink.job-id"] == "job"
    assert committed.scan().to_arrow().num_rows == 20
    # The same prepared snapshot cannot be swapped in twice: the head it asserted is gone.
    with pytest.raises(CommitFailedException):
        commit_prepared(table, prepared)
    again = prepare_snapshot(committed, data_files, {})
    second = commit_prepared(committed, again)
    assert second.current_snapshot().parent_snapshot_id == prepared.snapshot_id
    assert second.current_snapshot().summary["total-records"] == "40"


def _avro_header(path: Path) -> dict[str, bytes]:
    """The metadata map of an Avro object container file (magic, then a map of bytes)."""
    data = path.read_bytes()
    assert data[:4] == b"Obj\x01"
    position = 4

    def varint() -> int:
        nonlocal position
        shift = result = 0
        while True:
            byte = data[position]
            position += 1
            result |= (byte & 0x7F) << shift
            shift += 7
            if not byte & 0x80:
                return (result >> 1) ^ -(result & 1)

    meta: dict[str, bytes] = {}
    while (count := varint()) != 0:
        for _ in range(abs(count)):
            key_length = varint()
            key = data[position : position + key_length].decode()
            position += key_length
            value_length = varint()
            meta[key] = data[position : position + value_length]
            position += value_length
    return meta


@pytest.mark.parametrize("format_version", [1, 2])
def test_manifest_lists_are_the_files_pyiceberg_writes(table, tmp_path: Path, format_version: int) -> None:  # type: ignore[no-untyped-def]
    """The writer made once per layout writes what pyiceberg's writer writes: header, schema, every field."""
    from pyiceberg.manifest import read_manifest_list
    from pyiceberg.manifest import write_manifest_list as pyiceberg_write_manifest_list

    from icesink.iceberg.manifest_lists import write_manifest_list

    committed = commit_prepared(
        table,
        prepare_snapshot(
            table, [to_data_file(f, 2) for f in write_files(table, "shop.orders", "j", 0, orders(0, 9)).data_files], {}
        ),
    )
    manifests = committed.current_snapshot().manifests(committed.io)
    if format_version == 1:
        manifests = [m for m in manifests if m.content == 0]
    written = {}
    for name, write in (("ours", write_manifest_list), ("pyiceberg", pyiceberg_write_manifest_list)):
        for attempt in range(2):  # the second file of a layout is written with what the first made
            path = tmp_path / f"{name}-{attempt}.avro"
            with write(format_version, committed.io.new_output(file_uri(path)), 7, 6, 5, "zstd") as writer:
                writer.add_manifests(manifests)
            header = _avro_header(path)
            read = list(read_manifest_list(committed.io.new_input(file_uri(path))))
            written[(name, attempt)] = (header, read)
    ours, theirs = written[("ours", 1)], written[("pyiceberg", 0)]
    assert ours[0] == theirs[0] and ours[0] == written[("ours", 0)][0]
    assert ours[1] == theirs[1] and len(ours[1]) == len(manifests) > 0


def _field(schema: dict, name: str) -> dict:  # type: ignore[type-arg]
    return next(f for f in schema["fields"] if f["name"] == name)


def test_delete_manifest_declares_content_deletes_and_int_equality_ids(table, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """Iceberg Java refuses equality_ids declared as list<long> (apache/iceberg-python#3840)."""
    import json
    from dataclasses import replace

    from pyiceberg.manifest import DataFileContent

    from icesink.results import FileContent

    result = write_files(table, "shop.orders", "job", 1, orders(0, 5))
    delete = replace(result.data_files[0], content=FileContent.EQUALITY_DELETES, equality_ids=(1,))
    path = tmp_path / "deletes.avro"
    manifest = write_delta_manifest(
        table.metadata, table.io, file_uri(path), 0, [to_data_file(delete, 2)], deletes=True
    )
    meta = _avro_header(path)
    assert meta["content"] == b"deletes"
    schema = json.loads(meta["avro.schema"])
    data_file = _field(schema, "data_file")["type"]
    equality_ids = _field(data_file, "equality_ids")["type"]
    element = next(t for t in equality_ids if t != "null")["items"]
    assert element == "int"
    (back,) = read_delta_manifest(table.io, manifest)
    assert back.content == DataFileContent.EQUALITY_DELETES and back.equality_ids == [1]


@pytest.mark.parametrize("stale", [0, 1])
def test_tables_swapped_in_one_transaction_or_not_at_all(catalog_config: CatalogConfig, stale: int) -> None:
    """commit_tables moves every pointer or none: with either table moved meanwhile, neither changes,
    and the metadata files written for the attempt are gone."""
    from pyiceberg.exceptions import CommitFailedException

    from icesink.iceberg.catalog_commit import TableSwap, commit_tables
    from tests.helpers.support import pointers

    identifiers = ["shop.a", "shop.b b"]
    catalog = open_catalog(catalog_config)
    tables = [create_orders_table(catalog_config, identifier) for identifier in identifiers]
    swaps = []
    for table, identifier in zip(tables, identifiers, strict=True):
        files = [to_data_file(f, 2) for f in write_files(table, identifier, "job", 0, orders(0, 2)).data_files]
        swaps.append(TableSwap(table, prepare_snapshot(table, files, {"icesink.job-id": "job"})))
    catalog.load_table(identifiers[stale]).append(orders(7, 1))  # another writer moves one table
    before = pointers(catalog_config)
    metadata_files = {p for t in tables for p in Path(t.location().removeprefix("file://"), "metadata").glob("*.json")}
    with pytest.raises(CommitFailedException):
        commit_tables(catalog, swaps)
    assert pointers(catalog_config) == before
    after = {p for t in tables for p in Path(t.location().removeprefix("file://"), "metadata").glob("*.json")}
    assert after == metadata_files
    # Built on the current heads, the same commit goes through for both, with the caller's statements.
    fresh = [catalog.load_table(identifier) for identifier in identifiers]
    swaps = [
        TableSwap(
            t,
            prepare_snapshot(
                t, [to_data_file(f, 2) for f in write_files(t, i, "job", 1, orders(10, 1)).data_files], {}
            ),
        )
        for t, i in zip(fresh, identifiers, strict=True)
    ]
    seen = []
    committed = commit_tables(catalog, swaps, within=lambda connection: seen.append(connection.in_transaction()))
    assert seen == [True]
    assert [t.metadata_location for t in committed] == [pointers(catalog_config)[i] for i in identifiers]


def test_a_key_schema_is_the_schema_select_gives() -> None:
    """Converting equality deletes reads key columns with a schema made without pruning's walks: the same
    schema as ``Schema.select`` of the keys, for keys in any order, repeated, and identifier fields or not."""
    import random

    from pyiceberg.schema import Schema
    from pyiceberg.types import LongType, NestedField, StringType, StructType

    from icesink.iceberg.deletes import EqualityDeletes

    for seed in range(300):
        rng = random.Random(seed)
        ids = rng.sample(range(1, 40), rng.randint(1, 8))
        fields = [NestedField(i, f"c{i}", rng.choice([LongType(), StringType()]), required=True) for i in ids]
        fields.append(NestedField(90, "s", StructType(NestedField(91, "x", LongType())), required=False))
        schema = Schema(*fields, identifier_field_ids=rng.sample(ids, rng.randint(0, len(ids))), schema_id=seed % 4)
        keys = tuple(rng.choice([*ids, 90, 91] if seed % 5 == 0 else ids) for _ in range(rng.randint(1, 4)))
        index = EqualityDeletes.__new__(EqualityDeletes)
        index._schema, index._key_schemas = schema, {}
        made = index._key_schema(keys)
        selected = schema.select(*[schema.find_column_name(i) or "" for i in keys])
        assert made == selected, keys
        assert made.identifier_field_ids == selected.identifier_field_ids and made.schema_id == selected.schema_id
        assert [f.field_id for f in made.fields] == [f.field_id for f in selected.fields]


def test_a_file_staged_in_the_ledger_has_the_partition_values_a_manifest_gives_back(tmp_path: Path) -> None:
    """The committer reads a staged file's partition values from its ledger row, and compares them with those of
    the table's files, read from manifests: for every partition type, the two must be the same values."""
    import decimal
    import uuid

    from pyiceberg.partitioning import PartitionField, PartitionSpec
    from pyiceberg.schema import Schema
    from pyiceberg.transforms import (
        BucketTransform,
        DayTransform,
        HourTransform,
        IdentityTransform,
        MonthTransform,
        TruncateTransform,
        YearTransform,
    )
    from pyiceberg.types import (
        BinaryType,
        BooleanType,
        DateType,
        DecimalType,
        DoubleType,
        FixedType,
        FloatType,
        IntegerType,
        LongType,
        NestedField,
        StringType,
        TimestampType,
        TimestamptzType,
        TimeType,
        UUIDType,
    )

    from icesink.catalog import database
    from icesink.results import FileContent, FileRecord

    columns = [  # (type, the value a task's writer gives for it as identity, transform and its value)
        (IntegerType(), -7, BucketTransform(8), 3),
        (LongType(), 2**40, TruncateTransform(10), 2**40 - 6),
        (FloatType(), 0.1, None, None),
        (DoubleType(), 0.1, None, None),
        (DecimalType(9, 2), decimal.Decimal("-1.50"), TruncateTransform(10), decimal.Decimal("-1.50")),
        (DateType(), 20000, MonthTransform(), 657),
        (TimeType(), 3_600_000_000, None, None),
        (TimestampType(), 1_700_000_000_000_000, HourTransform(), 472222),
        (TimestamptzType(), 1_700_000_000_000_000, DayTransform(), 19675),
        (StringType(), "ü/x=%", TruncateTransform(2), "ü/"),
        (UUIDType(), uuid.UUID(int=5).bytes, None, None),
        (FixedType(3), b"\x00\xff\x01", None, None),
        (BinaryType(), b"\xff", None, None),
        (BooleanType(), True, None, None),
        (DateType(), None, YearTransform(), 54),
    ]
    schema = Schema(*(NestedField(i + 1, f"c{i}", t, required=False) for i, (t, *_) in enumerate(columns)))
    fields, values = [], []
    for i, (_, value, transform, transformed) in enumerate(columns):
        fields.append(PartitionField(i + 1, 1000 + len(fields), IdentityTransform(), f"c{i}"))
        values.append(value)
        if transform is not None:
            fields.append(PartitionField(i + 1, 1000 + len(fields), transform, f"c{i}_{len(fields)}"))
            values.append(transformed)
    config = CatalogConfig("t", f"sqlite:///{tmp_path / 'c.db'}", file_uri(tmp_path))
    database.upgrade(config)
    catalog = open_catalog(config)
    catalog.create_namespace("p")
    table = catalog.create_table("p.every_type", schema=schema, partition_spec=PartitionSpec(*fields))
    record = FileRecord(file_uri(tmp_path / "d.parquet"), FileContent.DATA, 1, 10, 0, tuple(values))
    partition_type = table.spec().partition_type(table.schema())
    staged = to_data_file(record, table.metadata.format_version, partition_type)
    path = file_uri(tmp_path / "delta.avro")
    manifest = write_delta_manifest(
        table.metadata, table.io, path, 0, [to_data_file(record, table.metadata.format_version)]
    )
    (read,) = read_delta_manifest(table.io, manifest)
    assert len(read.partition) == len(values) == len(staged.partition)
    for position, field in enumerate(partition_type.fields):
        have, want = staged.partition[position], read.partition[position]
        assert (type(have), have) == (type(want), want), field.name
    assert isinstance(staged.partition[[f.name for f in partition_type.fields].index("c10")], uuid.UUID)
