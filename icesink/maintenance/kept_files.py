"""What converting equality deletes keeps of the data files it reads: footers, bloom filters, key columns.

Every keyed checkpoint's commit resolves its equality deletes against the data files of the table that may hold
a deleted key, and looks at the same files again at the next commit, until maintenance rewrites them. A table
of streaming upserts gains a file at every micro-batch, so a commit that read them all again would cost more
with every file. A committed data file never changes: its footer and its key columns' bloom filters, read
once, serve every later commit in this process, and so do its key columns while the memory is not wanted
for others. A location alone does not say which file it is (``add_files`` can attach a regenerated file
where an earlier one was): a file is named by its table, location, size and data sequence number, as the
change reader names it (``icesink.iceberg.read_caches``).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from icesink.iceberg.bloom_filters import read_bitset
from icesink.iceberg.read_caches import Kept

if TYPE_CHECKING:
    from pyiceberg.io import FileIO
    from pyiceberg.table import Table

    from icesink.iceberg.scan import LiveFile

FileName = tuple[str, str, int, int]  # table uuid, location, size in bytes, data sequence number

# Footers of a few thousand files; bloom filters and key columns within a budget of bytes each: the key
# columns of a few million rows, small beside the committer's other memory.
FOOTERS = 8192
BLOOM_FILTER_BYTES = 32 * 1024 * 1024
KEY_COLUMN_BYTES = 128 * 1024 * 1024
_UNPROBED = np.empty((0, 8), dtype="<u4")  # kept for a filter this process cannot probe


@dataclass(frozen=True)
class KeptFooter:
    """A data file's Parquet footer and its schema as Arrow reads it (worked out once, not per read)."""

    metadata: pq.FileMetaData
    arrow_schema: pa.Schema


FOOTER_CACHE: Kept[KeptFooter] = Kept(FOOTERS)
BLOOM_FILTER_CACHE: Kept[np.ndarray] = Kept(BLOOM_FILTER_BYTES, lambda blocks: int(blocks.nbytes) + 64)
KEY_COLUMN_CACHE: Kept[pa.Table] = Kept(KEY_COLUMN_BYTES, lambda rows: int(rows.nbytes) + 64)


def file_name(table: Table, live: LiveFile) -> FileName:
    return (str(table.metadata.table_uuid), live.path, int(live.file.file_size_in_bytes), live.sequence_number)


class KeptFile:
    """One data file's footer, bloom filters and columns, from what is kept; the file is opened only for the rest,
    and at most once."""

    def __init__(self, io: FileIO, name: FileName) -> None:
        self._io = io
        self.name = name
        self._opened = contextlib.ExitStack()
        self._stream: Any = None
        self._footer = FOOTER_CACHE.get(name)

    def __enter__(self) -> KeptFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self._opened.close()

    def _open(self) -> Any:
        if self._stream is None:
            self._stream = self._opened.enter_context(self._io.new_input(self.name[1]).open())
        return self._stream

    @property
    def footer(self) -> KeptFooter:
        if self._footer is None:
            parquet = pq.ParquetFile(self._open())
            self._footer = KeptFooter(parquet.metadata, parquet.schema_arrow)
            FOOTER_CACHE.put(self.name, self._footer)
        return self._footer

    def bitset(self, row_group: int, column: int) -> np.ndarray | None:
        """The blocks of a column chunk's bloom filter (None: it has none, or none this module can probe)."""
        chunk = self.footer.metadata.row_group(row_group).column(column)
        if not chunk.bloom_filter_offset:
            return None
        key = (self.name, row_group, column)
        blocks = BLOOM_FILTER_CACHE.get(key)
        if blocks is None:
            blocks = read_bitset(self._open(), chunk.bloom_filter_offset, chunk.bloom_filter_length)
            blocks = _UNPROBED if blocks is None else blocks
            BLOOM_FILTER_CACHE.put(key, blocks)
        return blocks if len(blocks) else None

    def columns(self, row_groups: tuple[int, ...], columns: list[str]) -> pa.Table:
        """These columns of these row groups, in file order: each row group read once while it is kept."""
        kept = {g: KEY_COLUMN_CACHE.get((self.name, g, tuple(columns))) for g in row_groups}
        missing = [g for g, rows in kept.items() if rows is None]
        if missing:
            metadata = self.footer.metadata
            parquet = pq.ParquetFile(self._open(), metadata=metadata)
            read = parquet.read_row_groups(missing, columns=columns)
            start = 0
            for group in missing:
                size = metadata.row_group(group).num_rows
                rows = read.slice(start, size).combine_chunks()
                KEY_COLUMN_CACHE.put((self.name, group, tuple(columns)), rows)
                kept[group] = rows
                start += size
        parts = [kept[g] for g in row_groups]
        return parts[0] if len(parts) == 1 else pa.concat_tables(parts)
