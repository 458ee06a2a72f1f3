"""Column metrics of a data file, in Iceberg's manifest representation.

Bounds use Iceberg's single-value binary serialisation and the default
``truncate(16)`` metrics mode for strings and binary: a lower bound is a
prefix, an upper bound a prefix whose last character was incremented, so that
readers can still prune by them.
"""

from __future__ import annotations

import decimal
import struct
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from icesink.writer.spec import ColumnSpec

TRUNCATE_LENGTH = 16


# Decimals reach 38 digits; the default context's 28 would round the unscaled value (and so the bound).
_EXACT = decimal.Context(prec=100)


def unscaled(value: decimal.Decimal, scale: int) -> int:
    """A decimal's unscaled integer at ``scale`` (``1.50`` at scale 2: 150), exact at every precision."""
    return int(value.scaleb(scale, _EXACT))


def _decimal_bytes(value: decimal.Decimal, scale: int) -> bytes:
    unscaled_value = unscaled(value, scale)
    length = max(1, (unscaled_value.bit_length() + 8) // 8)
    return unscaled_value.to_bytes(length, "big", signed=True)


def to_bound_bytes(iceberg_type: str, value: Any) -> bytes:
    """Serialise one value as Iceberg's single-value binary form."""
    if iceberg_type == "boolean":
        return b"\x01" if value else b"\x00"
    if iceberg_type in ("int", "date"):
        return struct.pack("<i", value)
    if iceberg_type in ("long", "timestamp", "timestamptz", "time"):
        return struct.pack("<q", value)
    if iceberg_type == "float":
        return struct.pack("<f", value)
    if iceberg_type == "double":
        return struct.pack("<d", value)
    if iceberg_type == "string":
        return value.encode("utf-8")  # type: ignore[no-any-return]
    if iceberg_type == "binary" or iceberg_type.startswith("fixed"):
        return bytes(value)
    if iceberg_type.startswith("decimal"):
        scale = int(iceberg_type.rstrip(")").split(",")[1])
        return _decimal_bytes(value, scale)
    raise ValueError(f"no bound serialisation for {iceberg_type}")


def truncate_upper_string(value: str, length: int = TRUNCATE_LENGTH) -> str | None:
    """Smallest string of at most ``length`` code points that is >= every string with ``value``'s prefix."""
    if len(value) <= length:
        return value
    chars = list(value[:length])
    while chars:
        code = ord(chars[-1]) + 1
        if 0xD800 <= code <= 0xDFFF:
            code = 0xE000
        if code <= 0x10FFFF:
            chars[-1] = chr(code)
            return "".join(chars)
        chars.pop()
    return None


def truncate_upper_binary(value: bytes, length: int = TRUNCATE_LENGTH) -> bytes | None:
    if len(value) <= length:
        return value
    buf = bytearray(value[:length])
    while buf:
        if buf[-1] < 0xFF:
            buf[-1] += 1
            return bytes(buf)
        buf.pop()
    return None


def _comparable(array: pa.ChunkedArray | pa.Array, iceberg_type: str) -> pa.ChunkedArray | pa.Array:
    # Compare temporal values as their stored integers: that is also what the bound holds.
    if iceberg_type in ("timestamp", "timestamptz", "time"):
        return array.cast(pa.int64())
    if iceberg_type == "date":
        return array.cast(pa.int32())
    return array


def leaf_arrays(column: ColumnSpec, array: pa.ChunkedArray | pa.Array) -> Iterator[tuple[ColumnSpec, pa.Array]]:
    """Each primitive field under ``column`` with its values: a struct's nulls count as nulls of its fields,
    a list's or map's values are its entries."""
    for chunk in array.chunks if isinstance(array, pa.ChunkedArray) else (array,):
        yield from _leaves(column, chunk)


def _leaves(column: ColumnSpec, array: pa.Array) -> Iterator[tuple[ColumnSpec, pa.Array]]:
    kind = column.iceberg_type
    if kind == "struct":
        # flatten() gives each field the struct's own nulls as well.
        for child, values in zip(column.children, array.flatten(), strict=True):
            yield from _leaves(child, values)
        return
    if kind in ("list", "map"):
        offsets = array.offsets
        start, length = offsets[0].as_py(), offsets[-1].as_py() - offsets[0].as_py()
        if kind == "list":
            yield from _leaves(column.children[0], array.values.slice(start, length))
        else:
            key, value = column.children
            yield from _leaves(key, array.keys.slice(start, length))
            yield from _leaves(value, array.items.slice(start, length))
        return
    yield column, array


@dataclass
class ColumnStats:
    """Running metrics of one primitive field over the row groups of one file.

    ``bounded`` is false inside lists and maps, where Iceberg keeps counts but no bounds.
    """

    column: ColumnSpec
    null_count: int = 0
    nan_count: int = 0
    lower: Any = None
    upper: Any = None
    value_count: int = 0
    bounded: bool = True

    def update(self, array: pa.ChunkedArray | pa.Array) -> None:
        self.null_count += array.null_count
        self.value_count += len(array)
        kind = self.column.iceberg_type
        if kind in ("float", "double"):
            nan = pc.is_nan(array)
            nan_count = pc.sum(nan).as_py() or 0
            if nan_count:
                self.nan_count += nan_count
                array = pc.filter(array, pc.invert(nan))
        if kind == "uuid" or not self.bounded:
            # No bounds: Iceberg implementations have ordered UUIDs differently (signed vs unsigned),
            # and a bound read in the other order would prune files that hold matches.
            return
        values = _comparable(array, kind)
        minmax = pc.min_max(values)
        low, high = minmax["min"].as_py(), minmax["max"].as_py()
        if low is None:
            return
        if self.lower is None or low < self.lower:
            self.lower = low
        if self.upper is None or high > self.upper:
            self.upper = high

    def bounds(self) -> tuple[bytes | None, bytes | None]:
        if self.lower is None:
            return None, None
        kind = self.column.iceberg_type
        lower, upper = self.lower, self.upper
        if kind == "string":
            lower = lower[:TRUNCATE_LENGTH]
            upper = truncate_upper_string(upper)
        elif kind == "binary":
            lower = lower[:TRUNCATE_LENGTH]
            upper = truncate_upper_binary(upper)
        return (
            to_bound_bytes(kind, lower),
            None if upper is None else to_bound_bytes(kind, upper),
        )


@dataclass
class FileMetrics:
    """Metrics of every primitive field of one file, fed row group by row group, keyed by field id."""

    columns: tuple[ColumnSpec, ...]
    record_count: int = 0
    stats: dict[int, ColumnStats] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.stats = {
            leaf.column.field_id: ColumnStats(leaf.column, bounded=not leaf.in_repeated)
            for column in self.columns
            for leaf in column.leaves()
        }

    def update(self, table: pa.Table) -> None:
        self.record_count += table.num_rows
        for column in self.columns:
            for leaf, values in leaf_arrays(column, table.column(column.name)):
                self.stats[leaf.field_id].update(values)

    def value_counts(self) -> dict[int, int]:
        return {fid: s.value_count for fid, s in self.stats.items()}

    def null_value_counts(self) -> dict[int, int]:
        return {fid: s.null_count for fid, s in self.stats.items()}

    def nan_value_counts(self) -> dict[int, int]:
        return {fid: s.nan_count for fid, s in self.stats.items() if s.column.iceberg_type in ("float", "double")}

    def bounds(self) -> tuple[dict[int, bytes], dict[int, bytes]]:
        lowers: dict[int, bytes] = {}
        uppers: dict[int, bytes] = {}
        for fid, s in self.stats.items():
            low, high = s.bounds()
            if low is not None:
                lowers[fid] = low
            if high is not None:
                uppers[fid] = high
        return lowers, uppers
