"""The function Spark runs on executors for every micro-batch partition.

It receives Arrow record batches (``mapInArrow``), writes Parquet files per
partition and yields exactly one row: the encoded :class:`WriteResult`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence

import pyarrow as pa

from icesink.results import FileContent, FileRecord, PartitionValue, WriteResult, encode_write_result
from icesink.writer.changes import check_keys, collapse
from icesink.writer.conform import conform
from icesink.writer.files import FileNamer, RollingFileWriter
from icesink.writer.partitioning import partition_path, split_by_partition
from icesink.writer.spec import WriterSpec

RESULT_COLUMN = "write_result"
RESULT_SCHEMA_DDL = f"{RESULT_COLUMN} binary"

# Above this many buffered bytes across all open partitions, the largest buffer
# is flushed early so that a task fanning out to many partitions stays bounded.
MAX_BUFFERED_BYTES = 256 * 1024 * 1024


class TaskWriter:
    """All files of one task attempt: one rolling writer per partition (and per content).

    Appends stream straight into the files. A change stream is held until the
    task's input ends, because the last change of a key decides what is written.
    """

    def __init__(self, spec: WriterSpec, task_id: int, attempt: int) -> None:
        self._spec = spec
        self._task_id = task_id
        self._attempt = attempt
        self._namer = FileNamer(spec.job_id, spec.checkpoint_id, task_id, attempt)
        self._writers: dict[tuple[FileContent, tuple[PartitionValue, ...]], RollingFileWriter] = {}
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
            self._writer_for(content, key).write(rows)
        self._bound_memory()

    def _writer_for(self, content: FileContent, key: tuple[PartitionValue, ...]) -> RollingFileWriter:
        writer = self._writers.get((content, key))
        if writer is None:
            directory = self._spec.data_location.rstrip("/")
            if self._spec.partition_fields:
                directory = f"{directory}/{partition_path(self._spec, key)}"
            if content == FileContent.DATA:
                writer = RollingFileWriter(self._spec, self._namer, key, directory, self._spec.columns)
            else:
                assert self._spec.changes is not None
                writer = RollingFileWriter(
                    self._spec,
                    self._namer,
                    key,
                    directory,
                    self._spec.delete_columns,
                    content=FileContent.EQUALITY_DELETES,
                    equality_ids=self._spec.changes.equality_field_ids,
                )
            self._writers[(content, key)] = writer
        return writer

    def _bound_memory(self) -> None:
        while sum(w.buffered_bytes for w in self._writers.values()) > MAX_BUFFERED_BYTES:
            max(self._writers.values(), key=lambda w: w.buffered_bytes).flush()

    def complete(self) -> WriteResult:
        if self._changes:
            collapsed = collapse(self._spec, pa.concat_tables(self._changes), self._task_id)
            self._changes.clear()
            self._write_rows(FileContent.EQUALITY_DELETES, collapsed.keys_to_delete)
            self._write_rows(FileContent.DATA, collapsed.upserts)
        data: list[FileRecord] = []
        deletes: list[FileRecord] = []
        for (content, _), writer in self._writers.items():
            (data if content == FileContent.DATA else deletes).extend(writer.close())
        return WriteResult(
            self._spec.checkpoint_id, self._task_id, self._attempt, data_files=tuple(data), delete_files=tuple(deletes)
        )

    def abort(self) -> None:
        for writer in self._writers.values():
            writer.abort()


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
