"""A table's recorded event-time watermark: the newest ``icesink.watermark`` along a branch's ancestry.

Snapshots of other tools in between hold none and are walked past; icesink's maintenance snapshots carry the
watermark forward, so the walk normally stops at the head.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from pyiceberg.table.refs import MAIN_BRANCH

from icesink.completeness.watermark import format_watermark, parse_watermark
from icesink.iceberg.expired_history import history_cut
from icesink.iceberg.marker import branch_prefix
from icesink.properties import JOB_ID_PROPERTY, WATERMARK_PROPERTY, WATERMARK_SPLITS_PREFIX

if TYPE_CHECKING:
    from pyiceberg.table.metadata import TableMetadata


def splits_table_property(job_id: str, branch: str = MAIN_BRANCH) -> str:
    """The table property holding a job's watermark splits on ``branch``."""
    return f"{branch_prefix(branch)}{WATERMARK_SPLITS_PREFIX}{job_id}"


def ever_had_watermark(metadata: TableMetadata) -> bool:
    """Whether any stream with event_time committed to the table (its split state is a table property): a table
    that never had a watermark is not walked at every commit."""
    return any(WATERMARK_SPLITS_PREFIX in name for name in metadata.properties)


def recorded_watermark(metadata: TableMetadata, branch: str = MAIN_BRANCH, job_id: str | None = None) -> int | None:
    """The newest watermark (microseconds) on ``branch``'s ancestry (of ``job_id``'s snapshots only, when given),
    or None when none is recorded.

    A value that is not a watermark (written by hand or by another tool) is passed over as if absent. When the
    snapshots that held one have expired, the jobs' records in the table properties (written in the same commits)
    answer.
    """
    ref = metadata.refs.get(branch)
    snapshot_id = ref.snapshot_id if ref else None
    snapshots = {s.snapshot_id: s for s in metadata.snapshots}
    oldest = None
    while snapshot_id is not None:
        snapshot = snapshots.get(snapshot_id)
        if snapshot is None:  # history expired below this point
            return _from_properties(metadata, branch, job_id)
        summary = snapshot.summary
        text = summary[WATERMARK_PROPERTY] if summary is not None else None
        if text is not None and (job_id is None or (summary is not None and summary[JOB_ID_PROPERTY] == job_id)):
            try:
                return parse_watermark(text)
            except ValueError:
                pass
        oldest, snapshot_id = snapshot, snapshot.parent_snapshot_id
    # The branch's first snapshot: the history is whole (the jobs' records in the table properties would speak of
    # snapshots rolled back since), unless expiry cut the parent link of the oldest one it kept.
    return _from_properties(metadata, branch, job_id) if history_cut(oldest) else None


def watermark_at(metadata: TableMetadata, snapshot_id: int, known: dict[int, int | None] | None = None) -> int | None:
    """The watermark (microseconds) as of ``snapshot_id``: the newest on its ancestry, None when none is recorded
    there (or history expired below the snapshots that did: what the table properties hold is later). ``known``
    remembers answers between calls, so walking a range costs one pass."""
    known = known if known is not None else {}
    walked: list[int] = []
    found: int | None = None
    current: int | None = snapshot_id
    while current is not None and current not in known:
        snapshot = metadata.snapshot_by_id(current)
        if snapshot is None:
            break
        walked.append(current)
        text = snapshot.summary[WATERMARK_PROPERTY] if snapshot.summary is not None else None
        try:
            found = parse_watermark(text) if text is not None else None
        except ValueError:
            found = None
        if found is not None:
            break
        current = snapshot.parent_snapshot_id
    else:
        if current is not None:
            found = known[current]
    for one in walked:
        known[one] = found
    return found


def _from_properties(metadata: TableMetadata, branch: str, job_id: str | None) -> int | None:
    prefix = f"{branch_prefix(branch)}{WATERMARK_SPLITS_PREFIX}"
    found = [
        decode_job_record(value)[0]
        for name, value in metadata.properties.items()
        if (name == prefix + job_id if job_id is not None else name.startswith(prefix))
    ]
    marks = [w for w in found if w is not None]
    return max(marks) if marks else None


def encode_job_record(watermark: str | None, splits: str, event_field: int | None = None) -> str:
    """A job's watermark record in the table properties: its watermark (ISO 8601), the table field it is about
    and its splits' marks."""
    record = {"watermark": watermark, "event_field_id": event_field, "splits": json.loads(splits)}
    return json.dumps(record, separators=(",", ":"), ensure_ascii=False)


def recorded_event_fields(metadata: TableMetadata, branch: str = MAIN_BRANCH) -> list[int]:
    """The table fields the jobs' records say their watermarks are about (for when expiry removed the snapshots
    that said so)."""
    prefix = f"{branch_prefix(branch)}{WATERMARK_SPLITS_PREFIX}"
    found = []
    for name, value in metadata.properties.items():
        if name.startswith(prefix):
            try:
                field = json.loads(value).get("event_field_id")
            except (ValueError, AttributeError):
                continue
            if isinstance(field, int):
                found.append(field)
    return found


def decode_job_record(text: str) -> tuple[int | None, str]:
    """(watermark in microseconds, splits as JSON) of what :func:`encode_job_record` wrote; (None, "{}") for what
    it did not write (a value set by hand)."""
    try:
        record = json.loads(text)
        watermark = record.get("watermark")
        return (parse_watermark(watermark) if watermark else None), json.dumps(record.get("splits") or {})
    except (ValueError, AttributeError, TypeError):
        return None, "{}"


def watermark_carried(metadata: TableMetadata, branch: str, given: str | None) -> str | None:
    """The watermark a new icesink snapshot on ``branch`` records: the one it was given, never lower than the
    branch's (None when neither has one)."""
    recorded = recorded_watermark(metadata, branch) if ever_had_watermark(metadata) else None
    if given is None or recorded is None:
        return given if recorded is None else format_watermark(recorded)
    try:
        return given if parse_watermark(given) >= recorded else format_watermark(recorded)
    except ValueError:
        return format_watermark(recorded)
