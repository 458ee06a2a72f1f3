"""Whether two rows are the same, as a join on every column decides: a copy-on-write rewrite's rows copied
unchanged, and a key whose net change over a range leaves its row as it was, are no change."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from icesink.arrays import repeated
from icesink.iceberg.deletes import comparable_keys


def same_rows(left: pa.Table, right: pa.Table) -> pa.Array:
    """Whether each row of ``left`` equals the row of ``right`` at its index, as a join on every column decides
    (null equal to null, floats by their bits: NaN equal to NaN, -0.0 not to 0.0; nested values by their text)."""
    names = list(left.column_names)
    ours, _ = comparable_keys(joinable(left), names)
    theirs, _ = comparable_keys(joinable(right), names)
    same = repeated(True, ours.num_rows)
    for mine, other in zip(ours.columns, theirs.columns, strict=True):
        other = other if other.type == mine.type else other.cast(mine.type)
        if pa.types.is_floating(mine.type):
            bits = np.dtype(f"int{mine.type.bit_width}")
            equal = pa.array(mine.to_numpy().view(bits) == other.to_numpy().view(bits))
        else:
            equal = pc.equal(mine, other)
        same = pc.and_(same, equal)
    return same


def joinable(rows: pa.Table) -> pa.Table:
    """``rows`` with each struct, list and map column as text Arrow can join on.

    Arrow joins only primitive keys; comparing whole rows (copy-on-write
    rewrites, which icesink's own commits never make) is rare enough for a
    value-by-value spelling.
    """
    import json

    for index, field in enumerate(rows.schema):
        if pa.types.is_nested(field.type):
            text = [
                None if v is None else json.dumps(v, sort_keys=True, default=str)
                for v in rows.column(index).to_pylist()
            ]
            rows = rows.set_column(index, field.name, pa.array(text, pa.string()))
    return rows
