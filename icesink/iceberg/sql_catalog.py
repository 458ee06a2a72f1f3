"""The SQL catalog icesink opens: pyiceberg's ``SqlCatalog``, staging a commit's metadata without copying it whole.

pyiceberg stages every commit's new metadata with ``update_table_metadata``, which ends with a deep copy of the
whole metadata: every snapshot with its summary, every schema and log entry. That cost about 0.8 ms for a young
table and grows with its history, and a micro-batch into 200 tables paid it 200 times. Every update pyiceberg
applies builds new containers rather than changing the old metadata's (``snapshots + [new]``, a new ``refs``
dict), and nothing in icesink changes metadata in place, so the new metadata can share what did not change with
the old, as Iceberg Java's ``TableMetadata.Builder`` does.
"""

from __future__ import annotations

import datetime

from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.table import StagedTable, Table
from pyiceberg.table.locations import load_location_provider
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.update import (
    TableRequirement,
    TableUpdate,
    _apply_table_update,
    _TableMetadataUpdateContext,
    _update_table_metadata_log,
)
from pyiceberg.typedef import Identifier
from pyiceberg.utils.datetime import datetime_to_millis


class IcesinkSqlCatalog(SqlCatalog):
    """``SqlCatalog`` whose commits share the unchanged parts of a table's metadata with its previous version."""

    def _update_and_stage_table(
        self,
        current_table: Table | None,
        table_identifier: Identifier,
        requirements: tuple[TableRequirement, ...],
        updates: tuple[TableUpdate, ...],
    ) -> StagedTable:
        if current_table is None:  # a new table: pyiceberg validates its metadata whole, once
            return super()._update_and_stage_table(current_table, table_identifier, requirements, updates)
        for requirement in requirements:
            requirement.validate(current_table.metadata)
        metadata = updated_metadata(current_table.metadata, updates, current_table.metadata_location)
        version = self._parse_metadata_version(current_table.metadata_location) + 1
        location = load_location_provider(metadata.location, metadata.properties).new_table_metadata_file_location(
            version
        )
        return StagedTable(
            identifier=table_identifier,
            metadata=metadata,
            metadata_location=location,
            io=self._load_file_io(properties=metadata.properties, location=location),
            catalog=self,
        )


def updated_metadata(base: TableMetadata, updates: tuple[TableUpdate, ...], metadata_location: str) -> TableMetadata:
    """``base`` with ``updates`` applied, as pyiceberg's ``update_table_metadata`` for an existing table, but
    sharing what did not change with ``base``."""

    context = _TableMetadataUpdateContext()
    metadata = base
    for update in updates:
        metadata = _apply_table_update(update, metadata, context)
    if context.has_changes():
        metadata = _update_table_metadata_log(metadata, metadata_location, base.last_updated_ms)
        if base.last_updated_ms == metadata.last_updated_ms:
            now = datetime_to_millis(datetime.datetime.now().astimezone())
            metadata = metadata.model_copy(update={"last_updated_ms": now})
    metadata.spec().check_compatible(metadata.schema())
    metadata.sort_order().check_compatible(metadata.schema())
    return metadata
