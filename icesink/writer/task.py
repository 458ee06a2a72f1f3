"""The function Spark runs on executors for every micro-batch partition.

It receives Arrow record batches (``mapInArrow``), writes Parquet files per
partition and yields exactly one row: the encoded :class:`WriteResult`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pyarrow as pa

from icesink.errors import BadRowError
from icesink.results import PartitionValue, WriteResult, encode_write_result
from icesink.writer.files import FileNamer, RollingFileWriter
from icesink.writer.partitioning import partition_path, split_by_partition
from icesink.writer.spec import WriterSpec, arrow_type

RESULT_COLUMN = "write_result"
RESULT_SCHEMA_DDL = f"{RESULT_COLUMN} binary"

# Above this many buffered bytes across all open partitions, the largest buffer
# is flushed early so that a task fanning out to many partitions stays bounded.
MAX_BUFFERED_BYTES = 256 * 1024 * 1024

_SAME_FAMILY = {
    pa.string(): (pa.string(), pa.large_string(), pa.string_view()),
    pa.binary(): (pa.binary(), pa.large_binary(), pa.binary_view()),
}


def conform(spec: WriterSpec, batch: pa.RecordBatch | pa.Table, task_id: int) -> pa.Table:
    """Give the rows the table's column types and nullability, or say which row breaks them."""
    table = batch if isinstance(batch, pa.Table) else pa.Table.from_batches([batch])
    arrays = []
    fields = []
    schema = spec.arrow_schema()
    for column, target in zip(spec.columns, schema, strict=True):
        array = table.column(column.name)
        if column.required and array.null_count:
            raise BadRowError(
                f"table {spec.table_name}, checkpoint {spec.checkpoint_id}, task {task_id}: column "
                f"{column.name!r} is required but {array.null_count} row(s) have no value; "
                "fix the input (or make the column optional) and restart the stream"
            )
        wanted = arrow_type(column.iceberg_type)
        if array.type != wanted and array.type not in _SAME_FAMILY.get(wanted, ()):
            array = array.cast(wanted)
        arrays.append(array)
        fields.append(target.with_type(array.type))
    return pa.Table.from_arrays(arrays, schema=pa.schema(fields))


class TaskWriter:
    """All files of one task attempt: one rolling writer per partition."""

    def __init__(self, spec: WriterSpec, task_id: int, attempt: int) -> None:
        self._spec = spec
        self._task_id = task_id
        self._attempt = attempt
        self._namer = FileNamer(spec.job_id, spec.checkpoint_id, task_id, attempt)
        self._writers: dict[tuple[PartitionValue, ...], RollingFileWriter] = {}

    def write(self, batch: pa.RecordBatch | pa.Table) -> None:
        table = conform(self._spec, batch, self._task_id)
        for key, rows in split_by_partition(self._spec, table):
            self._writer_for(key).write(rows)
        self._bound_memory()

    def _writer_for(self, key: tuple[PartitionValue, ...]) -> RollingFileWriter:
        writer = self._writers.get(key)
        if writer is None:
            directory = self._spec.data_location.rstrip("/")
            if self._spec.partition_fields:
                directory = f"{directory}/{partition_path(self._spec, key)}"
            writer = RollingFileWriter(self._spec, self._namer, key, directory, self._spec.columns)
            self._writers[key] = writer
        return writer

    def _bound_memory(self) -> None:
        while sum(w.buffered_bytes for w in self._writers.values()) > MAX_BUFFERED_BYTES:
            max(self._writers.values(), key=lambda w: w.buffered_bytes).flush()

    def complete(self) -> WriteResult:
        files = []
        for writer in self._writers.values():
            files.extend(writer.close())
        return WriteResult(self._spec.checkpoint_id, self._task_id, self._attempt, data_files=tuple(files))

    def abort(self) -> None:
        for writer in self._writers.values():
            writer.abort()


def write_task(spec: WriterSpec) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The ``mapInArrow`` function for one checkpoint of one table."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from pyspark import TaskContext

        context = TaskContext.get()
        task_id = context.partitionId() if context else 0
        attempt = context.attemptNumber() if context else 0
        writer = TaskWriter(spec, task_id, attempt)
        try:
            for batch in batches:
                if batch.num_rows:
                    writer.write(batch)
            result = writer.complete()
        except BaseException:
            # A failed attempt leaves no files behind; the retry writes its own.
            writer.abort()
            raise
        yield pa.record_batch([pa.array([encode_write_result(result)], pa.binary())], names=[RESULT_COLUMN])

    return run
