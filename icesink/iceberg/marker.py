"""The committed-checkpoint marker: what the table itself says a job has committed.

Every icesink snapshot carries ``icesink.job-id``,
``icesink.max-committed-checkpoint-id`` and ``icesink.stream-id`` (the Spark
query whose checkpoint history the checkpoint ids belong to) in its summary.
The table, not the ledger, is the source of truth: after a crash between the
catalog commit and the ledger update, the marker reachable from the branch
head tells the committer the checkpoint is already in.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyiceberg.table.metadata import TableMetadata

from pyiceberg.table.refs import MAIN_BRANCH

from icesink.iceberg.expired_history import history_cut
from icesink.properties import (
    BRANCH_PROPERTY_PREFIX,
    JOB_ID_PROPERTY,
    MAX_CHECKPOINT_PROPERTY,
    STREAM_ID_PROPERTY,
    STREAM_TABLE_PROPERTY_PREFIX,
    TABLE_PROPERTY_PREFIX,
)


def table_property(job_id: str, branch: str = MAIN_BRANCH) -> str:
    """The table property holding the job's marker on ``branch`` (a job's marker on ``main`` keeps the name it
    had before branches: tables written by earlier releases read on)."""
    return f"{branch_prefix(branch)}{TABLE_PROPERTY_PREFIX}{job_id}"


def stream_table_property(job_id: str, branch: str = MAIN_BRANCH) -> str:
    return f"{branch_prefix(branch)}{STREAM_TABLE_PROPERTY_PREFIX}{job_id}"


def branch_prefix(branch: str) -> str:
    return "" if branch == MAIN_BRANCH else f"{BRANCH_PROPERTY_PREFIX}{branch}."


@dataclass(frozen=True)
class CommittedMarker:
    """The highest checkpoint of a job in the table, and the stream that wrote it (None if not recorded)."""

    checkpoint_id: int
    stream_id: str | None

    def written_by_another_stream(self, stream_id: str | None) -> bool:
        """True when both streams are known and differ: the job id's history belongs to someone else."""
        return self.stream_id is not None and stream_id is not None and self.stream_id != stream_id


@dataclass(frozen=True)
class KnownMarker:
    """A marker already read: the job's marker as of snapshot ``snapshot_id``."""

    snapshot_id: int
    marker: CommittedMarker | None


def committed_marker(
    metadata: TableMetadata, job_id: str, branch: str = MAIN_BRANCH, known: KnownMarker | None = None
) -> CommittedMarker | None:
    """The highest checkpoint of ``job_id`` committed on ``branch``, or None.

    Walks the ancestry from the head and stops at the newest snapshot of the
    job: markers only grow along a branch, and snapshots of other writers in
    between (maintenance included) are skipped. When the ancestry holds no
    snapshot of the job (expiry removed it; pyiceberg also cuts the parent
    link of the survivors), the table properties written in the same metadata
    commit as every icesink snapshot answer. After a rollback it may name
    checkpoints whose data was rolled back: they count as committed, as the
    rollback intended.

    ``known`` ends the walk early: reaching a snapshot whose marker was read
    before answers with that marker, so a committer that remembers the marker
    of its last commit only walks the snapshots added since.
    """
    ref = metadata.refs.get(branch)
    snapshot_id = ref.snapshot_id if ref else None
    while snapshot_id is not None:
        if known is not None and snapshot_id == known.snapshot_id:
            return known.marker
        snapshot = metadata.snapshot_by_id(snapshot_id)
        if snapshot is None:  # history expired below this point
            break
        summary = snapshot.summary
        if summary is not None and summary[JOB_ID_PROPERTY] == job_id:
            value = summary[MAX_CHECKPOINT_PROPERTY]
            if value is not None:
                return CommittedMarker(int(value), summary[STREAM_ID_PROPERTY])
        snapshot_id = snapshot.parent_snapshot_id
    recorded = metadata.properties.get(table_property(job_id, branch))
    if recorded is None:
        return None
    return CommittedMarker(int(recorded), metadata.properties.get(stream_table_property(job_id, branch)))


def marker_properties(job_id: str, checkpoint_id: int, stream_id: str | None) -> dict[str, str]:
    """The snapshot summary entries of a commit of ``checkpoint_id``."""
    properties = {JOB_ID_PROPERTY: job_id, MAX_CHECKPOINT_PROPERTY: str(checkpoint_id)}
    if stream_id is not None:
        properties[STREAM_ID_PROPERTY] = stream_id
    return properties


def marker_table_properties(
    job_id: str, checkpoint_id: int, stream_id: str | None, branch: str = MAIN_BRANCH
) -> dict[str, str]:
    """The table properties written in the same metadata commit, for when expiry removed the snapshots."""
    properties = {table_property(job_id, branch): str(checkpoint_id)}
    if stream_id is not None:
        properties[stream_table_property(job_id, branch)] = stream_id
    return properties


class CheckpointExpired(Exception):
    """The snapshot that held a job's checkpoint is gone from the table's history (expired)."""


def snapshot_at_checkpoint(
    metadata: TableMetadata, job_id: str, checkpoint_id: int, branch: str = MAIN_BRANCH
) -> int | None:
    """The newest snapshot of ``branch`` holding the job's checkpoints up to ``checkpoint_id`` and none after it.

    None is the table's state before its first snapshot. Snapshots other writers (maintenance) made
    after one of the job's snapshots hold the same checkpoints, so the newest of them is returned.
    Raises :class:`CheckpointExpired` when expiry removed the snapshots that would answer.
    """
    ref = metadata.refs.get(branch)
    newest = ref.snapshot_id if ref else None
    snapshot_id = newest
    seen_job = False  # passed a snapshot of the job holding later checkpoints
    next_marker: int | None = None  # the marker of the oldest of them
    last = None
    while snapshot_id is not None:
        snapshot = metadata.snapshot_by_id(snapshot_id)
        if snapshot is None:  # expired, its child still naming it (as Iceberg Java's expiry leaves it)
            if newest != snapshot_id and next_marker == checkpoint_id + 1:
                return newest  # kept, and the answer (below)
            raise CheckpointExpired(snapshot_id)
        last = snapshot
        summary = snapshot.summary
        marker = summary[MAX_CHECKPOINT_PROPERTY] if summary is not None else None
        if summary is not None and summary[JOB_ID_PROPERTY] == job_id and marker is not None:
            if int(marker) <= checkpoint_id:
                return newest
            seen_job, next_marker = True, int(marker)
            newest = snapshot.parent_snapshot_id  # this one holds later checkpoints: look below it
        snapshot_id = snapshot.parent_snapshot_id
    # The walk ended at a snapshot without a parent: the table's first, or one whose history expired, below which
    # nothing can be told apart any more.
    cut = history_cut(last)
    recorded = metadata.properties.get(table_property(job_id, branch))
    later = seen_job or (recorded is not None and int(recorded) > checkpoint_id)
    # Markers grow along a branch: below the job's snapshot of the next checkpoint every commit of the job holds
    # this checkpoint or an earlier one, so the kept snapshot under it answers however much history was cut.
    if newest is not None and next_marker == checkpoint_id + 1:
        return newest
    if cut and later:
        raise CheckpointExpired(last.snapshot_id if last is not None else None)
    return newest
