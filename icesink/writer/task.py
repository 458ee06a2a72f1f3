"""The function Spark runs on executors for every micro-batch partition.

It receives Arrow record batches (``mapInArrow``), writes Parquet files per
partition and yields exactly one row: the encoded :class:`WriteResult`.
"""

from __future__ import annotations

import itertools
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Sequence

import pyarrow as pa

from icesink.errors import naming_table
from icesink.results import FileContent, FileRecord, PartitionValue, WriteResult, encode_write_result
from icesink.writer.collapse import check_keys, collapse
from icesink.writer.conform import conform
from icesink.writer.event_times import EventTimes
from icesink.writer.files import FileNamer, RollingFileWriter, delete_files
from icesink.writer.late_rows import on_time_rows
from icesink.writer.partitioning import partition_path, split_by_partition
from icesink.writer.spec import WriterSpec

RESULT_COLUMN = "write_result"
RESULT_SCHEMA_DDL = f"{RESULT_COLUMN} binary"

# A task buffers its rows (as they came, all partitions together) up to this many bytes, then writes each
# partition's share as row groups of its file: memory stays bounded however many partitions the rows touch.
MAX_BUFFERED_BYTES = 128 * 1024 * 1024

Slot = tuple[FileContent, tuple[PartitionValue, ...]]


class TaskWriter:
    """All files of one task attempt, across its partitions (and contents: data, equality deletes).

    Rows are buffered as they arrive, without splitting them by partition (a
    partition's share of a batch is often a few rows, and a table of a few
    rows costs several times its data). Every ``MAX_BUFFERED_BYTES``, and when
    the input ends, the buffer is split by partition once and each share is
    written to its partition's file. At most ``spec.max_open_files`` files are
    open at once: the least recently written one is closed (and its partition
    forgotten) when another is needed. So memory follows the buffer and the
    open files, not how many partitions the task has seen.

    A change stream is held until the task's input ends, because the last
    change of a key decides what is written.
    """

    def __init__(self, spec: WriterSpec, task_id: int, attempt: int) -> None:
        self._spec = spec
        self._task_id = task_id
        self._attempt = attempt
        self._namer = FileNamer(spec.job_id, spec.checkpoint_id, task_id, attempt)
        self._sequences = itertools.count()  # file numbers, unique in the task
        self._buffer: list[tuple[FileContent, pa.Table]] = []
        self._buffered_bytes = 0
        self._open: OrderedDict[Slot, RollingFileWriter] = OrderedDict()  # least recently written first
        self._finished: list[FileRecord] = []
        self._changes: list[pa.Table] = []
        self._event_times = EventTimes(spec.event_time, spec.table_name) if spec.event_time is not None else None

    def write(self, batch: pa.RecordBatch | pa.Table) -> None:
        if self._event_times is not None:
            self._event_times.observe(batch)
            assert self._spec.event_time is not None
            if self._spec.event_time.set_aside_late:  # counted above; the dead-letter job writes them
                batch = on_time_rows(batch, self._spec.event_time, self._spec.table_name)
        if self._spec.changes is not None:
            check_keys(self._spec, batch, self._task_id)
            self._changes.append(conform(self._spec, batch, self._task_id))
            return
        rows = conform(self._spec, batch, self._task_id)
        if rows.num_columns > len(self._spec.columns):  # columns read, not written (an event time, a split)
            rows = rows.select(range(len(self._spec.columns)))
        self._buffer_rows(FileContent.DATA, rows)

    def _buffer_rows(self, content: FileContent, table: pa.Table) -> None:
        if table.num_rows == 0:  # a delete-only checkpoint has no data file, not an empty one
            return
        self._buffer.append((content, table))
        self._buffered_bytes += table.nbytes
        if self._buffered_bytes >= MAX_BUFFERED_BYTES:
            self._write_buffer()

    def _write_buffer(self) -> None:
        """Each partition's share of the buffered rows, as row groups of its file."""
        buffered, self._buffer, self._buffered_bytes = self._buffer, [], 0
        for content in (FileContent.EQUALITY_DELETES, FileContent.DATA):
            tables = [table for c, table in buffered if c == content]
            if not tables:
                continue
            for key, rows in split_by_partition(self._spec, pa.concat_tables(tables)):
                writer = self._writer_for(content, key)
                for row_group in row_groups(rows, self._spec):
                    writer.write(row_group)
                writer.flush()
                if not writer.has_open_file:  # rolled at the target size: nothing left to keep
                    self._finished.extend(writer.take_completed())
                    self._open.pop(writer.slot, None)

    def _writer_for(self, content: FileContent, key: tuple[PartitionValue, ...]) -> RollingFileWriter:
        writer = self._open.get((content, key))
        if writer is not None:
            return writer
        directory = self._spec.data_location.rstrip("/")
        if self._spec.partition_fields:
            directory = f"{directory}/{partition_path(self._spec, key)}"
        if content == FileContent.DATA:
            columns, equality_ids = self._spec.columns, None
        else:
            assert self._spec.changes is not None
            columns, equality_ids = self._spec.delete_columns, self._spec.changes.equality_field_ids
        return RollingFileWriter(
            self._spec,
            self._namer,
            key,
            directory,
            columns,
            content=content,
            equality_ids=equality_ids,
            sequences=self._sequences,
            open_files=self,
        )

    # --- OpenFiles: the bound on open files ---------------------------------------------------------------------

    def opening(self, writer: RollingFileWriter) -> None:
        while len(self._open) >= self._spec.max_open_files:
            _, least_recent = self._open.popitem(last=False)
            least_recent.close_file()
            self._finished.extend(least_recent.take_completed())
        self._open[writer.slot] = writer

    def written(self, writer: RollingFileWriter) -> None:
        self._open.move_to_end(writer.slot)

    def closed(self, writer: RollingFileWriter) -> None:
        self._open.pop(writer.slot, None)

    def complete(self) -> WriteResult:
        if self._changes:
            collapsed = collapse(self._spec, pa.concat_tables(self._changes), self._task_id)
            self._changes.clear()
            self._buffer_rows(FileContent.EQUALITY_DELETES, collapsed.keys_to_delete)
            self._buffer_rows(FileContent.DATA, collapsed.upserts)
        self._write_buffer()
        while self._open:
            _, writer = self._open.popitem()
            writer.close()
            self._finished.extend(writer.take_completed())
        data = tuple(r for r in self._finished if r.content == FileContent.DATA)
        deletes = tuple(r for r in self._finished if r.content != FileContent.DATA)
        return WriteResult(
            self._spec.checkpoint_id,
            self._task_id,
            self._attempt,
            data_files=data,
            delete_files=deletes,
            event_times=self._event_times.results() if self._event_times is not None else (),
        )

    def abort(self) -> None:
        self._buffer.clear()
        for writer in list(self._open.values()):
            writer.abort()
        self._open.clear()
        delete_files(self._finished, self._spec.storage_options)
        self._finished.clear()


def row_groups(rows: pa.Table, spec: WriterSpec) -> Iterator[pa.Table]:
    """``rows`` in slices of at most the spec's row-group rows and (about) bytes."""
    if rows.num_rows == 0:
        return
    per_row = max(1, rows.nbytes // rows.num_rows)
    size = max(1, min(spec.row_group_rows, spec.row_group_bytes // per_row))
    for start in range(0, rows.num_rows, size):
        yield rows.slice(start, size)


def write_task(
    spec: WriterSpec, column_names: Sequence[str] | None = None
) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The ``mapInArrow`` function for one checkpoint of one table.

    ``column_names`` are the real names of the incoming columns, by position,
    when the driver had to hand them over under placeholder names.
    """

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        if column_names is not None:
            batches = (batch.rename_columns(list(column_names)) for batch in batches)
        result = run_task(spec, batches)
        yield pa.record_batch([pa.array([encode_write_result(result)], pa.binary())], names=[RESULT_COLUMN])

    return run


def run_task(spec: WriterSpec, batches: Iterable[pa.RecordBatch]) -> WriteResult:
    """The one task entry point of both sinks: this Spark task's rows written as files, or none left behind."""
    from pyspark import TaskContext

    context = TaskContext.get()
    task_id = context.partitionId() if context else 0
    attempt = context.attemptNumber() if context else 0
    writer = TaskWriter(spec, task_id, attempt)
    try:
        with naming_table(spec.table_name):
            for batch in batches:
                if batch.num_rows:
                    writer.write(batch)
            return writer.complete()
    except BaseException:
        # A failed attempt leaves no files behind; the retry writes its own.
        writer.abort()
        raise
