"""What happens to every micro-batch on the driver (the ``foreachBatch`` function).

1. Decide whether this checkpoint still needs writing: the table's marker
   may already hold it, or hold a later one (a restart from an older
   checkpoint location: refused), and the ledger may have staged it already
   (Spark re-delivers a batch whose completion it did not record).
2. Executors write Parquet files in one pass over the batch (the only
   action on it, so the source is read once): appends Spark can write alone
   go through Spark's own Parquet writer (``spark_writer``), everything else
   through icesink's Arrow writer in a ``mapInArrow`` task; either way the
   driver ends up with the tasks' ``WriteResult``s.
3. The checkpoint's delta manifest is written and staged in the ledger
   before ``foreachBatch`` returns, so that Spark only records the batch as
   done once the hand-off is durable.
4. With the inline committer, the driver commits right away.
"""

from __future__ import annotations

import logging
import random
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from icesink.catalog.config import CatalogConfig
from icesink.catalog.loader import load_table, open_catalog
from icesink.committer.commit import TableCommitter
from icesink.committer.ledger import CheckpointState, Ledger
from icesink.committer.staging import stage_checkpoint
from icesink.errors import CheckpointRewindError, ConfigError, IcesinkError
from icesink.failpoints import failpoint
from icesink.iceberg.marker import max_committed_checkpoint
from icesink.results import decode_write_result
from icesink.sink.schema import plan_projection
from icesink.sink.spark_writer import SparkParquetWriter, spark_writer_refusal, table_bytes_per_row
from icesink.sink.tables import writer_spec
from icesink.writer.task import RESULT_SCHEMA_DDL, write_task

if TYPE_CHECKING:
    from pyiceberg.catalog.sql import SqlCatalog
    from pyiceberg.table import Table
    from pyspark.sql import DataFrame

    from icesink.results import WriteResult
    from icesink.writer.spec import ChangeSpec, WriterSpec

log = logging.getLogger("icesink.stream")

QUERY_ID_PROPERTY = "sql.streaming.queryId"


@dataclass(frozen=True)
class SinkSettings:
    """The resolved arguments of ``icesink.stream``."""

    table: str
    catalog: CatalogConfig
    job_id: str | None
    inline_commit: bool
    changes: ChangeSpec | None = None
    passthrough: tuple[str, ...] = ()
    commit_attempts: int = 8
    expire_snapshots: bool = False
    writer: str = "auto"


class BatchWriter:
    """The ``foreachBatch`` callable of one stream."""

    def __init__(self, settings: SinkSettings, catalog: SqlCatalog | None = None) -> None:
        self._settings = settings
        # stream() hands over the catalog it opened (and checked the migrations of) already.
        self._catalog = catalog or open_catalog(settings.catalog)
        self._ledger = Ledger(settings.catalog)
        self._committer = TableCommitter(
            self._catalog, settings.catalog, self._ledger, expire_snapshots=settings.expire_snapshots
        )
        self._spark_writer = SparkParquetWriter()
        self._writer_in_use: str | None = None

    def job_id(self, batch_df: DataFrame) -> str:
        if self._settings.job_id:
            return self._settings.job_id
        # Spark persists the query id in the checkpoint location: stable across restarts.
        query_id = batch_df.sparkSession.sparkContext.getLocalProperty(QUERY_ID_PROPERTY)
        if not query_id:
            raise ConfigError(f"table {self._settings.table}: cannot find the streaming query id; pass job_id=")
        return query_id

    def __call__(self, batch_df: DataFrame, batch_id: int) -> None:
        identifier = self._settings.table
        job_id = self.job_id(batch_df)
        checkpoint_id = int(batch_id)
        table = load_table(self._catalog, self._settings.catalog, identifier)
        marker = max_committed_checkpoint(table.metadata, job_id)
        if marker is not None and checkpoint_id < marker:
            raise CheckpointRewindError(
                f"table {identifier} already holds checkpoint {marker} of job {job_id}, but the stream is at "
                f"checkpoint {checkpoint_id}: it was restarted from an older checkpoint location. Either restore the "
                f"checkpoint location at or after checkpoint {marker} to continue, or pass a new job_id= to write "
                "this data again as a new job (rows already committed will then be written twice)"
            )
        if marker is not None and checkpoint_id == marker:
            log.info(
                "table=%s job=%s checkpoint=%d is already in the table; skipped", identifier, job_id, checkpoint_id
            )
            return
        known = self._ledger.get(identifier, job_id, checkpoint_id)
        if known is not None:
            # Spark re-delivered a batch whose staging survived: commit it, never write it again.
            log.info(
                "table=%s job=%s checkpoint=%d already %s; not written again",
                identifier,
                job_id,
                checkpoint_id,
                known.state,
            )
            if known.state == CheckpointState.STAGED and self._settings.inline_commit:
                self._commit(job_id)
            return
        spec = writer_spec(table, identifier, job_id, self._settings.changes).for_checkpoint(checkpoint_id)
        results = self._write(batch_df, table, spec)
        failpoint("driver.after-write")
        stage_checkpoint(self._ledger, table, identifier, job_id, checkpoint_id, results)
        failpoint("driver.after-stage")
        if self._settings.inline_commit:
            self._commit(job_id)

    def _write(self, batch_df: DataFrame, table: Table, spec: WriterSpec) -> list[WriteResult]:
        """The one action on the batch: files are written, their results come back to the driver."""
        from pyspark.sql import functions as F

        changes = self._settings.changes
        passthrough = list(self._settings.passthrough)
        if changes is not None:
            # Input position, taken before the shuffle: the tie-breaker between changes of one key.
            batch_df = batch_df.withColumn(changes.order_column, F.monotonically_increasing_id())
            passthrough.append(changes.order_column)
        projection = plan_projection(batch_df.schema, table.schema(), self._settings.table, passthrough)
        projected = projection.apply(batch_df, table.schema())
        if self._settings.writer != "arrow":
            refusal = spark_writer_refusal(spec, projected)
            if refusal is None:
                self._note_writer("spark", "Spark's Parquet writer")
                snapshot = table.current_snapshot()
                summary = snapshot.summary.additional_properties if snapshot and snapshot.summary else None
                return self._spark_writer.write(projected, spec, table_bytes_per_row(summary))
            if self._settings.writer == "spark":
                raise ConfigError(
                    f"table {self._settings.table}, checkpoint {spec.checkpoint_id}: writer='spark' cannot write "
                    f"it: {refusal}; use writer='auto' to fall back to the Arrow writer"
                )
            self._note_writer("arrow", f"icesink's Arrow writer ({refusal})")
        if changes is not None:
            # Every change of a key must reach the same task to be collapsed there.
            keys = [F.col(f"`{c.name}`") for c in spec.equality_columns]
            projected = projected.repartition(batch_df.sparkSession.sparkContext.defaultParallelism, *keys)
        rows = projected.mapInArrow(write_task(spec), RESULT_SCHEMA_DDL).collect()
        return [decode_write_result(row[0]) for row in rows]

    def _note_writer(self, writer: str, why: str) -> None:
        if writer != self._writer_in_use:
            self._writer_in_use = writer
            log.info("table=%s: files are written by %s", self._settings.table, why)

    def _commit(self, job_id: str) -> None:
        """Commit this job's pending checkpoints, retrying transient failures with capped backoff."""
        delay = 0.2
        for attempt in range(1, self._settings.commit_attempts + 1):
            try:
                self._committer.commit_pending(self._settings.table, job_id)
                return
            except IcesinkError as e:
                if not e.transient or attempt == self._settings.commit_attempts:
                    raise
                log.warning("table=%s: commit attempt %d failed (%s); retrying", self._settings.table, attempt, e)
                time.sleep(delay * random.uniform(0.5, 1.5))
                delay = min(delay * 2, 10.0)
