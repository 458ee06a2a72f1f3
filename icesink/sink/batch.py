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
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Protocol

from icesink.catalog.config import CatalogConfig
from icesink.catalog.loader import load_table, open_catalog
from icesink.committer.checkpoints import StreamIdentity
from icesink.committer.commit import TableCommitter
from icesink.committer.ledger import Ledger
from icesink.committer.maintainer import Maintainer
from icesink.committer.protocol import Admission, admit
from icesink.committer.staging import TableResults, stage_tables
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
    from pyspark.sql.types import StructType

    from icesink.results import WriteResult
    from icesink.sink.options import StreamOptions
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

    @classmethod
    def of(cls, options: StreamOptions, config: CatalogConfig, **planned: Any) -> SinkSettings:
        """A stream's settings from its options; ``planned`` adds what preflight found for its table (its
        change columns, the columns it passes through)."""
        from icesink.sink.options import Committer

        return cls(
            table=options.table,
            catalog=config,
            job_id=options.job_id,
            inline_commit=options.committer == Committer.INLINE,
            expire_snapshots=options.expire_snapshots,
            writer=options.writer,
            checkpoint_location=options.checkpoint_location,
            maintain=options.maintain,
            evolve_schema=options.evolve_schema,
            **planned,
        )


@dataclass(frozen=True)
class TargetSettings:
    """One table of a stream and the part of each micro-batch that goes there (None: all of it)."""

    settings: SinkSettings
    select: Callable[[DataFrame], DataFrame] | None = None


@dataclass(frozen=True)
class RoutedTarget:
    """One table of a micro-batch: its settings, the schema of its rows, and the rows (None: the router writes
    them itself, see :attr:`Routed.write_all`). An ``optional`` table is staged only if it was written files."""

    settings: SinkSettings
    schema: StructType
    rows: DataFrame | None = None
    optional: bool = False


# The router's own write of every table of a micro-batch (one Spark job): each table's results, in order.
WriteAll = Callable[[Sequence["PreparedWrite"], "Phases"], list[list["WriteResult"]]]


@dataclass
class Routed:
    """A micro-batch split by table; ``release`` frees what routing cached; ``write_all`` (if any) writes every
    table's rows at once, where each table's ``rows`` would otherwise be a Spark job of its own."""

    targets: list[RoutedTarget]
    release: Callable[[], object] = lambda: None
    write_all: WriteAll | None = None


class Router(Protocol):
    def route(self, batch_df: DataFrame) -> Routed: ...


class StaticRouter:
    """The tables named when the stream started, each taking its ``select`` of the micro-batch."""

    def __init__(self, targets: Sequence[TargetSettings]) -> None:
        self._targets = list(targets)

    def route(self, batch_df: DataFrame) -> Routed:
        if len(self._targets) == 1:
            target = self._targets[0]
            rows = target.select(batch_df) if target.select else batch_df
            return Routed([RoutedTarget(target.settings, rows.schema, rows)])
        cached = batch_df.persist()  # every target reads the micro-batch: its source is read once
        selected = [(t.settings, t.select(cached) if t.select else cached) for t in self._targets]
        return Routed([RoutedTarget(settings, rows.schema, rows) for settings, rows in selected], cached.unpersist)


class BatchWriter:
    """The ``foreachBatch`` callable of one stream, into one table or several.

    Every micro-batch is one checkpoint of the stream's job in every table it routes rows to: admitted
    (the checkpoint protocol) in each, written into each, staged for all of them in one ledger
    transaction, and committed; with ``atomic`` the tables are committed together, in one catalog
    transaction.
    """

    def __init__(
        self, stream: SinkSettings, router: Router, catalog: SqlCatalog | None = None, atomic: bool = False
    ) -> None:
        self._stream = stream  # the stream's own settings (job, catalog, committer); its table names it in logs
        self._router = router
        self._atomic = atomic
        # stream() hands over the catalog it opened (and checked the migrations of) already.
        self._catalog = catalog or open_catalog(stream.catalog, pending_tables=True)
        self._ledger = Ledger(stream.catalog)
        self._committer = TableCommitter(
            self._catalog, stream.catalog, self._ledger, expire_snapshots=stream.expire_snapshots
        )
        self._sinks: dict[str, TableSink] = {}
        self._claimed = False  # this run checked that no other stream uses its job id
        self.last_phases: dict[str, float] = {}  # of the last micro-batch written, for profiles

    def job_id(self, batch_df: DataFrame) -> str:
        if self._stream.job_id:
            return self._stream.job_id
        # Spark persists the query id in the checkpoint location: stable across restarts.
        query_id = batch_df.sparkSession.sparkContext.getLocalProperty(QUERY_ID_PROPERTY)
        if not query_id:
            raise ConfigError(f"table {self._stream.table}: cannot find the streaming query id; pass job_id=")
        return query_id

    def stream_identity(self, batch_df: DataFrame) -> StreamIdentity:
        query_id = batch_df.sparkSession.sparkContext.getLocalProperty(QUERY_ID_PROPERTY)
        return StreamIdentity(query_id or None, self._stream.checkpoint_location)

    def _sink(self, settings: SinkSettings) -> TableSink:
        sink = self._sinks.get(settings.table)
        if sink is None:
            sink = self._sinks[settings.table] = TableSink(settings, self._catalog, self._ledger)
        return sink

    def __call__(self, batch_df: DataFrame, batch_id: int) -> None:
        phases = Phases()
        job_id = self.job_id(batch_df)
        stream = self.stream_identity(batch_df)
        checkpoint_id = int(batch_id)
        routed = self._router.route(batch_df)
        try:
            if not routed.targets:
                return  # nothing for any table (a micro-batch of tombstones, say)
            targets = routed.targets
            sinks = [self._sink(t.settings) for t in targets]
            tables = [load_table(self._catalog, t.settings.catalog, t.settings.table) for t in targets]
            if not self._admitted(sinks, tables, job_id, checkpoint_id, stream):
                return
            prepared = [
                sink.prepare(target.schema, table, job_id, checkpoint_id)
                for sink, target, table in zip(sinks, targets, tables, strict=True)
            ]
            phases.done("check")
            if routed.write_all is not None:
                results = routed.write_all(prepared, phases)
            else:
                results = [sink.write(t.rows, p, phases) for sink, t, p in zip(sinks, targets, prepared, strict=True)]
            written = [
                sink.finish(one, result)
                for sink, target, one, result in zip(sinks, targets, prepared, results, strict=True)
                if not target.optional or any(r.data_files or r.delete_files for r in result)
            ]
        finally:
            routed.release()
        failpoint("driver.after-write")
        stage_tables(self._ledger, job_id, checkpoint_id, [w.results for w in written], stream, atomic=self._atomic)
        for one in written:
            self._sinks[one.results.identifier].staged(one)
        phases.done("stage")
        failpoint("driver.after-stage")
        if self._stream.inline_commit:
            self._commit(job_id, phases)
        self.last_phases = phases.milliseconds
        log.info(
            "table=%s checkpoint=%d took %s", ", ".join(w.results.identifier for w in written), checkpoint_id, phases
        )

    def _admitted(
        self,
        sinks: Sequence[TableSink],
        tables: Sequence[Table],
        job_id: str,
        checkpoint_id: int,
        stream: StreamIdentity,
    ) -> bool:
        """Whether this checkpoint is still to be written; if it was staged before, it is committed instead.

        A checkpoint is staged for all of a stream's tables at once, so one table that has it (staged or
        committed) means it is not written again anywhere.
        """
        decisions = [
            admit(self._ledger, table, sink.table, job_id, checkpoint_id, stream, first=not self._claimed)
            for table, sink in zip(tables, sinks, strict=True)
        ]
        for decision in decisions:
            if decision.refusal is not None:
                raise decision.refusal
        self._claimed = True
        if all(d.admission == Admission.WRITE for d in decisions):
            return True
        for decision, sink in zip(decisions, sinks, strict=True):
            state = decision.staged.state if decision.staged is not None else decision.admission.value
            log.info(
                "table=%s job=%s checkpoint=%d already %s; not written again", sink.table, job_id, checkpoint_id, state
            )
        if any(d.commit_staged for d in decisions) and self._stream.inline_commit:
            self._commit(job_id)
        return False

    def _commit(self, job_id: str, phases: Phases | None = None) -> None:
        """Commit this job's pending checkpoints, retrying transient failures with capped backoff."""
        phases = phases or Phases()
        for attempt in range(1, self._stream.commit_attempts + 1):
            try:
                if self._atomic:
                    outcomes = self._committer.commit_atomic(job_id)
                else:
                    outcomes = [o for table in self._sinks for o in self._committer.commit_pending(table, job_id)]
                phases.done("commit")
                for sink in self._sinks.values():
                    if any(o.snapshot_id is not None and o.identifier == sink.table for o in outcomes):
                        sink.maintain(self._committer)
                phases.done("maintain")
                return
            except IcesinkError as e:
                if not e.transient or attempt == self._stream.commit_attempts:
                    raise
                log.warning("table=%s: commit attempt %d failed (%s); retrying", self._stream.table, attempt, e)
                time.sleep(COMMIT_BACKOFF.delay(attempt))


class TableSink:
    """One table of a stream: fits each micro-batch to the table and writes its files on the executors."""

    def __init__(self, settings: SinkSettings, catalog: SqlCatalog, ledger: Ledger) -> None:
        self._settings = settings
        self.table = settings.table
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
        self._writer_in_use: str | None = None

    def prepare(self, spark_schema: StructType, table: Table, job_id: str, checkpoint_id: int) -> PreparedWrite:
        """The table fitted to this checkpoint's rows (evolved where allowed) and what its writers need."""
        identifier = self._settings.table
        table, projection = self._schema.fit(spark_schema, table, job_id, checkpoint_id)
        spec = replace(
            writer_spec(table, identifier, job_id, self._settings.changes).for_checkpoint(checkpoint_id),
            nulls_in_required=self._settings.evolve_schema,
        )
        return PreparedWrite(table, spec, projection)

    def finish(self, prepared: PreparedWrite, results: list[WriteResult]) -> Written:
        """The checkpoint's files in this table, ready to stage (required columns that got nulls made optional)."""
        table = prepared.table
        optional = self._schema.required_nulls(prepared.spec, results)
        if optional:
            table = self._schema.make_optional(table, optional, prepared.spec.checkpoint_id)
        staged = TableResults(
            table, self._settings.table, results, prepared.spec.schema_id, prepared.projection.field_ids
        )
        return Written(staged, prepared.projection)

    def staged(self, written: Written) -> None:
        self._schema.remember(written.projection)

    def maintain(self, committer: TableCommitter) -> None:
        """The table's due maintenance, between commits (``maintain=True``)."""
        if self._maintainer is not None and self._maintainer.between_commits(committer.table(self.table), self.table):
            committer.forget(self.table)

    def write(self, batch_df: DataFrame | None, prepared: PreparedWrite, phases: Phases) -> list[WriteResult]:
        """The one action on the batch: files are written, their results come back to the driver."""
        from pyspark.sql import functions as F

        assert batch_df is not None
        table, spec, projection = prepared.table, prepared.spec, prepared.projection
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


@dataclass(frozen=True)
class PreparedWrite:
    """One table made ready for a checkpoint: the table as fitted, its writers' spec, the rows' projection."""

    table: Table
    spec: WriterSpec
    projection: Projection


@dataclass(frozen=True)
class Written:
    """One table's files of a checkpoint, and the projection they were written through."""

    results: TableResults
    projection: Projection


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
