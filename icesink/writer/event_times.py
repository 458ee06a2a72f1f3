"""What a write task sees of a stream's event times: per split, the latest event time and the late rows.

It runs on the rows as they reach the task (before they are fitted to the table), so a stream's watermark
costs no pass of its own over the data: one grouped aggregate per Arrow batch.
"""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.compute as pc

from icesink.completeness.watermark import MAX_MICROS, MIN_MICROS
from icesink.errors import BadRowError
from icesink.results import SplitTimes
from icesink.writer.spec import EventTimeSpec

_MICROS_PER_DAY = 86_400_000_000
# Rows whose split values and times wait to be grouped together: about 16 bytes each, so a few MiB per task.
GROUP_ROWS = 262_144


def event_micros(array: pa.Array | pa.ChunkedArray, table: str, column: str) -> pa.ChunkedArray:
    """A timestamp or date column as int64 microseconds since the epoch (a zone-less timestamp read as UTC)."""
    kind = array.type
    if pa.types.is_timestamp(kind):
        as_micros = pc.cast(array, pa.timestamp("us", tz=kind.tz), safe=False)  # nanoseconds truncate
        return pc.cast(as_micros, pa.int64())
    if pa.types.is_date(kind):
        days = pc.cast(pc.cast(array, pa.date32()), pa.int32())
        return pc.multiply_checked(pc.cast(days, pa.int64()), pa.scalar(_MICROS_PER_DAY, pa.int64()))
    raise BadRowError(
        f"table {table}: event_time column {column!r} holds {kind}, not a timestamp or a date; convert it in the "
        "DataFrame (e.g. F.timestamp_millis for epoch milliseconds)"
    )


class EventTimes:
    """The event times one task has seen so far, per split."""

    def __init__(self, spec: EventTimeSpec, table: str) -> None:
        self._spec = spec
        self._table = table
        self._splits: dict[str, list[int | None]] = {}  # split → [latest, rows, late, untimed]
        self._keys = [f"k{i}" for i in range(len(spec.split_columns))]
        self._pending: list[pa.Table] = []  # split values, times and late flags not yet grouped
        self._pending_rows = 0

    def observe(self, batch: pa.RecordBatch | pa.Table) -> None:
        if batch.num_rows == 0:
            return
        spec = self._spec
        rows = batch if isinstance(batch, pa.Table) else pa.Table.from_batches([batch])
        low = high = None
        try:
            micros = event_micros(rows.column(spec.column), self._table, spec.column)
            bounds = pc.min_max(micros)
            low, high = bounds["min"].as_py(), bounds["max"].as_py()
            within = low is None or (low >= MIN_MICROS and high <= MAX_MICROS)
        except pa.ArrowInvalid:  # a date whose microseconds overflow
            within = False
        if not within:
            raise BadRowError(
                f"table {self._table}: event_time column {spec.column!r} holds a time outside the years 1 to 9999, "
                "which no watermark can be; fix or filter such rows in the DataFrame. Nothing was written"
            )
        late_before = spec.late_before
        split = _one_split([rows.column(name) for name in spec.split_columns])
        if split is not None:
            # No split columns, or one split in the whole batch: Spark's Kafka source reads each topic partition
            # in a task of its own, so a batch of rows is nearly always one split's, and needs no grouping.
            late_rows = 0
            if late_before is not None and low is not None and low < late_before:
                late_rows = int(pc.sum(pc.less(micros, pa.scalar(late_before, pa.int64()))).as_py() or 0)
            if spec.watermark_column is not None:  # the watermark follows the upstream's, not the event times
                high = pc.max(event_micros(rows.column(spec.watermark_column), self._table, spec.watermark_column))
                high = high.as_py()
            self._add(split, high, rows.num_rows, late_rows, micros.null_count)
            return
        if late_before is None or low is None or low >= late_before:
            late = pa.repeat(pa.scalar(0, pa.int64()), rows.num_rows)  # no row of the batch is late
        else:
            late = pc.cast(pc.fill_null(pc.less(micros, pa.scalar(late_before, pa.int64())), False), pa.int64())
        columns = {**{key: rows.column(name) for key, name in zip(self._keys, spec.split_columns, strict=True)}}
        self._pending.append(pa.table({**columns, "t": micros, "late": late}))
        self._pending_rows += rows.num_rows
        if self._pending_rows >= GROUP_ROWS:
            self._group()

    def _group(self) -> None:
        """The pending rows' times per split, in one grouped aggregate (one per batch costs twice as much)."""
        if not self._pending:
            return
        frame = pa.concat_tables(self._pending)
        self._pending, self._pending_rows = [], 0
        grouped = frame.group_by(self._keys, use_threads=False).aggregate(
            [("t", "max"), ("t", "count"), ([], "count_all"), ("late", "sum")]
        )
        for row in grouped.to_pylist():
            split = _split_name([row[k] for k in self._keys])
            total = row["count_all"]
            self._add(split, row["t_max"], total, row["late_sum"] or 0, total - row["t_count"])

    def _add(self, split: str, latest: int | None, rows: int, late: int, untimed: int) -> None:
        known = self._splits.get(split)
        if known is None:
            self._splits[split] = [latest, rows, late, untimed]
            return
        if latest is not None and (known[0] is None or latest > known[0]):
            known[0] = latest
        known[1] = (known[1] or 0) + rows
        known[2] = (known[2] or 0) + late
        known[3] = (known[3] or 0) + untimed

    def results(self) -> tuple[SplitTimes, ...]:
        self._group()
        return tuple(
            SplitTimes(split, latest, rows or 0, late or 0, untimed or 0)
            for split, (latest, rows, late, untimed) in sorted(self._splits.items())
        )


def _split_name(values: list[object]) -> str:
    """A split as the watermark's state names it: its values, as JSON."""
    return json.dumps(values, default=str, ensure_ascii=False, separators=(",", ":"))


def _one_split(columns: list[pa.ChunkedArray]) -> str | None:
    """The name of the one split every row of a batch is in (``[]`` without split columns); None when the rows are
    in several."""
    values: list[object] = []
    for column in columns:
        if len(column) == 0:
            return None
        if column.null_count == len(column):
            values.append(None)
            continue
        if column.null_count or pa.types.is_floating(column.type):  # NaN is no value min or max would name
            return None
        try:
            bounds = pc.min_max(column)
        except pa.ArrowNotImplementedError:  # a type without an order: grouped like any batch
            return None
        low, high = bounds["min"], bounds["max"]
        if low != high:
            return None
        values.append(column[0].as_py())
    return _split_name(values)
