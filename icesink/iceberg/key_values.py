"""Key values in the forms Iceberg bounds and Parquet statistics and bloom filters hold them.

Pruning compares a deleted key with a file's or row group's bounds, and hashes it as a bloom filter
does; this module says how each Iceberg type's values are put in those forms, and which types have an
order to trust.
"""

from __future__ import annotations

import json
import struct
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from pyiceberg import types as t

from icesink.writer.metrics import unscaled

if TYPE_CHECKING:
    from pyiceberg.types import IcebergType

# How a type's values compare with bounds: as integers (also dates, times, timestamps in microseconds,
# decimals unscaled, booleans) or as unsigned bytes (UTF-8 strings, binary, fixed). Floating point keys
# (NaN, -0.0) and UUIDs (implementations have ordered them differently) are not compared.
INTEGERS, BYTES = "integers", "bytes"


def order_of(kind: IcebergType) -> str | None:
    integers = (t.IntegerType, t.LongType, t.DateType, t.TimeType, t.TimestampType, t.TimestamptzType)
    if isinstance(kind, (*integers, t.DecimalType, t.BooleanType)):
        return INTEGERS
    if isinstance(kind, (t.StringType, t.BinaryType, t.FixedType)):
        return BYTES
    return None


def bound_form(kind: IcebergType, values: pa.Array) -> list[Any]:
    """Values as the bounds of their type decode: integers, or bytes."""

    if isinstance(kind, t.DecimalType):
        return [unscaled(v, kind.scale) for v in values.to_pylist()]
    if isinstance(kind, t.BooleanType):
        return [int(v) for v in values.to_pylist()]
    if isinstance(kind, (t.TimeType, t.TimestampType, t.TimestamptzType)):
        if pa.types.is_timestamp(values.type) and values.type.unit != "us":
            values = values.cast(pa.timestamp("us", values.type.tz))
        return values.cast(pa.int64()).to_pylist()  # type: ignore[no-any-return]
    if isinstance(kind, t.DateType):
        return values.cast(pa.int32()).to_pylist()  # type: ignore[no-any-return]
    if isinstance(kind, t.StringType):
        return [v.encode("utf-8") for v in values.to_pylist()]
    return values.to_pylist()  # type: ignore[no-any-return]


def decode_bound(kind: IcebergType, raw: bytes | None) -> Any:
    """An Iceberg single-value bound in the form of :func:`_bound_form` (None: none, or not one to trust)."""

    if raw is None:
        return None
    if isinstance(kind, t.DecimalType):
        return int.from_bytes(raw, "big", signed=True)
    if isinstance(kind, t.BooleanType):
        return raw[0] if len(raw) == 1 else None
    if isinstance(kind, (t.IntegerType, t.DateType)):
        return struct.unpack("<i", raw)[0] if len(raw) == 4 else None
    if isinstance(kind, t.LongType):
        # A long column promoted from int keeps its older files' 4-byte bounds.
        return struct.unpack("<i" if len(raw) == 4 else "<q", raw)[0] if len(raw) in (4, 8) else None
    if order_of(kind) == INTEGERS:
        # Times and timestamps are 8 bytes; a 4-byte timestamp bound is a date (format 3's promotion): unused.
        return struct.unpack("<q", raw)[0] if len(raw) == 8 else None
    return bytes(raw)


def plain_encodings(kind: IcebergType, values: pa.Array, column: Any) -> list[bytes] | None:
    """Each value as Parquet's plain encoding of the column writes it (bloom filters hash that)."""

    physical, width = column.physical_type, column.length or 0
    if isinstance(kind, (t.IntegerType, t.DateType)) and physical == "INT32":
        return [struct.pack("<i", v) for v in bound_form(kind, values)]
    if isinstance(kind, (t.TimeType, t.TimestampType, t.TimestamptzType)):
        unit = json.loads(column.logical_type.to_json()).get("timeUnit")
        if physical != "INT64" or unit != "microseconds":
            return None
        return [struct.pack("<q", v) for v in bound_form(kind, values)]
    if isinstance(kind, (t.IntegerType, t.LongType)) and physical == "INT64":
        return [struct.pack("<q", v) for v in bound_form(kind, values)]
    if isinstance(kind, (t.StringType, t.BinaryType)) and physical == "BYTE_ARRAY":
        return bound_form(kind, values)
    if isinstance(kind, (t.FixedType, t.UUIDType)) and physical == "FIXED_LEN_BYTE_ARRAY":
        raw = values.storage if isinstance(values.type, pa.BaseExtensionType) else values
        encoded = [bytes(v) for v in raw.to_pylist()]
        return encoded if all(len(v) == width for v in encoded) else None
    return None
