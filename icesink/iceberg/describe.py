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

TARGET_FILE_SIZE = "write.target-file-size-bytes"
TARGET_FILE_SIZE_DEFAULT = 512 * 1024 * 1024


def target_file_size(table: Table, identifier: str) -> int:
    """The table's ``write.target-file-size-bytes`` (512 MiB by default)."""
    try:
        return int(table.properties.get(TARGET_FILE_SIZE, TARGET_FILE_SIZE_DEFAULT))
    except ValueError as e:
        raise ConfigError(f"table {identifier}: {TARGET_FILE_SIZE} must be a number of bytes") from e


def writer_spec(table: Table, identifier: str, job_id: str, changes: ChangeSpec | None = None) -> WriterSpec:
    """Describe the table to the executors in plain values."""
    schema = table.schema()
    columns = []
    for field in schema.fields:
        type_name = str(field.field_type)
        try:
            arrow_type(type_name)
        except ValueError as e:
            raise UnsupportedTableError(
                f"table {identifier}: column {field.name!r} has type {type_name}, which icesink cannot write yet"
            ) from e
        columns.append(ColumnSpec(field.field_id, field.name, type_name, field.required))
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
