"""``icesink committer run``: drain the ledger into the tables until stopped."""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field

from pyiceberg.table.refs import MAIN_BRANCH

from icesink.catalog.config import CatalogConfig
from icesink.catalog.lease import Lease, LeaseHolder, LeaseKeeper, LeaseLostError, default_owner
from icesink.catalog.ledger import Ledger
from icesink.catalog.loader import open_catalog
from icesink.committer.build import CommitOutcome
from icesink.committer.commit import TableCommitter
from icesink.committer.daemon_publishing import PUBLISH_CHECK_SECONDS, DaemonPublishing
from icesink.committer.done_actions import RETRY_SECONDS, retry_waiting
from icesink.committer.maintainer import Maintainer
from icesink.committer.observability import CommitterMetrics
from icesink.errors import CatalogReplacedError, IcesinkError, LeaseHeldError
from icesink.maintenance.run import MaintenanceReport
from icesink.retry import Backoff

log = logging.getLogger("icesink.committer")
# The ledger itself unreachable (database restarted, connection killed): a short wait, then again.
LEDGER_BACKOFF = Backoff(first=1.0, cap=2.0)


@dataclass
class DaemonReport:
    """What one run of the daemon did; ``--once`` exits non-zero when ``failed`` is not empty."""

    snapshots: int = 0
    checkpoints: int = 0
    failed: dict[str, str] = field(default_factory=dict)  # table -> the error's message
    # table -> the error as fields (IcesinkError.fields): which table, checkpoint and job it names
    errors: dict[str, dict[str, object]] = field(default_factory=dict)


class CommitterDaemon:
    """Polls the ledger and commits each table's pending checkpoints in order."""

    def __init__(
        self,
        config: CatalogConfig,
        tables: Sequence[str] = (),
        poll_interval: float = 0.5,
        max_backoff: float = 30.0,
        lease_ttl: float = 10.0,
        owner: str | None = None,
        max_failures: int = 5,
        expire_snapshots: bool = False,
        maintain: bool = False,
        actions_retry_seconds: float = RETRY_SECONDS,
        publish_check_seconds: float = PUBLISH_CHECK_SECONDS,
    ) -> None:
        self._config = config
        self._actions_retry_seconds = actions_retry_seconds
        self._actions_retry_at = time.monotonic() + actions_retry_seconds
        self._quiet_tables: dict[str, float] = {}  # tables with done partitions and no action: when to look again
        self._tables = tuple(tables)
        self._poll_interval = poll_interval
        self._backoff = Backoff(first=1.0, cap=max_backoff)
        self._stop = threading.Event()
        self._catalog = open_catalog(config, pending_tables=True)
        self._ledger = Ledger(config)
        # One lease per scope: every table ("*"), or the sorted list given with --table.
        scope = ",".join(sorted(self._tables)) or "*"
        self.lease = Lease(config, scope, owner or default_owner(), ttl=lease_ttl)
        self._committer = TableCommitter(
            self._catalog,
            config,
            self._ledger,
            before_commit=self.lease.check,
            expire_snapshots=expire_snapshots,
            scope=self._tables,
        )
        self._maintainer = (
            Maintainer(
                self._catalog,
                config,
                owner=self.lease.owner,
                before_commit=self.lease.check,
                waiting=lambda table: table in self._ledger.pending_counts(),
                lease_ttl=lease_ttl,
            )
            if maintain
            else None
        )
        self._leading = False
        self._retry_at: dict[str, float] = {}
        self._failures: dict[str, int] = {}
        self._pending_reported: set[str] = set()  # tables the pending gauge has a value for
        self._terminal: set[str] = set()  # tables whose last failure is recorded on a checkpoint, for someone to act
        self._last_errors: dict[str, dict[str, object]] = {}  # table -> its last error's fields
        self._max_failures = max_failures
        self.metrics = CommitterMetrics()
        # Write-audit-publish for the streams that declared it.
        self._publishing = DaemonPublishing(
            self._catalog, config, self._ledger, self.lease, self.metrics, self._tables, publish_check_seconds
        )

    @property
    def maintenance_reports(self) -> list[MaintenanceReport]:
        """Every maintenance run this daemon did (``--maintain``)."""
        return self._maintainer.reports if self._maintainer is not None else []

    def stop(self, *_: object) -> None:
        """Finish the commit in flight, then return from :meth:`run`."""
        self._stop.set()

    def install_signal_handlers(self) -> None:
        signal.signal(signal.SIGTERM, self.stop)
        signal.signal(signal.SIGINT, self.stop)

    def _pending_tables(self) -> list[str]:
        pending = self._ledger.tables_with_pending()
        return [t for t in pending if not self._tables or t in self._tables]

    def drain_once(self, report: DaemonReport) -> int:
        """One pass over every table with pending checkpoints; returns how many tables still wait.

        A table whose commit fails waits with backoff while every other table goes on; one whose
        failure an operator dealt with (``checkpoints retry`` or ``discard``) is tried again at once.
        """
        waiting = 0
        pending = self._pending_tables()
        failing = self._ledger.tables_with_failures() if self._retry_at else set()
        for table in pending:
            if self._stop.is_set():
                break
            operator_acted = table in self._terminal and table not in failing
            if time.monotonic() < self._retry_at.get(table, 0.0) and not operator_acted:
                waiting += 1
                continue
            outcomes: list[CommitOutcome] = []
            try:
                self._committer.commit_pending(table, outcomes=outcomes)
            except CatalogReplacedError:
                raise  # every table of the catalog is affected: the daemon stops
            except LeaseLostError as e:
                self._counted(table, outcomes, report, failed=True)
                log.warning("%s; back to standby", e)
                self._leading = False
                return waiting + 1
            except Exception as e:  # one table's failure, foreseen or not, never stops the others
                self._counted(table, outcomes, report, failed=True)  # what it committed before the failure
                self._failed(table, e, report)
                waiting += 1
                continue
            self._forget_failure(table, report)
            committed = self._counted(table, outcomes, report)
            self._publishing.after_commit(table)
            if committed and self._maintainer is not None and not self._stop.is_set():
                branches = sorted({o.branch for o in outcomes if not o.already_committed})
                maintained = [branch for branch in branches if self._maintain(table, branch)]
                if any(branch != MAIN_BRANCH for branch in maintained):
                    # Maintenance changes no row: main follows it when it follows its parent.
                    self._publishing.after_commit(table)
        for table in set(self._retry_at) - set(pending):  # discarded, or committed by someone else
            self._forget_failure(table, report)
        if not self._stop.is_set():
            self._publishing.when_due()  # not only after this committer's own commits
        if time.monotonic() >= self._actions_retry_at and not self._stop.is_set():
            # Done actions whose first try failed would otherwise wait for their table's next commit.
            self._actions_retry_at = time.monotonic() + self._actions_retry_seconds
            retry_waiting(self._catalog, self._config, self._tables, pending, self._quiet_tables)
        return waiting

    def _counted(self, table: str, outcomes: list[CommitOutcome], report: DaemonReport, failed: bool = False) -> int:
        """Count a pass's commits of one table in the report and the metrics (those made before it ``failed``);
        returns the snapshots made."""
        snapshots = [o for o in outcomes if o.snapshot_id is not None]
        report.snapshots += len(snapshots)
        report.checkpoints += sum(len(o.checkpoint_ids) for o in outcomes)
        if outcomes or not failed:
            self.metrics.committed(
                table,
                snapshots=len(snapshots),
                checkpoints=sum(len(o.checkpoint_ids) for o in snapshots),
                skipped=sum(len(o.checkpoint_ids) for o in outcomes if o.already_committed),
                seconds=[o.seconds for o in snapshots],
                equality_delete_files=sum(o.equality_delete_files for o in snapshots),
            )
        return len(snapshots)

    def _failed(self, table: str, error: Exception, report: DaemonReport) -> None:
        """Record a table's failed commit and when to try it again."""
        failures = self._failures.get(table, 0) + 1
        self._failures[table] = failures
        self.metrics.failures.labels(table).set(failures)
        if isinstance(error, IcesinkError):
            details = error.located(table).fields()
        else:
            message = f"table {table}: {type(error).__name__}: {error}"
            details = {
                "error": type(error).__name__,
                "table": table,
                "checkpoint_id": None,
                "job_id": None,
                "transient": False,
                "message": message,
            }
        report.failed[table] = str(details["message"])
        report.errors[table] = details
        self._last_errors[table] = details
        transient = isinstance(error, IcesinkError) and error.transient
        if not transient and table in self._ledger.tables_with_failures():
            self._terminal.add(table)  # recorded on its checkpoint: clearing that is the operator's signal
        # Retrying cannot help a terminal error until someone acts, so it waits the longest.
        delay = self._backoff.delay(failures) if transient else self._backoff.longest()
        self._retry_at[table] = time.monotonic() + delay
        if isinstance(error, IcesinkError):
            level = logging.WARNING if transient else logging.ERROR
            log.log(level, "table=%s commit failed (%d in a row, retry in %.1fs): %s", table, failures, delay, error)
        else:
            log.exception("table=%s commit failed unexpectedly (retry in %.1fs)", table, delay)

    def _forget_failure(self, table: str, report: DaemonReport) -> None:
        for known in (self._failures, self._last_errors, self._retry_at, report.failed, report.errors):
            known.pop(table, None)
        self._terminal.discard(table)

    def _maintain(self, table: str, branch: str) -> bool:
        """Maintenance between this table's commits, on the branch they went to; whether it committed (its own
        failures never stop the commits)."""
        assert self._maintainer is not None
        try:
            current = self._committer.table(table)
        except IcesinkError as e:
            log.warning("table=%s: maintenance skipped: %s", table, e)
            return False
        # The commit lease stays renewed while maintenance runs: a compaction longer than its ttl would
        # otherwise find it expired at its own commit and fail every time (maintenance checks it too).
        with LeaseKeeper(self.lease):
            maintained = self._maintainer.between_commits(current, table, branch)
        if maintained is not None:
            self._committer.forget(table)
        return maintained is not None

    def audits(self) -> list[dict[str, object]]:
        """Each table whose publishing a failed audit holds, with the snapshot and the problems, for /healthz."""
        return self._publishing.audits()

    def _update_pending(self) -> None:
        try:
            counts = self._ledger.pending_counts()
        except IcesinkError:
            return
        # Tables reported before are set again: one whose checkpoints all committed must read 0, not its last count.
        tables = set(counts) | set(self._failures) | self._pending_reported
        for table in tables:
            self.metrics.pending.labels(table).set(counts.get(table, 0))
        self._pending_reported = tables

    def jobs(self) -> list[dict[str, object]]:
        """Each job of the catalog with its tables (a stream into many tables is one job), for /healthz."""

        return [asdict(j) for j in self._ledger.jobs()]

    def problems(self) -> list[str]:
        """Why the daemon is unhealthy; empty while it is healthy."""
        return [
            f"table {t} failed {n} time(s) in a row: {self._last_errors.get(t, {}).get('message', '')}"
            for t, n in sorted(self._failures.items())
            if n >= self._max_failures or t in self._terminal
        ]

    def failures(self) -> list[dict[str, object]]:
        """Each table whose last commit failed, how many times in a row, and the error as fields (its own
        ``table`` is another one when that table's checkpoint holds back a group committed together), for
        /healthz."""
        return [
            {"table": t, "failures_in_a_row": n, "error": self._last_errors.get(t)}
            for t, n in sorted(self._failures.items())
        ]

    def run(self, once: bool = False, wait: float | None = None) -> DaemonReport:
        """Commit until stopped; with ``once``, until nothing is pending (or a table failed).

        A run ``once`` stands by for a lease another committer holds for at most ``wait`` seconds (not at
        all without it), then raises :class:`LeaseHeldError` naming that committer: a cron job or an
        operator expects it to end, and the holder commits those tables anyway.
        """
        report = DaemonReport()
        deadline = None if wait is None else time.monotonic() + wait
        self._publishing.unbounded = once
        log.info("committer %s started on %s", self.lease.owner, self._config.describe())
        try:
            while not self._stop.is_set():
                if not self._hold_lease():
                    if once:
                        self._give_way(deadline, wait, report)
                    self._stop.wait(self._poll_interval)
                    continue
                try:
                    waiting = self.drain_once(report)
                except IcesinkError as e:
                    if not e.transient:
                        raise
                    # The ledger itself is unreachable (database restarted, connection killed): wait, go on.
                    log.warning("cannot read the ledger, retrying: %s", e)
                    self._stop.wait(LEDGER_BACKOFF.delay(2))
                    continue
                self._update_pending()
                if once and (waiting == 0 or report.failed):
                    break
                self._stop.wait(self._poll_interval)
        finally:
            if self._leading:
                self.lease.release()
        log.info("committer stopped: %d snapshots, %d checkpoints", report.snapshots, report.checkpoints)
        return report

    def _give_way(self, deadline: float | None, wait: float | None, report: DaemonReport) -> None:
        """Raise :class:`LeaseHeldError` once a run ``once`` has stood by as long as it may and another
        committer still holds the lease; an unreachable lease is not someone else's, so it is tried again."""
        if deadline is not None and time.monotonic() < deadline:
            return
        try:
            holder = self.lease.holder()
        except CatalogReplacedError:
            raise
        except IcesinkError:
            return
        if holder is not None:
            raise LeaseHeldError(self._held_by(holder, wait, report))

    def _held_by(self, holder: LeaseHolder, wait: float | None, report: DaemonReport) -> str:
        shared = "" if holder.scope == self.lease.scope else f" (it shares tables with scope {self.lease.scope!r})"
        done = f"committed {report.checkpoints} checkpoint(s) before it lost the lease" if report.checkpoints else ""
        if wait is None:
            outcome = f"This run {done or 'committed nothing'}. Run again later, or add --wait SECONDS"
        else:
            stood = f"stood by for {wait:g}s" + (f" and {done}" if done else "")
            outcome = f"This run {stood}. Run again later, or raise --wait"
        return (
            f"another committer holds the lease on scope {holder.scope!r}{shared}: {holder.describe()}; it commits "
            f"these tables itself. {outcome} to stand by for the lease (a committer killed without releasing it "
            "holds it until it expires)"
        )

    def _clean_leftovers(self) -> None:
        """What checkpoints a predecessor committed but died before cleaning up kept: the files in their rows, the
        delta manifests of those staged before 0018."""
        try:
            cleaned = self._committer.clean_committed()
        except IcesinkError as e:
            log.warning("could not clean up after committed checkpoints: %s", e)
            return
        if cleaned:
            log.info("cleaned up after %d committed checkpoint(s) a predecessor left", cleaned)

    def _hold_lease(self) -> bool:
        """Acquire or renew the lease; log when this committer becomes active or standby."""
        try:
            held = self.lease.acquire()
        except CatalogReplacedError:
            raise
        except IcesinkError as e:
            log.warning("cannot reach the lease: %s", e)
            held = False
        if held and not self._leading:
            self._publishing.lease_taken()
            log.info(
                "committer %s is active on scope %r (epoch %s)", self.lease.owner, self.lease.scope, self.lease.epoch
            )
            self._clean_leftovers()
        elif not held and self._leading:
            log.warning("committer %s lost its lease on scope %r; standing by", self.lease.owner, self.lease.scope)
        elif not held:
            log.debug("committer %s is standing by", self.lease.owner)
        self._leading = held
        self.metrics.active.set(1 if held else 0)
        return held
