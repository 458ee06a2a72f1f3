"""Table metadata files, parsed once per process.

A metadata file never changes once written (a commit writes a new one and moves the catalog's pointer), so
its parsed form can be kept by its location. A stream into many tables, its committer and its admission
checks load each table several times a micro-batch; parsing and validating the JSON was most of each load.
The cache holds files up to a budget of bytes, least recently used first out.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

from pyiceberg.io import FileIO
from pyiceberg.serializers import FromInputFile
from pyiceberg.table.metadata import TableMetadata

from icesink.iceberg import check_pyiceberg_version

check_pyiceberg_version()

BUDGET_BYTES = 256 * 1024 * 1024  # of metadata JSON read; the parsed form takes a few times more

_lock = threading.Lock()
_cached: OrderedDict[str, tuple[TableMetadata, int]] = OrderedDict()
_held = [0]


def remember(location: str, metadata: TableMetadata, size: int = 0) -> None:
    """The metadata icesink itself just wrote at ``location``: the next load of the table parses nothing."""
    with _lock:
        _put(location, metadata, size)


def _put(location: str, metadata: TableMetadata, size: int) -> None:
    if location in _cached:
        return
    _cached[location] = (metadata, size)
    _held[0] += size
    while _held[0] > BUDGET_BYTES and len(_cached) > 1:
        _, (_, dropped) = _cached.popitem(last=False)
        _held[0] -= dropped


def table_metadata(io: FileIO, location: str) -> TableMetadata:
    """The metadata file at ``location``, parsed (pyiceberg's errors for a missing or unreadable file)."""
    with _lock:
        known = _cached.get(location)
        if known is not None:
            _cached.move_to_end(location)
            return known[0]
    file = io.new_input(location)
    metadata = FromInputFile.table_metadata(file)
    size = len(file) if hasattr(file, "__len__") else 0
    with _lock:
        _put(location, metadata, size)
    return metadata
