"""The Spark ↔ Iceberg type mapping, both ways, for the write side (new tables and columns) and the read
side (the change stream's Spark schema) alike."""

from __future__ import annotations

from typing import TYPE_CHECKING

from icesink.errors import UnsupportedTableError

if TYPE_CHECKING:
    from pyiceberg.schema import Schema
    from pyiceberg.types import IcebergType
    from pyspark.sql.types import DataType, StructField


class FieldIds:
    """Hands out field ids for the nested fields of a new type; the catalog assigns the final ones."""

    def __init__(self, start: int = 1) -> None:
        self._next = start

    def take(self) -> int:
        self._next += 1
        return self._next - 1


def iceberg_type_of(spark_type: DataType, column: str, table: str, ids: FieldIds | None = None) -> IcebergType:
    """The Iceberg type a new table (or a new column) gets for a Spark column, nested types included.

    Nested fields are optional where Spark says they may be null; their ids are
    placeholders from ``ids`` (pyiceberg assigns fresh ones to any new type).
    """
    from pyiceberg import types as it
    from pyspark.sql import types as st

    ids = ids or FieldIds(1000)
    if isinstance(spark_type, st.StructType):
        return it.StructType(
            *[
                it.NestedField(
                    ids.take(), f.name, iceberg_type_of(f.dataType, f"{column}.{f.name}", table, ids), not f.nullable
                )
                for f in spark_type.fields
            ]
        )
    if isinstance(spark_type, st.ArrayType):
        element = iceberg_type_of(spark_type.elementType, f"{column}.element", table, ids)
        return it.ListType(ids.take(), element, element_required=not spark_type.containsNull)
    if isinstance(spark_type, st.MapType):
        key = iceberg_type_of(spark_type.keyType, f"{column}.key", table, ids)
        value = iceberg_type_of(spark_type.valueType, f"{column}.value", table, ids)
        return it.MapType(ids.take(), key, ids.take(), value, value_required=not spark_type.valueContainsNull)

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
        "timestamp_ntz, time, and structs, arrays and maps of them); "
        "cast or drop the column"
    )


def spark_type_of(iceberg: IcebergType) -> DataType:
    """The Spark type of an Iceberg type (timestamptz: TimestampType, timestamp: TimestampNTZType)."""
    from pyiceberg import types as it
    from pyspark.sql import types as st

    if isinstance(iceberg, it.StructType):
        return st.StructType(
            [st.StructField(f.name, spark_type_of(f.field_type), nullable=not f.required) for f in iceberg.fields]
        )
    if isinstance(iceberg, it.ListType):
        return st.ArrayType(spark_type_of(iceberg.element_type), containsNull=not iceberg.element_required)
    if isinstance(iceberg, it.MapType):
        return st.MapType(
            spark_type_of(iceberg.key_type),
            spark_type_of(iceberg.value_type),
            valueContainsNull=not iceberg.value_required,
        )
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


def spark_columns(schema: Schema) -> list[StructField]:
    """A table's columns as a DataFrame of it declares them (a required column is not nullable)."""
    from pyspark.sql.types import StructField

    return [StructField(f.name, spark_type_of(f.field_type), not f.required) for f in schema.fields]
