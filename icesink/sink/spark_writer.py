"""Appends written by Spark's own Parquet writer, inside the JVM.

Handing every row from the JVM to a Python worker as Arrow costs about as
much as Spark's whole Parquet write (docs/performance.md). For plain appends
nothing in icesink's Arrow writer needs Python: Spark can write the files
itself, with Iceberg's field ids in the Parquet schema, and the driver reads
their footers for the manifest metadata. That is this module.

How one checkpoint is written:

1. The batch, projected to the table's columns, is written by
   ``DataFrame.write.parquet`` into a fresh scratch directory under the
   table's data location (Spark's commit protocol keeps exactly one attempt's
   file per task there).
2. The driver reads each file's footer (``icesink.writer.footers``), checks
   its field ids, and moves the file into the data location under icesink's
   usual name (job, checkpoint, task, uuid).
3. The scratch directory is removed; the ``WriteResult``s go to staging as
   for the Arrow writer.

A crash anywhere in between leaves only files no checkpoint names, which
``icesink committer gc`` removes; the re-run batch writes into a new scratch
directory.

It is used where Spark can do everything the table asks for (see
:func:`spark_writer_refusal`); elsewhere the Arrow writer runs.
"""

from __future__ import annotations

import logging
import re
import uuid
from collections import defaultdict
from collections.abc import Mapping
from typing import TYPE_CHECKING

import pyarrow.fs as pafs
import pyarrow.parquet as pq

from icesink import paths
from icesink.failpoints import failpoint
from icesink.results import FileRecord, WriteResult
from icesink.sink.columns import column
from icesink.writer.files import FileNamer
from icesink.writer.footers import file_record_from_footer
from icesink.writer.storage import split_location
from icesink.writer.values import needs_conversion

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from icesink.sink.phases import Phases
    from icesink.writer.spec import WriterSpec

log = logging.getLogger("icesink.stream")

# Settings of the stream's own Spark session (a clone Spark makes per query, so
# the user's session is untouched). Iceberg readers need INT64 microsecond
# timestamps (Spark's default is INT96), field ids, the standard Parquet
# encodings, and dates/timestamps in the proleptic Gregorian calendar.
SESSION_SETTINGS = {
    "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
    "spark.sql.parquet.fieldId.write.enabled": "true",
    "spark.sql.parquet.writeLegacyFormat": "false",
    "spark.sql.parquet.datetimeRebaseModeInWrite": "CORRECTED",
}
FIELD_ID_METADATA = "parquet.field.id"
# The codecs (Compression.codec) Spark's Parquet writer has; brotli needs a codec jar pyspark does not
# ship. Of the levels, parquet-mr takes zstd's from this option; gzip's goes through Hadoop's zlib
# settings of the whole session, so a gzip table that sets a level is left to the Arrow writer. With
# no level set, parquet-mr's defaults are the ones the Arrow writer uses too (PARQUET_MR_LEVELS).
SPARK_CODECS = frozenset({"zstd", "snappy", "gzip", "lz4_raw", "none"})
ZSTD_LEVEL_OPTION = "parquet.compression.codec.zstd.level"
_SPARK_FILE = re.compile(r"^part-(\d+)-.*\.parquet$")


def spark_writer_refusal(spec: WriterSpec, projected: DataFrame) -> str | None:
    """Why Spark's Parquet writer cannot write this checkpoint, or None when it can."""
    if spec.changes is not None:
        return "a change stream's rows are collapsed per key before writing, which the Arrow writer does"
    if spec.event_time is not None:
        return "the stream's event times are observed by the Arrow writer's tasks as they write"
    if spec.partition_fields:
        # Spark could write identity and time partitions with partitionBy, but it sorts each task's rows
        # by partition first, or keeps a writer open per partition; either measured slower than the
        # Arrow writer's fan-out for day(ts) (bench/append_peers.py, docs/performance.md).
        return "the table is partitioned, which the Arrow writer's fan-out writes faster than Spark's partitionBy"
    if not paths.parse(spec.data_location).is_local:
        return (
            f"the data location {spec.data_location} is not a file system path, and pyspark ships no object-store "
            "connector"
        )
    codec, level = spec.compression.codec, spec.compression.level
    if codec not in SPARK_CODECS:
        return f"Spark's Parquet writer has no {codec!r} codec (write.parquet.compression-codec)"
    if level is not None and codec != "zstd":
        return f"Spark's Parquet writer cannot set a {codec} level (write.parquet.compression-level)"
    nested = [c.name for c in spec.columns if c.is_nested]
    if nested:
        return (
            f"column(s) {', '.join(repr(n) for n in nested)} are nested, and Spark's Parquet writer cannot give "
            "list elements and map keys and values Iceberg's field ids"
        )
    converted = [c.name for c in spec.columns if needs_conversion(c.iceberg_type)]
    if converted:
        return (
            f"column(s) {', '.join(repr(n) for n in converted)} have Iceberg types Spark's Parquet writer does not "
            "write (uuid, fixed, time); the Arrow writer converts and checks them"
        )
    nullable = {f.name: f.nullable for f in projected.schema.fields}
    unchecked = [c.name for c in spec.columns if c.required and nullable.get(c.name, True)]
    if unchecked:
        return (
            f"required column(s) {', '.join(repr(n) for n in unchecked)} may hold nulls in the DataFrame; "
            "the Arrow writer checks every row"
        )
    return None


def table_bytes_per_row(summary: Mapping[str, str] | None) -> float | None:
    """Bytes per row of the table's files so far, from a snapshot summary's totals."""
    if not summary:
        return None
    try:
        size, rows = int(summary.get("total-files-size", 0)), int(summary.get("total-records", 0))
    except ValueError:
        return None
    return size / rows if size and rows else None


class SparkParquetWriter:
    """Writes the checkpoints of one stream with Spark's Parquet writer.

    Spark rolls files by row count only, so the rows per file are derived from
    bytes per row: those of this stream's earlier checkpoints, else the
    table's totals so far (its current snapshot's summary). Files come out
    near the table's ``write.target-file-size-bytes``, except in the first
    checkpoint of a stream into an empty table: one file per task there.
    """

    def __init__(self) -> None:
        self._bytes_per_row: float | None = None

    def write(
        self, projected: DataFrame, spec: WriterSpec, table_row_bytes: float | None, phases: Phases | None = None
    ) -> list[WriteResult]:
        filesystem, data_path = split_location(spec.data_location, spec.storage_options)
        token = uuid.uuid4().hex
        scratch_name = f".icesink-scratch-{paths.segment(spec.job_id, 64)}-{spec.checkpoint_id:010d}-{token}"
        scratch_uri = f"{spec.data_location.rstrip('/')}/{scratch_name}"
        scratch_path = f"{data_path.rstrip('/')}/{scratch_name}"
        session = projected.sparkSession
        for key, value in SESSION_SETTINGS.items():
            session.conf.set(key, value)
        with_ids = projected.select(
            *[column(c.name).alias(c.name, metadata={FIELD_ID_METADATA: c.field_id}) for c in spec.columns]
        )
        writer = (
            with_ids.write.option("compression", spec.compression.codec)
            .option("parquet.block.size", str(spec.row_group_bytes))
            # No _SUCCESS marker: the scratch directory is read by icesink only.
            .option("mapreduce.fileoutputcommitter.marksuccessfuljobs", "false")
        )
        if spec.compression.codec == "zstd":
            # Always set: a session's Hadoop settings could otherwise change the level of this table's files.
            writer = writer.option(ZSTD_LEVEL_OPTION, str(spec.compression.effective_level))
        for path, fpp in spec.bloom_filters:  # parquet-mr's names for what the Arrow writer is told
            writer = writer.option(f"parquet.bloom.filter.enabled#{path}", "true")
            writer = writer.option(f"parquet.bloom.filter.fpp#{path}", str(fpp))
        bytes_per_row = self._bytes_per_row or table_row_bytes
        if bytes_per_row:
            rows = max(1, int(spec.target_file_size_bytes / bytes_per_row))
            writer = writer.option("maxRecordsPerFile", str(rows))
        try:
            writer.parquet(scratch_uri)
            if phases is not None:
                phases.done("write")
            failpoint("spark-writer.after-write")
            results = self._move_into_table(filesystem, scratch_path, data_path, spec)
            if phases is not None:
                phases.done("footers+moves")
        finally:
            # What is left: Hadoop's checksum files, or a failed write's remains.
            if filesystem.get_file_info(scratch_path).type != pafs.FileType.NotFound:
                filesystem.delete_dir(scratch_path)
        return results

    def _move_into_table(
        self, filesystem: pafs.FileSystem, scratch_path: str, data_path: str, spec: WriterSpec
    ) -> list[WriteResult]:
        files = sorted(
            (info for info in filesystem.get_file_info(pafs.FileSelector(scratch_path)) if info.is_file),
            key=lambda info: info.base_name,
        )
        by_task: dict[int, list[FileRecord]] = defaultdict(list)
        namers: dict[int, FileNamer] = {}
        total_bytes = total_rows = 0
        for info in files:
            match = _SPARK_FILE.match(info.base_name)
            if match is None:
                continue  # checksums and other side files of Hadoop's file system
            metadata = pq.read_metadata(info.path, filesystem=filesystem)
            if metadata.num_rows == 0:
                continue  # Spark writes a schema-only file for an empty batch
            task = int(match.group(1))
            namer = namers.setdefault(task, FileNamer(spec.job_id, spec.checkpoint_id, task, attempt=0))
            name = namer.name(len(by_task[task]))
            uri = f"{spec.data_location.rstrip('/')}/{name}"
            record = file_record_from_footer(spec, uri, info.size, metadata)
            filesystem.move(info.path, f"{data_path.rstrip('/')}/{name}")
            failpoint("spark-writer.after-move")
            by_task[task].append(record)
            # Column data only: footers would make a checkpoint of tiny files look like wide rows.
            total_bytes += sum(record.column_sizes.values())
            total_rows += metadata.num_rows
        if total_rows:
            self._bytes_per_row = total_bytes / total_rows
        return [
            WriteResult(spec.checkpoint_id, task, 0, data_files=tuple(records))
            for task, records in sorted(by_task.items())
        ]
