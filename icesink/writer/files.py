"""Parquet files for one partition, rolled at the table's target file size."""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Protocol

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from icesink import paths
from icesink.failpoints import failpoint
from icesink.results import FileContent, FileRecord, PartitionValue
from icesink.writer.metrics import FileMetrics
from icesink.writer.spec import ColumnSpec, Compression, WriterSpec
from icesink.writer.storage import split_location


@dataclass(frozen=True)
class FileNamer:
    """Names files so that no two task attempts, in any process, can collide.

    Spark's task ids restart in every process, so the name carries the job,
    the checkpoint, the task, its attempt and a random uuid.
    """

    job_id: str
    checkpoint_id: int
    task_id: int
    attempt: int
    token: str = field(default_factory=lambda: uuid.uuid4().hex)

    def name(self, sequence: int, kind: str = "data") -> str:
        suffix = "" if kind == "data" else f"-{kind}"
        return (
            f"{paths.segment(self.job_id, 64)}-{self.checkpoint_id:010d}-{self.task_id:05d}-{self.attempt}"
            f"-{self.token}-{sequence:05d}{suffix}.parquet"
        )


# Dictionary encoding pays for columns that repeat values; for one whose values are nearly all
# distinct (ids, timestamps, measurements) it only costs: building a dictionary as large as the data
# and writing both (about twice the encode time and half again the bytes, measured on 86k-row files).
DICTIONARY_SAMPLE_ROWS = 20_000
DICTIONARY_MAX_DISTINCT = 0.5  # distinct values per non-null value in the sample, above which: plain encoding


def dictionary_columns(table: pa.Table) -> bool | list[str]:
    """The columns worth dictionary encoding, judged on the first rows of a file's data.

    Tables with nested columns keep Parquet's default (dictionary everywhere,
    with its fallback): their leaves' paths are not top-level names.
    """
    if any(pa.types.is_nested(field.type) for field in table.schema):
        return True
    sample = table.slice(0, DICTIONARY_SAMPLE_ROWS)
    worth = []
    for name in sample.column_names:
        column = sample.column(name)
        values = len(column) - column.null_count
        if values < 1000 or pc.count_distinct(column).as_py() <= DICTIONARY_MAX_DISTINCT * values:
            worth.append(name)
    return worth if len(worth) < len(sample.column_names) else True


class ParquetFile:
    """One open Parquet file, with its metrics kept up to date row group by row group."""

    def __init__(
        self,
        filesystem: pafs.FileSystem,
        fs_path: str,
        uri: str,
        schema: pa.Schema,
        columns: tuple[ColumnSpec, ...],
        compression: Compression,
        use_dictionary: bool | list[str] = True,
        bloom_filters: dict[str, dict[str, float | int]] | None = None,
    ) -> None:
        self.uri = uri
        self._fs_path = fs_path
        self._filesystem = filesystem
        self._stream = filesystem.open_output_stream(fs_path)
        codec, level = compression.for_pyarrow()
        self._writer = pq.ParquetWriter(
            self._stream,
            schema,
            compression=codec,
            compression_level=level,
            # Iceberg readers expect INT64 microsecond timestamps, never INT96.
            use_deprecated_int96_timestamps=False,
            coerce_timestamps="us",
            allow_truncated_timestamps=False,
            store_schema=False,
            write_statistics=True,
            use_dictionary=use_dictionary,
            bloom_filter_options=bloom_filters,
        )
        self.metrics = FileMetrics(columns)

    @property
    def bytes_written(self) -> int:
        return int(self._stream.tell())

    def write(self, table: pa.Table) -> None:
        self._writer.write_table(table, row_group_size=max(1, table.num_rows))
        self.metrics.update(table)

    def close(self) -> tuple[int, pq.FileMetaData]:
        self._writer.close()
        size = int(self._stream.tell())
        self._stream.close()
        return size, self._writer.writer.metadata

    def abort(self) -> None:
        try:
            self._writer.close()
            self._stream.close()
        finally:
            self._filesystem.delete_file(self._fs_path)


def split_offsets(metadata: pq.FileMetaData) -> tuple[int, ...]:
    offsets = []
    for i in range(metadata.num_row_groups):
        chunk = metadata.row_group(i).column(0)
        start = chunk.dictionary_page_offset if chunk.has_dictionary_page else chunk.data_page_offset
        offsets.append(int(start))
    return tuple(sorted(offsets))


def column_sizes(metadata: pq.FileMetaData, columns: tuple[ColumnSpec, ...]) -> dict[int, int]:
    """Compressed bytes per primitive field (Parquet's column chunks are the leaves, in order)."""
    leaves = [leaf.column.field_id for column in columns for leaf in column.leaves()]
    sizes = dict.fromkeys(leaves, 0)
    for i in range(metadata.num_row_groups):
        group = metadata.row_group(i)
        for j, field_id in enumerate(leaves):
            sizes[field_id] += group.column(j).total_compressed_size
    return sizes


class OpenFiles(Protocol):
    """Told when a writer opens and closes a file, so that one task can bound how many are open at once."""

    def opening(self, writer: RollingFileWriter) -> None: ...

    def written(self, writer: RollingFileWriter) -> None: ...

    def closed(self, writer: RollingFileWriter) -> None: ...


class RollingFileWriter:
    """Writes the rows of one partition into files of about the target size.

    Incoming batches are small (Spark sends ~10k rows); they are buffered into
    row groups of ``row_group_rows``/``row_group_bytes`` so that readers get
    row groups of a useful size. ``sequences`` numbers the files (shared by a
    task's writers, so a partition written again after its file was closed
    gets a new name); ``open_files`` hears of every file opened and closed.
    """

    def __init__(
        self,
        spec: WriterSpec,
        namer: FileNamer,
        partition: tuple[PartitionValue, ...],
        directory: str,
        columns: tuple[ColumnSpec, ...],
        content: FileContent = FileContent.DATA,
        equality_ids: tuple[int, ...] | None = None,
        sequences: Iterator[int] | None = None,
        open_files: OpenFiles | None = None,
    ) -> None:
        self._spec = spec
        self._namer = namer
        self._partition = partition
        self._directory = directory.rstrip("/")
        self._columns = columns
        self._schema = spec.arrow_schema(columns)
        self._content = content
        self._equality_ids = equality_ids
        self._filesystem, self._fs_directory = split_location(self._directory, spec.storage_options)
        if isinstance(self._filesystem, pafs.LocalFileSystem):
            # Object stores have no directories; local disks need them first.
            self._filesystem.create_dir(self._fs_directory, recursive=True)
        self._buffer: list[pa.Table] = []
        self.buffered_rows = 0
        self.buffered_bytes = 0
        self._file: ParquetFile | None = None
        self._sequences = sequences if sequences is not None else itertools.count()
        self._open_files = open_files
        self.completed: list[FileRecord] = []

    @property
    def slot(self) -> tuple[FileContent, tuple[PartitionValue, ...]]:
        """What this writer writes: its content and partition."""
        return self._content, self._partition

    @property
    def has_open_file(self) -> bool:
        return self._file is not None

    def write(self, table: pa.Table) -> None:
        self._buffer.append(table)
        self.buffered_rows += table.num_rows
        self.buffered_bytes += table.nbytes
        if self.buffered_rows >= self._spec.row_group_rows or self.buffered_bytes >= self._spec.row_group_bytes:
            self.flush()

    def flush(self) -> None:
        """Write the buffered rows as one row group, rolling to a new file when the target size is reached."""
        if not self._buffer:
            return
        table = pa.concat_tables(self._buffer)
        self._buffer.clear()
        self.buffered_rows = 0
        self.buffered_bytes = 0
        if self._file is None:
            if self._open_files is not None:
                self._open_files.opening(self)
            self._file = self._open(table)
        self._file.write(table)
        if self._open_files is not None:
            self._open_files.written(self)
        if self._file.bytes_written >= self._spec.target_file_size_bytes:
            self.close_file()

    def _open(self, first: pa.Table) -> ParquetFile:
        name = self._namer.name(next(self._sequences), "data" if self._content == FileContent.DATA else "eq-deletes")
        return ParquetFile(
            self._filesystem,
            f"{self._fs_directory}/{name}",
            f"{self._directory}/{name}",
            self._schema,
            self._columns,
            self._spec.compression if self._content == FileContent.DATA else self._spec.delete_compression,
            dictionary_columns(first),
            # Key lookups (conversion of equality deletes, other engines' readers) probe data files only.
            self._spec.bloom_filter_options() if self._content == FileContent.DATA else None,
        )

    def close_file(self) -> None:
        """Finish the open file; buffered rows stay buffered, for the next one."""
        assert self._file is not None
        file, self._file = self._file, None
        size, metadata = file.close()
        if self._open_files is not None:
            self._open_files.closed(self)
        failpoint("writer.after-file")
        lowers, uppers = file.metrics.bounds()
        self.completed.append(
            FileRecord(
                path=file.uri,
                content=self._content,
                record_count=file.metrics.record_count,
                file_size_bytes=size,
                spec_id=self._spec.spec_id,
                partition=self._partition,
                column_sizes=column_sizes(metadata, self._columns),
                value_counts=file.metrics.value_counts(),
                null_value_counts=file.metrics.null_value_counts(),
                nan_value_counts=file.metrics.nan_value_counts(),
                lower_bounds=lowers,
                upper_bounds=uppers,
                split_offsets=split_offsets(metadata),
                equality_ids=self._equality_ids,
            )
        )

    def close(self) -> list[FileRecord]:
        self.flush()
        if self._file is not None:
            self.close_file()
        return self.completed

    def take_completed(self) -> list[FileRecord]:
        """The files finished so far, handed over once (the writer forgets them)."""
        done, self.completed = self.completed, []
        return done

    def abort(self) -> None:
        """Remove every file this writer created; used when the task fails."""
        self._buffer.clear()
        if self._file is not None:
            self._file.abort()
            self._file = None
            if self._open_files is not None:
                self._open_files.closed(self)
        delete_files(self.take_completed(), self._spec.storage_options)


def delete_files(records: Iterable[FileRecord], storage_options: tuple[tuple[str, str], ...]) -> None:
    """Remove finished files of a failed task attempt."""
    for record in records:
        filesystem, path = split_location(record.path, storage_options)
        filesystem.delete_file(path)
