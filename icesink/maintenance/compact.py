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
* A pass commits its groups in at most ``icesink.maintain.max-commits``
  ``replace`` snapshots (:mod:`icesink.maintenance.compact_commit`), and asks
  between groups whether checkpoints wait: one group bounds how long
  maintenance holds the committer.

Files of an older partition spec are left as they are (and reported).
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

import pyarrow as pa
from pyiceberg.expressions import AlwaysTrue
from pyiceberg.table.refs import MAIN_BRANCH

from icesink.arrays import repeated
from icesink.failpoints import failpoint
from icesink.iceberg.deletes import EqualityDeletes, PartitionKey, partition_scope
from icesink.iceberg.describe import target_file_size, writer_spec
from icesink.iceberg.references import delete_quietly
from icesink.iceberg.scan import plan_scan, position_deletes_by_file, read_files
from icesink.iceberg.schemas import with_dropped_keys
from icesink.maintenance.choosing import Candidate, candidate, chosen, count_position_deletes
from icesink.maintenance.compact_commit import (
    GroupsCommitted,
    WrittenGroup,
    commit_before_raising,
    commit_groups,
    groups_per_commit,
)
from icesink.maintenance.packing import packed
from icesink.maintenance.policy import MAX_COMMITS
from icesink.maintenance.verify import check_read, check_written
from icesink.reading_threads import in_parallel
from icesink.writer.conform import conform
from icesink.writer.files import FileNamer, RollingFileWriter
from icesink.writer.partitioning import partition_path

if TYPE_CHECKING:
    from pyiceberg.table import Table

    from icesink.iceberg.scan import PlannedDataFile, PlannedDelete
    from icesink.maintenance.committing import MaintenanceTarget
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

    def output_sequence(self, base_sequence_number: int) -> int:
        """The data sequence number of the files it writes, in a plan whose base has ``base_sequence_number``."""
        return self.sequence_number if self.sequence_number is not None else base_sequence_number


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
    max_commits: int = MAX_COMMITS,
) -> tuple[Table, CompactionResult]:
    """Rewrite the plan's groups while ``keep_going()`` says so, committed in at most ``max_commits`` snapshots.

    ``keep_going`` is asked between groups; when it says stop, the groups written so far are committed first.
    ``progress(number, group, result)`` is called after each group is written.
    """
    started = time.monotonic()
    result = CompactionResult(groups_planned=len(plan.groups))
    keys = (i for d in plan.equality_deletes for i in d.file.equality_ids or ())
    deletes = EqualityDeletes(table, with_dropped_keys(table, table.schema(), keys), plan.equality_deletes)
    deletes.preload()
    per_commit = groups_per_commit(len(plan.groups), max_commits)
    written: list[WrittenGroup] = []

    def commit(batch: list[WrittenGroup]) -> Table:
        done = commit_groups(target, table, plan, batch)
        _account(target, done, result)
        return done.table

    try:
        for number, group in enumerate(plan.groups):
            if number and not keep_going():
                result.stopped_early = True
                break
            if _spec_changed(target, table, plan, number, result):
                break
            records = tuple(_rewrite(target, table, plan, group, number, deletes))
            written.append(WrittenGroup(number, group, records, group.output_sequence(plan.base_sequence_number)))
            failpoint("maintain.compact.after-write")
            result.files_written += len(records)
            result.bytes_written += sum(r.file_size_bytes for r in records)
            if progress is not None:
                progress(number, group, replace(result, seconds=time.monotonic() - started))
            if len(written) == per_commit:
                batch, written = written, []  # handed over: the commit deletes them, or keeps them if unsure
                table = commit(batch)
    except Exception:  # a group that cannot be rewritten (a check failed, say)
        batch, written = written, []
        if batch:
            commit_before_raising(target, "groups", lambda: commit(batch))
        raise
    except BaseException:
        delete_quietly(table.io, [p for w in written for p in w.paths])
        raise
    if written:
        table = commit(written)
    result.seconds = time.monotonic() - started
    return table, result


def _account(target: MaintenanceTarget, done: GroupsCommitted, result: CompactionResult) -> None:
    for each, reason in done.refused:
        result.groups_failed.append(reason)
        result.files_written -= len(each.records)  # counted when written; deleted since
        result.bytes_written -= sum(r.file_size_bytes for r in each.records)
        log.info("table=%s: compaction group %d left for the next run: %s", target.identifier, each.number, reason)
    if not done.committed:
        return
    head = target.head_id(done.table)
    if head is not None:
        result.snapshot_ids.append(head)
    result.delete_files_dropped += done.delete_files_dropped
    for each in done.committed:
        result.groups_committed += 1
        result.files_rewritten += len(each.group.files)
        result.bytes_rewritten += each.group.bytes


def _spec_changed(
    target: MaintenanceTarget, table: Table, plan: CompactionPlan, number: int, result: CompactionResult
) -> bool:
    """Whether another tool changed the partition spec since the plan (the pass then ends: its groups are of the
    spec before, whose files compaction leaves as they are; written with the new one, their rows would be filed
    under partition values of the old)."""
    planned, current = plan.groups[number].files[0].file.spec_id, table.metadata.default_spec_id
    if planned == current:
        return False
    reason = f"the partition spec changed since planning (spec {planned} to {current}); files of an older spec stay"
    log.info("table=%s: %d compaction group(s) left: %s", target.identifier, len(plan.groups) - number, reason)
    result.groups_failed += [reason] * (len(plan.groups) - number)
    return True


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
        parts = in_parallel(read, group.files)
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


def _bin_packed(
    scope: PartitionKey, sequence: int | None, files: list[PlannedDataFile], max_bytes: int
) -> list[FileGroup]:
    """``files`` in groups of at most ``max_bytes`` (a larger file alone)."""
    ordered = sorted(files, key=lambda f: str(f.file.file_path))
    return [
        FileGroup(scope, tuple(group), sequence)
        for group in packed(ordered, lambda f: f.file.file_size_in_bytes, max_bytes)
    ]
