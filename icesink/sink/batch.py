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
import time
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from icesink.catalog.config import CatalogConfig
from icesink.catalog.loader import load_table, open_catalog
from icesink.committer.commit import TableCommitter
from icesink.committer.ledger import Ledger, StreamIdentity
from icesink.committer.maintainer import Maintainer
from icesink.committer.protocol import Admission, admit
from icesink.committer.staging import stage_checkpoint
from icesink.errors import ConfigError, IcesinkError
from icesink.failpoints import failpoint
from icesink.iceberg.describe import writer_spec
from icesink.results import decode_write_result
from icesink.retry import Backoff
from icesink.sink.columns import column, nested
from icesink.sink.evolution import SchemaTracker
from icesink.sink.projection import Projection
from icesink.sink.spark_writer import SparkParquetWriter, spark_writer_refusal, table_bytes_per_row
from icesink.writer.task import RESULT_SCHEMA_DDL, write_task

if TYPE_CHECKING:
    from pyiceberg.catalog.sql import SqlCatalog
    from pyiceberg.table import Table
    from pyspark.sql import Column, DataFrame

    from icesink.results import WriteResult
    from icesink.writer.spec import ChangeSpec, Leaf, WriterSpec

log = logging.getLogger("icesink.stream")
# A transient commit failure of the inline committer: retried within the micro-batch.
COMMIT_BACKOFF = Backoff(first=0.2, cap=10.0)

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
    checkpoint_location: str | None = None
    maintain: bool = False
    evolve_schema: bool = False


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
        # The next micro-batch waits for the driver: maintenance stops after icesink.maintain.max-seconds.
        self._maintainer = (
            Maintainer(self._catalog, settings.catalog, waiting=lambda table: True) if settings.maintain else None
        )
        passthrough = list(settings.passthrough)
        if settings.changes is not None:
            passthrough.append(settings.changes.order_column)
        self._schema = SchemaTracker(
            self._catalog, settings.catalog, self._ledger, settings.table, passthrough, settings.evolve_schema
        )
        self._spark_writer = SparkParquetWriter()
        self._writer_in_use: str | None = None
        self._claimed = False  # this run checked that no other stream uses its job id
        self.last_phases: dict[str, float] = {}  # of the last micro-batch written, for profiles

    def job_id(self, batch_df: DataFrame) -> str:
        if self._settings.job_id:
            return self._settings.job_id
        # Spark persists the query id in the checkpoint location: stable across restarts.
        query_id = batch_df.sparkSession.sparkContext.getLocalProperty(QUERY_ID_PROPERTY)
        if not query_id:
            raise ConfigError(f"table {self._settings.table}: cannot find the streaming query id; pass job_id=")
        return query_id

    def stream_identity(self, batch_df: DataFrame) -> StreamIdentity:
        query_id = batch_df.sparkSession.sparkContext.getLocalProperty(QUERY_ID_PROPERTY)
        return StreamIdentity(query_id or None, self._settings.checkpoint_location)

    def __call__(self, batch_df: DataFrame, batch_id: int) -> None:
        identifier = self._settings.table
        phases = Phases()
        job_id = self.job_id(batch_df)
        stream = self.stream_identity(batch_df)
        checkpoint_id = int(batch_id)
        table = load_table(self._catalog, self._settings.catalog, identifier)
        decision = admit(self._ledger, table, identifier, job_id, checkpoint_id, stream, first=not self._claimed)
        if decision.refusal is not None:
            raise decision.refusal
        self._claimed = True
        if decision.admission != Admission.WRITE:
            state = decision.staged.state if decision.staged is not None else "committed"
            log.info(
                "table=%s job=%s checkpoint=%d already %s; not written again", identifier, job_id, checkpoint_id, state
            )
            if decision.commit_staged and self._settings.inline_commit:
                self._commit(job_id)
            return
        table, projection = self._schema.fit(batch_df.schema, table, job_id, checkpoint_id)
        phases.done("check")
        spec = replace(
            writer_spec(table, identifier, job_id, self._settings.changes).for_checkpoint(checkpoint_id),
            nulls_in_required=self._settings.evolve_schema,
        )
        results = self._write(batch_df, table, spec, projection, phases)
        failpoint("driver.after-write")
        optional = self._schema.required_nulls(spec, results)
        if optional:
            table = self._schema.make_optional(table, optional, checkpoint_id)
        stage_checkpoint(
            self._ledger,
            table,
            identifier,
            job_id,
            checkpoint_id,
            results,
            stream,
            spec.schema_id,
            projection.field_ids,
        )
        self._schema.remember(projection)
        phases.done("stage")
        failpoint("driver.after-stage")
        if self._settings.inline_commit:
            self._commit(job_id, phases)
        self.last_phases = phases.milliseconds
        log.info("table=%s checkpoint=%d took %s", identifier, checkpoint_id, phases)

    def _write(
        self, batch_df: DataFrame, table: Table, spec: WriterSpec, projection: Projection, phases: Phases
    ) -> list[WriteResult]:
        """The one action on the batch: files are written, their results come back to the driver."""
        from pyspark.sql import functions as F

        changes = self._settings.changes
        if changes is not None:
            # Input position, taken before the shuffle: the tie-breaker between changes of one key.
            batch_df = batch_df.withColumn(changes.order_column, F.monotonically_increasing_id())
        projected = projection.apply(batch_df, table.schema())
        if self._settings.writer != "arrow":
            refusal = spark_writer_refusal(spec, projected)
            if refusal is None:
                self._note_writer("spark", "Spark's Parquet writer")
                snapshot = table.current_snapshot()
                summary = snapshot.summary.additional_properties if snapshot and snapshot.summary else None
                return self._spark_writer.write(projected, spec, table_bytes_per_row(summary), phases)
            if self._settings.writer == "spark":
                raise ConfigError(
                    f"table {self._settings.table}, checkpoint {spec.checkpoint_id}: writer='spark' cannot write "
                    f"it: {refusal}; use writer='auto' to fall back to the Arrow writer"
                )
            self._note_writer("arrow", f"icesink's Arrow writer ({refusal})")
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

    def _note_writer(self, writer: str, why: str) -> None:
        if writer != self._writer_in_use:
            self._writer_in_use = writer
            log.info("table=%s: files are written by %s", self._settings.table, why)

    def _commit(self, job_id: str, phases: Phases | None = None) -> None:
        """Commit this job's pending checkpoints, retrying transient failures with capped backoff."""
        phases = phases or Phases()
        for attempt in range(1, self._settings.commit_attempts + 1):
            try:
                outcomes = self._committer.commit_pending(self._settings.table, job_id)
                phases.done("commit")
                if self._maintainer is not None and any(o.snapshot_id is not None for o in outcomes):
                    identifier = self._settings.table
                    if self._maintainer.between_commits(self._committer.table(identifier), identifier):
                        self._committer.forget(identifier)
                    phases.done("maintain")
                return
            except IcesinkError as e:
                if not e.transient or attempt == self._settings.commit_attempts:
                    raise
                log.warning("table=%s: commit attempt %d failed (%s); retrying", self._settings.table, attempt, e)
                time.sleep(COMMIT_BACKOFF.delay(attempt))


class Phases:
    """Where a micro-batch's time goes on the driver, phase by phase (logged at INFO, kept for profiles)."""

    def __init__(self) -> None:
        self._last = time.perf_counter()
        self.milliseconds: dict[str, float] = {}

    def done(self, phase: str) -> None:
        now = time.perf_counter()
        self.milliseconds[phase] = self.milliseconds.get(phase, 0.0) + (now - self._last) * 1000
        self._last = now

    def __str__(self) -> str:
        return " ".join(f"{name}={ms:.0f}ms" for name, ms in self.milliseconds.items())


def _distribution_key(df: DataFrame, leaf: Leaf) -> Column:
    """What changes are distributed by: one value per key, however the input spells it.

    A uuid key given as text is compared as its 16 bytes by the tasks, so ``5BC8…`` and ``5bc8…``
    must reach the same task (the tasks refuse any text that is not 8-4-4-4-12 hex digits, so
    lower case is the whole of the difference). Binary uuids are already one spelling.
    """
    from pyspark.sql import functions as F
    from pyspark.sql.types import StringType

    key = nested(leaf.path)
    as_text = leaf.column.iceberg_type == "uuid" and isinstance(df.select(key).schema[0].dataType, StringType)
    return F.lower(key) if as_text else key
