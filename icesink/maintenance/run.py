"""One maintenance run on one table: what is due, doing it, and a report of before and after."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from pyiceberg.table.refs import MAIN_BRANCH

from icesink.catalog.loader import load_table
from icesink.iceberg.describe import check_format_version, writer_spec
from icesink.iceberg.publish import branch_line
from icesink.iceberg.scan import live_files
from icesink.iceberg.snapshots import head_snapshot_id
from icesink.maintenance.committing import MaintenanceTarget
from icesink.maintenance.compact import compact, plan_compaction
from icesink.maintenance.convert import convert_equality_deletes
from icesink.maintenance.merge_deletes import merge_position_deletes, plan_delete_merges
from icesink.maintenance.policy import MaintenancePolicy
from icesink.properties import MAINTENANCE_COMPACT, MAINTENANCE_MERGE_DELETES, MAINTENANCE_PROPERTY

if TYPE_CHECKING:
    from pyiceberg.table import Table
    from pyiceberg.table.metadata import TableMetadata

    from icesink.maintenance.compact import CompactionResult, FileGroup
    from icesink.maintenance.convert import ConversionResult
    from icesink.maintenance.merge_deletes import MergeResult

log = logging.getLogger("icesink.maintenance")
# What a compaction pass leaves in the history when it does something (conversion is checked at every commit).
PASS_KINDS = frozenset({MAINTENANCE_COMPACT, MAINTENANCE_MERGE_DELETES})


@dataclass(frozen=True)
class TableStats:
    """The live files of a table at one moment."""

    data_files: int
    data_bytes: int
    position_delete_files: int
    equality_delete_files: int
    delete_bytes: int

    @classmethod
    def of(cls, table: Table, branch: str = MAIN_BRANCH) -> TableStats:
        head = head_snapshot_id(table.metadata, branch)
        if head is None:
            return cls(0, 0, 0, 0, 0)
        live = live_files(table, head)
        deletes = live.position_deletes + live.equality_deletes
        return cls(
            data_files=len(live.data),
            data_bytes=sum(f.file.file_size_in_bytes for f in live.data),
            position_delete_files=len(live.position_deletes),
            equality_delete_files=len(live.equality_deletes),
            delete_bytes=sum(f.file.file_size_in_bytes for f in deletes),
        )


@dataclass(frozen=True)
class Due:
    """What a table needs now."""

    convert: bool
    compact: bool

    def __bool__(self) -> bool:
        return self.convert or self.compact


def equality_deletes_in(metadata: TableMetadata, branch: str = MAIN_BRANCH) -> bool:
    """From the branch head's summary totals: no manifest is read."""
    snapshot = metadata.snapshot_by_name(branch)
    if snapshot is None or snapshot.summary is None:
        return False
    return int(snapshot.summary["total-equality-deletes"] or 0) > 0


def commits_since_compaction(metadata: TableMetadata, limit: int, branch: str = MAIN_BRANCH) -> int:
    """Snapshots on the branch head's ancestry since the last compaction pass, counting at most ``limit``."""
    snapshot = metadata.snapshot_by_name(branch)
    count = 0
    while snapshot is not None and count < limit:
        # A pass that merged deletes without compacting counts as one too: else every commit would be a pass.
        if snapshot.summary is not None and snapshot.summary[MAINTENANCE_PROPERTY] in PASS_KINDS:
            break
        count += 1
        snapshot = metadata.snapshot_by_id(snapshot.parent_snapshot_id) if snapshot.parent_snapshot_id else None
    return count


def due(table: Table, policy: MaintenancePolicy, branch: str = MAIN_BRANCH) -> Due:
    """Cheap to ask after every commit: conversion from the summary, compaction every ``min_commits``.

    Only a threshold above one equality delete file makes the question read manifests (to count them).
    """

    metadata = table.metadata
    convert = equality_deletes_in(metadata, branch)
    if convert and policy.equality_delete_files > 1:
        head = head_snapshot_id(metadata, branch)
        convert = len(live_files(table, head).equality_deletes) >= policy.equality_delete_files
    return Due(
        convert=convert,
        compact=commits_since_compaction(metadata, policy.min_commits, branch) >= policy.min_commits,
    )


@dataclass
class MaintenanceReport:
    """What a run found and did; ``icesink maintain`` prints it."""

    table: str
    dry_run: bool
    before: TableStats
    branch: str = MAIN_BRANCH
    after: TableStats | None = None
    conversion: ConversionResult | None = None
    compaction: CompactionResult | None = None
    merge: MergeResult | None = None
    planned_groups: int = 0
    planned_files: int = 0
    planned_delete_merges: int = 0  # partitions whose position deletes are to be merged
    older_spec_files: int = 0
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class MaintenanceRequest:
    """What one maintenance run is asked to do, and how far it may go: the one value both entry points take
    (``icesink maintain`` and the committer between commits, through :class:`~icesink.committer.maintainer.Maintainer`).
    """

    policy: MaintenancePolicy
    everything: bool = False  # convert and compact whatever is there, due or not
    dry_run: bool = False  # plan and report; change nothing
    keep_going: Callable[[], bool] = lambda: True  # asked between compaction groups: False stops the run there
    progress: Callable[[int, FileGroup, CompactionResult], None] | None = None  # after each compaction group
    convert_max_rows: int | None = None  # a conversion that would read more rows is left to a later run


def published_sequence(table: Table, branch: str) -> int | None:
    """The sequence number of main's head, for a branch main can follow but has not caught up with (see
    :func:`~icesink.maintenance.compact.plan_compaction`); None otherwise."""
    if branch == MAIN_BRANCH:
        return None
    line = branch_line(table, branch)
    main = table.metadata.snapshot_by_id(line.main_id) if line.main_id is not None else None
    if not line.ahead or main is None:  # diverged (main cannot follow), caught up, or no main
        return None
    return main.sequence_number or 0


def maintain_table(
    target: MaintenanceTarget, table: Table, request: MaintenanceRequest
) -> tuple[Table, MaintenanceReport]:
    """Convert equality deletes and compact what is due (everything with ``request.everything``), on the target's
    branch."""

    started = time.monotonic()
    check_format_version(table, target.identifier)
    # What the rewrite will refuse (a codec no writer honours, say), a dry run refuses too.
    writer_spec(table, target.identifier, "maintenance")
    policy, everything, dry_run = request.policy, request.everything, request.dry_run
    branch = target.branch
    report = MaintenanceReport(target.identifier, dry_run, TableStats.of(table, branch), branch)
    if target.head_id(table) is None:
        report.notes.append("the table has no snapshot yet" if branch == MAIN_BRANCH else f"it has no branch {branch}")
        return table, report
    todo = Due(convert=True, compact=True) if everything else due(table, policy, branch)
    todo = Due(convert=todo.convert and report.before.equality_delete_files > 0, compact=todo.compact)
    if todo.convert and not dry_run:
        report.conversion = convert_equality_deletes(target, table, max_rows=request.convert_max_rows)
        if report.conversion.skipped:
            report.notes.append(report.conversion.skipped)
        table = load_table(target.catalog, target.config, target.identifier)
    if todo.compact:
        plan = plan_compaction(table, policy, everything, branch, published_sequence(table, branch))
        report.planned_groups, report.planned_files = len(plan.groups), plan.files
        report.older_spec_files = plan.older_spec_files
        if plan.older_spec_files:
            report.notes.append(f"{plan.older_spec_files} data file(s) of older partition specs are left as they are")
        if plan.groups and not dry_run:
            table, report.compaction = compact(
                target, table, plan, request.keep_going, request.progress, policy.max_commits
            )
        stopped = report.compaction is not None and report.compaction.stopped_early
        if not stopped and (not report.compaction or request.keep_going()):
            # After compaction, which applies the deletes of what it rewrites: what is left is merged.
            rewriting = frozenset(str(f.file.file_path) for g in plan.groups for f in g.files) if dry_run else None
            merges = plan_delete_merges(table, target, everything, rewriting or frozenset())
            report.planned_delete_merges = len(merges.merges)
            if merges.merges and not dry_run:
                table, report.merge = merge_position_deletes(
                    target, table, merges, policy.max_group_bytes, request.keep_going, policy.max_commits
                )
    if dry_run and report.before.equality_delete_files:
        report.notes.append(f"would convert {report.before.equality_delete_files} equality delete file(s)")
    report.after = TableStats.of(table, branch) if not dry_run else None
    report.seconds = time.monotonic() - started
    return table, report
