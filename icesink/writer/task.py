"""The function Spark runs on executors for every micro-batch partition.

It receives Arrow record batches (``mapInArrow``), writes Parquet files per
partition and yields exactly one row: the encoded :class:`WriteResult`.
"""

from __future__ import annotations

import itertools
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Sequence

import pyarrow as pa

from icesink.results import FileContent, FileRecord, PartitionValue, WriteResult, encode_write_result
from icesink.writer.changes import check_keys, collapse
from icesink.writer.conform import conform
from icesink.writer.files import FileNamer, RollingFileWriter, delete_files
from icesink.writer.partitioning import partition_path, split_by_partition
from icesink.writer.spec import WriterSpec

RESULT_COLUMN = "write_result"
RESULT_SCHEMA_DDL = f"{RESULT_COLUMN} binary"

# Above this many buffered bytes across all of a task's partitions, the largest buffer is written early, so
# that a task fanning out to many partitions stays bounded.
MAX_BUFFERED_BYTES = 256 * 1024 * 1024

Slot = tuple[FileContent, tuple[PartitionValue, ...]]


class TaskWriter:
    """All files of one task attempt, across its partitions (and contents: data, equality deletes).

    Appends stream straight into the files. A change stream is held until the
    task's input ends, because the last change of a key decides what is written.

    Memory follows what is open, not how many partitions the task has seen: at
    most ``spec.max_open_files`` files are open at once (the least recently
    written one is closed when another is needed), rows wait in per-partition
    buffers of at most ``MAX_BUFFERED_BYTES`` in all, and a partition with no
    open file and nothing buffered is forgotten (only its finished files'
    records stay, for the task's result).
    """

    def __init__(self, spec: WriterSpec, task_id: int, attempt: int) -> None:
        self._spec = spec
        self._task_id = task_id
        self._attempt = attempt
        self._namer = FileNamer(spec.job_id, spec.checkpoint_id, task_id, attempt)
        self._sequences = itertools.count()  # file numbers, unique in the task
        self._writers: dict[Slot, RollingFileWriter] = {}
        self._open: OrderedDict[Slot, RollingFileWriter] = OrderedDict()  # least recently written first
        self._buffered_bytes = 0
        self._finished: list[FileRecord] = []
        self._changes: list[pa.Table] = []

    def write(self, batch: pa.RecordBatch | pa.Table) -> None:
        if self._spec.changes is not None:
            check_keys(self._spec, batch, self._task_id)
            self._changes.append(conform(self._spec, batch, self._task_id))
            return
        table = conform(self._spec, batch, self._task_id)
        self._write_rows(FileContent.DATA, table)

    def _write_rows(self, content: FileContent, table: pa.Table) -> None:
        if table.num_rows == 0:  # a delete-only checkpoint has no data file, not an empty one
            return
        for key, rows in split_by_partition(self._spec, table):
            writer = self._writer_for(content, key)
            before = writer.buffered_bytes
            writer.write(rows)
            self._buffered_bytes += writer.buffered_bytes - before
            self._forget_if_idle(writer)
        self._bound_memory()

    def _writer_for(self, content: FileContent, key: tuple[PartitionValue, ...]) -> RollingFileWriter:
        writer = self._writers.get((content, key))
        if writer is None:
            directory = self._spec.data_location.rstrip("/")
            if self._spec.partition_fields:
                directory = f"{directory}/{partition_path(self._spec, key)}"
            if content == FileContent.DATA:
                columns, equality_ids = self._spec.columns, None
            else:
                assert self._spec.changes is not None
                columns, equality_ids = self._spec.delete_columns, self._spec.changes.equality_field_ids
            writer = RollingFileWriter(
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
            self._writers[(content, key)] = writer
        return writer

    # --- OpenFiles: the bound on open files ---------------------------------------------------------------------

    def opening(self, writer: RollingFileWriter) -> None:
        while len(self._open) >= self._spec.max_open_files:
            _, least_recent = self._open.popitem(last=False)
            least_recent.close_file()
            self._forget_if_idle(least_recent)
        self._open[writer.slot] = writer

    def written(self, writer: RollingFileWriter) -> None:
        self._open.move_to_end(writer.slot)

    def closed(self, writer: RollingFileWriter) -> None:
        self._open.pop(writer.slot, None)

    def _forget_if_idle(self, writer: RollingFileWriter) -> None:
        """Drop a partition's writer once it holds nothing: no open file, no buffered rows."""
        self._finished.extend(writer.take_completed())
        if not writer.has_open_file and writer.buffered_rows == 0:
            self._writers.pop(writer.slot, None)

    def _bound_memory(self) -> None:
        if self._buffered_bytes <= MAX_BUFFERED_BYTES:
            return
        # Down to half the bound in one go, largest buffers first: one sort per half-bound of rows, where a
        # search per flush would cost a pass over every partition for each of thousands of small buffers.
        for writer in sorted(self._writers.values(), key=lambda w: w.buffered_bytes, reverse=True):
            if self._buffered_bytes <= MAX_BUFFERED_BYTES // 2:
                break
            self._buffered_bytes -= writer.buffered_bytes
            writer.flush()
            self._forget_if_idle(writer)

    def complete(self) -> WriteResult:
        if self._changes:
            collapsed = collapse(self._spec, pa.concat_tables(self._changes), self._task_id)
            self._changes.clear()
            self._write_rows(FileContent.EQUALITY_DELETES, collapsed.keys_to_delete)
            self._write_rows(FileContent.DATA, collapsed.upserts)
        while self._writers:
            _, writer = self._writers.popitem()
            writer.close()
            self._finished.extend(writer.take_completed())
        self._buffered_bytes = 0
        data = tuple(r for r in self._finished if r.content == FileContent.DATA)
        deletes = tuple(r for r in self._finished if r.content != FileContent.DATA)
        return WriteResult(
            self._spec.checkpoint_id, self._task_id, self._attempt, data_files=data, delete_files=deletes
        )

    def abort(self) -> None:
        for writer in list(self._writers.values()):
            writer.abort()
        self._writers.clear()
        delete_files(self._finished, self._spec.storage_options)
        self._finished.clear()


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
        for batch in batches:
            if batch.num_rows:
                writer.write(batch)
        return writer.complete()
    except BaseException:
        # A failed attempt leaves no files behind; the retry writes its own.
        writer.abort()
        raise
