"""Describing an Iceberg table to the code that writes its files, in plain values.

The executors (and the committer's maintenance, which writes files too) get a
:class:`~icesink.writer.spec.WriterSpec`: no pyiceberg types cross into
``icesink.writer``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from icesink.errors import ConfigError, UnsupportedTableError
from icesink.writer.spec import ChangeSpec, ColumnSpec, PartitionFieldSpec, WriterSpec, arrow_type
from icesink.writer.storage import storage_options

if TYPE_CHECKING:
    from pyiceberg.table import Table
    from pyiceberg.types import NestedField

TARGET_FILE_SIZE = "write.target-file-size-bytes"
TARGET_FILE_SIZE_DEFAULT = 512 * 1024 * 1024


def target_file_size(table: Table, identifier: str) -> int:
    """The table's ``write.target-file-size-bytes`` (512 MiB by default)."""
    try:
        return int(table.properties.get(TARGET_FILE_SIZE, TARGET_FILE_SIZE_DEFAULT))
    except ValueError as e:
        raise ConfigError(f"table {identifier}: {TARGET_FILE_SIZE} must be a number of bytes") from e


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
        compression=properties.get("write.parquet.compression-codec", "zstd"),
        storage_options=storage_options(table.io.properties),
        changes=changes,
        schema_id=schema.schema_id,
    )
