"""Matching a Spark schema with an Iceberg table schema.

Runs on the driver before the stream starts, so that a DataFrame that cannot
fit the table is refused with the column named, before any file is written.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from icesink.errors import SchemaMismatchError, UnsupportedTableError
from icesink.sink.columns import column

if TYPE_CHECKING:
    from pyiceberg.schema import Schema
    from pyiceberg.types import IcebergType
    from pyspark.sql import Column, DataFrame
    from pyspark.sql.types import DataType, StructType


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
    ]
    for spark_class, iceberg in mapping:
        if type(spark_type) is spark_class:
            return iceberg
    if isinstance(spark_type, st.DecimalType):
        return it.DecimalType(spark_type.precision, spark_type.scale)
    raise UnsupportedTableError(
        f"table {table}: column {column!r} has Spark type {spark_type.simpleString()}, which icesink cannot "
        "write yet (supported: boolean, integers, float, double, decimal, string, binary, date, timestamp); "
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
    if isinstance(target, it.LongType) and isinstance(source, it.IntegerType):
        return True
    if isinstance(target, it.DoubleType) and isinstance(source, it.FloatType):
        return True
    if isinstance(target, it.DecimalType) and isinstance(source, it.DecimalType):
        return source.scale == target.scale and source.precision <= target.precision
    return False


@dataclass(frozen=True)
class Projection:
    """How to turn each batch into the table's columns, in the table's order."""

    columns: tuple[tuple[str, str | None, bool], ...]  # (table column, source column or None, needs cast)
    passthrough: tuple[str, ...] = ()  # DataFrame columns the writer needs besides the table's

    def apply(self, df: DataFrame, table_schema: Schema) -> DataFrame:
        from pyspark.sql import functions as F

        selected: list[Column] = []
        for (name, source, cast), field in zip(self.columns, table_schema.fields, strict=True):
            spark_type = spark_type_of(field.field_type)
            if source is None:
                selected.append(F.lit(None).cast(spark_type).alias(name))
            elif cast:
                selected.append(column(source).cast(spark_type).alias(name))
            else:
                selected.append(column(source).alias(name))
        selected += [column(name) for name in self.passthrough]
        return df.select(*selected)


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
    }
    return mapping[type(iceberg)]


def plan_projection(
    spark_schema: StructType, table_schema: Schema, table: str, passthrough: Sequence[str] = ()
) -> Projection:
    """Check that the DataFrame fits the table and say how to project it; raise naming the column otherwise."""
    by_name = {f.name: f for f in spark_schema.fields if f.name not in passthrough}
    by_lower = {f.name.lower(): f for f in spark_schema.fields}
    used: set[str] = set()
    columns: list[tuple[str, str | None, bool]] = []
    for field in table_schema.fields:
        if not field.field_type.is_primitive:
            raise UnsupportedTableError(
                f"table {table}: column {field.name!r} is {field.field_type}; icesink writes primitive columns only"
            )
        source = by_name.get(field.name) or by_lower.get(field.name.lower())
        if source is None:
            if field.required:
                raise SchemaMismatchError(
                    f"table {table}: required column {field.name!r} ({field.field_type}) is missing from the "
                    f"DataFrame (columns: {', '.join(by_name) or 'none'}); add it to the DataFrame"
                )
            columns.append((field.name, None, False))
            continue
        used.add(source.name)
        actual = iceberg_type_of(source.dataType, source.name, table)
        if not _accepts(field.field_type, actual):
            raise SchemaMismatchError(
                f"table {table}: column {field.name!r} is {field.field_type} in the table but "
                f"{source.dataType.simpleString()} in the DataFrame; cast it in the DataFrame"
            )
        columns.append((field.name, source.name, actual != field.field_type))
    extra = [name for name in by_name if name not in used]
    if extra:
        raise SchemaMismatchError(
            f"table {table}: DataFrame column(s) {', '.join(repr(e) for e in extra)} are not in the table; "
            "drop them from the DataFrame or add them to the table schema first"
        )
    return Projection(tuple(columns), tuple(passthrough))
