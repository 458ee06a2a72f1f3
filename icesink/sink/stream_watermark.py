"""The watermark of one stream on the driver: recovered from the ledger or the tables, folded per micro-batch.

The state a checkpoint ends with is staged with it (its snapshot properties), so that the committer records it
in the same commit as the data; the driver keeps it in memory only as a cache of what the ledger holds, and
reads it again whenever the micro-batch is not the one after the last it folded (a restart, a replay).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from icesink.completeness.watermark import (
    MAX_MICROS,
    MIN_MICROS,
    SPLITS_CHECKPOINT_VALUE,
    WatermarkState,
    format_watermark,
    parse_watermark,
)
from icesink.errors import BadRowError
from icesink.iceberg.watermarks import recorded_watermark, splits_table_property
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

    def __init__(self, ledger: Ledger, idle_timeout: int, clock: Callable[[], float] = time.time) -> None:
        self._ledger = ledger
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
            splits = metadata.properties.get(splits_table_property(job_id, ref.branch))
            watermark = recorded_watermark(metadata, ref.branch)
            if watermark is None and splits is None:
                continue
            state = _state_of(format_watermark(watermark) if watermark is not None else None, splits or "{}")
            if best.watermark is None or (state.watermark is not None and state.watermark > best.watermark):
                best = state
        return best

    def fold(self, tables: Sequence[TableTimes]) -> tuple[WatermarkState, dict[str, str]]:
        """The state after this micro-batch and the snapshot properties that record it, in every table it moves."""
        assert self._state is not None, "start() first"
        observed: dict[str, int] = {}
        late = untimed = 0
        timed = False
        for one in tables:
            if one.settings is None:
                continue
            timed = True
            for result in one.results:
                for times in result.event_times:
                    late += times.late_rows
                    untimed += times.untimed_rows
                    if times.latest is None:
                        continue
                    if not MIN_MICROS <= times.latest <= MAX_MICROS:
                        raise BadRowError(
                            f"table {one.identifier}: event_time column {one.settings.column!r} holds a time outside "
                            "the years 1 to 9999; fix or filter such rows in the DataFrame"
                        )
                    mark = max(times.latest - one.settings.lateness, MIN_MICROS)
                    observed[times.split] = max(mark, observed.get(times.split, mark))
        state = self._state.fold(observed, int(self._clock() * 1000), self._idle_ms)
        if not timed:
            return state, {}
        properties = {SPLITS_CHECKPOINT_VALUE: state.encode_splits(), LATE_ROWS_PROPERTY: str(late)}
        if untimed:
            properties[UNTIMED_ROWS_PROPERTY] = str(untimed)
        if state.watermark is not None:
            properties[WATERMARK_PROPERTY] = format_watermark(state.watermark)
        if late:
            log.info("%d row(s) arrived below the watermark %s", late, properties.get(WATERMARK_PROPERTY))
        return state, properties

    def staged(self, checkpoint_id: int, state: WatermarkState) -> None:
        """The checkpoint was staged with ``state``: the next micro-batch goes on from it."""
        self._state, self._checkpoint = state, checkpoint_id


def _state_of(watermark: str | None, splits: str) -> WatermarkState:
    try:
        return WatermarkState(
            parse_watermark(watermark) if watermark is not None else None, WatermarkState.decode_splits(splits)
        )
    except ValueError as e:
        log.warning("a recorded watermark state is unreadable (%s); the watermark starts again from the data", e)
        return WatermarkState()
