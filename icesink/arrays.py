"""Arrow arrays icesink builds often, built in C++ rather than from Python lists (millions of rows)."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc


def repeated(value: int | bool, length: int) -> pa.Array:
    """``value`` ``length`` times (int64 or bool)."""
    kind = pa.bool_() if isinstance(value, bool) else pa.int64()
    return pa.repeat(pa.scalar(value, kind), length)


def positions(length: int) -> pa.Array:
    """0, 1, …, length - 1 as int64."""
    if length == 0:
        return pa.array([], pa.int64())
    return pc.subtract(pc.cumulative_sum(repeated(1, length)), 1)
