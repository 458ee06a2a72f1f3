"""Columns whose Iceberg type Spark does not have, filled from the type a user would naturally use.

==================  =====================================  ===================================
Iceberg type        DataFrame column                       checked on every row
==================  =====================================  ===================================
``uuid``            ``string`` (``8-4-4-4-12`` hex) or     canonical form / 16 bytes
                    ``binary`` of 16 bytes
``fixed[n]``        ``binary``                             exactly ``n`` bytes
``time``            ``time`` (Spark 4's ``TimeType``)       whole microseconds
==================  =====================================  ===================================

Every check and conversion runs over whole Arrow arrays; no value passes
through Python on its own.
"""

from __future__ import annotations

import re

import pyarrow as pa
import pyarrow.compute as pc

_UUID_TEXT = r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$"
_FIXED = re.compile(r"fixed\[(\d+)\]")
_ZERO_UUID = "00000000000000000000000000000000"


class BadValues(ValueError):
    """Rows whose values the column's type cannot hold; the message says which and why."""


def needs_conversion(iceberg_type: str) -> bool:
    return iceberg_type in ("uuid", "time") or _FIXED.fullmatch(iceberg_type) is not None


def placeholder(iceberg_type: str, kind: pa.DataType) -> pa.Scalar:
    """A value of input type ``kind`` that converts to ``iceberg_type``: what stands where no value is read."""
    if iceberg_type == "uuid":
        text = pa.types.is_string(kind) or pa.types.is_large_string(kind) or pa.types.is_string_view(kind)
        return pa.scalar("00000000-0000-0000-0000-000000000000" if text else b"\0" * 16, kind)
    fixed = _FIXED.fullmatch(iceberg_type)
    if fixed:
        return pa.scalar(b"\0" * int(fixed.group(1)), kind)
    return pa.array([0], pa.int64()).cast(kind)[0]  # time


def stand_in(kind: pa.DataType) -> pa.Scalar:
    """Any valid value of Arrow type ``kind``: what a required field holds where no struct above has a value."""
    if pa.types.is_list(kind) or pa.types.is_large_list(kind) or pa.types.is_map(kind):
        return pa.scalar([], kind)
    if pa.types.is_string(kind) or pa.types.is_large_string(kind):
        return pa.scalar("", kind)
    if pa.types.is_fixed_size_binary(kind):
        return pa.scalar(b"\0" * kind.byte_width, kind)
    if pa.types.is_binary(kind) or pa.types.is_large_binary(kind):
        return pa.scalar(b"", kind)
    if isinstance(kind, pa.BaseExtensionType):  # uuid
        return pa.ExtensionScalar.from_storage(kind, stand_in(kind.storage_type).as_py())
    if pa.types.is_boolean(kind):
        return pa.scalar(False)
    if pa.types.is_decimal(kind):
        import decimal

        return pa.scalar(decimal.Decimal(0), kind)
    # Numbers, dates, times and timestamps: zero of their width (Arrow casts no int64 to a 32-bit date or time).
    width = pa.int32() if kind.bit_width == 32 else pa.int64()
    return pa.array([0], width).cast(kind)[0]


def convert(array: pa.Array | pa.ChunkedArray, iceberg_type: str, wanted: pa.DataType) -> pa.Array:
    """``array`` as ``wanted`` (the Arrow type of ``iceberg_type``), or :class:`BadValues`."""
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks()
    if iceberg_type == "uuid":
        kind = array.type
        if pa.types.is_string(kind) or pa.types.is_large_string(kind) or pa.types.is_string_view(kind):
            storage = _uuid_bytes_from_text(array.cast(pa.string()))
        else:
            storage = _exact_width(array, 16, "uuid")
        return pa.ExtensionArray.from_storage(pa.uuid(), storage)
    fixed = _FIXED.fullmatch(iceberg_type)
    if fixed:
        return _exact_width(array, int(fixed.group(1)), iceberg_type)
    if iceberg_type == "time":
        try:
            return array.cast(wanted)  # safe cast: refuses to drop sub-microsecond digits
        except pa.ArrowInvalid as e:
            ticks = array.cast(pa.int64())
            lossy = pc.not_equal(pc.multiply(pc.divide(ticks, 1000), 1000), ticks)
            wrong = pc.sum(lossy).as_py() or 0
            index = pc.index(lossy, True).as_py()
            raise BadValues(
                f"{wrong} value(s) have digits below a microsecond, which Iceberg's time cannot hold (the first, "
                f"row {index}, is {array[index].as_py()}); round them to microseconds"
            ) from e
    return array.cast(wanted)


def _exact_width(array: pa.Array, width: int, what: str) -> pa.Array:
    if pa.types.is_fixed_size_binary(array.type) and array.type.byte_width == width:
        return array
    lengths = pc.binary_length(array)
    wrong = pc.sum(pc.not_equal(lengths, width)).as_py() or 0
    if wrong:
        index = pc.index(pc.not_equal(lengths, width), True).as_py()
        raise BadValues(
            f"{wrong} value(s) are not exactly {width} bytes long, as {what} needs (the first, row {index}, has "
            f"{lengths[index].as_py()})"
        )
    return array.cast(pa.binary(width))


def _uuid_bytes_from_text(text: pa.Array) -> pa.Array:
    """Canonical UUID strings as 16-byte values, in one hex decode of the whole column."""
    canonical = pc.match_substring_regex(text, _UUID_TEXT)
    wrong = pc.sum(pc.invert(canonical)).as_py() or 0  # nulls stay null and are not counted
    if wrong:
        index = pc.index(pc.invert(canonical), True).as_py()
        raise BadValues(
            f"{wrong} value(s) are not UUIDs written as 8-4-4-4-12 hex digits (the first, row {index}, is "
            f"{text[index].as_py()!r})"
        )
    digits = pc.replace_substring(pc.fill_null(text, _ZERO_UUID), "-", "")
    offsets = pa.Array.from_buffers(pa.int32(), len(digits) + 1, [None, digits.buffers()[1]], offset=digits.offset)
    start, end = offsets[0].as_py(), offsets[-1].as_py()
    raw = bytes.fromhex(digits.buffers()[2].to_pybytes()[start:end].decode("ascii"))
    storage = pa.FixedSizeBinaryArray.from_buffers(pa.binary(16), len(text), [None, pa.py_buffer(raw)])
    if text.null_count:
        storage = pc.if_else(pc.is_valid(text), storage, pa.scalar(None, pa.binary(16)))
    return storage
