"""Late rows told apart from the rows on time, by one test, wherever it runs.

With ``late="dead_letter"`` a micro-batch's late rows are written by a job of their own (to the stream's
dead-letter table) while the table's write tasks leave them out: both decide with :func:`late_mask`, so every
row lands in exactly one of the two.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import TypeAlias

import pyarrow as pa
import pyarrow.compute as pc

from icesink.writer.event_times import event_micros
from icesink.writer.spec import EventTimeSpec

# The late row's event time in microseconds, added to what the dead-letter job's tasks hand back.
MICROS_COLUMN = "__icesink_event_micros"

Rows: TypeAlias = pa.RecordBatch | pa.Table


def late_mask(rows: Rows, spec: EventTimeSpec, table: str) -> pa.Array | pa.ChunkedArray | None:
    """Which rows arrived below the watermark the micro-batch started with (None: no watermark yet, so none
    did). A row without an event time is not late: nothing says when it happened."""
    if spec.late_before is None:
        return None
    micros = event_micros(rows.column(spec.column), table, spec.column)
    return pc.fill_null(pc.less(micros, pa.scalar(spec.late_before, pa.int64())), False)


def on_time_rows(rows: Rows, spec: EventTimeSpec, table: str) -> Rows:
    """``rows`` without the late ones."""
    late = late_mask(rows, spec, table)
    if late is None or not pc.any(late).as_py():
        return rows
    return rows.filter(pc.invert(late))


def late_rows_task(
    spec: EventTimeSpec, table: str, column_names: Sequence[str]
) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The ``mapInArrow`` function keeping only the late rows, each with its event time in microseconds.

    ``column_names`` are the real names of the incoming columns, by position (they come under placeholder
    names, which pyspark can look up whatever the real ones hold); the batches go back under the placeholders.
    """

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            named = batch.rename_columns(list(column_names))
            late = late_mask(named, spec, table)
            if late is None:
                continue
            kept = batch.filter(late)
            if kept.num_rows == 0:
                continue
            micros = event_micros(named.filter(late).column(spec.column), table, spec.column)
            yield kept.append_column(MICROS_COLUMN, micros)

    return run
