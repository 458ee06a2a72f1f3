"""Matching a Spark schema with an Iceberg table schema.

Runs on the driver before the stream starts, so that a DataFrame that cannot
fit the table is refused with the column named, before any file is written.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from icesink.errors import SchemaMismatchError, UnsupportedTableError
from icesink.iceberg.schemas import AddColumn, SchemaChange, WidenColumn, can_promote
from icesink.sink.columns import column

if TYPE_CHECKING:
    from pyiceberg.schema import Schema
    from pyiceberg.types import IcebergType
    from pyspark.sql import Column, DataFrame
    from pyspark.sql.types import DataType, StructField, StructType


def iceberg_type_of(spark_type: DataType, column: str, table: str) -> IcebergType:
    """The Iceberg type a new table gets for a Spark column."""
    from pyiceberg import types as it
    from pyspark.sql import types as st

    mapping: list[tuple[type, IcebergType]] = [
        (st.BooleanType, it.BooleanType()),
        (st.ByteType, it.IntegerType()),
        (st.ShortType, it.IntegerType()),
        (st.IntegerType, it.IntegerType()),
        (st.LongType, it.LongType()),
        (st.FloatType, it.FloatType()),
        (st.DoubleType, it.DoubleType()),
        (st.StringType, it.StringType()),
        (st.BinaryType, it.BinaryType()),
        (st.DateType, it.DateType()),
        (st.TimestampType, it.TimestamptzType()),
        (st.TimestampNTZType, it.TimestampType()),
        (st.TimeType, it.TimeType()),
    ]
    for spark_class, iceberg in mapping:
        if type(spark_type) is spark_class:
            return iceberg
    if isinstance(spark_type, st.DecimalType):
        return it.DecimalType(spark_type.precision, spark_type.scale)
    raise UnsupportedTableError(
        f"table {table}: column {column!r} has Spark type {spark_type.simpleString()}, which icesink cannot "
        "write yet (supported: boolean, integers, float, double, decimal, string, binary, date, timestamp, "
        "timestamp_ntz, time); "
        "cast or drop the column"
    )


def schema_from_spark(
    spark_schema: StructType, table: str, identifier_fields: Sequence[str] = (), skip: Sequence[str] = ()
) -> Schema:
    """A new table's schema: field ids 1..n in column order, non-nullable Spark columns required.

    Identifier fields (the key of a change stream) are required, as Iceberg demands;
    ``skip`` names DataFrame columns that are not table data (a change stream's operation).
    """
    from pyiceberg.schema import Schema
    from pyiceberg.types import NestedField

    fields = [
        NestedField(
            field_id=i,
            name=f.name,
            field_type=iceberg_type_of(f.dataType, f.name, table),
            required=not f.nullable or f.name in identifier_fields,
        )
        for i, f in enumerate((f for f in spark_schema.fields if f.name not in skip), start=1)
    ]
    ids = [f.field_id for f in fields if f.name in identifier_fields]
    return Schema(*fields, identifier_field_ids=ids)


def _accepts(target: IcebergType, source: IcebergType) -> bool:
    """Can a value of ``source`` be stored in a column of ``target`` without loss?"""
    from pyiceberg import types as it

    if target == source:
        return True
    # Iceberg types Spark lacks, filled from the type a user would use (checked per row by the writer).
    if isinstance(target, it.UUIDType):
        return isinstance(source, it.StringType | it.BinaryType)
    if isinstance(target, it.FixedType):
        return isinstance(source, it.BinaryType)
    if isinstance(target, it.DecimalType) and isinstance(source, it.DecimalType):
        return source.scale == target.scale and source.precision <= target.precision
    return can_promote(source, target)


@dataclass(frozen=True)
class ColumnSource:
    """Where one table column's values come from in the DataFrame (None: written as nulls)."""

    name: str  # the table column
    field_id: int
    source: str | None
    cast: bool = False


@dataclass(frozen=True)
class Projection:
    """How to turn each batch into the table's columns, in the table's order."""

    columns: tuple[ColumnSource, ...]
    passthrough: tuple[str, ...] = ()  # DataFrame columns the writer needs besides the table's

    def apply(self, df: DataFrame, table_schema: Schema) -> DataFrame:
        from pyspark.sql import functions as F

        selected: list[Column] = []
        for source, field in zip(self.columns, table_schema.fields, strict=True):
            spark_type = spark_type_of(field.field_type)
            if source.source is None:
                selected.append(F.lit(None).cast(spark_type).alias(source.name))
            elif source.cast:
                selected.append(column(source.source).cast(spark_type).alias(source.name))
            else:
                selected.append(column(source.source).alias(source.name))
        selected += [column(name) for name in self.passthrough]
        return df.select(*selected)

    @property
    def field_ids(self) -> dict[str, int]:
        """DataFrame column → the table field it was written to (what a rename must not change)."""
        return {c.source: c.field_id for c in self.columns if c.source is not None}


@dataclass(frozen=True)
class SchemaPlan:
    """A DataFrame matched with a table schema: the projection, or the changes the table needs first."""

    projection: Projection | None
    changes: tuple[SchemaChange, ...] = ()


def spark_type_of(iceberg: IcebergType) -> DataType:
    """The Spark type of an Iceberg primitive type (timestamptz: TimestampType, timestamp: TimestampNTZType)."""
    from pyiceberg import types as it
    from pyspark.sql import types as st

    if isinstance(iceberg, it.DecimalType):
        return st.DecimalType(iceberg.precision, iceberg.scale)
    mapping: dict[type, DataType] = {
        it.BooleanType: st.BooleanType(),
        it.IntegerType: st.IntegerType(),
        it.LongType: st.LongType(),
        it.FloatType: st.FloatType(),
        it.DoubleType: st.DoubleType(),
        it.StringType: st.StringType(),
        it.BinaryType: st.BinaryType(),
        it.DateType: st.DateType(),
        it.TimestamptzType: st.TimestampType(),
        it.TimestampType: st.TimestampNTZType(),
        it.TimeType: st.TimeType(),
        it.UUIDType: st.StringType(),
        it.FixedType: st.BinaryType(),
    }
    return mapping[type(iceberg)]


def plan_projection(
    spark_schema: StructType,
    table_schema: Schema,
    table: str,
    passthrough: Sequence[str] = (),
    field_ids: Mapping[str, int] | None = None,
) -> Projection:
    """Check that the DataFrame fits the table as it is and say how to project it; raise naming the column."""
    plan = plan_schema(spark_schema, table_schema, table, passthrough, field_ids)
    if plan.changes:
        raise SchemaMismatchError(schema_refusal(table, plan.changes[0]))
    assert plan.projection is not None
    return plan.projection


def plan_schema(
    spark_schema: StructType,
    table_schema: Schema,
    table: str,
    passthrough: Sequence[str] = (),
    field_ids: Mapping[str, int] | None = None,
) -> SchemaPlan:
    """Match the DataFrame's columns with the table's, or list the (lossless) changes the table needs first.

    A DataFrame column this stream wrote before (``field_ids``: column → field
    id, from the schema of its last checkpoint) goes to the same field id, so
    that a column renamed in the table meanwhile keeps receiving its values;
    other columns match by name (exact first, then ignoring case). What no
    evolution may do (a dropped column, a narrower or other type, a missing
    required column) raises :class:`SchemaMismatchError` naming the column.
    """
    from pyiceberg import types as it

    data_fields = [f for f in spark_schema.fields if f.name not in passthrough]
    source_of = _match_columns(table, data_fields, table_schema, field_ids or {})
    new_columns = [f for f in data_fields if f.name not in {s.name for s in source_of.values()}]
    columns: list[ColumnSource] = []
    changes: list[SchemaChange] = []
    for field in table_schema.fields:
        if not field.field_type.is_primitive:
            raise UnsupportedTableError(
                f"table {table}: column {field.name!r} is {field.field_type}; icesink writes primitive columns only"
            )
        source = source_of.get(field.field_id)
        if source is None:
            if field.required:
                raise SchemaMismatchError(
                    f"table {table}: required column {field.name!r} ({field.field_type}) is missing from the "
                    f"DataFrame (columns: {', '.join(f.name for f in data_fields) or 'none'}); add it to the DataFrame"
                )
            columns.append(ColumnSource(field.name, field.field_id, None))
            continue
        actual = iceberg_type_of(source.dataType, source.name, table)
        if _accepts(field.field_type, actual):
            # uuid and fixed arrive as Spark strings or binaries; the writer converts and checks them.
            cast = actual != field.field_type and not isinstance(field.field_type, it.UUIDType | it.FixedType)
            columns.append(ColumnSource(field.name, field.field_id, source.name, cast))
        elif can_promote(field.field_type, actual):
            changes.append(WidenColumn(field.name, field.field_id, field.field_type, actual))
        else:
            raise SchemaMismatchError(
                f"table {table}: column {field.name!r} is {field.field_type} in the table but "
                f"{source.dataType.simpleString()} in the DataFrame, which is neither the same type nor a widening "
                "Iceberg allows (int to long, float to double, a decimal's precision); cast it in the DataFrame"
            )
    changes += [AddColumn(f.name, iceberg_type_of(f.dataType, f.name, table)) for f in new_columns]
    if changes:
        return SchemaPlan(None, tuple(changes))
    return SchemaPlan(Projection(tuple(columns), tuple(passthrough)))


def _match_columns(
    table: str, data_fields: list[StructField], table_schema: Schema, field_ids: Mapping[str, int]
) -> dict[int, StructField]:
    """Table field id → the DataFrame column that fills it, matched in three passes.

    First the columns this stream wrote before, to the same field whatever it
    is called now (a field dropped since is found again only when a column of
    that name was added back); then exact names; then names ignoring case.
    Two DataFrame columns that would fill one field are an error naming both.
    """
    by_id = {f.field_id: f for f in table_schema.fields}
    by_name = {f.name: f for f in table_schema.fields}
    by_lower = {f.name.lower(): f for f in table_schema.fields}
    source_of: dict[int, StructField] = {}
    how: dict[int, str] = {}
    unmatched: list[StructField] = []
    for spark_field in data_fields:
        known = field_ids.get(spark_field.name)
        if known is None:
            unmatched.append(spark_field)
            continue
        target = by_id.get(known) or by_name.get(spark_field.name)
        if target is None:
            raise SchemaMismatchError(
                f"table {table}: column {spark_field.name!r} (field id {known}), which this stream writes, was "
                "dropped from the table by someone else; icesink never re-creates a dropped column. Nothing of "
                "this batch was written: add a column of that name back to the table, or drop it from the "
                "DataFrame, and restart the stream"
            )
        source_of[target.field_id] = spark_field
        how[target.field_id] = f"which this stream has written to it (as {target.name!r} now)"
    for lookup, key, way in ((by_name, str, "by name"), (by_lower, str.lower, "by name ignoring case")):
        rest = []
        for spark_field in unmatched:
            target = lookup.get(key(spark_field.name))
            if target is None:
                rest.append(spark_field)
                continue
            if target.field_id in source_of:
                other = source_of[target.field_id].name
                raise SchemaMismatchError(
                    f"table {table}: DataFrame columns {other!r} ({how[target.field_id]}) and "
                    f"{spark_field.name!r} ({way}) would both fill table column {target.name!r}; nothing of this "
                    "batch was written: rename or drop one of them in the DataFrame"
                )
            source_of[target.field_id] = spark_field
            how[target.field_id] = way
        unmatched = rest
    return source_of


def schema_refusal(table: str, change: SchemaChange) -> str:
    """Why a DataFrame does not fit a table that icesink may not evolve."""
    if isinstance(change, AddColumn):
        return (
            f"table {table}: DataFrame column {change.name!r} ({change.field_type}) is not in the table; drop it "
            "from the DataFrame, add it to the table first, or pass evolve_schema=True to add it as an optional "
            "column"
        )
    if isinstance(change, WidenColumn):
        return (
            f"table {table}: column {change.name!r} is {change.old_type} in the table but {change.new_type} in the "
            f"DataFrame; cast it to {change.old_type} in the DataFrame, or pass evolve_schema=True to widen the "
            "table's column"
        )
    return (
        f"table {table}: column {change.name!r} is required but receives nulls; fix the input, or pass "
        "evolve_schema=True to make the column optional"
    )
