"""Finding or creating the target table, and describing it to the executors."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING

from icesink.catalog.config import CatalogConfig
from icesink.catalog.database import database_errors
from icesink.catalog.loader import load_table
from icesink.errors import ConfigError, TableNotFoundError, UnsupportedTableError
from icesink.sink.schema import schema_from_spark
from icesink.writer.spec import ChangeSpec, ColumnSpec, PartitionFieldSpec, WriterSpec, arrow_type
from icesink.writer.storage import storage_options

if TYPE_CHECKING:
    from pyiceberg.catalog.sql import SqlCatalog
    from pyiceberg.partitioning import PartitionSpec
    from pyiceberg.schema import Schema
    from pyiceberg.table import Table
    from pyspark.sql.types import StructType

_TRANSFORM = re.compile(r"^\s*(\w+)\s*\(\s*(?:(\d+)\s*,\s*)?`?([^`()]+?)`?\s*\)\s*$")
_ALIASES = {"years": "year", "months": "month", "days": "day", "hours": "hour"}

TARGET_FILE_SIZE = "write.target-file-size-bytes"
TARGET_FILE_SIZE_DEFAULT = 512 * 1024 * 1024


def parse_partition_by(table: str, schema: Schema, partition_by: Sequence[str]) -> PartitionSpec:
    """``["region", "day(ts)", "bucket(16, id)", "truncate(4, name)"]`` as an Iceberg partition spec."""
    from pyiceberg.partitioning import PartitionField, PartitionSpec
    from pyiceberg.transforms import parse_transform

    fields = []
    for number, text in enumerate(partition_by):
        match = _TRANSFORM.match(text)
        if match:
            name, width, column = match.group(1).lower(), match.group(2), match.group(3).strip()
            name = _ALIASES.get(name, name)
            transform_text = f"{name}[{width}]" if width else name
        else:
            column, transform_text = text.strip(), "identity"
        try:
            source = schema.find_field(column)
        except ValueError as e:
            raise ConfigError(
                f"table {table}: partition_by {text!r} names column {column!r}, which is not in the table"
            ) from e
        try:
            transform = parse_transform(transform_text)
        except ValueError as e:
            raise ConfigError(f"table {table}: partition_by {text!r} has an unknown transform") from e
        if not transform.can_transform(source.field_type):
            raise ConfigError(
                f"table {table}: partition_by {text!r} cannot apply {transform_text} to {source.field_type}"
            )
        suffix = "" if transform_text == "identity" else f"_{name}"
        fields.append(
            PartitionField(
                source_id=source.field_id, field_id=1000 + number, transform=transform, name=f"{column}{suffix}"
            )
        )
    return PartitionSpec(*fields)


def resolve_table(
    catalog: SqlCatalog,
    config: CatalogConfig,
    identifier: str,
    spark_schema: StructType,
    create: bool,
    partition_by: Sequence[str],
    identifier_fields: Sequence[str] = (),
    skip_columns: Sequence[str] = (),
) -> Table:
    """Load the table, creating it (and its namespace) from the DataFrame's schema when allowed."""
    from pyiceberg.exceptions import TableAlreadyExistsError

    if "." not in identifier:
        raise ConfigError(f"table {identifier!r} needs a namespace, e.g. 'shop.{identifier}'")
    try:
        table = load_table(catalog, config, identifier)
    except TableNotFoundError:
        if not create:
            raise
    else:
        if partition_by and not _same_partitioning(table, partition_by):
            raise ConfigError(
                f"table {identifier} exists with partitioning {table.spec()}, not {list(partition_by)}; "
                "drop partition_by or change the table's spec first"
            )
        return table
    schema = schema_from_spark(spark_schema, identifier, identifier_fields, skip_columns)
    spec = parse_partition_by(identifier, schema, partition_by)
    namespace = identifier.rsplit(".", 1)[0]
    with database_errors(config):
        catalog.create_namespace_if_not_exists(namespace)
        try:
            return catalog.create_table(identifier, schema=schema, partition_spec=spec)
        except TableAlreadyExistsError:  # another stream created it first
            return load_table(catalog, config, identifier)


def _same_partitioning(table: Table, partition_by: Sequence[str]) -> bool:
    wanted = parse_partition_by(table.name()[-1], table.schema(), partition_by)
    current = table.spec()
    return [(f.source_id, str(f.transform)) for f in wanted.fields] == [
        (f.source_id, str(f.transform)) for f in current.fields
    ]


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
    try:
        target = int(properties.get(TARGET_FILE_SIZE, TARGET_FILE_SIZE_DEFAULT))
    except ValueError as e:
        raise ConfigError(f"table {identifier}: {TARGET_FILE_SIZE} must be a number of bytes") from e
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
    )
