"""Connect schemas (as JsonConverter writes them) to Spark types, by Debezium's logical types.

The one table of the mapping; the documentation's type table is generated from :data:`TYPE_TABLE`. A value
is decoded on the executors (:mod:`icesink.debezium_events.decode`) into the spelling ``from_json`` reads into
exactly this type.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from icesink.debezium_events import connect_values as d
from icesink.errors import SchemaMismatchError

if TYPE_CHECKING:
    from pyspark.sql.types import DataType, StructType

Origin = TypeVar("Origin")

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


def merge_schemas(
    typed: Sequence[tuple[StructType, Origin]], where: str
) -> tuple[StructType, dict[str, list[tuple[str, Origin]]]]:
    """One schema for rows of every schema of ``typed`` (oldest first): every column any of them has (in order of
    first appearance), each in the widest of its types, which holds each of their values exactly (see
    :func:`widest`). Also, per column path, each type it has and the first schema (origin) that has it.

    A column whose types no type holds together (``int`` and ``string``; decimals needing more than 38 digits)
    raises :class:`SchemaMismatchError` naming the column, both types and where each comes from.
    """
    merger = _Merger(where)
    merged: StructType | None = None
    for schema, origin in typed:
        merged = schema if merged is None else merger.struct(merged, schema, "", origin)
        merger.note(schema, "", origin)
    assert merged is not None
    return merged, merger.origins


class _Merger:
    def __init__(self, where: str) -> None:
        self._where = where
        self.origins: dict[str, list[tuple[str, Any]]] = {}

    def note(self, kind: DataType, path: str, origin: Any) -> None:
        """Record the types ``kind`` gives each path, where none recorded it before."""
        from pyspark.sql import types as T

        if path:
            seen = self.origins.setdefault(path, [])
            if all(t != kind.simpleString() for t, _ in seen):
                seen.append((kind.simpleString(), origin))
        if isinstance(kind, T.StructType):
            for f in kind.fields:
                self.note(f.dataType, f"{path}.{f.name}" if path else f.name, origin)
        elif isinstance(kind, T.ArrayType):
            self.note(kind.elementType, f"{path}[]", origin)
        elif isinstance(kind, T.MapType):
            self.note(kind.keyType, f"{path}.key", origin)
            self.note(kind.valueType, f"{path}.value", origin)

    def struct(self, old: StructType, new: StructType, path: str, origin: Any) -> StructType:
        from pyspark.sql import types as T

        fields = {f.name: f for f in old.fields}
        for f in new.fields:
            child = f"{path}.{f.name}" if path else f.name
            before = fields.get(f.name)
            if before is None:
                fields[f.name] = f
                continue
            kind = self.widest(before.dataType, f.dataType, child, origin)
            fields[f.name] = T.StructField(f.name, kind, before.nullable or f.nullable)
        return T.StructType(list(fields.values()))

    def widest(self, old: DataType, new: DataType, path: str, origin: Any) -> DataType:
        """The narrowest type that holds every value of ``old`` and of ``new`` exactly, or a refusal."""
        from pyspark.sql import types as T

        if isinstance(old, T.StructType) and isinstance(new, T.StructType):
            return self.struct(old, new, path, origin)
        if isinstance(old, T.ArrayType) and isinstance(new, T.ArrayType):
            element = self.widest(old.elementType, new.elementType, f"{path}[]", origin)
            return T.ArrayType(element, old.containsNull or new.containsNull)
        if isinstance(old, T.MapType) and isinstance(new, T.MapType):
            key = self.widest(old.keyType, new.keyType, f"{path}.key", origin)
            value = self.widest(old.valueType, new.valueType, f"{path}.value", origin)
            return T.MapType(key, value, old.valueContainsNull or new.valueContainsNull)
        wider = widest(old, new)
        if wider is None:
            raise self._refusal(old, new, path, origin)
        return wider

    def _refusal(self, old: DataType, new: DataType, path: str, origin: Any) -> SchemaMismatchError:
        earlier = next((o for t, o in self.origins.get(path, []) if t == old.simpleString()), None)
        if isinstance(old, type(new)) and hasattr(old, "precision"):
            why = "together they need more than the 38 digits Iceberg's decimals hold"
        else:
            why = "no type holds the values of both exactly"
        return SchemaMismatchError(
            f"{self._where}: column {path!r} is {old.simpleString()} in records from {earlier} and "
            f"{new.simpleString()} in records from {origin}; {why}. Nothing of the micro-batch was written. "
            "Write the source's new values into a table of their own (a mapping in icesink.debezium(tables=...)), "
            "or change the column back at the source"
        )


_INTEGER_RANK = ("ByteType", "ShortType", "IntegerType", "LongType")


def widest(old: DataType, new: DataType) -> DataType | None:
    """For primitives: the narrowest type holding every value of both exactly (None: there is none).

    Integers widen to the wider integer, ``float`` to ``double``, and two decimals to the one with the larger
    scale and the more digits before the point (at most 38 digits in all). Nothing else mixes: an integer is
    not a float (a float cannot hold every long), and text is not a number.
    """
    from pyspark.sql import types as T

    if old == new:
        return old
    old_name, new_name = type(old).__name__, type(new).__name__
    if old_name in _INTEGER_RANK and new_name in _INTEGER_RANK:
        return old if _INTEGER_RANK.index(old_name) >= _INTEGER_RANK.index(new_name) else new
    if {old_name, new_name} == {"FloatType", "DoubleType"}:
        return T.DoubleType()
    if isinstance(old, T.DecimalType) and isinstance(new, T.DecimalType):
        scale = max(old.scale, new.scale)
        whole = max(old.precision - old.scale, new.precision - new.scale)
        return T.DecimalType(whole + scale, scale) if whole + scale <= 38 else None
    return None
