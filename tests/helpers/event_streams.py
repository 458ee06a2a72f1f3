"""A stream's job as the driver runs it, without Spark: write tasks observe event times, the driver folds them
into the watermark, the committer commits (tests of the watermark and of partitions done)."""

from __future__ import annotations

import datetime
from dataclasses import dataclass, field, replace
from typing import Any

import pyarrow as pa

from icesink.catalog.config import CatalogConfig
from icesink.catalog.ledger import Ledger
from icesink.catalog.loader import open_catalog
from icesink.committer.commit import TableCommitter
from icesink.committer.staging import TableResults, stage_tables
from icesink.completeness.watermark import datetime_to_micros
from icesink.iceberg.describe import writer_spec
from icesink.sink.event_time import EventTimeSettings
from icesink.sink.stream_watermark import StreamWatermark, TableTimes
from icesink.table_ref import TableRef
from icesink.writer.spec import EventTimeSpec
from icesink.writer.task import TaskWriter

TABLE = "shop.events ü"
START = datetime.datetime(2026, 11, 25, 0, 0, tzinfo=datetime.UTC)
MINUTE = 60_000_000


def at(minutes: float) -> datetime.datetime:
    return START + datetime.timedelta(minutes=minutes)


def micros(minutes: float) -> int:
    return datetime_to_micros(at(minutes))


@dataclass
class Stream:
    """One stream's job as the driver runs it, without Spark: tasks observe, the driver folds, the committer commits."""

    config: CatalogConfig
    lateness: int = 0
    idle_ms: int = 60_000
    clock_ms: int = 0
    job: str = "job"
    checkpoint: int = 0
    table: str = TABLE
    on_partition_done: Any = None
    watermark: StreamWatermark = field(init=False)

    def __post_init__(self) -> None:
        self.restart()

    def restart(self) -> None:
        self.watermark = StreamWatermark(Ledger(self.config), self.idle_ms * 1000, clock=lambda: self.clock_ms / 1000)

    def batch(self, rows: list[tuple[int, str, float | None]], commit: bool = True) -> dict[str, str]:
        """One micro-batch of (id, split, event minute) rows: written, staged and (unless told not to) committed."""
        catalog = open_catalog(self.config)
        table = catalog.load_table(self.table)
        late_before = self.watermark.start(self.job, self.checkpoint, [(table, TableRef(self.table))])
        spec = writer_spec(table, self.table, self.job).for_checkpoint(self.checkpoint)
        settings = EventTimeSettings("ts", self.lateness, ("split",))
        spec = replace(spec, event_time=EventTimeSpec("ts", ("split",), late_before))
        writer = TaskWriter(spec, 0, 0)
        given = {
            "id": pa.array([r[0] for r in rows], pa.int64()),
            "name": pa.array([f"n{r[0]}" for r in rows]),
            "amount": pa.array([1.0] * len(rows)),
            "ts": pa.array([at(r[2]) if r[2] is not None else None for r in rows], pa.timestamp("us", "UTC")),
        }
        columns = {f.name: given.get(f.name, pa.nulls(len(rows), f.type)) for f in table.schema().as_arrow()}
        writer.write(pa.table({**columns, "split": [r[1] for r in rows]}))
        result = writer.complete()
        state, shared, counts = self.watermark.fold([TableTimes(self.table, settings, [result])])
        # As TableSink.finish says which table column the watermark is about (its field id).
        field_id = table.schema().find_field("ts").field_id
        properties = {**shared, **counts[self.table], "icesink.event-time-field-id": str(field_id)}
        staged = TableResults(table, self.table, [result], snapshot_properties=properties)
        assert stage_tables(Ledger(self.config), self.job, self.checkpoint, [staged])
        self.watermark.staged(self.checkpoint, state)
        if commit:
            committer = TableCommitter(
                catalog, self.config, Ledger(self.config), on_partition_done=self.on_partition_done
            )
            committer.commit_pending(self.table, self.job)
        self.checkpoint += 1
        return properties


def summaries(config: CatalogConfig, identifier: str = TABLE) -> list[dict[str, str]]:
    """The summaries of the table's main branch, oldest first."""
    table = open_catalog(config).load_table(identifier)
    by_id = {s.snapshot_id: s for s in table.metadata.snapshots}
    chain = []
    snapshot = table.current_snapshot()
    while snapshot is not None:
        chain.append(dict(snapshot.summary.additional_properties))
        snapshot = by_id.get(snapshot.parent_snapshot_id) if snapshot.parent_snapshot_id is not None else None
    return chain[::-1]
