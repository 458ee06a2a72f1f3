"""Checking and describing a keyed change stream (upserts and CDC) before it starts."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from pyiceberg import types as iceberg_types
from pyspark.sql.types import ArrayType, DoubleType, FloatType, MapType, StructType

from icesink.errors import ConfigError
from icesink.iceberg.deletes import nested_key_fields
from icesink.iceberg.schemas import field_path
from icesink.maintenance.policy import CONVERT_AT_COMMIT, MaintenancePolicy
from icesink.sink.projection import PATH_SEPARATOR, path_key
from icesink.writer.collapse import DELETE, INSERT, SKIP, UPDATE
from icesink.writer.spec import ChangeSpec

if TYPE_CHECKING:
    from pyiceberg.schema import Schema
    from pyiceberg.table import Table
    from pyiceberg.types import NestedField
    from pyspark.sql.types import StructType

DEFAULT_OP_VALUES: Mapping[str, str] = {
    "I": INSERT,
    "U": UPDATE,
    "D": DELETE,
    # A changelog read with icesink.read_stream: its _change_type values. The old row of an update
    # says nothing the new one does not.
    "insert": INSERT,
    "update_after": UPDATE,
    "delete": DELETE,
    "update_before": SKIP,
}


def resolve_equality_fields(
    table: Table,
    identifier: str,
    equality_fields: Sequence[str] | None,
    known: Mapping[str, int] | None = None,
    df_schema: StructType | None = None,
) -> list[str]:
    """The key by the table's current names: as given, else the table's identifier fields, else none.

    A DataFrame column (or field inside its structs) the job's earlier checkpoints wrote to a field
    (``known``, keyed as :func:`~icesink.sink.projection.path_key`) means that field, under whatever name the
    table gives it now: another tool may have renamed the key.
    """

    schema = table.schema()
    if not equality_fields:
        return [schema.find_column_name(fid) or "" for fid in schema.identifier_field_ids]
    names = []
    for name in equality_fields:
        path = dataframe_key_path(df_schema, name) if df_schema is not None else None
        field_id = (known or {}).get(path_key(path)) if path is not None else None
        current = schema.find_column_name(field_id) if field_id is not None else None
        names.append(current or name)
    return names


def dataframe_key_names(
    table: Table, identifier: str, keys: Sequence[str], known: Mapping[str, int] | None = None
) -> list[str]:
    """The DataFrame's names of the table's key fields ``keys``: those the job wrote them from, else the same."""

    schema = table.schema()
    by_id = {field_id: ".".join(column.split(PATH_SEPARATOR)) for column, field_id in (known or {}).items()}
    return [by_id.get(_table_key_field(schema, identifier, name).field_id, name) for name in keys]


def _floating_key(identifier: str, name: str, type_name: str) -> ConfigError:
    return ConfigError(
        f"table {identifier}: equality field {name!r} is {type_name}; floating-point keys do not compare "
        "reliably (NaN, -0.0), use an integer, string, decimal or date key"
    )


def dataframe_key_path(df_schema: StructType, name: str) -> tuple[str, ...] | None:
    """Where an equality field is in the DataFrame: a column of that exact name, else a dotted path through
    structs (``customer.id``); None when neither exists."""

    if name in df_schema.fieldNames():
        return (name,)
    parts = name.split(".")
    current: StructType | None = df_schema
    for part in parts:
        if not isinstance(current, StructType) or part not in current.fieldNames():
            return None
        current = current[part].dataType  # type: ignore[assignment]
    return tuple(parts)


def check_key_columns(identifier: str, df_schema: StructType, equality_fields: Sequence[str]) -> None:
    """Refuse an unusable key before anything (a new table, say) is created from the DataFrame."""

    for name in equality_fields:
        path = dataframe_key_path(df_schema, name)
        if path is None:
            raise ConfigError(
                f"table {identifier}: equality field {name!r} is neither a column of the DataFrame nor a field "
                f"inside one of its structs (columns: {', '.join(df_schema.fieldNames())})"
            )
        kind = df_schema[path[0]].dataType
        for part in path[1:]:
            kind = kind[part].dataType  # type: ignore[index]
        if isinstance(kind, StructType | ArrayType | MapType):
            raise ConfigError(
                f"table {identifier}: equality field {name!r} is {kind.simpleString()}; a key is a primitive "
                "column, or a primitive field inside structs (never inside an array or a map)"
            )
        if isinstance(kind, FloatType | DoubleType):
            raise _floating_key(identifier, name, kind.simpleString())


def _table_key_field(schema: Schema, identifier: str, name: str) -> NestedField:
    """An equality field of the table: a top-level column of that exact name, else a field inside structs."""
    # Top-level columns by their exact name first: find_field reads a dot as a path into a struct.
    field = next((f for f in schema.fields if f.name == name), None)
    if field is not None:
        return field
    try:
        field = schema.find_field(name)
    except ValueError:
        raise ConfigError(
            f"table {identifier}: equality field {name!r} is neither a column of the table nor a field inside one "
            f"of its structs (columns: {', '.join(f.name for f in schema.fields)})"
        ) from None
    for parent, _ in field_path(schema, field.field_id)[:-1]:
        if not isinstance(schema.find_field(parent).field_type, iceberg_types.StructType):
            raise ConfigError(
                f"table {identifier}: equality field {name!r} is inside a list or a map; a key is a primitive "
                "column, or a primitive field inside structs"
            )
    if not field.field_type.is_primitive:
        raise ConfigError(f"table {identifier}: equality field {name!r} is {field.field_type}, not a primitive")
    return field


def change_spec(
    table: Table,
    identifier: str,
    df_schema: StructType,
    equality_fields: Sequence[str],
    op_column: str | None,
    op_values: Mapping[str, str] | None,
    sequence_by: str | None,
) -> ChangeSpec:
    """Validate a change stream against the table and the DataFrame; raise naming what is wrong."""
    schema = table.schema()
    if table.metadata.format_version < 2:
        raise ConfigError(f"table {identifier} is Iceberg format version 1, which has no delete files; upgrade it to 2")
    ids = []
    for name in equality_fields:
        field = _table_key_field(schema, identifier, name)
        if isinstance(field.field_type, iceberg_types.FloatType | iceberg_types.DoubleType):
            raise _floating_key(identifier, name, str(field.field_type))
        ids.append(field.field_id)
    nested = nested_key_fields(schema, ids)
    if nested and not MaintenancePolicy.of(table.properties, identifier).convert_at_commit:
        raise ConfigError(
            f"table {identifier}: equality fields inside structs ({', '.join(map(repr, nested))}) need their deletes "
            f"converted to position deletes at commit, and the table sets {CONVERT_AT_COMMIT}=false. Iceberg Java "
            "1.9 does not apply equality deletes keyed on nested fields and would read deleted rows: remove the "
            "property, or key the stream on top-level columns"
        )
    check_partition_keys(table, identifier, ids)
    columns = set(df_schema.fieldNames())
    if op_column is not None and op_column not in columns:
        raise ConfigError(f"table {identifier}: op_column {op_column!r} is not a column of the DataFrame")
    if sequence_by is not None and sequence_by not in columns:
        raise ConfigError(f"table {identifier}: sequence_by column {sequence_by!r} is not a column of the DataFrame")
    values = dict(op_values or DEFAULT_OP_VALUES)
    unknown = {kind for kind in values.values() if kind not in (INSERT, UPDATE, DELETE, SKIP)}
    if unknown:
        raise ConfigError(
            f"table {identifier}: op_values map to {sorted(unknown)}; use 'insert', 'update', 'delete' or 'skip'"
        )
    return ChangeSpec(
        equality_field_ids=tuple(ids),
        op_column=op_column,
        op_kinds=tuple(values.items()),
        sequence_column=sequence_by,
    )


def check_partition_keys(table: Table, identifier: str, equality_field_ids: Sequence[int], since: str = "") -> None:
    """Every partition field of the table's current spec reads a key column (invariant 5): checked at start and
    before every micro-batch, since another tool may repartition the table while the stream runs."""
    schema = table.schema()
    keys = [schema.find_column_name(i) or str(i) for i in equality_field_ids]
    for partition_field in table.spec().fields:
        if partition_field.source_id not in equality_field_ids:
            source = schema.find_column_name(partition_field.source_id)
            raise ConfigError(
                f"table {identifier}{since} is partitioned by {partition_field.transform}({source}), but {source!r} "
                f"is not among the equality fields {keys}: an update that moves a key to another partition "
                "would leave the old row alive. Add the column to equality_fields (of a Debezium stream's table: to "
                "the source table's primary key), or drop the partition field"
            )


def extra_columns(changes: ChangeSpec, table: Table) -> list[str]:
    """DataFrame columns the writer needs besides the table's own."""
    names = {f.name for f in table.schema().fields}
    extra = [c for c in (changes.op_column, changes.sequence_column) if c is not None and c not in names]
    return extra
