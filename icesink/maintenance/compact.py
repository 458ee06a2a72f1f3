"""Compaction: small data files of a partition, and files with deletes, rewritten as few large ones.

The rules, as Iceberg's ``RewriteFiles`` has them:

* A group's files are read with every delete that applies to them as of the
  base snapshot (position deletes, and equality deletes with a higher data
  sequence number), and written again as files of up to
  ``write.target-file-size-bytes``.
* The new files take the data sequence number of the base snapshot, not a new
  one: an equality delete committed after the base (a stream's next upsert)
  has a higher number and still applies to them, so no deleted row comes back.
* A position delete committed after the base against a file of the group
  names a row by its old position, which the rewrite does not keep: that
  group fails, its files are deleted, and a later run retries it. The delete
  is never lost. Equality deletes never make a group fail, so a stream that
  upserts all the time cannot starve compaction.
* Delete files the rewrite leaves with nothing to do are dropped: position
  deletes whose data files are all rewritten, equality deletes with no live
  data file below their sequence number in their scope.
* Each group is its own ``replace`` commit, so one group bounds how long
  maintenance holds the committer.

Files of an older partition spec are left as they are (and reported).
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.parquet as pq
from pyiceberg.expressions import AlwaysTrue
from pyiceberg.manifest import DataFileContent
from pyiceberg.table.refs import MAIN_BRANCH
from pyiceberg.table.snapshots import Operation

from icesink.arrays import repeated
from icesink.failpoints import failpoint
from icesink.iceberg.deletes import GLOBAL, EqualityDeletes, PartitionKey, partition_scope
from icesink.iceberg.describe import target_file_size, writer_spec
from icesink.iceberg.manifests import AddedFile, to_data_file
from icesink.iceberg.scan import live_files, plan_scan, position_deletes_by_file, read_files
from icesink.iceberg.schemas import with_dropped_keys
from icesink.iceberg.snapshots import SnapshotChange
from icesink.maintenance.choosing import Candidate, candidate, chosen, count_position_deletes
from icesink.maintenance.committing import ConflictError, MaintenanceTarget, commit_change
from icesink.maintenance.packing import packed
from icesink.maintenance.verify import check_read, check_written
from icesink.properties import BASE_SNAPSHOT_PROPERTY, MAINTENANCE_COMPACT, MAINTENANCE_PROPERTY
from icesink.writer.conform import conform
from icesink.writer.files import FileNamer, RollingFileWriter
from icesink.writer.partitioning import partition_path
from icesink.writer.position_deletes import FILE_PATH_ID

if TYPE_CHECKING:
    from pyiceberg.manifest import DataFile
    from pyiceberg.table import Table

    from icesink.iceberg.history import ChangesSince
    from icesink.iceberg.scan import LiveFile, PlannedDataFile, PlannedDelete
    from icesink.iceberg.snapshots import SnapshotChange
    from icesink.maintenance.policy import MaintenancePolicy
    from icesink.results import FileRecord

log = logging.getLogger("icesink.maintenance")


@dataclass(frozen=True)
class FileGroup:
    """Data files of one partition rewritten together, with the position deletes that apply to them."""

    scope: PartitionKey
    files: tuple[PlannedDataFile, ...]
    # The data sequence number of what it writes; None: the plan's base. Any number from the newest of its files'
    # to the base's reads the same: the deletes in between were applied by the rewrite, and apply to nothing again.
    sequence_number: int | None = None

    @property
    def bytes(self) -> int:
        return sum(f.file.file_size_in_bytes for f in self.files)


@dataclass(frozen=True)
class CompactionPlan:
    """What is worth rewriting in the table as of ``base_snapshot_id``."""

    base_snapshot_id: int | None
    base_sequence_number: int
    groups: tuple[FileGroup, ...]
    data_files: int
    older_spec_files: int
    equality_deletes: tuple[PlannedDelete, ...] = ()

    @property
    def files(self) -> int:
        return sum(len(g.files) for g in self.groups)


def plan_compaction(
    table: Table,
    policy: MaintenancePolicy,
    everything: bool = False,
    branch: str = MAIN_BRANCH,
    published_sequence: int | None = None,
) -> CompactionPlan:
    """Files to rewrite, grouped by partition and bin-packed up to ``max_group_bytes``.

    Which files, :mod:`icesink.maintenance.choosing` says: those whose deletes remove ``delete_ratio_threshold``
    of their rows (or number ``delete_file_threshold``), and small files by size tier; with ``everything``, every
    file with a delete and every small file of a partition with two. Planned on the head of ``branch``.

    ``published_sequence`` is the sequence number of main's head, for a branch main has not caught up with: the
    files main holds and those after it are then never rewritten together, and main's are written with main's
    sequence number. So the rows main holds never count as added since main, which is what a branch's audit
    after a failure reads (rewritten into a file of the branch, they would be audited again, though the branch
    cannot change them).
    """

    snapshot = table.metadata.snapshot_by_name(branch)
    planned = plan_scan(table, snapshot.snapshot_id if snapshot else None, AlwaysTrue())
    deletes = EqualityDeletes(table, planned.schema, planned.equality_deletes)
    counts = count_position_deletes(table.io, (d for f in planned.data for d in f.position_deletes))
    small = policy.min_file_ratio * target_file_size(table, ".".join(table.name()))
    default_spec = table.metadata.default_spec_id
    # By partition, and (a branch ahead of main) by whether main holds the file: main's sequence number, or None.
    by_partition: dict[tuple[PartitionKey, int | None], list[Candidate]] = defaultdict(list)
    older = 0
    for data in planned.data:
        if data.file.spec_id != default_spec:
            older += 1
            continue
        scope = partition_scope(table, data.file)
        equality = deletes.files_applying(scope, data.sequence_number)
        found = candidate(data, counts, table.io, equality, policy, small, everything)
        if found is not None:
            in_main = published_sequence is not None and data.sequence_number <= published_sequence
            by_partition[scope, published_sequence if in_main else None].append(found)
    groups: list[FileGroup] = []
    for (scope, sequence), candidates in by_partition.items():
        files = chosen(candidates, policy.min_input_files, everything)
        if files:
            groups += _bin_packed(scope, sequence, files, policy.max_group_bytes)
    return CompactionPlan(
        base_snapshot_id=snapshot.snapshot_id if snapshot else None,
        base_sequence_number=(snapshot.sequence_number or 0) if snapshot else 0,
        groups=tuple(groups),
        data_files=len(planned.data),
        older_spec_files=older,
        equality_deletes=tuple(planned.equality_deletes),
    )


@dataclass
class CompactionResult:
    """What a compaction run did."""

    groups_planned: int = 0
    groups_committed: int = 0
    groups_failed: list[str] = field(default_factory=list)
    files_rewritten: int = 0
    bytes_rewritten: int = 0
    files_written: int = 0
    bytes_written: int = 0
    delete_files_dropped: int = 0
    snapshot_ids: list[int] = field(default_factory=list)
    seconds: float = 0.0
    stopped_early: bool = False


def compact(
    target: MaintenanceTarget,
    table: Table,
    plan: CompactionPlan,
    keep_going: Callable[[], bool] = lambda: True,
    progress: Callable[[int, FileGroup, CompactionResult], None] | None = None,
) -> tuple[Table, CompactionResult]:
    """Rewrite the plan's groups, one commit each, while ``keep_going()`` says so.

    ``progress(number, group, result)`` is called after each group.
    """
    started = time.monotonic()
    result = CompactionResult(groups_planned=len(plan.groups))
    keys = (i for d in plan.equality_deletes for i in d.file.equality_ids or ())
    deletes = EqualityDeletes(table, with_dropped_keys(table, table.schema(), keys), plan.equality_deletes)
    deletes.preload()
    for number, group in enumerate(plan.groups):
        if number and not keep_going():
            result.stopped_early = True
            break
        records = _rewrite(target, table, plan, group, number, deletes)
        failpoint("maintain.compact.after-write")
        try:
            table, dropped = _commit_group(target, table, plan, group, records)
        except ConflictError as e:
            result.groups_failed.append(str(e))
            log.info("table=%s: compaction group %d left for the next run: %s", target.identifier, number, e)
            continue
        head = target.head_id(table)
        if head is not None:
            result.snapshot_ids.append(head)
        result.groups_committed += 1
        result.files_rewritten += len(group.files)
        result.bytes_rewritten += group.bytes
        result.files_written += len(records)
        result.bytes_written += sum(r.file_size_bytes for r in records)
        result.delete_files_dropped += dropped
        if progress is not None:
            result.seconds = time.monotonic() - started
            progress(number, group, result)
    result.seconds = time.monotonic() - started
    return table, result


def _rewrite(
    target: MaintenanceTarget,
    table: Table,
    plan: CompactionPlan,
    group: FileGroup,
    number: int,
    deletes: EqualityDeletes,
) -> list[FileRecord]:
    """Read the group's rows with the deletes of the base applied and write them as new files."""

    schema = deletes.schema  # the table's, plus key columns dropped since that deletes still need
    spec = writer_spec(table, target.identifier, "maintenance").for_checkpoint(plan.base_sequence_number)
    arrow_schema = spec.arrow_schema()
    partition = group.files[0].file.partition
    key = tuple(partition[i] for i in range(len(partition)))
    directory = spec.data_location.rstrip("/")
    if spec.partition_fields:
        directory = f"{directory}/{partition_path(spec, key)}"
    writer = RollingFileWriter(
        spec, FileNamer("maintenance", plan.base_sequence_number, number, 0), key, directory, spec.columns
    )

    positions = position_deletes_by_file(table, [d for f in group.files for d in f.position_deletes])

    def read(data: PlannedDataFile) -> pa.Table:
        # One physical type per column (files read back as string or large_string alike).
        rows = read_files(table, schema, [(data.file, data.position_deletes)], None, positions)
        conformed = conform(spec, rows, number)
        table_columns = conformed.select(arrow_schema.names).cast(arrow_schema)
        check_read(table.io, target.identifier, data, table_columns, positions)
        for name in conformed.column_names[len(arrow_schema) :]:  # dropped keys, until deletes are applied
            table_columns = table_columns.append_column(name, conformed.column(name))
        return table_columns

    try:
        with ThreadPoolExecutor(max_workers=4) as pool:
            parts = list(pool.map(read, group.files))
        rows = pa.concat_tables(parts)
        if deletes:  # one join for the whole group: rows carry their file's data sequence number
            sequence = pa.concat_arrays(
                [repeated(f.sequence_number, p.num_rows) for f, p in zip(group.files, parts, strict=True)]
            )
            rows = deletes.apply(rows, sequence, group.scope)
        rows = rows.select(arrow_schema.names)
        for start in range(0, rows.num_rows, spec.row_group_rows):  # row groups (and files) of the usual size
            writer.write(rows.slice(start, spec.row_group_rows))
        records = writer.close()
        check_written(table.io, target.identifier, rows, records)
        return records
    except BaseException:
        writer.abort()
        raise


def _commit_group(
    target: MaintenanceTarget, table: Table, plan: CompactionPlan, group: FileGroup, records: list[FileRecord]
) -> tuple[Table, int]:
    version = table.metadata.format_version
    sequence = group.sequence_number if group.sequence_number is not None else plan.base_sequence_number
    added = tuple(AddedFile(to_data_file(r, version), sequence) for r in records)
    replaced = frozenset(str(f.file.file_path) for f in group.files)
    dropped: list[int] = [0]

    def build(head: Table, since: ChangesSince) -> SnapshotChange:
        _check_no_new_position_deletes(head, since, group, plan.base_sequence_number)
        obsolete = _obsolete_deletes(head, target.head_id(head), replaced, sequence, group.scope)
        dropped[0] = len(obsolete)
        return SnapshotChange(
            added=added,
            removed=replaced | obsolete,
            operation=Operation.REPLACE,
            properties={MAINTENANCE_PROPERTY: MAINTENANCE_COMPACT, BASE_SNAPSHOT_PROPERTY: str(plan.base_snapshot_id)},
        )

    committed = commit_change(target, table, plan.base_snapshot_id, build, [r.path for r in records])
    return committed, dropped[0]


def _check_no_new_position_deletes(head: Table, since: ChangesSince, group: FileGroup, base_sequence: int) -> None:
    """Iceberg's ``validateNoNewDeletesForDataFiles``: a newer position delete on a replaced file fails the group."""

    replaced = {str(f.file.file_path) for f in group.files}
    for new in since.added:
        if new.file.content != DataFileContent.POSITION_DELETES or new.sequence_number <= base_sequence:
            continue
        if partition_scope(head, new.file) not in (GLOBAL, group.scope):
            continue
        # The bounds say "maybe" for a delete file naming many data files; its file_path column says for sure.
        if _may_reference(new.file, replaced) and _referenced_paths(head, new) & replaced:
            raise ConflictError(f"position delete {new.path} was committed since against a file being rewritten")


def _bin_packed(
    scope: PartitionKey, sequence: int | None, files: list[PlannedDataFile], max_bytes: int
) -> list[FileGroup]:
    """``files`` in groups of at most ``max_bytes`` (a larger file alone)."""
    ordered = sorted(files, key=lambda f: str(f.file.file_path))
    return [
        FileGroup(scope, tuple(group), sequence)
        for group in packed(ordered, lambda f: f.file.file_size_in_bytes, max_bytes)
    ]


def _may_reference(delete: DataFile, locations: set[str]) -> bool:
    """Whether a position delete file's ``file_path`` bounds admit one of ``locations``."""

    lower = (delete.lower_bounds or {}).get(FILE_PATH_ID)
    upper = (delete.upper_bounds or {}).get(FILE_PATH_ID)
    if lower is None or upper is None:
        return True
    return any(lower <= location.encode("utf-8") <= upper for location in locations)


def _obsolete_deletes(
    head: Table, head_id: int | None, replaced: frozenset[str], output_sequence: int, scope: PartitionKey
) -> frozenset[str]:
    """Delete files reaching ``scope`` with nothing left to do once ``replaced`` are gone (judged on the branch's
    head, ``head_id``)."""

    live = live_files(head, head_id)
    remaining = [d for d in live.data if d.path not in replaced]
    remaining_paths = {d.path for d in remaining}
    obsolete: set[str] = set()
    for delete in live.position_deletes:
        if partition_scope(head, delete.file) == scope and not _referenced_paths(head, delete) & remaining_paths:
            obsolete.add(delete.path)
    for delete in live.equality_deletes:
        delete_scope = partition_scope(head, delete.file)
        # The rewritten files keep the base's sequence number: a newer equality delete still applies to them.
        if delete_scope not in (GLOBAL, scope) or output_sequence < delete.sequence_number:
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
