"""Partition values of rows, computed with iceberg-rust's vectorised transforms.

Values are kept in Iceberg's internal representation (days and microseconds
as integers, decimals as ``Decimal``) because that is what manifests store.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from icesink import paths
from icesink.arrays import nested_column, positions
from icesink.results import PartitionValue
from icesink.writer.spec import PartitionFieldSpec, WriterSpec

_EPOCH = datetime.date(1970, 1, 1)


def _transform(transform: str) -> Any:
    from pyiceberg_core import transform as rust  # lazy: only partitioned tables need it

    if transform == "identity":
        return lambda array: array
    if transform in ("year", "month", "day", "hour"):
        fn = getattr(rust, transform)
        return lambda array: fn(array).cast(pa.int32())
    name, _, arg = transform.partition("[")
    if name in ("bucket", "truncate") and arg.endswith("]"):
        width = int(arg[:-1])
        fn = getattr(rust, name)
        return lambda array: fn(array, width)
    raise ValueError(f"partition transform {transform!r} is not supported by the icesink writer")


def _internal(array: pa.Array) -> pa.Array:
    # Temporal identity values are stored as integers in manifests; uuids as their 16 bytes (Arrow can neither
    # count nor group its uuid extension type).
    if isinstance(array.type, pa.BaseExtensionType):
        return array.storage
    if pa.types.is_timestamp(array.type):
        return array.cast(pa.int64())
    if pa.types.is_date32(array.type):
        return array.cast(pa.int32())
    return array


def partition_arrays(spec: WriterSpec, table: pa.Table) -> list[pa.Array]:
    """One array per partition field: the transformed value of every row."""
    arrays = []
    for field in spec.partition_fields:
        # The source may be a field inside structs (a table another tool partitioned so).
        column = nested_column(table, spec.leaf_by_id(field.source_id).steps).combine_chunks()
        arrays.append(_internal(_transform(field.transform)(column)))
    return arrays


def split_by_partition(spec: WriterSpec, table: pa.Table) -> Iterator[tuple[tuple[PartitionValue, ...], pa.Table]]:
    """Yield ``(partition tuple, rows)`` for every partition present in ``table``."""
    if not spec.partition_fields:
        yield (), table
        return
    keys = partition_arrays(spec, table)
    if len(keys) == 1 and keys[0].null_count == 0 and pc.count_distinct(keys[0]).as_py() == 1:
        yield (keys[0][0].as_py(),), table  # the common case of a batch within one partition
        return
    names = [f"k{i}" for i in range(len(keys))]
    index = pa.table([*keys, positions(table.num_rows)], names=[*names, "row"])
    groups = index.group_by(names, use_threads=False).aggregate([("row", "list")])
    rows = groups.column("row_list").combine_chunks()
    # One take puts every partition's rows together; each partition is then a slice of it, not a take of its
    # own (a take per partition re-reads the whole input, which costs minutes with thousands of partitions).
    ordered = table.take(rows.flatten())
    values = zip(*(groups.column(name).to_pylist() for name in names), strict=True)
    start = 0
    for key, size in zip(values, pc.list_value_length(rows).to_pylist(), strict=True):
        yield tuple(key), ordered.slice(start, size)
        start += size


def _human(field: PartitionFieldSpec, value: PartitionValue) -> str:
    if value is None:
        return "null"
    if field.transform == "year":
        return str(1970 + int(value))
    if field.transform == "month":
        year, month = divmod(int(value), 12)
        return f"{1970 + year:04d}-{month + 1:02d}"
    if field.transform == "day":
        return (_EPOCH + datetime.timedelta(days=int(value))).isoformat()
    if field.transform == "hour":
        moment = datetime.datetime(1970, 1, 1) + datetime.timedelta(hours=int(value))
        return moment.strftime("%Y-%m-%d-%H")
    if isinstance(value, bytes):
        return value.hex()
    return str(value)


def partition_path(spec: WriterSpec, key: tuple[PartitionValue, ...]) -> str:
    """The Hive-style directory of a partition, as Iceberg's own writers lay it out.

    Names and values are percent-encoded (:func:`icesink.paths.segment`), and the
    files' locations keep the encoded form: that is where they are written.
    """
    return "/".join(
        f"{paths.segment(f.name)}={paths.segment(_human(f, v))}"
        for f, v in zip(spec.partition_fields, key, strict=True)
    )
