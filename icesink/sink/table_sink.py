"""One table of a stream: each micro-batch fitted to the table, and its files written on the executors."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from pyspark.sql import functions as F
from pyspark.sql.types import StringType

from icesink.catalog.ledger import Ledger
from icesink.committer.commit import TableCommitter
from icesink.committer.maintainer import Maintainer
from icesink.committer.staging import TableResults
from icesink.errors import ConfigError
from icesink.iceberg.describe import writer_spec
from icesink.properties import EVENT_TIME_FIELD_PROPERTY
from icesink.results import decode_write_result
from icesink.sink.change_stream import check_partition_keys
from icesink.sink.columns import column, nested
from icesink.sink.dead_letter import late_rows
from icesink.sink.evolution import SchemaTracker
from icesink.sink.phases import Phases
from icesink.sink.projection import Projection
from icesink.sink.spark_writer import SparkParquetWriter, spark_writer_refusal, table_bytes_per_row
from icesink.table_options import Writer
from icesink.writer.task import RESULT_SCHEMA_DDL, write_task

if TYPE_CHECKING:
    from pyiceberg.catalog.sql import SqlCatalog
    from pyiceberg.table import Table
    from pyspark.sql import Column, DataFrame
    from pyspark.sql.types import StructType

    from icesink.results import WriteResult
    from icesink.sink.sink_settings import SinkSettings
    from icesink.writer.spec import Leaf, WriterSpec

log = logging.getLogger("icesink.stream")


class TableSink:
    """One table of a stream: fits each micro-batch to the table and writes its files on the executors."""

    def __init__(self, settings: SinkSettings, catalog: SqlCatalog, ledger: Ledger) -> None:
        self._settings = settings
        self.table = settings.table
        self.ref = settings.ref
        # The next micro-batch waits for the driver: maintenance stops after icesink.maintain.max-seconds.
        self._maintainer = (
            Maintainer(catalog, settings.catalog, waiting=lambda table: True) if settings.maintain else None
        )
        passthrough = list(settings.passthrough)
        if settings.changes is not None:
            passthrough.append(settings.changes.order_column)
        self._schema = SchemaTracker(
            catalog, settings.catalog, ledger, settings.table, passthrough, settings.evolve_schema
        )
        self._spark_writer = SparkParquetWriter()
        self._writer_in_use: Writer | None = None

    def prepare(
        self, spark_schema: StructType, table: Table, job_id: str, checkpoint_id: int, late_before: int | None = None
    ) -> PreparedWrite:
        """The table fitted to this checkpoint's rows (evolved where allowed) and what its writers need;
        ``late_before``: the stream's watermark as the micro-batch starts (rows below it are late)."""
        identifier = self._settings.table
        table, projection = self._schema.fit(spark_schema, table, job_id, checkpoint_id)
        if self._settings.changes is not None:
            # Another tool may have repartitioned the table since the stream started.
            since = f", checkpoint {checkpoint_id}: the table"
            check_partition_keys(table, identifier, self._settings.changes.equality_field_ids, since)
        spec = replace(
            writer_spec(table, identifier, job_id, self._settings.changes).for_checkpoint(checkpoint_id),
            nulls_in_required=self._settings.evolve_schema,
        )
        event_time = self._settings.event_time
        if event_time is not None:
            spec = replace(spec, event_time=event_time.spec(projection, late_before))
        return PreparedWrite(table, spec, projection)

    def finish(
        self, prepared: PreparedWrite, results: list[WriteResult], snapshot_properties: Mapping[str, str]
    ) -> Written:
        """The checkpoint's files in this table, ready to stage (required columns that got nulls made optional),
        with the values its snapshot's summary records besides icesink's markers."""
        table = prepared.table
        optional = self._schema.required_nulls(prepared.spec, results)
        if optional:
            table = self._schema.make_optional(table, optional, prepared.spec.checkpoint_id)
        properties = dict(snapshot_properties)
        event_time = self._settings.event_time
        if properties and event_time is not None:
            # Which table column the watermark is about: only partitions of it are done by the watermark.
            field_id = prepared.projection.field_ids.get(event_time.column)
            if field_id is not None:
                properties[EVENT_TIME_FIELD_PROPERTY] = str(field_id)
        staged = TableResults(
            table,
            self._settings.table,
            results,
            prepared.spec.schema_id,
            prepared.projection.field_ids,
            snapshot_properties=properties,
            branch=self._settings.branch,
        )
        return Written(staged, prepared.projection)

    def staged(self, written: Written) -> None:
        self._schema.remember(written.projection)

    def maintain(self, committer: TableCommitter) -> bool:
        """The table's due maintenance on its branch, between commits (``maintain=True``); whether it committed."""
        if self._maintainer is None:
            return False
        branch = self._settings.branch
        if self._maintainer.between_commits(committer.table(self.table), self.table, branch) is None:
            return False
        committer.forget(self.table)
        return True

    def write(self, batch_df: DataFrame | None, prepared: PreparedWrite, phases: Phases) -> list[WriteResult]:
        """The one action on the batch: files are written, their results come back to the driver."""

        assert batch_df is not None
        spec = prepared.spec
        changes = self._settings.changes
        projected = self._projected(batch_df, prepared)
        if self._settings.writer != Writer.ARROW:
            refusal = spark_writer_refusal(spec, projected)
            if refusal is None:
                self._note_writer(Writer.SPARK, "Spark's Parquet writer")
                snapshot = prepared.table.current_snapshot()
                summary = snapshot.summary.additional_properties if snapshot and snapshot.summary else None
                return self._spark_writer.write(projected, spec, table_bytes_per_row(summary), phases)
            if self._settings.writer == Writer.SPARK:
                raise ConfigError(
                    f"table {self._settings.table}, checkpoint {spec.checkpoint_id}: writer='spark' cannot write "
                    f"it: {refusal}; use writer='auto' to fall back to the Arrow writer"
                )
            self._note_writer(Writer.ARROW, f"icesink's Arrow writer ({refusal})")
        if changes is not None:
            # Every change of a key must reach the same task to be collapsed there.
            keys = [_distribution_key(projected, leaf) for leaf in spec.equality_leaves]
            projected = projected.repartition(batch_df.sparkSession.sparkContext.defaultParallelism, *keys)
        # pyspark's mapInArrow looks every column up by its name, which fails for names Spark parses
        # (a backtick, a dot); positional names go in, and the task restores the real ones.
        names = projected.columns
        positional = projected.select(*[column(n).alias(f"_{i}") for i, n in enumerate(names)])
        rows = positional.mapInArrow(write_task(spec, names), RESULT_SCHEMA_DDL).collect()
        phases.done("write")
        return [decode_write_result(row[0]) for row in rows]

    def _projected(self, batch_df: DataFrame, prepared: PreparedWrite) -> DataFrame:
        """The micro-batch as the table's write tasks get it: its columns named and typed as the table's."""
        changes = self._settings.changes
        if changes is not None:
            # Input position, taken before the shuffle: the tie-breaker between changes of one key.
            batch_df = batch_df.withColumn(changes.order_column, F.monotonically_increasing_id())
        return prepared.projection.apply(batch_df, prepared.table.schema())

    def late_rows(self, batch_df: DataFrame, prepared: PreparedWrite) -> DataFrame:
        """The micro-batch's rows that its write left out as late (``late="dead_letter"``), as rows of the
        dead-letter table."""
        spec = prepared.spec
        assert spec.event_time is not None
        return late_rows(self._projected(batch_df, prepared), spec.event_time, self.table, spec.checkpoint_id)

    def _note_writer(self, writer: Writer, why: str) -> None:
        if writer != self._writer_in_use:
            self._writer_in_use = writer
            log.info("table=%s: files are written by %s", self._settings.table, why)


@dataclass(frozen=True)
class PreparedWrite:
    """One table made ready for a checkpoint: the table as fitted, its writers' spec, the rows' projection."""

    table: Table
    spec: WriterSpec
    projection: Projection

    @property
    def sets_aside_late(self) -> bool:
        """Whether its tasks leave late rows out (for the dead-letter table), rather than write them."""
        event_time = self.spec.event_time
        return event_time is not None and event_time.set_aside_late and event_time.late_before is not None


@dataclass(frozen=True)
class Written:
    """One table's files of a checkpoint, and the projection they were written through."""

    results: TableResults
    projection: Projection

    @property
    def refitted(self) -> bool:
        """Whether finishing the checkpoint changed the table's schema (columns made optional for its nulls)."""
        written_with = self.results.schema_id
        return written_with is not None and self.results.table.metadata.current_schema_id != written_with


def _distribution_key(df: DataFrame, leaf: Leaf) -> Column:
    """What changes are distributed by: one value per key, however the input spells it.

    A uuid key given as text is compared as its 16 bytes by the tasks, so ``5BC8…`` and ``5bc8…``
    must reach the same task (the tasks refuse any text that is not 8-4-4-4-12 hex digits, so
    lower case is the whole of the difference). Binary uuids are already one spelling.
    """

    key = nested(leaf.path)
    as_text = leaf.column.iceberg_type == "uuid" and isinstance(df.select(key).schema[0].dataType, StringType)
    return F.lower(key) if as_text else key
