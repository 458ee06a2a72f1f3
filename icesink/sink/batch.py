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
3. The checkpoint's files are staged in the ledger (listed in its row)
   before ``foreachBatch`` returns, so that Spark only records the batch as
   done once the hand-off is durable.
4. With the inline committer, the driver commits right away.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from icesink.audit.publish_policy import PublishPolicy, PublishSettings
from icesink.catalog.checkpoints import StreamIdentity
from icesink.catalog.ledger import Ledger
from icesink.catalog.loader import load_tables, open_catalog
from icesink.committer.audited_branch import AuditedBranch
from icesink.committer.claims import claim, new_token
from icesink.committer.commit import TableCommitter
from icesink.committer.done_actions import ActionRetrier
from icesink.committer.protocol import Admission, admit
from icesink.committer.publish_timer import PublishTimer
from icesink.committer.publisher import Publisher
from icesink.committer.staging import stage_tables
from icesink.errors import ConfigError, IcesinkError, SchemaMismatchError, TableNotFoundError
from icesink.failpoints import failpoint
from icesink.retry import Backoff
from icesink.sink.branch_declarations import BranchDeclarations
from icesink.sink.dead_letter import LATE_ROWS_SCHEMA
from icesink.sink.executor_errors import executor_errors
from icesink.sink.known_routes import Mispredicted
from icesink.sink.phases import Phases
from icesink.sink.query_errors import QUERY_ID_PROPERTY, record_raised
from icesink.sink.routing import Routed, RoutedTarget, Router, StaticRouter, recreation
from icesink.sink.sink_settings import SinkSettings
from icesink.sink.stream_watermark import StreamWatermark, TableTimes
from icesink.sink.table_sink import PreparedWrite, TableSink, Written

if TYPE_CHECKING:
    from pyiceberg.catalog.sql import SqlCatalog
    from pyiceberg.table import Table
    from pyspark.sql import DataFrame

    from icesink.completeness.watermark import WatermarkState
    from icesink.results import WriteResult


log = logging.getLogger("icesink.stream")
# A transient commit failure of the inline committer: retried within the micro-batch.
COMMIT_BACKOFF = Backoff(first=0.2, cap=10.0)


class MicroBatchHandler:
    """The ``foreachBatch`` callable of one stream, into one table or several.

    Every micro-batch is one checkpoint of the stream's job in every table it routes rows to: admitted
    (the checkpoint protocol) in each, written into each, staged for all of them in one ledger
    transaction, and committed; with ``atomic`` the tables are committed together, in one catalog
    transaction.
    """

    def __init__(
        self,
        stream: SinkSettings,
        router: Router,
        catalog: SqlCatalog | None = None,
        atomic: bool = False,
        dead_letter: SinkSettings | None = None,
    ) -> None:
        self._stream = stream  # the stream's own settings (job, catalog, committer); its table names it in logs
        self._router = router
        self._dead_letter = dead_letter  # the table of late rows set aside (late="dead_letter")
        # Named in the errors of its micro-batches when the stream writes one table.
        self._single_table = router.only_table if isinstance(router, StaticRouter) else None
        self._atomic = atomic
        # stream() hands over the catalog it opened (and checked the migrations of) already.
        self._catalog = catalog or open_catalog(stream.catalog, pending_tables=True)
        self._ledger = Ledger(stream.catalog)
        self._committer = TableCommitter(
            self._catalog,
            stream.catalog,
            self._ledger,
            expire_snapshots=stream.expire_snapshots,
            on_partition_done=stream.on_partition_done,
        )
        # Done actions that failed after a commit are tried again while the stream has no commit to run them after.
        self._actions_lock = threading.Lock()
        self._actions = ActionRetrier(stream.catalog, stream.on_partition_done, self._actions_lock)
        self._sinks: dict[str, TableSink] = {}
        # Write-audit-publish: the branches whose snapshots are audited and published after each commit; with the
        # daemon, those to declare to it (it needs the job id, known with the first micro-batch).
        self._publisher: Publisher | None = None
        self._publish_timer: PublishTimer | None = None  # publishes what a publish interval held back, when due
        self._unpublished: set[str] = set()  # tables met whose branch the stream neither audits nor publishes
        default = stream.publish or PublishSettings(PublishPolicy.MANUAL)
        self._declarations = BranchDeclarations(stream.catalog, default, self._atomic)
        self._token = new_token()  # this stream, to its publish timer and those of the driver's other streams
        # A stream of several tables keeps a mark per table and split (each table its own lateness).
        self._watermark = StreamWatermark(self._ledger, stream.idle_timeout, per_table=self._single_table is None)
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
            self._publish_branch_of(settings)
        return sink

    def _publish_branch_of(self, settings: SinkSettings) -> None:
        publish = settings.publish  # None: on main, which publishes nothing
        if publish is not None and not settings.audit and publish.policy == PublishPolicy.MANUAL:
            publish = None  # a branch nobody audits or publishes but an operator
        branch = AuditedBranch(settings.ref, settings.audit, publish) if publish is not None else None
        by_daemon = branch if not self._stream.inline_commit else None  # declared with the first checkpoint
        if not settings.ref.on_main:  # takes the branch's publishing over from older streams, and earlier ones of
            self._declarations.met(settings.ref, by_daemon)  # the driver
            claim(self._token, self._stream.catalog.name, settings.ref)
        if branch is None or publish is None:
            self._unpublished.add(settings.table)  # not of the group that publishes together either
            return
        if by_daemon is not None:
            return  # the daemon audits and publishes it
        if self._publisher is None:
            self._publisher = Publisher(
                self._catalog,
                self._stream.catalog,
                self._ledger,
                [],
                publish,
                self._atomic,
                self._committer.forget,
                self._stream.on_partition_done,
                token=self._token,
                unpublished=self._unpublished,
            )
            self._publish_timer = PublishTimer(self._publisher, self._actions_lock, self._actions.waiting)
        self._publisher.add(branch)

    def __call__(self, batch_df: DataFrame, batch_id: int) -> None:
        job_id = self.job_id(batch_df)
        try:
            self._handle(batch_df, job_id, int(batch_id))
        except IcesinkError as e:
            # Where it happened, as fields: the checkpoint and job always; the table when the stream has one.
            e.located(self._single_table, int(batch_id), job_id)
            record_raised(batch_df.sparkSession.sparkContext, e)  # for icesink.error_of
            raise

    def _handle(self, batch_df: DataFrame, job_id: str, checkpoint_id: int) -> None:
        phases = Phases()
        stream = self.stream_identity(batch_df)
        with executor_errors():
            routed = self._router.route(batch_df, job_id, checkpoint_id)
            phases.done("route")  # a Debezium stream's summary, or its whole write in one job
            try:
                routed, outcome = self._write_routed(routed, job_id, checkpoint_id, stream, phases)
                if outcome is not None:
                    routed.refitted([w.results.identifier for w in outcome[0] if w.refitted])
            finally:
                routed.release()
        if outcome is None:
            return
        failpoint("driver.after-write")
        written, watermark = outcome
        stage_tables(self._ledger, job_id, checkpoint_id, [w.results for w in written], stream, atomic=self._atomic)
        if watermark is not None:
            self._watermark.staged(checkpoint_id, watermark)
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

    def _write_routed(
        self, routed: Routed, job_id: str, checkpoint_id: int, stream: StreamIdentity, phases: Phases
    ) -> tuple[Routed, tuple[list[Written], WatermarkState | None] | None]:
        """:meth:`_write`, routing the micro-batch again where the router offers to: a one-job write that found a
        table otherwise than predicted, or a table dropped since the router met it (created again). Returns the
        routing that was written (the caller releases it, as it releases the one it passed)."""
        recreated: set[str] = set()
        try:
            while True:
                try:
                    return routed, self._write(routed, job_id, checkpoint_id, stream, phases)
                except Mispredicted as e:
                    if routed.general is None:
                        raise
                    log.info("checkpoint=%d: %s; routed again", checkpoint_id, e)
                    again = routed.general
                except TableNotFoundError as e:
                    again = recreation(routed, e, recreated, checkpoint_id)
                routed.release()
                routed = again()
                phases.done("route")
        except BaseException:
            routed.release()
            raise

    def _write(
        self, routed: Routed, job_id: str, checkpoint_id: int, stream: StreamIdentity, phases: Phases
    ) -> tuple[list[Written], WatermarkState | None] | None:
        """The checkpoint's files in each of its tables and the stream's watermark after it (None: nothing to
        write, or written before)."""
        if not routed.targets:
            return None  # nothing for any table (a micro-batch of tombstones, say)
        targets = routed.targets
        if self._dead_letter is not None:  # staged only when the micro-batch had late rows
            targets = [*targets, RoutedTarget(self._dead_letter, LATE_ROWS_SCHEMA, optional=True)]
        sinks = [self._sink(t.settings) for t in targets]
        tables = load_tables(self._catalog, targets[0].settings.catalog, [t.settings.table for t in targets])
        if routed.check is not None:
            routed.check(tables)
        admitted = self._admitted(sinks, tables, job_id, checkpoint_id, stream)
        uuids = {t.settings.table: str(table.metadata.table_uuid) for t, table in zip(targets, tables, strict=True)}
        self._declarations.take_over(job_id, uuids)  # once the stream is known to be the job's (a refusal raised above)
        if not admitted:
            return None
        timed = any(t.settings.event_time is not None for t in targets)
        late_before = (
            self._watermark.start(job_id, checkpoint_id, [(t, s.ref) for t, s in zip(tables, sinks, strict=True)])
            if timed
            else None
        )
        prepared = [
            _prepare(sink, target, table, job_id, checkpoint_id, late_before)
            for sink, target, table in zip(sinks, targets, tables, strict=True)
        ]
        phases.done("check")
        routed_count = len(routed.targets)
        if routed.write_all is not None:
            results = routed.write_all(prepared, phases)
        else:
            results = [
                sink.write(t.rows, p, phases)
                for sink, t, p in zip(sinks[:routed_count], targets, prepared[:routed_count], strict=False)
            ]
        if self._dead_letter is not None:
            results.append(self._write_late_rows(sinks, targets, prepared, results, phases))
        watermark: WatermarkState | None = None
        shared: dict[str, str] = {}
        counts: dict[str, dict[str, str]] = {}
        if timed:
            times = [
                TableTimes(t.settings.table, t.settings.event_time, r) for t, r in zip(targets, results, strict=True)
            ]
            watermark, shared, counts = self._watermark.fold(times)
        written = [
            sink.finish(one, result, {**shared, **counts.get(sink.table, {})})
            for sink, target, one, result in zip(sinks, targets, prepared, results, strict=True)
            if not target.optional or any(r.data_files or r.delete_files for r in result)
        ]
        return written, watermark

    def _write_late_rows(
        self,
        sinks: Sequence[TableSink],
        targets: Sequence[RoutedTarget],
        prepared: Sequence[PreparedWrite],
        results: Sequence[list[WriteResult]],
        phases: Phases,
    ) -> list[WriteResult]:
        """The late rows the tables' writes left out, written to the dead-letter table (the last target) in one
        job; none when no table had any (its tasks counted them)."""
        frames = [
            sink.late_rows(target.rows, one)
            for sink, target, one, written in zip(sinks, targets, prepared, results, strict=False)
            if target.rows is not None and one.sets_aside_late and late_rows_of(written) > 0
        ]
        if not frames:
            return []
        rows = functools.reduce(lambda a, b: a.unionByName(b), frames)
        return sinks[-1].write(rows, prepared[-1], phases)

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
        known = self._ledger.get_many([s.table for s in sinks], job_id, checkpoint_id, unreadable_too=True)
        decisions = [
            admit(self._ledger, table, sink.ref, job_id, checkpoint_id, stream, not self._claimed, known)
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
                with self._actions_lock:
                    self._commit_once(job_id, phases)
                self._actions.waiting(self._committer.take_actions_waiting())
                if self._publisher is not None:
                    self._actions.waiting(self._publisher.take_actions_waiting())
                if self._publish_timer is not None:
                    self._publish_timer.committed(job_id)
                return
            except IcesinkError as e:
                if not e.transient or attempt == self._stream.commit_attempts:
                    raise
                log.warning("table=%s: commit attempt %d failed (%s); retrying", self._stream.table, attempt, e)
                time.sleep(COMMIT_BACKOFF.delay(attempt))

    def _commit_once(self, job_id: str, phases: Phases) -> None:
        """One try at committing the job's pending checkpoints, then publishing and maintaining what moved."""
        if self._atomic:
            outcomes = self._committer.commit_atomic(job_id)
        else:
            outcomes = [o for table in self._sinks for o in self._committer.commit_pending(table, job_id)]
        phases.done("commit")
        if self._publisher is not None:
            self._publisher.after_commit(job_id)
            phases.done("publish")
        maintained = [
            sink.maintain(self._committer)
            for sink in self._sinks.values()
            if any(o.snapshot_id is not None and o.identifier == sink.table for o in outcomes)
        ]
        phases.done("maintain")
        if any(maintained) and self._publisher is not None:
            # Maintenance of a branch changes no row: main follows it at once when it follows its parent.
            self._publisher.after_commit(job_id)


def late_rows_of(results: Sequence[WriteResult]) -> int:
    """The late rows a table's write tasks saw."""
    return sum(times.late_rows for result in results for times in result.event_times)


def _prepare(
    sink: TableSink, target: RoutedTarget, table: Table, job_id: str, checkpoint_id: int, late_before: int | None
) -> PreparedWrite:
    try:
        return sink.prepare(target.schema, table, job_id, checkpoint_id, late_before)
    except SchemaMismatchError as e:
        if target.explain is None:
            raise
        raise target.explain(e, checkpoint_id) from e
