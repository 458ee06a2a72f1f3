"""Publishing declared to the committer daemon: a stream into branches says how each is audited and published
(:func:`declare_publishing`), and the daemon makes a publisher per job from that (:class:`DeclaredPublishers`),
the checks made again from their descriptions, since a process of its own cannot be handed them."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from pyiceberg.exceptions import CommitFailedException

from icesink.audit.publish_policy import AuditFailure, PublishPolicy, PublishSettings
from icesink.audit.running import describe_check, import_check
from icesink.catalog.publishing_record import Declared, PublishingRecord
from icesink.committer.publisher import AuditedBranch, Publisher, PublishReport
from icesink.errors import IcesinkError
from icesink.table_ref import TableRef

if TYPE_CHECKING:
    from pyiceberg.catalog.sql import SqlCatalog

    from icesink.audit.running import Check
    from icesink.catalog.config import CatalogConfig
    from icesink.catalog.ledger import Ledger

log = logging.getLogger("icesink.committer")


def declare_publishing(
    config: CatalogConfig, job_id: str, branches: Sequence[AuditedBranch], settings: PublishSettings, atomic: bool
) -> None:
    """Tell the committer daemon how each of a stream's branches is audited and published (it cannot be handed the
    checks themselves: it makes them again from their descriptions)."""
    record = PublishingRecord(config)
    for branch in branches:
        checks = tuple(describe_check(c) for c in branch.checks)
        policy = settings.policy.value
        record.declare(
            Declared(
                branch.ref.identifier, job_id, branch.ref.branch, atomic, policy, settings.interval_seconds, checks
            )
        )


def publisher_of_job(
    catalog: SqlCatalog, config: CatalogConfig, ledger: Ledger, declared: Sequence[Declared]
) -> Publisher | None:
    """The daemon's publisher of one job, from what its stream declared (None: it declared nothing)."""
    if not declared:
        return None
    branches = []
    for one in declared:
        checks = [import_check(dict(d)) for d in one.checks]
        made = tuple(c for c in checks if c is not None)
        if len(made) < len(checks):  # a module that can no longer be imported: nothing is published unchecked
            made = (*made, _cannot_be_made(one.identifier))
        branches.append(AuditedBranch(TableRef(one.identifier, one.branch), made))
    first = declared[0]
    policy = PublishPolicy(first.policy)
    settings = PublishSettings(policy, first.interval_seconds, AuditFailure.CONTINUE)
    return Publisher(catalog, config, ledger, branches, settings, first.atomic, lambda _: None)


class DeclaredPublishers:
    """The committer daemon's publishers: one per job that declared publishing, kept between passes (for the
    interval a duration policy counts) and made again when its stream declares anew (restarted with other checks)."""

    def __init__(self, catalog: SqlCatalog, config: CatalogConfig, ledger: Ledger) -> None:
        self._catalog = catalog
        self._config = config
        self._ledger = ledger
        self._known: dict[str, tuple[list[Declared], Publisher]] = {}

    def after_commit(self, table: str, before: Callable[[], None]) -> list[PublishReport]:
        """Audit and publish for every job that declared ``table``; ``before`` runs right before each job's pass
        (the daemon's lease check: only the committer holding it moves main). A failure is logged, not raised."""
        return self._jobs_of([table], before, f"table={table}")

    def every_job(self, scope: Sequence[str], before: Callable[[], None]) -> list[PublishReport]:
        """Audit and publish for every job that declared a table of ``scope`` (empty: any table), commit or not:
        after a restart, when a publish interval ends on a quiet stream, or after another tool fixed a branch."""
        return self._jobs_of(scope, before, f"tables={','.join(scope) or '*'}")

    def _jobs_of(self, tables: Sequence[str], before: Callable[[], None], where: str) -> list[PublishReport]:
        record = PublishingRecord(self._config)
        try:
            declared = record.of_tables(tables) if tables else record.every_table()
        except IcesinkError as e:
            log.warning("%s: publishing skipped: %s", where, e)
            return []
        reports = []
        for job in sorted({d.job_id for d in declared}):
            try:
                of_job = record.of_job(job)
                known = self._known.get(job)
                if known is None or known[0] != of_job:
                    made = publisher_of_job(self._catalog, self._config, self._ledger, of_job)
                    if made is None:
                        continue
                    known = self._known[job] = (of_job, made)
                before()
                reports.append(known[1].after_commit(job))
            except (IcesinkError, CommitFailedException) as e:
                log.warning("%s job=%s: publishing failed (tried again on the next pass): %s", where, job, e)
        return reports


def _cannot_be_made(identifier: str) -> Check:
    def check_missing(audit: object) -> list[str]:
        return [
            f"table {identifier}: a check its stream declared cannot be imported by this committer; install the "
            "module that holds it where the committer runs"
        ]

    return check_missing
