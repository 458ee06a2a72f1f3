"""The partitions each snapshot of a branch added rows to, and a spec's time fields: what the partition record
is kept from (``icesink.catalog.partition_record``).

Only the manifests each snapshot wrote are read, and only the entries it wrote, so keeping the record costs what
the commits since its last update added, not the table.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pyiceberg.manifest import DataFileContent, ManifestEntryStatus
from pyiceberg.table.refs import MAIN_BRANCH
from pyiceberg.transforms import DayTransform, HourTransform, IdentityTransform, MonthTransform, YearTransform
from pyiceberg.types import DateType, TimestampNanoType, TimestampType, TimestamptzNanoType, TimestamptzType

from icesink.completeness.partition_times import TimeField, TimeKind
from icesink.completeness.watermark import parse_watermark
from icesink.iceberg.expired_history import history_cut
from icesink.iceberg.manifest_lists import manifests_of
from icesink.iceberg.scan import live_files
from icesink.iceberg.watermarks import recorded_event_fields
from icesink.properties import EVENT_TIME_FIELD_PROPERTY, MAINTENANCE_PROPERTY, WATERMARK_PROPERTY

if TYPE_CHECKING:
    from pyiceberg.table import Table
    from pyiceberg.typedef import Record

_TRANSFORMS: dict[type, TimeKind] = {
    YearTransform: TimeKind.YEAR,
    MonthTransform: TimeKind.MONTH,
    DayTransform: TimeKind.DAY,
}
_TIMESTAMPS = (TimestampType, TimestamptzType)


@dataclass(frozen=True)
class SnapshotPartitions:
    """What one snapshot did to the partitions: the rows it added to each (spec id, partition values), whether
    it only rewrote rows (maintenance), and the watermark it recorded."""

    snapshot_id: int
    timestamp_ms: int
    rewrite: bool
    watermark: int | None
    added: tuple[tuple[int, tuple[object, ...], int], ...]


def partition_values(partition: Record) -> tuple[object, ...]:
    """A data file's partition as a plain tuple, in the spec's field order."""
    return tuple(partition[i] for i in range(len(partition)))


def spec_fields(
    table: Table, spec_id: int, event_field: int | None = None, every_time_field: bool = True
) -> dict[int, tuple[str, TimeKind | None]]:
    """Each partition field of the spec by position: its name, and what its values count if it is over time.

    With ``every_time_field=False`` only a field over ``event_field`` (the table column the watermark is about)
    counts as over time: a partition of another time column is not done by the watermark (its rows' times say
    nothing of when they arrive).
    """
    spec = table.metadata.specs()[spec_id]
    schema = table.schema()
    fields: dict[int, tuple[str, TimeKind | None]] = {}
    for position, field in enumerate(spec.fields):
        try:
            source_type = schema.find_field(field.source_id).field_type
        except ValueError:  # the source column was dropped since
            source_type = None
        kind: TimeKind | None = None
        if isinstance(source_type, TimestampNanoType | TimestamptzNanoType):
            kind = None  # nanosecond values: not a span this module counts in
        elif isinstance(field.transform, HourTransform) and isinstance(source_type, _TIMESTAMPS):
            kind = TimeKind.HOUR
        elif type(field.transform) in _TRANSFORMS and isinstance(source_type, (*_TIMESTAMPS, DateType)):
            kind = _TRANSFORMS[type(field.transform)]
        elif isinstance(field.transform, IdentityTransform):
            if isinstance(source_type, DateType):
                kind = TimeKind.DATE
            elif isinstance(source_type, _TIMESTAMPS):
                kind = TimeKind.TIMESTAMP
        if not every_time_field and field.source_id != event_field:
            kind = None
        fields[position] = (field.name, kind)
    return fields


def time_fields(fields: dict[int, tuple[str, TimeKind | None]]) -> list[TimeField]:
    return [TimeField(position, name, kind) for position, (name, kind) in fields.items() if kind is not None]


def has_time_partitions(table: Table, event_field: int | None = None) -> bool:
    """Whether any of the table's specs partitions by time (by ``event_field``, when given): only then are
    partitions done or not."""
    return any(
        time_fields(spec_fields(table, spec_id, event_field, every_time_field=event_field is None))
        for spec_id in table.metadata.specs()
    )


def recorded_event_field(table: Table, branch: str = MAIN_BRANCH) -> int | None:
    """The table field the newest watermark on ``branch`` is about (``icesink.event-time-field-id``), or None."""
    ref = table.metadata.refs.get(branch)
    snapshot_id = ref.snapshot_id if ref else None
    snapshots = {s.snapshot_id: s for s in table.metadata.snapshots}
    while snapshot_id is not None and snapshot_id in snapshots:
        summary = snapshots[snapshot_id].summary
        value = summary[EVENT_TIME_FIELD_PROPERTY] if summary is not None else None
        if value is not None and value.isdigit():
            return int(value)
        snapshot_id = snapshots[snapshot_id].parent_snapshot_id
    recorded = recorded_event_fields(table.metadata, branch)  # the snapshots that said expired: the jobs' records
    return recorded[0] if len(set(recorded)) == 1 else None


def live_partitions(table: Table, branch: str = MAIN_BRANCH) -> SnapshotPartitions | None:
    """The rows of every partition live at ``branch``'s head, as if its snapshot had added them all (what the
    record starts from when the history before it has expired)."""
    ref = table.metadata.refs.get(branch)
    snapshot = table.metadata.snapshot_by_id(ref.snapshot_id) if ref else None
    if snapshot is None:
        return None
    added = tuple(
        (f.file.spec_id, partition_values(f.file.partition), f.file.record_count)
        for f in live_files(table, snapshot.snapshot_id).data
    )
    return SnapshotPartitions(snapshot.snapshot_id, snapshot.timestamp_ms, False, None, added)


class Reach(enum.Enum):
    """How far back :func:`partition_history` went."""

    SINCE = "since"  # to the snapshot asked for: the history after it, to add to what was kept
    ROOT = "root"  # to the branch's first snapshot, not passing the one asked for (a rollback): all of it
    CUT = "cut"  # to a snapshot expiry removed: the history left does not hold every row


def partition_history(
    table: Table, since: int | None, branch: str = MAIN_BRANCH
) -> tuple[list[SnapshotPartitions], Reach]:
    """The snapshots of ``branch`` after ``since``, oldest first, and how far back they go."""
    metadata = table.metadata
    ref = metadata.refs.get(branch)
    snapshot_id = ref.snapshot_id if ref else None
    snapshots = {s.snapshot_id: s for s in metadata.snapshots}
    found: list[SnapshotPartitions] = []
    while snapshot_id is not None and snapshot_id != since:
        snapshot = snapshots.get(snapshot_id)
        if snapshot is None:
            return found[::-1], Reach.CUT
        summary = snapshot.summary
        rewrite = summary is not None and (
            summary.operation.value == "replace" or summary[MAINTENANCE_PROPERTY] is not None
        )
        text = summary[WATERMARK_PROPERTY] if summary is not None else None
        try:
            watermark = parse_watermark(text) if text is not None else None
        except ValueError:
            watermark = None
        added: list[tuple[int, tuple[object, ...], int]] = []
        if not rewrite:
            for manifest in manifests_of(table.io, snapshot):
                if manifest.added_snapshot_id != snapshot_id:
                    continue
                for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=False):
                    data = entry.data_file
                    if (
                        entry.snapshot_id == snapshot_id
                        and entry.status == ManifestEntryStatus.ADDED
                        and data.content == DataFileContent.DATA
                    ):
                        added.append((data.spec_id, partition_values(data.partition), data.record_count))
        found.append(SnapshotPartitions(snapshot_id, snapshot.timestamp_ms, rewrite, watermark, tuple(added)))
        snapshot_id = snapshot.parent_snapshot_id
    if snapshot_id == since and since is not None:
        return found[::-1], Reach.SINCE
    first = snapshots[found[-1].snapshot_id] if found else None
    return found[::-1], Reach.CUT if history_cut(first) else Reach.ROOT
