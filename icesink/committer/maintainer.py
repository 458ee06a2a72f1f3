"""Maintenance run by the committer between its commits, and by ``icesink maintain``.

One maintainer per table at a time holds the table's maintenance lease
(``maintain:<table>``, apart from the commit leases): the daemon's
``--maintain``, a stream's ``maintain=True`` and an operator's ``icesink
maintain`` never rewrite the same table side by side. Every maintenance
commit also asserts the head it was built on, and is checked against what
was committed since its base.

Between commits, maintenance starts no new compaction group once checkpoints
of the table are waiting and ``icesink.maintain.max-seconds`` have passed, so
a waiting checkpoint is delayed by at most that plus one group (whose size
``icesink.maintain.max-group-bytes`` bounds). A maintenance failure is logged
and never stops commits.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from pyiceberg.table.refs import MAIN_BRANCH

from icesink.catalog.config import CatalogConfig
from icesink.catalog.lease import Lease, LeaseKeeper, default_owner, maintenance_scope
from icesink.errors import CatalogReplacedError, ConfigError, MaintenanceBusyError
from icesink.maintenance.committing import MaintenanceTarget
from icesink.maintenance.policy import MaintenancePolicy
from icesink.maintenance.run import MaintenanceReport, MaintenanceRequest, due, maintain_table

if TYPE_CHECKING:
    from pyiceberg.catalog.sql import SqlCatalog
    from pyiceberg.table import Table


log = logging.getLogger("icesink.maintenance")


class Maintainer:
    """Runs due maintenance on tables, holding each table's maintenance lease while it does."""

    def __init__(
        self,
        catalog: SqlCatalog,
        config: CatalogConfig,
        owner: str | None = None,
        before_commit: Callable[[], None] | None = None,
        waiting: Callable[[str], bool] = lambda table: False,
        lease_ttl: float = 10.0,
    ) -> None:
        """``before_commit`` also runs before every maintenance commit (the daemon's commit lease);
        ``waiting(table)`` says whether checkpoints of the table wait to be committed."""
        self._catalog = catalog
        self._config = config
        self._owner = owner or default_owner()
        self._before_commit = before_commit
        self._waiting = waiting
        self._lease_ttl = lease_ttl
        self.reports: list[MaintenanceReport] = []

    def between_commits(self, table: Table, identifier: str, branch: str = MAIN_BRANCH) -> MaintenanceReport | None:
        """Do what is due on the table's ``branch`` (the one the commits went to), within the time bound; None when
        nothing was due or possible."""
        try:
            policy = MaintenancePolicy.of(table.properties, identifier)
        except ConfigError as e:
            log.warning("table=%s: maintenance skipped: %s", identifier, e)
            return None
        if not due(table, policy, branch):
            return None
        started = time.monotonic()

        def keep_going() -> bool:
            return not self._waiting(identifier) or time.monotonic() - started < policy.max_seconds

        try:
            # With checkpoints waiting, bulk conversion (one pass, it cannot stop halfway) runs only as far as
            # a commit would convert: up to convert-max-rows rows to read.
            limit = policy.convert_max_rows if self._waiting(identifier) else None
            request = MaintenanceRequest(policy, keep_going=keep_going, convert_max_rows=limit)
            return self.run(table, identifier, request, branch)
        except MaintenanceBusyError as e:
            log.info("table=%s: %s", identifier, e)
        except CatalogReplacedError:
            raise  # every table of the catalog is affected
        except Exception:  # whatever went wrong, the table is as it was and the commits go on
            log.exception("table=%s: maintenance failed; commits go on", identifier)
        return None

    def run(
        self, table: Table, identifier: str, request: MaintenanceRequest, branch: str = MAIN_BRANCH
    ) -> MaintenanceReport:
        """One maintenance run on the table's ``branch``, under the table's maintenance lease (one per table,
        whatever the branch: maintenance runs of two branches would compete for the same sequence numbers)."""
        lease = Lease(self._config, maintenance_scope(identifier), self._owner, ttl=self._lease_ttl)
        if not lease.acquire():
            raise MaintenanceBusyError(
                f"table {identifier}: another maintainer holds its maintenance lease (it runs maintenance now, or "
                f"died less than {self._lease_ttl:g}s ago); try again later"
            )

        def before_commit() -> None:
            lease.check()
            if self._before_commit is not None:
                self._before_commit()

        target = MaintenanceTarget(self._catalog, self._config, identifier, before_commit, branch)
        try:
            with LeaseKeeper(lease):
                _, report = maintain_table(target, table, request)
        finally:
            lease.release()
        self.reports.append(report)
        where = identifier if branch == MAIN_BRANCH else f"{identifier} branch={branch}"
        log.info("table=%s maintenance: %s", where, describe(report))
        return report


def describe(report: MaintenanceReport) -> str:
    """One line: what changed."""
    before, after = report.before, report.after
    parts = []
    if report.conversion is not None:
        c = report.conversion
        parts.append(
            f"converted {c.equality_delete_files} equality delete file(s) into {c.position_delete_files} position "
            f"delete file(s) ({c.deleted_rows} rows)" + (f" [left for later: {c.conflict}]" if c.conflict else "")
        )
    if report.compaction is not None:
        k = report.compaction
        parts.append(
            f"compacted {k.files_rewritten} file(s) ({k.bytes_rewritten} bytes) into {k.files_written} "
            f"({k.bytes_written} bytes) in {k.groups_committed}/{k.groups_planned} group(s), dropped "
            f"{k.delete_files_dropped} delete file(s)"
            + (", stopped for waiting checkpoints" if k.stopped_early else "")
        )
    if report.merge is not None and (report.merge.delete_files_written or report.merge.conflict):
        m = report.merge
        parts.append(
            f"merged {m.delete_files_rewritten} position delete file(s) ({m.bytes_rewritten} bytes) into "
            f"{m.delete_files_written}, one per data file ({m.positions} positions) in {m.commits} commit(s)"
            + (f" [left for later: {m.conflict}]" if m.conflict else "")
            + (", stopped for waiting checkpoints" if m.stopped_early else "")
        )
    if after is not None:
        parts.append(
            f"data files {before.data_files} -> {after.data_files}, delete files "
            f"{before.position_delete_files + before.equality_delete_files} -> "
            f"{after.position_delete_files + after.equality_delete_files}"
        )
    parts += report.notes
    parts.append(f"{report.seconds:.2f}s")
    return "; ".join(parts) if parts else "nothing to do"
