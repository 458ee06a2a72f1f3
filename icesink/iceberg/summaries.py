"""Snapshot summaries: what Iceberg computes for a snapshot (counts and totals), and icesink's properties beside."""

from __future__ import annotations

from collections.abc import Mapping

from pyiceberg.manifest import DataFile
from pyiceberg.table import TableProperties
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.snapshots import Operation, SnapshotSummaryCollector, Summary, update_snapshot_summaries

# The summary fields Iceberg computes for a snapshot (its counts and totals, the operation).
_COMPUTED_PREFIXES = ("added-", "deleted-", "removed-", "total-", "partitions.")
_COMPUTED = frozenset({"operation", "changed-partition-count", "partition-summaries-included"})


def computed_by_iceberg(name: str) -> bool:
    """Whether Iceberg's writers compute a snapshot summary field of this name (``added-records``,
    ``total-data-files``, ``partitions.<path>``, ``operation``, …): a value given for it would contradict them."""
    return name in _COMPUTED or name.startswith(_COMPUTED_PREFIXES)


def snapshot_summary(
    metadata: TableMetadata,
    parent_id: int | None,
    operation: Operation,
    added: list[DataFile],
    removed: list[DataFile],
    properties: Mapping[str, str],
) -> Summary:
    """The summary of a snapshot adding and removing these files: Iceberg's counts and totals, and ``properties``
    (except the names Iceberg computes)."""
    collector = SnapshotSummaryCollector(
        partition_summary_limit=int(
            metadata.properties.get(
                TableProperties.WRITE_PARTITION_SUMMARY_LIMIT, TableProperties.WRITE_PARTITION_SUMMARY_LIMIT_DEFAULT
            )
        )
    )
    specs = metadata.specs()
    schema = metadata.schema()
    for data_file in added:
        collector.add_file(data_file, schema=schema, partition_spec=specs[data_file.spec_id])
    for data_file in removed:
        collector.remove_file(data_file, schema=schema, partition_spec=specs[data_file.spec_id])
    parent = metadata.snapshot_by_id(parent_id) if parent_id is not None else None
    # pyiceberg computes totals for append/overwrite/delete only; a replace changes totals the same way.
    computed = Operation.OVERWRITE if operation == Operation.REPLACE else operation
    # What Iceberg computes (file and record counts, totals) is never taken from the properties given.
    given = {name: value for name, value in properties.items() if not computed_by_iceberg(name)}
    summary = update_snapshot_summaries(
        Summary(operation=computed, **{**given, **collector.build()}),
        previous_summary=parent.summary if parent else None,
    )
    if operation == Operation.REPLACE:
        summary = Summary(operation=operation, **summary.additional_properties)
    return summary
