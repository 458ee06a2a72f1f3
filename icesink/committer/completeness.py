"""What a commit records of its stream's completeness: the watermark (never below the branch's), the late rows of
its checkpoints, and the time partitions it makes done (:mod:`icesink.completeness`)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING

from icesink.catalog.config import CatalogConfig
from icesink.catalog.partition_record import PartitionRecord, partition_key
from icesink.completeness.partition_times import partition_end, partition_path
from icesink.completeness.watermark import SPLITS_CHECKPOINT_VALUE, parse_watermark
from icesink.iceberg.partition_history import has_time_partitions, partition_values, spec_fields, time_fields
from icesink.iceberg.watermarks import encode_job_record, watermark_carried
from icesink.properties import (
    EVENT_TIME_FIELD_PROPERTY,
    LATE_ROWS_PROPERTY,
    PARTITIONS_DONE_PROPERTY,
    UNTIMED_ROWS_PROPERTY,
    WATERMARK_PROPERTY,
)

if TYPE_CHECKING:
    from pyiceberg.manifest import DataFile
    from pyiceberg.table import Table

    from icesink.committer.build import CheckpointFiles


def records_completeness(summary: dict[str, str]) -> bool:
    """Whether a snapshot's completeness values say anything a snapshot without files must be made for:
    partitions made done, or late rows counted."""
    late = summary.get(LATE_ROWS_PROPERTY, "0")
    return PARTITIONS_DONE_PROPERTY in summary or (late.isdigit() and int(late) > 0)


class CommitCompleteness:
    """The completeness values of the snapshots one committer prepares."""

    def __init__(self, config: CatalogConfig) -> None:
        self._partitions = PartitionRecord(config)

    def record(
        self, table: Table, identifier: str, branch: str, per_row: Sequence[CheckpointFiles], own: dict[str, str]
    ) -> str | None:
        """The snapshot's watermark (never below the branch's), its late-row counts summed over its checkpoints
        and the partitions it makes done, set in ``own``; returns the job's own watermark and split state, for
        its table property."""
        for counted in (LATE_ROWS_PROPERTY, UNTIMED_ROWS_PROPERTY):
            counts = [int(v) for c in per_row for n, v in c.row.snapshot_properties if n == counted and v.isdigit()]
            if counts:
                own[counted] = str(sum(counts))
        splits = own.pop(SPLITS_CHECKPOINT_VALUE, None)
        own_watermark = own.get(WATERMARK_PROPERTY)
        watermark = watermark_carried(table.metadata, branch, own_watermark)
        if watermark is not None:
            own[WATERMARK_PROPERTY] = watermark
            field = own.get(EVENT_TIME_FIELD_PROPERTY, "")
            files = [f for c in per_row for f in c.files]
            done = self._partitions_done(
                table, identifier, branch, files, watermark, int(field) if field.isdigit() else None
            )
            if done:
                own[PARTITIONS_DONE_PROPERTY] = json.dumps(done, ensure_ascii=False)
        field = own.get(EVENT_TIME_FIELD_PROPERTY, "")
        event_field = int(field) if field.isdigit() else None
        return encode_job_record(own_watermark, splits, event_field) if splits is not None else None

    def _partitions_done(
        self,
        table: Table,
        identifier: str,
        branch: str,
        files: Sequence[DataFile],
        watermark: str,
        event_field: int | None,
    ) -> list[str]:
        """The time partitions a snapshot at ``watermark`` makes done: the open ones the record knows whose end it
        reaches, and the ones the snapshot's files are the first rows of, when their end is reached already. Only
        partitions of the watermark's own column (``event_field``) are done by it."""
        if event_field is None or not has_time_partitions(table, event_field):
            return []
        self._partitions.keep_up(table, identifier, branch)
        reached = parse_watermark(watermark)
        done = self._partitions.open_ending_by(identifier, branch, reached)
        first = {(f.spec_id, partition_key(partition_values(f.partition))): f for f in files}
        known = self._partitions.known(identifier, branch, list(first))
        for (spec_id, key), f in first.items():
            if (spec_id, key) in known:
                continue
            fields = spec_fields(table, spec_id)
            if not fields:
                continue
            ends = time_fields(spec_fields(table, spec_id, event_field, every_time_field=False))
            end = partition_end(ends, partition_values(f.partition))
            if end is not None and end <= reached:
                done.append(partition_path(fields, partition_values(f.partition)))
        return sorted(set(done))
