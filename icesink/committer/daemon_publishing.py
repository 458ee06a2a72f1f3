"""The committer daemon's write-audit-publish: after each of its commits, and now and then on its own."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from icesink.catalog.lease import Lease, LeaseKeeper
from icesink.committer.declared_publishing import DeclaredPublishers

if TYPE_CHECKING:
    from pyiceberg.catalog.sql import SqlCatalog

    from icesink.catalog.config import CatalogConfig
    from icesink.catalog.ledger import Ledger
    from icesink.committer.observability import CommitterMetrics
    from icesink.committer.publisher import PublishReport

# How often the daemon audits and publishes the declared branches that may have something to do, commit or not.
PUBLISH_CHECK_SECONDS = 10.0
# The longest one such pass runs before the daemon commits again (it resumes where it stopped).
PUBLISH_PASS_SECONDS = 2.0


class DaemonPublishing:
    """Audits and publishes for the streams that declared it (``icesink_publishing``), counts it in the metrics,
    and keeps the tables whose publishing a failed audit holds, for /healthz.

    Every commit of a declared table is followed by its jobs' pass. Besides, every ``check_seconds``, a pass over
    the jobs that may have something to do without a commit: a predecessor that died between its commit and its
    publish, a publish interval ending on a quiet stream, another tool's fix of a branch.
    """

    def __init__(
        self,
        catalog: SqlCatalog,
        config: CatalogConfig,
        ledger: Ledger,
        lease: Lease,
        metrics: CommitterMetrics,
        scope: Sequence[str] = (),
        check_seconds: float = PUBLISH_CHECK_SECONDS,
    ) -> None:
        self._publishers = DeclaredPublishers(catalog, config, ledger, scope)
        self._lease = lease
        self._metrics = metrics
        self._check_seconds = check_seconds
        self._check_at = 0.0  # 0.0: on the first pass
        self._held_by_audit: dict[str, dict[str, object]] = {}
        self.unbounded = False  # a run --once passes over every job at once: no later run resumes its pass

    def lease_taken(self) -> None:
        """The next pass looks at every job at once: a predecessor may have died between its commit and its
        publish."""
        self._check_at = 0.0
        self._publishers.look_at_everything()

    def after_commit(self, table: str) -> None:
        """Audit and publish the branches of the jobs that declared ``table``, as their inline committer would; a
        failure is logged and never stops the commits. The lease is checked right before main moves."""
        self._count(self._publishers.after_commit(table, before=self._lease.check))

    def when_due(self) -> None:
        """The pass on its own, when it is due."""
        if time.monotonic() < self._check_at:
            return
        with LeaseKeeper(self._lease):  # the lease stays renewed while the pass runs
            budget = float("inf") if self.unbounded else PUBLISH_PASS_SECONDS
            self._count(self._publishers.every_job(self._lease.check, budget))
        declared = self._publishers.declared_tables
        if declared is not None:  # a table taken over, or dropped: this daemon holds nothing of it any more
            self._held_by_audit = {t: held for t, held in self._held_by_audit.items() if t in declared}
        # A pass that ran out of time goes on after the next round of commits.
        wait = 0.0 if self._publishers.unfinished else self._check_seconds
        self._check_at = time.monotonic() + wait

    def _count(self, reports: list[PublishReport]) -> None:
        for published in reports:
            for entry in published.audited:
                self._metrics.audits.labels(entry.identifier, "passed" if entry.passed else "failed").inc()
                if not entry.passed:
                    self._held_by_audit[entry.identifier] = entry.held()
            for identifier, why in published.unaudited.items():
                self._held_by_audit[identifier] = {"table": identifier, "problems": {"not audited": [why]}}
            for identifier in published.published:
                self._metrics.published.labels(identifier).inc()
                self._held_by_audit.pop(identifier, None)

    def audits(self) -> list[dict[str, object]]:
        """Each table whose publishing a failed audit holds, with the snapshot and the problems."""
        return [self._held_by_audit[t] for t in sorted(self._held_by_audit)]
