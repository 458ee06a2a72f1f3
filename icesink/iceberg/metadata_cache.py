"""Table metadata files, parsed once per process.

A metadata file never changes once written (a commit writes a new one and moves the catalog's pointer), so
its parsed form can be kept by its location. A stream into many tables, its committer and its admission
checks load each table several times a micro-batch; parsing and validating the JSON was most of each load.
The cache holds files up to a budget of bytes, least recently used first out.
"""

from __future__ import annotations

from pyiceberg.io import FileIO
from pyiceberg.serializers import FromInputFile
from pyiceberg.table.metadata import TableMetadata

from icesink.iceberg import check_pyiceberg_version
from icesink.iceberg.read_caches import Kept

check_pyiceberg_version()

BUDGET_BYTES = 256 * 1024 * 1024  # of metadata JSON read; the parsed form takes a few times more

_METADATA: Kept[tuple[TableMetadata, int]] = Kept(BUDGET_BYTES, lambda kept: kept[1])


def remember(location: str, metadata: TableMetadata) -> None:
    """The metadata icesink itself just wrote at ``location``: the next load of the table parses nothing."""
    _METADATA.put(location, (metadata, _estimated_size(metadata)))


def _estimated_size(metadata: TableMetadata) -> int:
    """About the bytes of a metadata file's JSON, for one written here and never read: its logs and snapshots
    make most of it (a committer remembers each file it writes, so these must count against the budget)."""
    entries = len(metadata.snapshots) + len(metadata.snapshot_log) + len(metadata.metadata_log)
    return 4096 * (1 + len(metadata.schemas)) + 512 * entries


def table_metadata(io: FileIO, location: str) -> TableMetadata:
    """The metadata file at ``location``, parsed (pyiceberg's errors for a missing or unreadable file)."""
    known = _METADATA.get(location)
    if known is not None:
        return known[0]
    file = io.new_input(location)
    metadata = FromInputFile.table_metadata(file)
    size = len(file) if hasattr(file, "__len__") else _estimated_size(metadata)
    _METADATA.put(location, (metadata, size))
    return metadata
