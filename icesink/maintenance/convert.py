"""Equality deletes become position deletes: at commit time, and in bulk for what is left.

**At commit time** (:func:`convert_for_commit`): the committer builds each
snapshot on a head it knows, and its compare-and-swap asserts that head, so
the rows a checkpoint's equality deletes remove can be found in the head's
data files and named by position in the same commit. If anyone commits in
between, the swap fails and the committer resolves again on the new head. The
equality delete never reaches the table; a checkpoint that only inserts new
keys becomes a plain append.

**In bulk** (:func:`convert_equality_deletes`): equality deletes that are in
the table anyway (a commit over ``convert-max-rows``, another engine's
writes, tables from before) are resolved in one pass over the data files
they may touch, and replaced by position deletes in one ``delete`` commit
(Iceberg's name for a row delta that only deletes). The position deletes keep
the data sequence number of the equality deletes they replace, as Iceberg's
``RewriteFiles`` does for delete files, so concurrent maintenance by other
engines judges them exactly as it judged the originals.
"""

from __future__ import annotations

import functools
import logging
import time
import uuid
from collections import defaultdict
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pyiceberg.manifest import DataFileContent
from pyiceberg.table.snapshots import Operation

from icesink import paths
from icesink.failpoints import failpoint
from icesink.iceberg.deletes import GLOBAL, EqualityDeletes, PartitionKey, data_in_other_specs, partition_scope
from icesink.iceberg.describe import parquet_compression
from icesink.iceberg.key_pruning import KeyPruning, PruningCounts
from icesink.iceberg.manifests import AddedFile, to_data_file
from icesink.iceberg.scan import LiveFile, live_files
from icesink.iceberg.schemas import with_dropped_keys
from icesink.iceberg.snapshots import SnapshotChange
from icesink.maintenance.committing import ConflictError, MaintenanceTarget, commit_change
from icesink.maintenance.positions import PARALLEL_FILES, DeletedRows, KeyRead, deleted_rows, plan_key_reads
from icesink.properties import BASE_SNAPSHOT_PROPERTY, MAINTENANCE_CONVERT, MAINTENANCE_PROPERTY, POLICY_PROPERTIES
from icesink.reading_threads import in_parallel
from icesink.results import FileRecord
from icesink.writer.position_deletes import write_position_deletes
from icesink.writer.storage import storage_options

if TYPE_CHECKING:
    from pyiceberg.manifest import DataFile
    from pyiceberg.table import Table

    from icesink.iceberg.history import ChangesSince
    from icesink.iceberg.manifests import AddedFile
    from icesink.iceberg.scan import LiveFile, ManifestCache
    from icesink.iceberg.snapshots import SnapshotChange
    from icesink.maintenance.policy import MaintenancePolicy

log = logging.getLogger("icesink.maintenance")
CONVERT_MAX_ROWS = POLICY_PROPERTIES["convert_max_rows"]


def write_position_delete_files(table: Table, rows: list[DeletedRows], label: str) -> list[FileRecord]:
    """One position delete file per partition, next to the data files it deletes from."""

    by_partition: dict[tuple[int, PartitionKey], list[DeletedRows]] = defaultdict(list)
    for found in rows:
        by_partition[(found.data.file.spec_id, found.scope)].append(found)
    options = storage_options(table.io.properties)
    _, compression = parquet_compression(table, ".".join(table.name()))

    def write(group: list[DeletedRows]) -> FileRecord:
        directory = group[0].data.path.rsplit("/", 1)[0]
        location = paths.join(directory, f"{paths.segment(label, 64)}-{uuid.uuid4().hex}-pos-deletes.parquet")
        spec_id = group[0].data.file.spec_id
        partition = tuple(group[0].data.file.partition[i] for i in range(len(group[0].data.file.partition)))
        deletes = {found.data.path: found.positions for found in group}
        return write_position_deletes(location, deletes, spec_id, partition, options, compression)

    # A table partitioned many ways writes many small files: on several threads, which writing files frees.
    return in_parallel(write, list(by_partition.values()), alone_below=PARALLEL_FILES)


@dataclass(frozen=True)
class CommitConversion:
    """A checkpoint's equality deletes, resolved on the head it is committed on."""

    position_deletes: list[DataFile]
    written: list[str]
    rows: int
    equality_deletes: int


def convert_for_commit(
    table: Table,
    staged: list[DataFile],
    policy: MaintenancePolicy,
    label: str,
    cache: ManifestCache | None = None,
    *,
    required: bool = False,
    head: int | None = None,
) -> CommitConversion | None:
    """Position deletes for ``staged`` equality deletes on snapshot ``head`` (default: the table's current one,
    the head of main), the one the commit builds on; None when over ``convert_max_rows``.

    Every live data file has a lower sequence number than the commit that
    will carry the deletes, so every data file in their scope is a candidate.
    ``required`` conversions (deletes the table must not keep) ignore the row limit, as do those of a table
    that holds data files of another partition spec: the deletes then reach every file, which a reader
    would not apply them to (see :func:`data_in_other_specs`).
    """

    sequence = table.metadata.next_sequence_number()
    schema = with_dropped_keys(table, table.schema(), (i for f in staged for i in f.equality_ids or ()))
    everywhere = bool(data_in_other_specs(table, staged, head))
    deletes = EqualityDeletes(table, schema, [LiveFile(f, sequence) for f in staged], everywhere=everywhere)
    required = required or everywhere
    pruning = KeyPruning(table, schema, deletes)
    live = live_files(table, head, cache=cache, reading=pruning.reads)
    reads = plan_key_reads(table, pruning.files(live.data), pruning)
    counts = pruning.counts
    if not _within_limit(table, reads, counts, policy, required):
        return None
    found = deleted_rows(table, schema, reads, deletes)
    log.info(
        "table=%s: %s read the keys of %d of %d data files in its deletes' scope (%d rows; manifests: %d read, %d "
        "skipped by partition; row groups: %d read, %d skipped by statistics, %d by bloom filters)",
        ".".join(table.name()),
        label,
        len(reads),
        counts.files_in_scope,
        counts.rows_read,
        counts.manifests_read,
        counts.manifests_skipped_by_partition,
        counts.row_groups_read,
        counts.row_groups_skipped_by_statistics,
        counts.row_groups_skipped_by_bloom_filter,
    )
    records = write_position_delete_files(table, found, label)
    version = table.metadata.format_version
    return CommitConversion(
        position_deletes=[to_data_file(r, version) for r in records],
        written=[r.path for r in records],
        rows=sum(len(f.positions) for f in found),
        equality_deletes=len(staged),
    )


def _within_limit(
    table: Table, reads: list[KeyRead], counts: PruningCounts, policy: MaintenancePolicy, required: bool
) -> bool:
    """Whether the commit reads the keys it has to (over ``convert_max_rows`` only when ``required``), said in the
    log when over."""
    rows = sum(r.rows for r in reads)
    if rows <= policy.convert_max_rows:
        return True
    if required:
        log.warning(
            "table=%s: %d rows in %d files may hold keys of this checkpoint's deletes (over %d), converted anyway: "
            "readers would not apply its equality deletes to every row they remove (keys inside structs, which "
            "Iceberg Java does not apply, or data files of another partition spec)",
            ".".join(table.name()),
            rows,
            len(reads),
            policy.convert_max_rows,
        )
        return True
    log.warning(
        "table=%s: the keys of this checkpoint's deletes are spread over the table: %d rows in %d of %d files may "
        "hold them (over %s=%d); its equality deletes are committed as they are and maintenance converts them later",
        ".".join(table.name()),
        rows,
        len(reads),
        counts.files_in_scope,
        CONVERT_MAX_ROWS,
        policy.convert_max_rows,
    )
    return False


@dataclass(frozen=True)
class ConversionResult:
    """What a bulk conversion did."""

    equality_delete_files: int
    position_delete_files: int
    deleted_rows: int
    data_files_read: int
    snapshot_id: int | None
    seconds: float
    conflict: str | None = None
    skipped: str | None = None


def convert_equality_deletes(
    target: MaintenanceTarget, table: Table, label: str = "maintenance", max_rows: int | None = None
) -> ConversionResult:
    """Replace every equality delete of the table (at the head of the target's branch) by position deletes, in one
    commit.

    With ``max_rows``, a conversion that would read the keys of more rows is left for later.
    """

    started = time.monotonic()
    live = live_files(table, target.head_id(table))
    schema = with_dropped_keys(
        table, table.schema(), (i for d in live.equality_deletes for i in d.file.equality_ids or ())
    )
    deletes = EqualityDeletes(table, schema, live.equality_deletes)
    pruning = KeyPruning(table, schema, deletes)
    reads = plan_key_reads(table, pruning.files(live.data), pruning)
    rows = sum(r.rows for r in reads)
    if max_rows is not None and rows > max_rows:
        why = f"equality deletes reaching {rows} rows (over {max_rows}) left for a run while no checkpoint waits"
        return ConversionResult(len(live.equality_deletes), 0, 0, 0, None, time.monotonic() - started, skipped=why)
    found = deleted_rows(table, schema, reads, deletes)
    failpoint("maintain.convert.after-resolve")
    records = write_position_delete_files(table, found, label)
    written = [r.path for r in records]
    failpoint("maintain.convert.after-write")
    newest = _newest_delete_per_scope(table, live.equality_deletes)
    version = table.metadata.format_version
    added = tuple(AddedFile(to_data_file(r, version), _sequence_for(table, r, newest)) for r in records)
    removed = frozenset(e.path for e in live.equality_deletes)
    referenced = frozenset(f.data.path for f in found)

    build = functools.partial(
        _conversion_change,
        added=added,
        removed=removed,
        referenced=referenced,
        newest=newest,
        base_snapshot_id=live.snapshot_id,
    )
    try:
        committed = commit_change(target, table, live.snapshot_id, build, written)
    except ConflictError as e:
        log.info("table=%s: equality delete conversion left for the next run: %s", target.identifier, e)
        return ConversionResult(len(removed), 0, 0, len(reads), None, time.monotonic() - started, str(e))
    return ConversionResult(
        equality_delete_files=len(removed),
        position_delete_files=len(records),
        deleted_rows=sum(len(f.positions) for f in found),
        data_files_read=len(reads),
        snapshot_id=target.head_id(committed),
        seconds=time.monotonic() - started,
    )


def _conversion_change(
    head: Table,
    since: ChangesSince,
    *,
    added: tuple[AddedFile, ...],
    removed: frozenset[str],
    referenced: frozenset[str],
    newest: dict[PartitionKey, int],
    base_snapshot_id: int | None,
) -> SnapshotChange:
    """The conversion's snapshot on ``head``, unless a commit since took away what it depends on."""

    gone = (removed | referenced) & since.removed
    if gone:
        raise ConflictError(f"{len(gone)} file(s) this conversion depends on were removed since, e.g. {min(gone)}")
    for new in since.added:
        if new.file.content == DataFileContent.DATA and _older_than_a_delete(head, new, newest):
            raise ConflictError(f"data file {new.path} was added since with an older sequence number")
    return SnapshotChange(
        added=added,
        removed=removed,
        operation=Operation.DELETE,
        properties={MAINTENANCE_PROPERTY: MAINTENANCE_CONVERT, BASE_SNAPSHOT_PROPERTY: str(base_snapshot_id)},
    )


def _newest_delete_per_scope(table: Table, deletes: list[LiveFile]) -> dict[PartitionKey, int]:
    newest: dict[PartitionKey, int] = {}
    for delete in deletes:
        scope = partition_scope(table, delete.file)
        newest[scope] = max(newest.get(scope, 0), delete.sequence_number)
    return newest


def _sequence_for(table: Table, record: FileRecord, newest: dict[PartitionKey, int]) -> int:
    """The newest equality delete that can reach the record's partition: its rows were removed by one of them."""
    spec = table.metadata.specs()[record.spec_id]
    scope: PartitionKey = GLOBAL if spec.is_unpartitioned() else (record.spec_id, tuple(record.partition))
    return max(newest.get(scope, 0), newest.get(GLOBAL, 0))


def _older_than_a_delete(table: Table, data: LiveFile, newest: dict[PartitionKey, int]) -> bool:
    """A data file added since the base that a converted equality delete would have reached."""
    scope = partition_scope(table, data.file)
    return data.sequence_number < max(newest.get(scope, 0), newest.get(GLOBAL, 0))
