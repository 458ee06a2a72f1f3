"""Compaction's swap: groups already written, checked against the commits since the base, committed together.

A pass commits its groups in a few snapshots, not one each (Iceberg's ``partial-progress.max-commits`` does the
same): every commit rewrites the manifests that list the files it replaces, and over a table of many partitions
those manifests list every partition, so a commit per group made a pass cost the square of the partitions.

Each group is judged on its own: a group whose files a newer position delete names, or that another writer
removed since the base, is left for the next pass (its new files deleted), and the others are committed.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pyarrow.parquet as pq
from pyiceberg.manifest import DataFileContent
from pyiceberg.table.snapshots import Operation

from icesink.iceberg.deletes import GLOBAL, PartitionKey, partition_scope
from icesink.iceberg.manifests import AddedFile, to_data_file
from icesink.iceberg.references import delete_quietly
from icesink.iceberg.scan import live_files
from icesink.iceberg.snapshots import SnapshotChange
from icesink.maintenance.committing import ConflictError, MaintenanceTarget, commit_change
from icesink.properties import BASE_SNAPSHOT_PROPERTY, MAINTENANCE_COMPACT, MAINTENANCE_PROPERTY
from icesink.writer.position_deletes import FILE_PATH_ID

if TYPE_CHECKING:
    from pyiceberg.manifest import DataFile
    from pyiceberg.table import Table

    from icesink.iceberg.history import ChangesSince
    from icesink.iceberg.scan import LiveFile
    from icesink.maintenance.compact import CompactionPlan, FileGroup
    from icesink.results import FileRecord


log = logging.getLogger("icesink.maintenance")


def commit_before_raising(target: MaintenanceTarget, what: str, commit: Callable[[], object]) -> None:
    """After a group (or merge) could not be written: commit those written before it, as they would have been
    alone, so that it costs the pass only itself. Its error is the one the caller raises next; a failure of
    this commit is logged (what it wrote is then left to the next pass and to ``committer gc``)."""
    try:
        commit()
    except Exception:
        log.exception("table=%s: committing the %s written before a failed one failed", target.identifier, what)


def groups_per_commit(groups: int, max_commits: int) -> int:
    """How many groups one commit takes so that ``groups`` need at most ``max_commits`` commits."""
    return max(1, math.ceil(groups / max_commits))


@dataclass(frozen=True)
class WrittenGroup:
    """A planned group (number ``number`` of the plan) and the files its rewrite wrote."""

    number: int
    group: FileGroup
    records: tuple[FileRecord, ...]
    sequence_number: int  # the data sequence number its files take

    @property
    def paths(self) -> list[str]:
        return [r.path for r in self.records]

    @property
    def replaced(self) -> frozenset[str]:
        return frozenset(str(f.file.file_path) for f in self.group.files)


@dataclass(frozen=True)
class GroupsCommitted:
    """What one commit of written groups did: the groups in it, those left for the next pass (with why), the
    delete files it dropped."""

    table: Table
    committed: tuple[WrittenGroup, ...]
    refused: tuple[tuple[WrittenGroup, str], ...]
    delete_files_dropped: int


def commit_groups(
    target: MaintenanceTarget, table: Table, plan: CompactionPlan, written: Sequence[WrittenGroup]
) -> GroupsCommitted:
    """One ``replace`` of the groups still valid on the head; the files of the others are deleted."""

    version = table.metadata.format_version
    refused: dict[int, str] = {}
    dropped = [0]

    def build(head: Table, since: ChangesSince) -> SnapshotChange:
        refused.clear()  # judged again on every head: what was committed since only grows
        for each in written:
            reason = _conflict(head, since, each.group, plan.base_sequence_number)
            if reason is not None:
                refused[each.number] = reason
        kept = [w for w in written if w.number not in refused]
        if not kept:
            raise ConflictError(refused[written[0].number])
        replaced = frozenset().union(*(w.replaced for w in kept))
        outputs: dict[PartitionKey, int] = {}
        for each in kept:
            scope = each.group.scope
            outputs[scope] = min(outputs.get(scope, each.sequence_number), each.sequence_number)
        obsolete = _obsolete_deletes(head, target.head_id(head), replaced, outputs)
        dropped[0] = len(obsolete)
        return SnapshotChange(
            added=tuple(AddedFile(to_data_file(r, version), w.sequence_number) for w in kept for r in w.records),
            removed=replaced | obsolete,
            operation=Operation.REPLACE,
            properties={MAINTENANCE_PROPERTY: MAINTENANCE_COMPACT, BASE_SNAPSHOT_PROPERTY: str(plan.base_snapshot_id)},
        )

    try:
        table = commit_change(target, table, plan.base_snapshot_id, build, [p for w in written for p in w.paths])
    except ConflictError as e:  # every group refused, or the base lost: their files are deleted
        return GroupsCommitted(table, (), tuple((w, refused.get(w.number, str(e))) for w in written), 0)
    left = tuple((w, refused[w.number]) for w in written if w.number in refused)
    delete_quietly(table.io, [p for w, _ in left for p in w.paths])
    committed = tuple(w for w in written if w.number not in refused)
    return GroupsCommitted(table, committed, left, dropped[0])


def _conflict(head: Table, since: ChangesSince, group: FileGroup, base_sequence: int) -> str | None:
    """Why the group can no longer be swapped in on ``head``; None when it can.

    Iceberg's ``validateNoNewDeletesForDataFiles``: a newer position delete on a replaced file names a row by a
    position the rewrite does not keep. A replaced file another writer removed since cannot be replaced again.
    """

    replaced = {str(f.file.file_path) for f in group.files}
    gone = replaced & since.removed
    if gone:
        return f"{len(gone)} file(s) this group rewrites were removed since, e.g. {min(gone)}"
    for new in since.added:
        if new.file.content != DataFileContent.POSITION_DELETES or new.sequence_number <= base_sequence:
            continue
        if partition_scope(head, new.file) not in (GLOBAL, group.scope):
            continue
        # The bounds say "maybe" for a delete file naming many data files; its file_path column says for sure.
        if _may_reference(new.file, replaced) and _referenced_paths(head, new) & replaced:
            return f"position delete {new.path} was committed since against a file being rewritten"
    return None


def _may_reference(delete: DataFile, locations: set[str]) -> bool:
    """Whether a position delete file's ``file_path`` bounds admit one of ``locations``."""

    lower = (delete.lower_bounds or {}).get(FILE_PATH_ID)
    upper = (delete.upper_bounds or {}).get(FILE_PATH_ID)
    if lower is None or upper is None:
        return True
    return any(lower <= location.encode("utf-8") <= upper for location in locations)


def _obsolete_deletes(
    head: Table, head_id: int | None, replaced: frozenset[str], outputs: Mapping[PartitionKey, int]
) -> frozenset[str]:
    """Delete files with nothing left to do once ``replaced`` are gone (judged on the branch's head, ``head_id``).

    ``outputs`` holds, for each partition the commit rewrites in, the lowest data sequence number of the files it
    writes there.
    """

    live = live_files(head, head_id)
    remaining = [d for d in live.data if d.path not in replaced]
    remaining_paths = {d.path for d in remaining}
    obsolete: set[str] = set()
    for delete in live.position_deletes:
        if partition_scope(head, delete.file) in outputs and not _referenced_paths(head, delete) & remaining_paths:
            obsolete.add(delete.path)
    for delete in live.equality_deletes:
        delete_scope = partition_scope(head, delete.file)
        if delete_scope == GLOBAL:
            lowest = min(outputs.values())
        elif delete_scope in outputs:
            lowest = outputs[delete_scope]
        else:
            continue
        # The rewritten files keep the base's sequence number: a newer equality delete still applies to them.
        if lowest < delete.sequence_number:
            continue
        reaches = [d for d in remaining if delete_scope == GLOBAL or partition_scope(head, d.file) == delete_scope]
        if not any(d.sequence_number < delete.sequence_number for d in reaches):
            obsolete.add(delete.path)
    return frozenset(obsolete)


def _referenced_paths(table: Table, delete: LiveFile) -> frozenset[str]:
    """The data files a position delete file names: its bounds when they name one, else its ``file_path`` column."""

    lower = (delete.file.lower_bounds or {}).get(FILE_PATH_ID)
    upper = (delete.file.upper_bounds or {}).get(FILE_PATH_ID)
    if lower is not None and lower == upper:
        return frozenset({lower.decode("utf-8")})
    with table.io.new_input(delete.path).open() as stream:
        column = pq.ParquetFile(stream).read(columns=["file_path"]).column("file_path")
    return frozenset(str(v) for v in column.unique().to_pylist())
