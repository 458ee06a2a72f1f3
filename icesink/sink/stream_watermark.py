"""The watermark of one stream on the driver: recovered from the ledger or the tables, folded per micro-batch.

The state a checkpoint ends with is staged with it (its snapshot properties), so that the committer records it
in the same commit as the data; the driver keeps it in memory only as a cache of what the ledger holds, and
reads it again whenever the micro-batch is not the one after the last it folded (a restart, a replay).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from icesink.completeness.watermark import (
    MIN_MICROS,
    SPLITS_CHECKPOINT_VALUE,
    WatermarkState,
    format_watermark,
    parse_watermark,
)
from icesink.iceberg.watermarks import decode_job_record, recorded_watermark, splits_table_property
from icesink.properties import (
    LATE_ROWS_PROPERTY,
    UNTIMED_ROWS_PROPERTY,
    WATERMARK_PROPERTY,
)

if TYPE_CHECKING:
    from pyiceberg.table import Table

    from icesink.catalog.ledger import Ledger
    from icesink.results import WriteResult
    from icesink.sink.event_time import EventTimeSettings
    from icesink.table_ref import TableRef

log = logging.getLogger("icesink.stream")


@dataclass(frozen=True)
class TableTimes:
    """What one table's tasks saw of the event times in a micro-batch."""

    identifier: str
    settings: EventTimeSettings | None
    results: Sequence[WriteResult]


class StreamWatermark:
    """The watermark of one stream's job (every table it writes shares it)."""

    def __init__(
        self, ledger: Ledger, idle_timeout: int, per_table: bool = False, clock: Callable[[], float] = time.time
    ) -> None:
        self._ledger = ledger
        self._per_table = per_table  # a stream of several tables: a table's rows of a split are a split
        self._idle_ms = idle_timeout // 1000
        self._clock = clock
        self._state: WatermarkState | None = None
        self._checkpoint: int | None = None  # the checkpoint self._state is the state after

    def start(self, job_id: str, checkpoint_id: int, tables: Sequence[tuple[Table, TableRef]]) -> int | None:
        """The watermark this micro-batch starts with (rows below it are late), recovering the state first when
        the micro-batch does not follow the last one folded."""
        if self._state is None or self._checkpoint != checkpoint_id - 1:
            self._state = self._recover(job_id, checkpoint_id, tables)
            self._checkpoint = checkpoint_id - 1
        return self._state.watermark

    def _recover(self, job_id: str, checkpoint_id: int, tables: Sequence[tuple[Table, TableRef]]) -> WatermarkState:
        staged = self._ledger.last_properties(job_id, SPLITS_CHECKPOINT_VALUE, checkpoint_id)
        if staged is not None:
            _, properties = staged
            return _state_of(properties.get(WATERMARK_PROPERTY), properties[SPLITS_CHECKPOINT_VALUE])
        # The ledger forgot (pruned, or another catalog database): the tables' own record, the furthest one.
        best = WatermarkState()
        for table, ref in tables:
            metadata = table.metadata
            record = metadata.properties.get(splits_table_property(job_id, ref.branch))
            watermark = recorded_watermark(metadata, ref.branch, job_id)  # its own: not another job's
            if watermark is None and record is None:
                continue
            splits = decode_job_record(record)[1] if record is not None else "{}"
            state = _state_of(format_watermark(watermark) if watermark is not None else None, splits)
            if best.watermark is None or (state.watermark is not None and state.watermark > best.watermark):
                best = state
        return best

    def fold(self, tables: Sequence[TableTimes]) -> tuple[WatermarkState, dict[str, str], dict[str, dict[str, str]]]:
        """The state after this micro-batch, the snapshot properties that record it in every table the checkpoint
        moves, and each table's own counts (its late rows, its rows without an event time)."""
        assert self._state is not None, "start() first"
        observed: dict[str, int] = {}
        counts: dict[str, dict[str, str]] = {}
        for one in tables:
            if one.settings is None:
                continue
            late = untimed = 0
            for result in one.results:
                for times in result.event_times:
                    late += times.late_rows
                    untimed += times.untimed_rows
                    if times.latest is None:
                        continue
                    # In a stream of several tables each table's rows of a split are a split of their own, so that
                    # each keeps its own lateness and a quiet table falls idle rather than holding the others back.
                    split = _with_table(one.identifier, times.split) if self._per_table else times.split
                    mark = max(times.latest - one.settings.lateness, MIN_MICROS)
                    observed[split] = max(mark, observed.get(split, mark))
            counts[one.identifier] = {LATE_ROWS_PROPERTY: str(late)}
            if untimed:
                counts[one.identifier][UNTIMED_ROWS_PROPERTY] = str(untimed)
            if late:
                log.info("table=%s: %d row(s) arrived below the watermark", one.identifier, late)
        state = self._state.fold(observed, int(self._clock() * 1000), self._idle_ms)
        if not counts:
            return state, {}, {}
        shared = {SPLITS_CHECKPOINT_VALUE: state.encode_splits()}
        if state.watermark is not None:
            shared[WATERMARK_PROPERTY] = format_watermark(state.watermark)
        return state, shared, counts

    def staged(self, checkpoint_id: int, state: WatermarkState) -> None:
        """The checkpoint was staged with ``state``: the next micro-batch goes on from it."""
        self._state, self._checkpoint = state, checkpoint_id


def _with_table(identifier: str, split: str) -> str:
    try:
        values = json.loads(split)
    except ValueError:
        values = [split]
    return json.dumps([identifier, *values], ensure_ascii=False, separators=(",", ":"))


def _state_of(watermark: str | None, splits: str) -> WatermarkState:
    try:
        return WatermarkState(
            parse_watermark(watermark) if watermark is not None else None, WatermarkState.decode_splits(splits)
        )
    except ValueError as e:
        log.warning("a recorded watermark state is unreadable (%s); the watermark starts again from the data", e)
        return WatermarkState()
