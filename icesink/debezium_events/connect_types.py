"""Connect schemas (as JsonConverter writes them) to Spark types, by Debezium's logical types.

The one table of the mapping; the documentation's type table is generated from :data:`TYPE_TABLE`. A value
is decoded on the executors (:mod:`icesink.debezium_events.decode`) into the spelling ``from_json`` reads into
exactly this type.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from icesink.debezium_events import decode as d
from icesink.errors import SchemaMismatchError

if TYPE_CHECKING:
    from pyspark.sql.types import DataType, StructType

# (Connect schema, Spark type, Iceberg type, how the value is read) — the documented mapping.
TYPE_TABLE: tuple[tuple[str, str, str, str], ...] = (
    ("`boolean`", "boolean", "boolean", ""),
    ("`int8`, `int16`, `int32`", "tinyint, smallint, int", "int", ""),
    ("`int64`", "bigint", "long", ""),
    ("`float`, `double`", "float, double", "float, double", "`NaN` and the infinities kept"),
    ("`string`, and `Uuid`, `Json`, `Xml`, `Enum`, `EnumSet`, `ZonedTime`, `Interval`", "string", "string", "as sent"),
    ("`bytes`, `Bits`", "binary", "binary", "base64 decoded"),
    (
        "`Decimal` (`scale`, `connect.decimal.precision`)",
        "decimal(p, s)",
        "decimal(p, s)",
        "base64 of the unscaled two's-complement value, exactly (or a JSON number with "
        "`decimal.format=NUMERIC`); p defaults to 38",
    ),
    ("`VariableScaleDecimal`", "string", "string", "the exact decimal in plain digits (its scale varies by row)"),
    ("`Date` (Connect or Debezium)", "date", "date", "days since 1970-01-01"),
    (
        "`Time`, `MicroTime`, `NanoTime`",
        "bigint",
        "long",
        "microseconds since midnight (a nanosecond value must be whole microseconds)",
    ),
    (
        "`Timestamp` (Connect or Debezium), `MicroTimestamp`, `NanoTimestamp`",
        "timestamp_ntz",
        "timestamp",
        "the source's wall clock, to the microsecond (a nanosecond value must be whole microseconds)",
    ),
    ("`ZonedTimestamp`", "timestamp", "timestamptz", "the ISO 8601 instant; PostgreSQL's `infinity` is refused"),
    ("`MicroDuration`, `Year`", "bigint, int", "long, int", "as sent"),
    ("`struct` (and `Geometry`, `Point`)", "struct", "struct", "field by field"),
    ("`array`", "array", "list", "element by element"),
    ("`map` with string keys / other keys", "map / array of struct(key, value)", "map / list", "entry by entry"),
)


def spark_type(schema: dict[str, Any], where: str) -> DataType:
    """The Spark type of a Connect schema."""
    from pyspark.sql import types as T

    name = schema.get("name")
    kind = schema.get("type")
    if name == d.DECIMAL:
        parameters = schema.get("parameters") or {}
        scale = int(parameters.get("scale", 0))
        precision = int(parameters.get("connect.decimal.precision", 38))
        # Iceberg's decimals need 0 <= scale <= precision: numeric(5, -2) holds whole numbers of up to 7 digits,
        # numeric(2, 5) fractions of 5 digits. Both fit exactly in the decimal that holds every digit.
        digits, fraction = precision + max(0, -scale), max(0, scale)
        digits = max(digits, fraction)
        if digits > 38:
            raise SchemaMismatchError(
                f"{where}: decimal(precision {precision}, scale {scale}) needs {digits} digits, and Iceberg's "
                "decimals hold at most 38; send it as text (decimal.handling.mode=string) or narrow the column"
            )
        return T.DecimalType(digits, fraction)
    simple = _simple_types()
    if name in simple:
        return simple[name]
    if kind in simple:  # a primitive, or a logical type read as its primitive (Uuid, Json, Enum, Bits, Year, ...)
        return simple[kind]
    if kind == "struct":
        return struct_type(schema, where)
    if kind == "array":
        return T.ArrayType(spark_type(schema["items"], f"{where}[]"), True)
    if kind == "map":
        keys, values = schema["keys"], schema["values"]
        value_type = spark_type(values, f"{where}.value")
        if keys.get("type") == "string" and not keys.get("name"):
            return T.MapType(T.StringType(), value_type, True)
        entry = T.StructType(
            [T.StructField("key", spark_type(keys, f"{where}.key")), T.StructField("value", value_type)]
        )
        return T.ArrayType(entry, True)
    raise SchemaMismatchError(f"{where}: Connect type {kind!r} ({name or 'no logical name'}) has no mapping")


def _simple_types() -> dict[str | None, DataType]:
    """Logical names with a fixed type, and the primitive types (for names icesink has no reading of)."""
    from pyspark.sql import types as T

    return {
        d.VARIABLE_DECIMAL: T.StringType(),
        d.TIME_MICROS: T.LongType(),
        d.TIME_NANOS: T.LongType(),
        d.TIMESTAMP_MICROS: T.TimestampNTZType(),
        d.TIMESTAMP_NANOS: T.TimestampNTZType(),
        d.ZONED_TIMESTAMP: T.TimestampType(),
        **{n: T.DateType() for n in d.DATES},
        **{n: T.LongType() for n in d.TIME_MILLIS},
        **{n: T.TimestampNTZType() for n in d.TIMESTAMP_MILLIS},
        "boolean": T.BooleanType(),
        "int8": T.ByteType(),
        "int16": T.ShortType(),
        "int32": T.IntegerType(),
        "int64": T.LongType(),
        "float": T.FloatType(),
        "float32": T.FloatType(),
        "double": T.DoubleType(),
        "float64": T.DoubleType(),
        "string": T.StringType(),
        "bytes": T.BinaryType(),
    }


def struct_type(schema: dict[str, Any], where: str) -> StructType:
    from pyspark.sql import types as T

    return T.StructType(
        [
            T.StructField(f["field"], spark_type(f, f"{where}.{f['field']}"), bool(f.get("optional", True)))
            for f in schema.get("fields", [])
        ]
    )
