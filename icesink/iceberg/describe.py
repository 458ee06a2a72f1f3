"""Describing an Iceberg table to the code that writes its files, in plain values.

The executors (and the committer's maintenance, which writes files too) get a
:class:`~icesink.writer.spec.WriterSpec`: no pyiceberg types cross into
``icesink.writer``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from icesink.errors import ConfigError, UnsupportedTableError
from icesink.writer.spec import ChangeSpec, ColumnSpec, PartitionFieldSpec, WriterSpec, arrow_type
from icesink.writer.storage import storage_options

if TYPE_CHECKING:
    from pyiceberg.table import Table
    from pyiceberg.types import NestedField

TARGET_FILE_SIZE = "write.target-file-size-bytes"
TARGET_FILE_SIZE_DEFAULT = 512 * 1024 * 1024
COMPRESSION_CODEC = "write.parquet.compression-codec"
COMPRESSION_LEVEL = "write.parquet.compression-level"
# Iceberg's codec names → the names Parquet writers here take. LZO has no
# writer in pyarrow, and Spark needs a codec jar pyspark does not ship.
_CODECS = {"zstd": "zstd", "snappy": "snappy", "gzip": "gzip", "lz4": "lz4", "brotli": "brotli", "uncompressed": "none"}
# The levels each codec accepts; snappy, lz4 and none have none, and Iceberg
# Java ignores a level set for them, as icesink does.
_LEVELS = {"zstd": range(-(1 << 17), 23), "gzip": range(1, 10), "brotli": range(0, 12)}
# With no level set, Iceberg Java writes zstd at parquet-mr's level 3; pyarrow's
# own default is 1. Both of icesink's writers use 3, so that a table's files
# do not depend on which writer wrote them.
_DEFAULT_LEVELS = {"zstd": 3}


def check_write_properties(properties: Mapping[str, str], identifier: str) -> None:
    """Refuse write properties icesink's writers cannot honour, before a table is created with them."""
    _target_file_size(properties, identifier)
    _parquet_compression(properties, identifier)


def target_file_size(table: Table, identifier: str) -> int:
    """The table's ``write.target-file-size-bytes`` (512 MiB by default)."""
    return _target_file_size(table.properties, identifier)


def _target_file_size(properties: Mapping[str, str], identifier: str) -> int:
    try:
        return int(properties.get(TARGET_FILE_SIZE, TARGET_FILE_SIZE_DEFAULT))
    except ValueError as e:
        raise ConfigError(f"table {identifier}: {TARGET_FILE_SIZE} must be a number of bytes") from e


def parquet_compression(table: Table, identifier: str) -> tuple[str, int | None]:
    """The table's Parquet codec and level (``write.parquet.compression-codec``/``-level``), checked."""
    return _parquet_compression(table.properties, identifier)


def _parquet_compression(properties: Mapping[str, str], identifier: str) -> tuple[str, int | None]:
    name = properties.get(COMPRESSION_CODEC, "zstd")
    codec = _CODECS.get(name.strip().lower())
    if codec is None:
        raise ConfigError(
            f"table {identifier}: {COMPRESSION_CODEC}={name!r} cannot be written; "
            f"set it to one of {', '.join(sorted(_CODECS))}"
        )
    if codec not in _LEVELS:
        return codec, None
    raw = properties.get(COMPRESSION_LEVEL)
    if raw is None:
        return codec, _DEFAULT_LEVELS.get(codec)
    allowed = _LEVELS[codec]
    try:
        level = int(raw)
    except ValueError:
        level = None
    if level not in allowed:
        raise ConfigError(
            f"table {identifier}: {COMPRESSION_LEVEL}={raw!r} is not a {codec} level; "
            f"set a whole number from {allowed.start} to {allowed.stop - 1}, or remove the property"
        )
    return codec, level


def column_spec(field: NestedField, identifier: str, path: str = "") -> ColumnSpec:
    """One field, with its nested fields, in plain values."""
    from pyiceberg import types as it

    name = f"{path}.{field.name}" if path else field.name
    kind = field.field_type
    if isinstance(kind, it.StructType):
        return ColumnSpec(
            field.field_id,
            field.name,
            "struct",
            field.required,
            tuple(column_spec(f, identifier, name) for f in kind.fields),
        )
    if isinstance(kind, it.ListType):
        return ColumnSpec(
            field.field_id, field.name, "list", field.required, (column_spec(kind.element_field, identifier, name),)
        )
    if isinstance(kind, it.MapType):
        children = (column_spec(kind.key_field, identifier, name), column_spec(kind.value_field, identifier, name))
        return ColumnSpec(field.field_id, field.name, "map", field.required, children)
    type_name = str(kind)
    try:
        arrow_type(type_name)
    except ValueError as e:
        raise UnsupportedTableError(
            f"table {identifier}: column {name!r} has type {type_name}, which icesink cannot write yet"
        ) from e
    return ColumnSpec(field.field_id, field.name, type_name, field.required)


def writer_spec(table: Table, identifier: str, job_id: str, changes: ChangeSpec | None = None) -> WriterSpec:
    """Describe the table to the executors in plain values."""
    schema = table.schema()
    columns = [column_spec(field, identifier) for field in schema.fields]
    spec = table.spec()
    properties = table.properties
    target = target_file_size(table, identifier)
    data_location = properties.get("write.data.path") or f"{table.location().rstrip('/')}/data"
    codec, level = parquet_compression(table, identifier)
    return WriterSpec(
        table_name=identifier,
        data_location=data_location,
        columns=tuple(columns),
        partition_fields=tuple(
            PartitionFieldSpec(f.field_id, f.name, f.source_id, str(f.transform)) for f in spec.fields
        ),
        spec_id=spec.spec_id,
        job_id=job_id,
        target_file_size_bytes=target,
        compression=codec,
        compression_level=level,
        storage_options=storage_options(table.io.properties),
        changes=changes,
        schema_id=schema.schema_id,
    )
