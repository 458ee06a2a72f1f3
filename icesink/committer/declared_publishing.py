"""Publishing declared to the committer daemon: a stream into branches says how each is audited and published
(:func:`declare_publishing`), and the daemon makes a publisher per job from that (:class:`DeclaredPublishers`),
the checks made again from their descriptions, since a process of its own cannot be handed them."""

from __future__ import annotations

import importlib
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

from icesink.audit.publish_policy import AuditFailure, PublishPolicy, PublishSettings
from icesink.audit.running import describe_check, import_check
from icesink.catalog.loader import load_table, open_catalog
from icesink.catalog.pointers import every_pointer
from icesink.catalog.publishing_record import Declared, PublishingRecord
from icesink.committer.audited_branch import AuditedBranch
from icesink.committer.publisher import Publisher, PublishReport
from icesink.errors import IcesinkError, TableNotFoundError
from icesink.table_ref import TableRef

if TYPE_CHECKING:
    from pyiceberg.catalog.sql import SqlCatalog

    from icesink.catalog.config import CatalogConfig
    from icesink.catalog.ledger import Ledger

log = logging.getLogger("icesink.committer")
# How often the daemon's publishing pass looks at every declared job, changed or not: an audit recorded by hand
# (`icesink audit`) changes no table, and a pass that failed for a moment is tried again.
FULL_PASS_SECONDS = 300.0
# A job whose pass failed (the catalog away, a conflict) is looked at again after this long, changed or not.
RETRY_SECONDS = 60.0


def declare_publishing(
    config: CatalogConfig,
    job_id: str,
    branches: Sequence[AuditedBranch],
    settings: PublishSettings,
    atomic: bool,
    others: Sequence[TableRef] = (),
    table_uuids: Mapping[str, str] | None = None,
) -> list[Declared]:
    """Tell the committer daemon how each of a stream's branches is audited and published (it cannot be handed the
    checks themselves: it makes them again from their descriptions); a branch without settings of its own
    publishes by ``settings``.

    The branches of ``branches`` and ``others`` (branches the stream writes that the daemon does not publish for
    it) are the stream's from now on: any older declaration of them, whichever job made it, is withdrawn;
    returns what other jobs held of them. Each declaration is of the table of its name now (``table_uuids``, by
    identifier; default: the catalog's): one dropped and created again later is not audited or published by it.
    """
    uuids = table_uuids if table_uuids is not None else _uuids_now(config, [b.ref.identifier for b in branches])
    declared = [
        Declared(
            b.ref.identifier,
            job_id,
            b.ref.branch,
            atomic,
            (b.settings or settings).policy.value,
            (b.settings or settings).interval_seconds,
            tuple(describe_check(c) for c in b.checks),
            table_uuid=uuids.get(b.ref.identifier),
        )
        for b in branches
    ]
    return PublishingRecord(config).take_over(others, job_id, declared)


def _uuids_now(config: CatalogConfig, identifiers: Sequence[str]) -> dict[str, str]:
    """The uuid of each table of these names that exists (pending ones too: a stream declares before it commits)."""
    if not identifiers:
        return {}
    catalog = open_catalog(config, pending_tables=True)
    found = {}
    for identifier in identifiers:
        try:
            found[identifier] = str(load_table(catalog, config, identifier, own=True).metadata.table_uuid)
        except TableNotFoundError:
            continue  # declared for whatever table of the name is created
    return found


def publisher_of_job(
    catalog: SqlCatalog, config: CatalogConfig, ledger: Ledger, declared: Sequence[Declared], scope: Sequence[str] = ()
) -> tuple[Publisher | None, bool]:
    """The daemon's publisher of one job, from what its stream declared (None: it declared nothing), and whether
    every check could be made. A branch missing one is not audited (nothing is published unchecked, and no
    failure is recorded that the check did not find): the publisher is made again on the next pass, when the
    module may be installed."""
    if not declared:
        return None, True
    branches, complete = [], True
    for one in declared:
        checks = [(d, import_check(dict(d))) for d in one.checks]
        made = tuple(c for _, c in checks if c is not None)
        missing = tuple(str(d.get("function") or d.get("name")) for d, c in checks if c is None)
        complete = complete and not missing
        own = PublishSettings(PublishPolicy(one.policy), one.interval_seconds, AuditFailure.CONTINUE)
        ref = TableRef(one.identifier, one.branch)
        branches.append(AuditedBranch(ref, made, own, missing, table_uuid=one.table_uuid))
    newest = declared[0]  # a group publishes together, as its stream's newest run said
    settings = PublishSettings(PublishPolicy(newest.policy), newest.interval_seconds, AuditFailure.CONTINUE)
    publisher = Publisher(
        catalog, config, ledger, branches, settings, newest.atomic, lambda _: None, scope=scope, by_daemon=True
    )
    return publisher, complete


class DeclaredPublishers:
    """The committer daemon's publishers: one per job that declared publishing, kept between passes (for the
    interval a duration policy counts) and made again when its stream declares anew (restarted with other checks).

    Besides its pass after each commit, the daemon looks at every declared job now and then
    (:meth:`every_job`): only at those whose tables changed since it last looked, or whose publish interval
    ended, and at all of them when it takes the lease and every :data:`FULL_PASS_SECONDS`.
    """

    def __init__(self, catalog: SqlCatalog, config: CatalogConfig, ledger: Ledger, scope: Sequence[str] = ()) -> None:
        self._catalog = catalog
        self._config = config
        self._ledger = ledger
        self._scope = tuple(scope)  # the daemon's --table: the only tables whose main it moves (empty: any)
        self._known: dict[str, tuple[list[Declared], Publisher, bool]] = {}  # job -> declared, publisher, complete
        self._retry_at: dict[str, float] = {}  # job -> when a pass that failed is tried again (monotonic)
        self._seen: dict[str, tuple[tuple[str, str | None], ...]] = {}  # job -> its tables' pointers, last looked at
        self._everything_at = 0.0  # when the next pass looks at every job (monotonic)
        self._remaining: list[str] | None = None  # the jobs a pass that ran out of time left for the next one
        self.declared_tables: set[str] | None = None  # what the last pass on its own found declared

    @property
    def unfinished(self) -> bool:
        """The last pass ran out of time: the next one goes on where it stopped."""
        return self._remaining is not None

    def look_at_everything(self) -> None:
        """The next pass looks at every job, changed or not (a committer that just took the lease)."""
        self._everything_at = 0.0

    def after_commit(self, table: str, before: Callable[[], None]) -> list[PublishReport]:
        """Audit and publish for every job that declared ``table``; ``before`` runs before each job's pass (the
        daemon's lease check; main itself moves by compare-and-swap). A failure is logged, not raised."""
        try:
            jobs = sorted({d.job_id for d in PublishingRecord(self._config).of_tables([table])})
        except IcesinkError as e:
            log.warning("table=%s: publishing skipped: %s", table, e)
            return []
        reports = [self._job_pass(job, before, f"table={table}") for job in jobs]
        return [r for r in reports if r is not None]

    def every_job(self, before: Callable[[], None], budget_seconds: float) -> list[PublishReport]:
        """Audit and publish, commit or not, for the declared jobs that may have something to do: after a restart,
        when a publish interval ends on a quiet stream, or after another tool changed a branch. Stops after
        ``budget_seconds`` (the daemon's commits wait meanwhile) and resumes there on the next call."""
        started = time.monotonic()
        everything = started >= self._everything_at
        record = PublishingRecord(self._config)
        try:
            declared = record.of_tables(self._scope) if self._scope else record.every_table()
            pointers = every_pointer(self._config)
        except IcesinkError as e:
            log.warning("tables=%s: publishing skipped: %s", ",".join(self._scope) or "*", e)
            return []
        dropped = sorted({d.identifier for d in declared} - set(pointers))
        if dropped:  # dropped or renamed: nothing of them left to publish
            declared = [d for d in declared if d.identifier not in dropped]
            try:
                record.forget(dropped)
            except IcesinkError as e:
                log.warning("tables=%s: their declarations stay for now: %s", ",".join(dropped), e)
        self.declared_tables = {d.identifier for d in declared}
        tables_of: dict[str, set[str]] = {}
        for one in declared:
            tables_of.setdefault(one.job_id, set()).add(one.identifier)
        for gone in set(self._known) - set(tables_of):  # withdrawn: another stream took its tables over
            self._known.pop(gone, None)
            self._seen.pop(gone, None)
            self._retry_at.pop(gone, None)
        jobs = sorted(tables_of) if self._remaining is None else [j for j in self._remaining if j in tables_of]
        reports: list[PublishReport] = []
        self._remaining = None
        for index, job in enumerate(jobs):
            if index and time.monotonic() - started > budget_seconds:  # every pass gets one job done at least
                self._remaining = jobs[index:]
                break
            seen = tuple(sorted((t, pointers.get(t)) for t in tables_of[job]))
            if not everything and self._seen.get(job) == seen and not self._due(job):
                continue
            self._seen[job] = seen
            report = self._job_pass(job, before, f"tables={','.join(sorted(tables_of[job]))}")
            if report is not None:
                reports.append(report)
        if everything and self._remaining is None:
            self._everything_at = time.monotonic() + FULL_PASS_SECONDS
        return reports

    def _due(self, job: str) -> bool:
        """Whether a job whose tables did not change has something to do: its interval ended, a check is still
        to be imported, or its last pass failed."""
        known = self._known.get(job)
        if known is None or not known[2] or time.monotonic() >= self._retry_at.get(job, float("inf")):
            return True
        due = known[1].seconds_until_due()
        return due is not None and due <= 0

    def _job_pass(self, job: str, before: Callable[[], None], where: str) -> PublishReport | None:
        """One job's audit and publish; None when it declares nothing (any more) or failed (logged: the daemon goes
        on with the other jobs, and this one is tried again)."""
        try:
            of_job = PublishingRecord(self._config).of_job(job)
            known = self._known.get(job)
            if known is None or known[0] != of_job or not known[2]:  # new, declared anew, or a check missing
                if known is not None and not known[2]:
                    importlib.invalidate_caches()  # its module may have been installed since
                made, complete = publisher_of_job(self._catalog, self._config, self._ledger, of_job, self._scope)
                if made is None:
                    self._known.pop(job, None)
                    return None
                if known is not None:
                    made.take_timing(known[1])
                known = self._known[job] = (of_job, made, complete)
            before()
            report = known[1].after_commit(job)
            for gone in (d for d in known[0] if d.identifier in report.replaced):
                PublishingRecord(self._config).forget_declared(gone)  # its stream meets the new table, or not
        except Exception as e:  # foreseen (the catalog away, a conflict, the lease lost) or not: never the daemon's end
            self._retry_at[job] = time.monotonic() + RETRY_SECONDS
            log.warning("%s job=%s: publishing failed (tried again within %gs): %s", where, job, RETRY_SECONDS, e)
            return None
        self._retry_at.pop(job, None)
        return report
