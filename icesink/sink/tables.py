"""Finding or creating the target table, and describing it to the executors."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from pyiceberg.exceptions import TableAlreadyExistsError
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema, assign_fresh_schema_ids
from pyiceberg.transforms import parse_transform
from pyiceberg.types import NestedField
from pyiceberg.types import StructType as IcebergStructType

from icesink import paths
from icesink.catalog.config import CatalogConfig
from icesink.catalog.database import database_errors
from icesink.catalog.loader import check_identifier, load_table
from icesink.errors import ConfigError, TableNotFoundError
from icesink.iceberg.describe import check_format_version, check_write_properties
from icesink.iceberg.pending_tables import PendingAwareCatalog, PendingTable
from icesink.sink.change_stream import dataframe_key_path
from icesink.sink.pending_options import kept_pending, pending_note
from icesink.spark_types import FieldIds, iceberg_type_of

if TYPE_CHECKING:
    from pyiceberg.catalog.sql import SqlCatalog
    from pyiceberg.partitioning import PartitionSpec
    from pyiceberg.schema import Schema
    from pyiceberg.table import Table
    from pyiceberg.types import NestedField
    from pyspark.sql.types import StructType

_TRANSFORM = re.compile(r"^\s*(\w+)\s*\(\s*(?:(\d+)\s*,\s*)?(.+?)\s*\)\s*$", re.DOTALL)
_ALIASES = {"years": "year", "months": "month", "days": "day", "hours": "hour"}


def _column_name(text: str) -> str:
    """A column as written in ``partition_by``: bare, or in backticks with inner backticks doubled."""
    text = text.strip()
    if len(text) >= 2 and text[0] == "`" and text[-1] == "`":
        return text[1:-1].replace("``", "`")
    return text


def parse_partition_by(table: str, schema: Schema, partition_by: Sequence[str]) -> PartitionSpec:
    """``["region", "day(ts)", "bucket(16, id)", "truncate(4, `first name`)"]`` as an Iceberg partition spec.

    A bare entry is an identity partition of the column with exactly that name
    (spaces, dots and all); backticks quote a name that would read as a
    transform, with a backtick inside written twice.
    """

    fields = []
    for number, text in enumerate(partition_by):
        match = _TRANSFORM.match(text)
        if match and not text.strip().startswith("`"):
            name, width, column = match.group(1).lower(), match.group(2), _column_name(match.group(3))
            name = _ALIASES.get(name, name)
            transform_text = f"{name}[{width}]" if width else name
        else:
            column, transform_text = _column_name(text), "identity"
        # Top-level columns by their exact name: find_field would read a dot as a path into a struct.
        source = next((f for f in schema.fields if f.name == column), None)
        if source is None:
            raise ConfigError(
                f"table {table}: partition_by {text!r} names column {column!r}, which is not in the table "
                f"(columns: {', '.join(f.name for f in schema.fields)})"
            )
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


def table_exists(catalog: SqlCatalog, config: CatalogConfig, identifier: str) -> bool:
    """Whether the catalog has the table now."""
    try:
        load_table(catalog, config, identifier)
    except TableNotFoundError:
        return False
    return True


def resolve_table(
    catalog: SqlCatalog,
    config: CatalogConfig,
    identifier: str,
    spark_schema: StructType,
    create: bool,
    partition_by: Sequence[str],
    identifier_fields: Sequence[str] = (),
    skip_columns: Sequence[str] = (),
    properties: Mapping[str, str] | None = None,
    deferred: bool = False,
) -> Table:
    """Load the table, creating it (and its namespace) from the DataFrame's schema when allowed.

    ``properties`` are the table properties of a table created here. A ``deferred`` table (of a stream
    into several tables) enters the catalog with its first commit; until then only icesink's writers and
    committers see it (:mod:`icesink.iceberg.pending_tables`).

    Another stream or tool creating the same table (or namespace) at the same
    moment is not an error: the loser uses what the winner created, if it fits.
    """

    check_identifier(identifier)
    found = _found(catalog, config, identifier, create)
    # A pending table has no rows yet: one a stream creates is held to the options the stream asks (below).
    if found is not None and not (create and deferred and isinstance(found, PendingTable)):
        return _existing(found, identifier, partition_by)
    # A table is never created with write properties its writers would then refuse.
    check_write_properties(properties or {}, identifier)
    schema = schema_from_spark(spark_schema, identifier, identifier_fields, skip_columns)
    spec = parse_partition_by(identifier, schema, partition_by)
    if found is not None:
        kept = kept_pending(catalog, config, found, identifier, schema, spec, dict(properties or {}))
        if kept is not None:
            return _existing(kept, identifier, partition_by)
    namespace, name = identifier.rsplit(".", 1)
    with database_errors(config):
        _create_namespace(catalog, namespace)
        location = new_table_location(catalog, config, namespace, name)
        if deferred:
            assert isinstance(catalog, PendingAwareCatalog), "open the catalog with pending_tables=True"
            created = catalog.create_pending_table(identifier, schema, spec, location, dict(properties or {}))
            return _existing(created, identifier, partition_by)
        try:
            return catalog.create_table(
                identifier, schema=schema, partition_spec=spec, location=location, properties=dict(properties or {})
            )
        except TableAlreadyExistsError:  # another stream created it first
            pass
    return _existing(load_table(catalog, config, identifier), identifier, partition_by)


def _found(catalog: SqlCatalog, config: CatalogConfig, identifier: str, create: bool) -> Table | None:
    """The table; None where there is none and it may be created."""
    try:
        return load_table(catalog, config, identifier)
    except TableNotFoundError:
        if not create:
            raise
        return None


def _existing(table: Table, identifier: str, partition_by: Sequence[str]) -> Table:
    check_format_version(table, identifier)
    if partition_by and not _same_partitioning(table, partition_by):
        note = f". {pending_note(identifier)}" if isinstance(table, PendingTable) else ""
        raise ConfigError(
            f"table {identifier} exists with partitioning {table.spec()}, not {list(partition_by)}; "
            f"drop partition_by or change the table's spec first{note}"
        )
    return table


def _create_namespace(catalog: SqlCatalog, namespace: str) -> None:
    try:
        catalog.create_namespace_if_not_exists(namespace)
    except Exception:
        # pyiceberg checks, then inserts: a namespace created in between fails the insert.
        if not catalog.namespace_exists(namespace):
            raise


def new_table_location(catalog: SqlCatalog, config: CatalogConfig, namespace: str, name: str) -> str:
    """pyiceberg's default layout (``<warehouse>/<namespace>/<table>``) with names percent-encoded.

    Table and namespace names may hold any character; their directories hold
    only what every reader parses the same way (see :mod:`icesink.paths`).
    """
    base = catalog.load_namespace_properties(namespace).get("location")
    if base:
        return paths.join(base, paths.segment(name))
    return paths.join(config.warehouse, paths.segment(namespace), paths.segment(name))


def _same_partitioning(table: Table, partition_by: Sequence[str]) -> bool:
    wanted = parse_partition_by(table.name()[-1], table.schema(), partition_by)
    current = table.spec()
    return [(f.source_id, str(f.transform)) for f in wanted.fields] == [
        (f.source_id, str(f.transform)) for f in current.fields
    ]


def schema_from_spark(
    spark_schema: StructType, table: str, identifier_fields: Sequence[str] = (), skip: Sequence[str] = ()
) -> Schema:
    """A new table's schema: field ids 1..n in column order, non-nullable Spark columns required.

    Identifier fields (the key of a change stream) are required, as Iceberg demands;
    ``skip`` names DataFrame columns that are not table data (a change stream's operation).
    """

    columns = [f for f in spark_schema.fields if f.name not in skip]
    nested_ids = FieldIds(len(columns) + 1)
    fields = [
        NestedField(
            field_id=i,
            name=f.name,
            field_type=iceberg_type_of(f.dataType, f.name, table, nested_ids),
            required=not f.nullable,
        )
        for i, f in enumerate(columns, start=1)
    ]
    ids = []
    for name in identifier_fields:
        path = dataframe_key_path(spark_schema, name)
        if path is None:
            continue  # check_key_columns names it
        # Iceberg: an identifier field is required, and so is every struct holding it.
        fields, field_id = _required_along(fields, path)
        ids.append(field_id)
    # Iceberg's numbering: top-level columns 1..n, then the nested fields.
    return assign_fresh_schema_ids(Schema(*fields, identifier_field_ids=ids))


def _required_along(fields: list[NestedField], path: tuple[str, ...]) -> tuple[list[NestedField], int]:
    """``fields`` with the field at ``path`` and the structs above it required, and that field's id."""
    out = []
    found = -1
    for field in fields:
        if field.name != path[0]:
            out.append(field)
            continue
        field_type = field.field_type
        found = field.field_id
        if len(path) > 1 and isinstance(field_type, IcebergStructType):
            children, found = _required_along(list(field_type.fields), path[1:])
            field_type = IcebergStructType(*children)
        out.append(NestedField(field.field_id, field.name, field_type, required=True, doc=field.doc))
    return out, found
