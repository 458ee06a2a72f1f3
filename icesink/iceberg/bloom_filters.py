"""Parquet's split-block bloom filters, read and probed (pyarrow writes them but cannot read them).

A column chunk's filter is a Thrift header (compact protocol) followed by a
bitset of 32-byte blocks. A value's 64-bit xxHash (seed 0, of its plain
encoding) picks a block with its upper half and eight bits of it with its
lower half; the value may be in the chunk only if all eight are set. A filter
never says no to a value it holds, which is all that pruning needs: anything
unexpected in a header reads as "may hold".
"""

from __future__ import annotations

from typing import BinaryIO

import numpy as np
import xxhash

_SALT = np.array(
    [0x47B6137B, 0x44974D91, 0x8824AD5B, 0xA2B7289D, 0x705495C7, 0x2DF1424B, 0x9EFC4947, 0x5C6BFB31], dtype=np.uint32
)
_HEADER_READ = 64  # more than a header of the spec's fields takes
_MAX_BYTES = 128 * 1024 * 1024  # the spec's limit; a larger size means a header we misread


def hashes(encoded: list[bytes]) -> np.ndarray:
    """xxHash64 (seed 0) of each value's plain encoding."""

    return np.fromiter((xxhash.xxh64_intdigest(b) for b in encoded), dtype=np.uint64, count=len(encoded))


def read_bitset(stream: BinaryIO, offset: int, length: int | None) -> np.ndarray | None:
    """The filter's blocks (n × 8 words) at ``offset``, or None if it is not one this module can probe."""
    stream.seek(offset)
    head = stream.read(length if length else _HEADER_READ)
    parsed = _header(head)
    if parsed is None:
        return None
    size, start = parsed
    body = head[start : start + size]
    if len(body) < size:
        stream.seek(offset + start)
        body = stream.read(size)
    if len(body) != size or size % 32:
        return None
    return np.frombuffer(body, dtype="<u4").reshape(-1, 8)


def may_hold_any(blocks: np.ndarray, value_hashes: np.ndarray) -> bool:
    """Whether the filter may hold at least one of the values."""
    if len(value_hashes) == 0:
        return False
    count = np.uint64(len(blocks))
    index = ((value_hashes >> np.uint64(32)) * count) >> np.uint64(32)
    key = (value_hashes & np.uint64(0xFFFFFFFF)).astype(np.uint32)
    with np.errstate(over="ignore"):
        bits = np.left_shift(np.uint32(1), (key[:, None] * _SALT[None, :]) >> np.uint32(27))
    words = blocks[index.astype(np.int64)]
    return bool(np.any(np.all((words & bits) != 0, axis=1)))


def _header(data: bytes) -> tuple[int, int] | None:
    """(bitset size, header length) of a BloomFilterHeader with the split-block algorithm, xxHash and no
    compression; None for anything else."""
    reader = _Compact(data)
    try:
        fields = reader.struct()
    except (IndexError, ValueError):
        return None
    size = fields.get(1)
    # Each of algorithm, hash and compression is a union whose member 1 is the one the spec defines.
    if not isinstance(size, int) or not 0 < size <= _MAX_BYTES:
        return None
    if any(fields.get(f) != {1: {}} for f in (2, 3, 4)):
        return None
    return size, reader.position


class _Compact:
    """Just enough of Thrift's compact protocol for a bloom filter header."""

    def __init__(self, data: bytes) -> None:
        self._data = data
        self.position = 0

    def _byte(self) -> int:
        value = self._data[self.position]
        self.position += 1
        return value

    def _varint(self) -> int:
        shift = result = 0
        while True:
            byte = self._byte()
            result |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return result
            shift += 7
            if shift > 63:
                raise ValueError("varint too long")

    def _zigzag(self) -> int:
        value = self._varint()
        return (value >> 1) ^ -(value & 1)

    def struct(self) -> dict[int, object]:
        fields: dict[int, object] = {}
        last = 0
        while True:
            head = self._byte()
            if head == 0:
                return fields
            delta, kind = head >> 4, head & 0x0F
            last = last + delta if delta else self._zigzag()
            fields[last] = self._value(kind)

    def _value(self, kind: int) -> object:
        if kind in (1, 2):  # booleans carry their value in the type
            return kind == 1
        if kind == 3:
            return self._byte()
        if kind in (4, 5, 6):
            return self._zigzag()
        if kind == 7:
            self.position += 8
            return None
        if kind == 8:
            length = self._varint()
            self.position += length
            return None
        if kind == 12:
            return self.struct()
        raise ValueError(f"unexpected thrift type {kind}")
