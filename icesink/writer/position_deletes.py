"""Position delete files: which rows of which data files are deleted.

Iceberg's format v2 layout: ``file_path`` (field id 2147483546) and ``pos``
(2147483545), sorted by path, then position. Every reader finds the data files
a delete file applies to by its ``file_path`` bounds (pyiceberg indexes a file
whose lower and upper bound are equal by that path), so the bounds are the
full, untruncated paths: a cut upper bound would sort below the real path and
the delete would silently apply to nothing.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from icesink.arrays import FIELD_ID
from icesink.results import FileContent, FileRecord, PartitionValue
from icesink.writer.files import split_offsets
from icesink.writer.spec import Compression
from icesink.writer.storage import split_location

FILE_PATH_ID = 2147483546
POS_ID = 2147483545
SCHEMA = pa.schema(
    [
        pa.field("file_path", pa.string(), nullable=False, metadata={FIELD_ID: str(FILE_PATH_ID).encode()}),
        pa.field("pos", pa.int64(), nullable=False, metadata={FIELD_ID: str(POS_ID).encode()}),
    ]
)


def write_position_deletes(
    location: str,
    deletes: Mapping[str, pa.Array],
    spec_id: int,
    partition: tuple[PartitionValue, ...],
    storage_options: tuple[tuple[str, str], ...] = (),
    compression: Compression | None = None,
) -> FileRecord:
    """Write the positions ``deletes`` (data file location → row positions) as one delete file at ``location``.

    The data files must all belong to partition ``partition`` of spec ``spec_id``.
    """
    paths = sorted(p for p, positions in deletes.items() if len(positions))
    if not paths:
        raise ValueError("a position delete file needs at least one position")
    parts = []
    for path in paths:
        positions = pc.unique(pa.array(deletes[path], pa.int64()))
        positions = positions.take(pc.sort_indices(positions))
        parts.append(pa.table([pa.array([path] * len(positions), pa.string()), positions], schema=SCHEMA))
    table = pa.concat_tables(parts)
    filesystem, fs_path = split_location(location, storage_options)
    if isinstance(filesystem, pafs.LocalFileSystem):  # object stores have no directories
        filesystem.create_dir(fs_path.rsplit("/", 1)[0], recursive=True)
    codec, level = (compression or Compression()).for_pyarrow()
    with filesystem.open_output_stream(fs_path) as stream:
        writer = pq.ParquetWriter(stream, SCHEMA, compression=codec, compression_level=level, store_schema=False)
        writer.write_table(table)
        writer.close()
        size = int(stream.tell())
    bounds = pc.min_max(table.column("pos"))
    low, high = bounds["min"].as_py(), bounds["max"].as_py()
    return FileRecord(
        path=location,
        content=FileContent.POSITION_DELETES,
        record_count=table.num_rows,
        file_size_bytes=size,
        spec_id=spec_id,
        partition=partition,
        value_counts={FILE_PATH_ID: table.num_rows, POS_ID: table.num_rows},
        null_value_counts={FILE_PATH_ID: 0, POS_ID: 0},
        lower_bounds={FILE_PATH_ID: paths[0].encode("utf-8"), POS_ID: struct.pack("<q", low)},
        upper_bounds={FILE_PATH_ID: paths[-1].encode("utf-8"), POS_ID: struct.pack("<q", high)},
        split_offsets=split_offsets(writer.writer.metadata),
        referenced_data_file=paths[0] if len(paths) == 1 else None,
    )
