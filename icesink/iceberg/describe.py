"""Describing an Iceberg table to the code that writes its files, in plain values.

The executors (and the committer's maintenance, which writes files too) get a
:class:`~icesink.writer.spec.WriterSpec`: no pyiceberg types cross into
``icesink.writer``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import TYPE_CHECKING

from icesink.errors import ConfigError, UnsupportedTableError
from icesink.properties import MAX_OPEN_FILES_PROPERTY
from icesink.writer.spec import (
    MAX_OPEN_FILES_DEFAULT,
    ChangeSpec,
    ColumnSpec,
    Compression,
    PartitionFieldSpec,
    WriterSpec,
    arrow_type,
)
from icesink.writer.storage import storage_options

if TYPE_CHECKING:
    from pyiceberg.table import Table
    from pyiceberg.types import NestedField

TARGET_FILE_SIZE = "write.target-file-size-bytes"
TARGET_FILE_SIZE_DEFAULT = 512 * 1024 * 1024
# Iceberg Java falls back to the data files' codec and level for delete files where these are unset.
DATA_CODEC, DATA_LEVEL = "write.parquet.compression-codec", "write.parquet.compression-level"
DELETE_CODEC, DELETE_LEVEL = "write.delete.parquet.compression-codec", "write.delete.parquet.compression-level"
# Iceberg's codec names → icesink's (Compression.codec). Both of icesink's writers write LZ4 as LZ4_RAW,
# Parquet's LZ4 without Hadoop's framing, which its format deprecates. LZO has no writer in pyarrow,
# and Spark needs a codec jar pyspark does not ship.
_CODECS = {
    "zstd": "zstd",
    "snappy": "snappy",
    "gzip": "gzip",
    "lz4": "lz4_raw",
    "lz4_raw": "lz4_raw",
    "brotli": "brotli",
    "uncompressed": "none",
    "none": "none",
}
# The levels each codec takes; snappy, lz4 and none take none, and Iceberg Java ignores a level set for
# them, as icesink does.
_LEVELS = {"zstd": range(-(1 << 17), 23), "gzip": range(0, 10), "brotli": range(0, 12)}
# Iceberg Java hands a gzip level to Hadoop's zlib, which takes these names, not numbers.
_GZIP_LEVEL_NAMES = {
    "NO_COMPRESSION": 0,
    "BEST_SPEED": 1,
    **{name: n for n, name in enumerate(("TWO", "THREE", "FOUR", "FIVE", "SIX", "SEVEN", "EIGHT"), start=2)},
    "BEST_COMPRESSION": 9,
    "DEFAULT_COMPRESSION": None,
}
_HOW_TO_CHANGE = "change the table property (ALTER TABLE … SET TBLPROPERTIES, or pyiceberg's set_properties)"


def check_write_properties(properties: Mapping[str, str], identifier: str) -> None:
    """Refuse the properties of a new table (``table_properties``) that icesink's writers cannot honour."""
    _target_file_size(properties, identifier)
    _max_open_files(properties, identifier)
    _parquet_compression(properties, identifier, how="change it in table_properties (no table was created)")


def target_file_size(table: Table, identifier: str) -> int:
    """The table's ``write.target-file-size-bytes`` (512 MiB by default)."""
    return _target_file_size(table.properties, identifier)


def _target_file_size(properties: Mapping[str, str], identifier: str) -> int:
    try:
        return int(properties.get(TARGET_FILE_SIZE, TARGET_FILE_SIZE_DEFAULT))
    except ValueError as e:
        raise ConfigError(f"table {identifier}: {TARGET_FILE_SIZE} must be a number of bytes") from e


def _max_open_files(properties: Mapping[str, str], identifier: str) -> int:
    raw = properties.get(MAX_OPEN_FILES_PROPERTY, str(MAX_OPEN_FILES_DEFAULT))
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value < 1:
        raise ConfigError(
            f"table {identifier}: table property {MAX_OPEN_FILES_PROPERTY}={raw!r} must be a whole number of "
            f"files, 1 or more (default {MAX_OPEN_FILES_DEFAULT}); set it so, or remove it for the default"
        )
    return value


def parquet_compression(table: Table, identifier: str) -> tuple[Compression, Compression]:
    """The codecs and levels of the table's data files and of its delete files, checked."""
    return _parquet_compression(table.properties, identifier)


def _parquet_compression(
    properties: Mapping[str, str], identifier: str, how: str = _HOW_TO_CHANGE
) -> tuple[Compression, Compression]:
    data = _compression(properties, identifier, how, DATA_CODEC, DATA_LEVEL)
    deletes = _compression(properties, identifier, how, DELETE_CODEC, DELETE_LEVEL, (DATA_CODEC, DATA_LEVEL))
    return data, deletes


def _compression(
    properties: Mapping[str, str],
    identifier: str,
    how: str,
    codec_property: str,
    level_property: str,
    fallback: tuple[str, str] | None = None,
) -> Compression:
    def get(key: str, fallback_key: str | None) -> tuple[str, str | None]:
        if key in properties or fallback_key is None:
            return key, properties.get(key)
        return fallback_key, properties.get(fallback_key)

    source, name = get(codec_property, fallback[0] if fallback else None)
    codec = _CODECS.get((name or "zstd").strip().lower())
    if codec is None:
        raise ConfigError(
            f"table {identifier}: {source}={name!r} cannot be written; {how} to one of {', '.join(sorted(_CODECS))}"
        )
    source, raw = get(level_property, fallback[1] if fallback else None)
    if codec not in _LEVELS or raw is None:
        return Compression(codec)
    allowed = _LEVELS[codec]
    if codec == "gzip" and raw.strip().upper() in _GZIP_LEVEL_NAMES:
        return Compression(codec, _GZIP_LEVEL_NAMES[raw.strip().upper()])
    level = int(raw) if re.fullmatch(r"\s*-?\d+\s*", raw) else None
    if level not in allowed:
        names = f" or one of Hadoop's names ({', '.join(_GZIP_LEVEL_NAMES)})" if codec == "gzip" else ""
        raise ConfigError(
            f"table {identifier}: {source}={raw!r} is not a {codec} level; {how} to a whole number "
            f"from {allowed.start} to {allowed.stop - 1}{names}, or remove it"
        )
    return Compression(codec, level)


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


# Format 1: the manifests icesink stages do not encode in its layout, and it has no delete files (a known gap).
WRITABLE_FORMAT_VERSIONS = (2,)


def check_format_version(table: Table, identifier: str) -> None:
    """Refuse a table whose metadata icesink cannot write, before anything is written for it."""
    version = table.metadata.format_version
    if version not in WRITABLE_FORMAT_VERSIONS:
        remedy = (
            "upgrade it to format 2 (pyiceberg: `with table.transaction() as t: t.upgrade_table_version(2)`; "
            "Spark SQL: ALTER TABLE ... SET TBLPROPERTIES ('format-version'='2'))"
            if version < 2
            else "write to a format 2 table (create it with the table property format-version=2)"
        )
        raise UnsupportedTableError(
            f"table {identifier} is Iceberg format version {version}; icesink (through pyiceberg "
            f"{'.'.join(map(str, _pyiceberg_version()))}) writes format version 2 only. Nothing was written: {remedy}"
        )


def _pyiceberg_version() -> tuple[int, ...]:
    from icesink.iceberg import PYICEBERG_VERSION

    return tuple(int(p) for p in PYICEBERG_VERSION.split("."))


BLOOM_FILTER_ENABLED = "write.parquet.bloom-filter-enabled.column."
BLOOM_FILTER_FPP = "write.parquet.bloom-filter-fpp.column."
BLOOM_FILTER_FPP_DEFAULT = 0.01  # Iceberg Java's


def bloom_filters(
    properties: Mapping[str, str], columns: tuple[ColumnSpec, ...], keys: set[int], identifier: str
) -> tuple[tuple[str, float], ...]:
    """The columns whose data files get a Parquet bloom filter: the key columns (the table's identifier
    fields and a stream's equality fields), plus or minus what ``write.parquet.bloom-filter-enabled.column.*``
    says. Properties naming no column icesink can give a filter (none such, a boolean, a field inside a list
    or map) are left to the engines that set them."""
    chosen = []
    for leaf in (leaf for column in columns for leaf in column.leaves()):
        name = leaf.dotted
        enabled = properties.get(BLOOM_FILTER_ENABLED + name)
        if enabled is not None and enabled.strip().lower() not in ("true", "false"):
            raise ConfigError(
                f"table {identifier}: table property {BLOOM_FILTER_ENABLED}{name}={enabled!r} must be true or "
                f"false; {_HOW_TO_CHANGE}"
            )
        wanted = enabled.strip().lower() == "true" if enabled is not None else leaf.column.field_id in keys
        if not wanted or leaf.in_repeated or leaf.column.iceberg_type == "boolean":
            continue
        raw = properties.get(BLOOM_FILTER_FPP + name, str(BLOOM_FILTER_FPP_DEFAULT))
        try:
            fpp = float(raw)
        except ValueError:
            fpp = -1.0
        if not 0.0 < fpp < 1.0:
            raise ConfigError(
                f"table {identifier}: table property {BLOOM_FILTER_FPP}{name}={raw!r} must be a probability "
                f"between 0 and 1 (default {BLOOM_FILTER_FPP_DEFAULT}); {_HOW_TO_CHANGE}"
            )
        chosen.append((name, fpp))
    return tuple(chosen)


def writer_spec(table: Table, identifier: str, job_id: str, changes: ChangeSpec | None = None) -> WriterSpec:
    """Describe the table to the executors in plain values."""
    schema = table.schema()
    columns = [column_spec(field, identifier) for field in schema.fields]
    spec = table.spec()
    properties = table.properties
    target = target_file_size(table, identifier)
    data_location = properties.get("write.data.path") or f"{table.location().rstrip('/')}/data"
    compression, delete_compression = parquet_compression(table, identifier)
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
        max_open_files=_max_open_files(properties, identifier),
        compression=compression,
        delete_compression=delete_compression,
        storage_options=storage_options(table.io.properties),
        changes=changes,
        schema_id=schema.schema_id,
        bloom_filters=bloom_filters(
            properties,
            tuple(columns),
            set(schema.identifier_field_ids) | set(changes.equality_field_ids if changes else ()),
            identifier,
        ),
    )
