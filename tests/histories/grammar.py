"""Random tables and rows: every Iceberg type icesink accepts, nested up to depth 3, hostile names, null,
empty, holding nulls and full values, uuids in any spelling."""

from __future__ import annotations

import datetime
import decimal
import random
import uuid
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

UTC = datetime.UTC
# Names a user may pick: spaces, dots, %, /, letters beyond ASCII, and one that differs only in case.
NAMES = ("a", "b c", "d.e", "f%g", "h/i", "ü", "ключ", "Name", "name2", "x y%/ü", "v", "w.x y")
PRIMITIVES = (
    "boolean",
    "int",
    "long",
    "float",
    "double",
    "decimal(9, 2)",
    "decimal(22, 4)",
    "date",
    "time",
    "timestamp",
    "timestamptz",
    "string",
    "uuid",
    "fixed[3]",
    "binary",
)
# Spark 4.3 has a TIME type but its streams refuse it: histories through Spark draw from these.
SPARK_PRIMITIVES = tuple(p for p in PRIMITIVES if p != "time")
KEY_TYPES = ("int", "long", "string", "uuid", "date", "decimal(9, 2)")
MAP_KEY_TYPES = ("int", "long", "string", "date")


def iceberg_type(name: str) -> Any:
    from pyiceberg import types as t

    if name.startswith("decimal"):
        precision, scale = (int(p) for p in name[len("decimal(") : -1].split(","))
        return t.DecimalType(precision, scale)
    if name.startswith("fixed"):
        return t.FixedType(int(name[len("fixed[") : -1]))
    return {
        "boolean": t.BooleanType(),
        "int": t.IntegerType(),
        "long": t.LongType(),
        "float": t.FloatType(),
        "double": t.DoubleType(),
        "date": t.DateType(),
        "time": t.TimeType(),
        "timestamp": t.TimestampType(),
        "timestamptz": t.TimestamptzType(),
        "string": t.StringType(),
        "uuid": t.UUIDType(),
        "binary": t.BinaryType(),
    }[name]


class Ids:
    """Field ids for a new schema (the catalog assigns the final ones)."""

    def __init__(self) -> None:
        self.next = 1

    def take(self) -> int:
        self.next += 1
        return self.next


def random_type(rng: random.Random, ids: Ids, depth: int, primitives: tuple[str, ...] = PRIMITIVES) -> Any:
    """A primitive, or (while ``depth`` allows) a struct, list or map of random types."""
    from pyiceberg.types import ListType, MapType, NestedField, StructType

    roll = rng.random()
    if depth <= 0 or roll < 0.55:
        return iceberg_type(rng.choice(primitives))
    if roll < 0.75:
        names = rng.sample(NAMES, rng.randint(1, 3))
        members = []
        for name in names:
            field_id = ids.take()
            kind = random_type(rng, ids, depth - 1, primitives)
            members.append(NestedField(field_id, name, kind, required=rng.random() < 0.2))
        return StructType(*members)
    if roll < 0.88:
        element_id = ids.take()
        element = random_type(rng, ids, depth - 1, primitives)
        return ListType(element_id, element, element_required=rng.random() < 0.2)
    key = iceberg_type(rng.choice(MAP_KEY_TYPES))
    key_id, value_id = ids.take(), ids.take()
    value = random_type(rng, ids, depth - 1, primitives)
    return MapType(key_id, key, value_id, value, value_required=rng.random() < 0.2)


@dataclass(frozen=True)
class TableShape:
    """A random table: its schema, its key (field names, empty for appends) and its partition field."""

    schema: Any
    keys: tuple[str, ...]
    partition: str | None  # e.g. "bucket(4, id)"

    def describe(self) -> str:
        key = f" keyed on {list(self.keys)}" if self.keys else " (appends)"
        part = f", partitioned by {self.partition}" if self.partition else ""
        return f"{self.schema}{key}{part}"


def random_table(rng: random.Random, primitives: tuple[str, ...] = PRIMITIVES) -> TableShape:
    from pyiceberg.schema import Schema
    from pyiceberg.types import NestedField, StructType

    ids = Ids()
    keyed = rng.random() < 0.6
    names = rng.sample(NAMES, rng.randint(3, 6))
    fields = []
    keys: list[str] = []
    if keyed:
        for name in names[: rng.choice((1, 1, 2))]:
            keys.append(name)
            fields.append(NestedField(ids.take(), name, iceberg_type(rng.choice(KEY_TYPES)), required=True))
        if rng.random() < 0.25:  # a key inside a struct
            inner = rng.choice([n for n in NAMES if "." not in n])
            struct_name = names[len(keys)]
            key_type = iceberg_type(rng.choice(KEY_TYPES))
            fields.append(
                NestedField(
                    ids.take(), struct_name, StructType(NestedField(ids.take(), inner, key_type, required=True)), True
                )
            )
            keys.append(f"{struct_name}.{inner}")
    taken = {f.name for f in fields}
    for name in names:
        if name not in taken:
            field_id = ids.take()
            kind = random_type(rng, ids, 3, primitives)
            fields.append(NestedField(field_id, name, kind, required=rng.random() < 0.15))
    schema = Schema(*fields)
    partition = _random_partition(rng, schema, keys)
    return TableShape(schema, tuple(keys), partition)


def _random_partition(rng: random.Random, schema: Any, keys: list[str]) -> str | None:
    """Keyed tables partition only by key columns (equality deletes stay in their partition)."""
    if rng.random() < 0.4:
        return None
    candidates = []
    for field in schema.fields:
        if keys and field.name not in keys:
            continue
        kind = str(field.field_type)
        if not field.field_type.is_primitive:
            continue
        if kind in ("int", "long", "string") or kind.startswith("decimal"):
            candidates += [f"bucket(4, {field.name})", f"truncate(3, {field.name})", field.name]
        if kind in ("date", "timestamp", "timestamptz"):
            candidates += [f"day({field.name})", f"month({field.name})", field.name]
        if kind in ("uuid", "binary"):  # Iceberg buckets no boolean
            candidates += [f"bucket(3, {field.name})"]
    return rng.choice(candidates) if candidates else None


# --- values ---------------------------------------------------------------------------------------------------------


def random_value(rng: random.Random, kind: Any, required: bool) -> Any:
    """A value as a user's DataFrame would hold it: null, empty, holding nulls or full."""
    from pyiceberg.types import ListType, MapType, StructType

    if not required and rng.random() < 0.2:
        return None
    if isinstance(kind, StructType):
        return {f.name: random_value(rng, f.field_type, f.required) for f in kind.fields}
    if isinstance(kind, ListType):
        size = rng.choice((0, 0, 1, 2, 3))
        return [random_value(rng, kind.element_type, kind.element_required) for _ in range(size)]
    if isinstance(kind, MapType):
        size = rng.choice((0, 0, 1, 2, 3))
        keys = {}
        for _ in range(size):
            key = random_primitive(rng, str(kind.key_type))
            keys[repr(key)] = key
        return [(k, random_value(rng, kind.value_type, kind.value_required)) for k in keys.values()]
    return random_primitive(rng, str(kind))


def random_primitive(rng: random.Random, kind: str, small: bool = False) -> Any:
    """``small`` draws from few values, so that keys repeat; otherwise, now and then, an extreme one."""
    if not small and rng.random() < 0.15:
        wide = _extreme(rng, kind)
        if wide is not None:
            return wide
    spread = 6 if small else 10**6
    n = rng.randrange(-spread, spread)
    if kind == "boolean":
        return n % 2 == 0
    if kind in ("int", "long"):
        return n if kind == "int" else n * 1_000_003
    if kind == "float":
        return n / 8  # exact in the float32 the input holds
    if kind == "double":
        return n / 7  # most need all 64 bits: a double squeezed through 32 shows
    if kind.startswith("decimal"):
        scale = int(kind.rstrip(")").split(",")[1])
        return decimal.Decimal(n).scaleb(-scale, WIDE)
    if kind == "date":
        return datetime.date(2000, 1, 1) + datetime.timedelta(days=n % 40_000 - 20_000)
    if kind == "time":
        return (datetime.datetime(2000, 1, 1) + datetime.timedelta(microseconds=abs(n) * 86_399)).time()
    if kind in ("timestamp", "timestamptz"):
        at = datetime.datetime(2000, 1, 1) + datetime.timedelta(microseconds=n * 123_456_789)
        return at.replace(tzinfo=UTC) if kind == "timestamptz" else at
    if kind == "string":
        return rng.choice(("", "ü %/x", "a", "A", "naïve", "日本")) + (str(n) if n % 3 else "")
    if kind == "uuid":
        text = str(uuid.UUID(int=(n * 0x9E3779B97F4A7C15) % 2**128))
        return text.upper() if rng.random() < 0.5 else text  # one value, two spellings
    if kind.startswith("fixed"):
        width = int(kind[len("fixed[") : -1])
        return bytes((n + i) % 256 for i in range(width))
    if kind == "binary":
        return bytes(abs(n) % 256 for _ in range(abs(n) % 4))
    raise ValueError(kind)


def _extreme(rng: random.Random, kind: str) -> Any:
    """The edges of a type: its largest and smallest values, every digit of a decimal, doubles that need all
    64 bits, NaN and the infinities."""
    import math
    import struct

    if kind == "int":
        return rng.choice((2**31 - 1, -(2**31), 0))
    if kind == "long":
        return rng.choice((2**63 - 1, -(2**63), 2**53 + 1))
    if kind == "double":
        return rng.choice((math.nan, math.inf, -math.inf, -0.0, 1.7976931348623157e308, 5e-324, 1 / 3, 0.1))
    if kind == "float":  # what a float32 holds exactly: the input is float32 before icesink sees it
        chosen = rng.choice((math.nan, math.inf, -math.inf, 3.4028234663852886e38, 1.401298464324817e-45, 0.1))
        return struct.unpack("<f", struct.pack("<f", chosen))[0]
    if kind.startswith("decimal"):
        precision, scale = (int(p) for p in kind[len("decimal(") : -1].split(","))
        unscaled = rng.choice((10**precision - 1, -(10**precision - 1), rng.randrange(10**precision)))
        return decimal.Decimal(unscaled).scaleb(-scale, WIDE)  # the default context keeps 28 digits
    return None


WIDE = decimal.Context(prec=80)


def input_type(kind: Any) -> pa.DataType:
    """The Arrow type a Spark DataFrame would hand over for an Iceberg type (uuid as text, fixed as binary)."""
    from pyiceberg.types import ListType, MapType, StructType

    if isinstance(kind, StructType):
        return pa.struct([pa.field(f.name, input_type(f.field_type)) for f in kind.fields])
    if isinstance(kind, ListType):
        return pa.list_(input_type(kind.element_type))
    if isinstance(kind, MapType):
        return pa.map_(input_type(kind.key_type), input_type(kind.value_type))
    name = str(kind)
    if name.startswith("decimal"):
        precision, scale = (int(p) for p in name[len("decimal(") : -1].split(","))
        return pa.decimal128(precision, scale)
    if name.startswith("fixed") or name == "binary":
        return pa.binary()
    return {
        "boolean": pa.bool_(),
        "int": pa.int32(),
        "long": pa.int64(),
        "float": pa.float32(),
        "double": pa.float64(),
        "date": pa.date32(),
        "time": pa.time64("us"),
        "timestamp": pa.timestamp("us"),
        "timestamptz": pa.timestamp("us", tz="UTC"),
        "string": pa.string(),
        "uuid": pa.string(),
    }[name]
