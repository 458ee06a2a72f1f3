"""The columns a change stream adds to a table's: what changed, in which commit, and the names joins use."""

from __future__ import annotations

from collections.abc import Mapping

import pyarrow as pa

from icesink.arrays import FieldStep

KeyPaths = Mapping[str, tuple[FieldStep, ...]]  # key name → where it is, inside structs or not

CHANGE_TYPE = "_change_type"
CHANGE_ORDINAL = "_change_ordinal"
COMMIT_SNAPSHOT_ID = "_commit_snapshot_id"
COMMIT_TIMESTAMP = "_commit_timestamp"
# With the option with-watermark: the source table's watermark as of the commit (icesink.watermark), so that a
# stream of the changes can take its own watermark from it (icesink.stream(..., watermark_from=...)).
COMMIT_WATERMARK = "_commit_watermark"
WATERMARK_FIELD = pa.field(COMMIT_WATERMARK, pa.timestamp("us", tz="UTC"), nullable=True)
INSERT, DELETE, UPDATE_BEFORE, UPDATE_AFTER = "insert", "delete", "update_before", "update_after"
CHANGE_FIELDS = pa.schema(
    [
        pa.field(CHANGE_TYPE, pa.string(), nullable=False),
        pa.field(CHANGE_ORDINAL, pa.int64(), nullable=False),
        pa.field(COMMIT_SNAPSHOT_ID, pa.int64(), nullable=False),
        pa.field(COMMIT_TIMESTAMP, pa.timestamp("us", tz="UTC"), nullable=False),
    ]
)
# Row numbers carried through joins of old and new rows.
JOIN_ROW = "__icesink_row"
JOIN_SIDE = "__icesink_side"
