"""Position deletes merged into one delete file per data file, the data files left as they are.

Iceberg's ``rewrite_position_delete_files``. Every commit of an upsert stream adds a position delete file per
partition (its converted equality deletes), naming rows of many data files. A data file whose deletes remove
too little of it to be worth rewriting (:mod:`icesink.maintenance.choosing`) would gather one more delete file
per commit, each read by every reader of it; merging them costs a read and a write of the positions alone.

* A partition is merged when one of its data files is named by two or more position delete files. All the
  position delete files of the partition are then read, and written again as one file per data file they name:
  a file naming several data files can only go once every one of them has its own.
* Positions naming a data file that is no longer live (rewritten since) are dropped: they delete nothing.
* Each merged file takes the newest data sequence number of the files it merges, so it applies to exactly the
  data files they applied to.
* The commit is a ``replace`` of delete files only: no data file and no row changes. A data file or delete file
  removed since planning sends the merge back to the next pass; delete files added since stay as they are.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections import defaultdict
from dataclasses import dataclass
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
from icesink.properties import BASE_SNAPSHOT_PROPERTY, MAINTENANCE_MERGE_DELETES, MAINTENANCE_PROPERTY
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
    delete_files_rewritten: int = 0
    delete_files_written: int = 0
    bytes_rewritten: int = 0
    bytes_written: int = 0
    positions: int = 0
    snapshot_id: int | None = None
    conflict: str | None = None
    seconds: float = 0.0


def plan_delete_merges(table: Table, target: MaintenanceTarget, everything: bool = False) -> MergePlan:
    """The partitions with a data file named by two or more position delete files (with ``everything``: by one
    that also names another data file, or by two)."""

    head = target.head_id(table)
    live = live_files(table, head)
    counts = count_position_deletes(table.io, (d.file for d in live.position_deletes))
    data_by_path = {d.path: d for d in live.data}
    deletes_by_path = {d.path: d for d in live.position_deletes}
    names: dict[str, set[str]] = defaultdict(set)  # delete file → the data files it names
    for data_path, naming in counts.by_data_file.items():
        for delete_path in naming:
            names[delete_path].add(data_path)
    by_scope: dict[PartitionKey, set[str]] = defaultdict(set)
    due: set[PartitionKey] = set()
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
        # A delete file reaching other partitions than this one (another writer's) is left as it is.
        if any(partition_scope(table, d.file) != scope for d in deletes):
            continue
        named = sorted({p for d in deletes for p in names[d.path]} & data_by_path.keys())
        merges.append(DeleteMerge(scope, tuple(deletes), tuple(data_by_path[p] for p in named)))
    return MergePlan(head, tuple(merges))


def merge_position_deletes(target: MaintenanceTarget, table: Table, plan: MergePlan) -> tuple[Table, MergeResult]:
    """Write each planned partition's merged delete files and swap them in, in one ``replace`` commit."""

    started = time.monotonic()
    result = MergeResult(partitions=len(plan.merges))
    if not plan.merges:
        return table, result
    records: list[tuple[FileRecord, int]] = []
    try:
        for merge in plan.merges:
            records += _write_merged(table, merge)
        failpoint("maintain.merge.after-write")
        version = table.metadata.format_version
        added = tuple(AddedFile(to_data_file(record, version), sequence) for record, sequence in records)
        removed = frozenset(d.path for m in plan.merges for d in m.deletes)
        named = frozenset(d.path for m in plan.merges for d in m.data)
    except BaseException:
        delete_quietly(table.io, [r.path for r, _ in records])
        raise

    def build(head: Table, since: ChangesSince) -> SnapshotChange:
        gone = (removed | named) & since.removed
        if gone:
            raise ConflictError(f"{len(gone)} file(s) this merge reads were removed since, e.g. {min(gone)}")
        return SnapshotChange(
            added=added,
            removed=removed,
            operation=Operation.REPLACE,
            properties={
                MAINTENANCE_PROPERTY: MAINTENANCE_MERGE_DELETES,
                BASE_SNAPSHOT_PROPERTY: str(plan.base_snapshot_id),
            },
        )

    try:
        table = commit_change(target, table, plan.base_snapshot_id, build, [r.path for r, _ in records])
    except ConflictError as e:
        log.info("table=%s: merging position deletes left for the next run: %s", target.identifier, e)
        result.conflict = str(e)
        result.seconds = time.monotonic() - started
        return table, result
    result.snapshot_id = target.head_id(table)
    result.delete_files_rewritten = len(removed)
    result.delete_files_written = len(records)
    result.bytes_rewritten = sum(m.bytes for m in plan.merges)
    result.bytes_written = sum(r.file_size_bytes for r, _ in records)
    result.positions = sum(r.record_count for r, _ in records)
    result.seconds = time.monotonic() - started
    return table, result


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
