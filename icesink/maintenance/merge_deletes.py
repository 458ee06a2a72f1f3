"""Position deletes merged into one delete file per data file, the data files left as they are.

Iceberg's ``rewrite_position_delete_files``. Every commit of an upsert stream adds a position delete file per
partition (its converted equality deletes), naming rows of many data files. A data file whose deletes remove
too little of it to be worth rewriting (:mod:`icesink.maintenance.choosing`) would gather one more delete file
per commit, each read by every reader of it; merging them costs a read and a write of the positions alone.

* A partition is merged when one of its data files is named by two or more position delete files. All the
  position delete files of the partition are then read, and written again as one file per data file they name:
  a file naming several data files can only go once every one of them has its own.
* Positions naming a data file that is no longer live (rewritten since) are dropped: they delete nothing; so is
  a delete file naming no live data file. So are positions named twice (each commit's conversion names the rows
  of an updated key again, those deleted before included). The summary says how many were dropped
  (``icesink.maintenance.dropped-positions``), so that a branch's audit can tell the merge changed no row.
* A partition whose delete files reach another partition (another writer's) is left as it is.
* Each merged file takes the newest data sequence number of the files it merges, so it applies to exactly the
  data files they applied to.
* Merges are written in groups of partitions of up to ``icesink.maintain.max-group-bytes`` of delete files, and
  committed in at most ``icesink.maintain.max-commits`` ``replace`` snapshots of delete files only: no data file
  and no row changes. A partition whose data files or delete files were removed since planning is sent back to
  the next pass (the others are committed); delete files added since stay as they are.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.table.snapshots import Operation

from icesink import paths
from icesink.failpoints import failpoint
from icesink.iceberg.deletes import PartitionKey, partition_scope
from icesink.iceberg.describe import parquet_compression
from icesink.iceberg.manifests import AddedFile, to_data_file
from icesink.iceberg.references import delete_quietly
from icesink.iceberg.scan import live_files, position_deletes_of
from icesink.iceberg.snapshots import SnapshotChange
from icesink.maintenance.choosing import count_position_deletes
from icesink.maintenance.committing import ConflictError, MaintenanceTarget, commit_change
from icesink.maintenance.compact_commit import commit_before_raising, groups_per_commit
from icesink.maintenance.packing import packed
from icesink.maintenance.policy import MAX_COMMITS
from icesink.properties import (
    BASE_SNAPSHOT_PROPERTY,
    MAINTENANCE_MERGE_DELETES,
    MAINTENANCE_PROPERTY,
    MERGE_DROPPED_PROPERTY,
)
from icesink.writer.position_deletes import write_position_deletes
from icesink.writer.storage import storage_options

if TYPE_CHECKING:
    from pyiceberg.table import Table

    from icesink.iceberg.history import ChangesSince
    from icesink.iceberg.scan import LiveFile
    from icesink.results import FileRecord

log = logging.getLogger("icesink.maintenance")


@dataclass(frozen=True)
class DeleteMerge:
    """One partition's position delete files, and the live data files they name."""

    scope: PartitionKey
    deletes: tuple[LiveFile, ...]
    data: tuple[LiveFile, ...]

    @property
    def bytes(self) -> int:
        return sum(d.file.file_size_in_bytes for d in self.deletes)


@dataclass(frozen=True)
class MergePlan:
    base_snapshot_id: int | None
    merges: tuple[DeleteMerge, ...]


@dataclass
class MergeResult:
    """What merging position deletes did."""

    partitions: int = 0
    commits: int = 0
    delete_files_rewritten: int = 0
    delete_files_written: int = 0
    bytes_rewritten: int = 0
    bytes_written: int = 0
    positions: int = 0
    snapshot_ids: list[int] = field(default_factory=list)
    conflict: str | None = None
    stopped_early: bool = False
    seconds: float = 0.0


def plan_delete_merges(
    table: Table, target: MaintenanceTarget, everything: bool = False, rewriting: frozenset[str] = frozenset()
) -> MergePlan:
    """The partitions with a data file named by two or more position delete files (with ``everything``: by one
    that also names another data file), or with a delete file naming no live data file.

    ``rewriting`` are data files a compaction planned in the same pass will rewrite (a dry run's plan): they
    count as gone.
    """

    head = target.head_id(table)
    live = live_files(table, head)
    counts = count_position_deletes(table.io, (d.file for d in live.position_deletes))
    data_by_path = {d.path: d for d in live.data if d.path not in rewriting}
    deletes_by_path = {d.path: d for d in live.position_deletes}
    names: dict[str, set[str]] = defaultdict(set)  # delete file → the data files it names
    for data_path, naming in counts.by_data_file.items():
        for delete_path in naming:
            names[delete_path].add(data_path)
    by_scope: dict[PartitionKey, set[str]] = defaultdict(set)
    due: set[PartitionKey] = set()
    live_paths = {d.path for d in live.data}
    for delete in live.position_deletes:
        if not names[delete.path] & live_paths:  # it deletes nothing any more: dropped
            scope = partition_scope(table, delete.file)
            by_scope[scope].add(delete.path)
            due.add(scope)
    for data_path, naming in counts.by_data_file.items():
        data = data_by_path.get(data_path)
        if data is None:
            continue
        scope = partition_scope(table, data.file)
        by_scope[scope].update(naming)
        shared = everything and any(len(names[d]) > 1 for d in naming)
        if len(naming) >= 2 or shared:
            due.add(scope)
    merges = []
    for scope in sorted(due, key=str):
        deletes = [deletes_by_path[p] for p in sorted(by_scope[scope])]
        named = sorted({p for d in deletes for p in names[d.path]} & data_by_path.keys())
        # A delete file of another partition, or naming a data file of another (another writer's; a reader that
        # follows the spec ignores such an entry, so moving it into a file of that partition would change rows),
        # leaves the partition as it is.
        scopes = {partition_scope(table, d.file) for d in deletes}
        scopes |= {partition_scope(table, data_by_path[p].file) for p in named}
        if scopes != {scope}:
            continue
        merges.append(DeleteMerge(scope, tuple(deletes), tuple(data_by_path[p] for p in named)))
    return MergePlan(head, tuple(merges))


@dataclass(frozen=True)
class WrittenMerge:
    """A planned partition's merge, and the delete files written for it (each with its data sequence number)."""

    merge: DeleteMerge
    records: tuple[tuple[FileRecord, int], ...]

    @property
    def paths(self) -> list[str]:
        return [r.path for r, _ in self.records]


def merge_position_deletes(
    target: MaintenanceTarget,
    table: Table,
    plan: MergePlan,
    max_bytes: int,
    keep_going: Callable[[], bool] = lambda: True,
    max_commits: int = MAX_COMMITS,
) -> tuple[Table, MergeResult]:
    """Write the planned partitions' merged delete files in groups of up to ``max_bytes`` of delete files, asking
    ``keep_going()`` before each group but the first, and swap them in with at most ``max_commits`` ``replace``
    commits (when ``keep_going`` says stop, the groups written so far are committed first)."""

    started = time.monotonic()
    result = MergeResult(partitions=len(plan.merges))
    groups = packed(plan.merges, lambda m: m.bytes, max_bytes)
    per_commit = groups_per_commit(len(groups), max_commits)
    written: list[WrittenMerge] = []
    try:
        for number, group in enumerate(groups):
            if number and not keep_going():
                result.stopped_early = True
                break
            for merge in group:
                written.append(WrittenMerge(merge, tuple(_write_merged(table, merge))))
            failpoint("maintain.merge.after-write")
            if (number + 1) % per_commit == 0:
                batch, written = written, []  # handed over: the commit deletes them, or keeps them if unsure
                table = _commit_merges(target, table, plan.base_snapshot_id, batch, result)
    except Exception:  # a merge that cannot be written
        batch, written = written, []
        if batch:
            commit_before_raising(
                target, "merges", lambda: _commit_merges(target, table, plan.base_snapshot_id, batch, result)
            )
        raise
    except BaseException:
        delete_quietly(table.io, [p for w in written for p in w.paths])
        raise
    if written:
        table = _commit_merges(target, table, plan.base_snapshot_id, written, result)
    result.seconds = time.monotonic() - started
    return table, result


def _commit_merges(
    target: MaintenanceTarget,
    table: Table,
    base_snapshot_id: int | None,
    written: list[WrittenMerge],
    result: MergeResult,
) -> Table:
    """One ``replace`` of the merges whose files are all still there; the files of the others are deleted."""

    version = table.metadata.format_version
    refused: dict[int, str] = {}
    kept: list[WrittenMerge] = []

    def build(head: Table, since: ChangesSince) -> SnapshotChange:
        refused.clear()  # judged again on every head: what was removed since only grows
        for number, each in enumerate(written):
            gone = ({d.path for d in each.merge.deletes} | {d.path for d in each.merge.data}) & since.removed
            if gone:
                refused[number] = f"{len(gone)} file(s) this merge reads were removed since, e.g. {min(gone)}"
        kept[:] = [w for number, w in enumerate(written) if number not in refused]
        if not kept:
            raise ConflictError(refused[0])
        removed_positions = sum(d.file.record_count for w in kept for d in w.merge.deletes)
        written_positions = sum(r.record_count for w in kept for r, _ in w.records)
        return SnapshotChange(
            added=tuple(AddedFile(to_data_file(r, version), sequence) for w in kept for r, sequence in w.records),
            removed=frozenset(d.path for w in kept for d in w.merge.deletes),
            operation=Operation.REPLACE,
            properties={
                MAINTENANCE_PROPERTY: MAINTENANCE_MERGE_DELETES,
                BASE_SNAPSHOT_PROPERTY: str(base_snapshot_id),
                # Named twice, or naming a data file no longer live: what the merge did not write again.
                MERGE_DROPPED_PROPERTY: str(removed_positions - written_positions),
            },
        )

    try:
        table = commit_change(target, table, base_snapshot_id, build, [p for w in written for p in w.paths])
    except ConflictError as e:  # every merge refused, or the base lost: their files are deleted
        log.info("table=%s: merging position deletes left for the next run: %s", target.identifier, e)
        result.conflict = str(e)
        return table
    if refused:
        delete_quietly(table.io, [p for number, w in enumerate(written) if number in refused for p in w.paths])
        result.conflict = next(iter(refused.values()))
        log.info("table=%s: merging position deletes left for the next run: %s", target.identifier, result.conflict)
    head = target.head_id(table)
    if head is not None:
        result.snapshot_ids.append(head)
    result.commits += 1
    result.delete_files_rewritten += sum(len(w.merge.deletes) for w in kept)
    result.delete_files_written += sum(len(w.records) for w in kept)
    result.bytes_rewritten += sum(w.merge.bytes for w in kept)
    result.bytes_written += sum(r.file_size_bytes for w in kept for r, _ in w.records)
    result.positions += sum(r.record_count for w in kept for r, _ in w.records)
    return table


def _write_merged(table: Table, merge: DeleteMerge) -> list[tuple[FileRecord, int]]:
    """One delete file per data file the merge names, with its data sequence number."""

    positions = position_deletes_of(table, [d.file for d in merge.deletes])
    options = storage_options(table.io.properties)
    _, compression = parquet_compression(table, ".".join(table.name()))
    written: list[tuple[FileRecord, int]] = []
    for data in merge.data:
        # Only deletes at or after the data file's sequence number apply to it (a path is written once, so this
        # only guards against another writer's mistakes).
        applying = [d for d in merge.deletes if d.sequence_number >= data.sequence_number]
        found = [positions[d.path][data.path] for d in applying if data.path in positions[d.path]]
        if not found:
            continue
        merged = pc.sort_indices(pa.concat_arrays(found))
        values = pa.concat_arrays(found).take(merged)
        directory = data.path.rsplit("/", 1)[0]
        location = paths.join(directory, f"maintenance-{uuid.uuid4().hex}-pos-deletes.parquet")
        partition = tuple(data.file.partition[i] for i in range(len(data.file.partition)))
        try:
            record = write_position_deletes(
                location, {data.path: values}, data.file.spec_id, partition, options, compression
            )
        except BaseException:
            delete_quietly(table.io, [r.path for r, _ in written])
            raise
        sequence = max(d.sequence_number for d in applying if data.path in positions[d.path])
        written.append((record, sequence))
    return written
