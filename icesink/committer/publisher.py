"""Write-audit-publish for a stream into a branch: audit each new branch snapshot, then move ``main`` to it.

After every commit of a stream with ``branch=`` and ``audit=[...]`` (or ``publish=``), the committer audits the
branch's snapshots that have no audit yet (:mod:`icesink.audit.chain` says against what), records each outcome
(:mod:`icesink.catalog.audit_record`), and, as the publish policy says, moves ``main`` to the newest snapshot
that may be published: by compare-and-swap, to that snapshot and not to the branch's head, so a later snapshot
that is not audited yet never becomes visible. A stream of several tables committed atomically publishes them
in one transaction of the catalog database, at one checkpoint of the job: a reader of every ``main`` sees one
consistent cut. Everything here is recovered from the tables and the record, so a committer killed anywhere
audits and publishes what is left on its next pass.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from pyiceberg.exceptions import CommitFailedException
from pyiceberg.table.refs import MAIN_BRANCH

from icesink.audit.auditing import audit_link
from icesink.audit.chain import Chain, Link, read_chain
from icesink.audit.publish_policy import AuditFailure, PublishPolicy, PublishSettings
from icesink.catalog.audit_record import AuditEntry, AuditRecord
from icesink.catalog.loader import load_table
from icesink.catalog.publishing_record import NOT_PUBLISHED, PublishingRecord
from icesink.committer.audited_branch import AuditedBranch
from icesink.committer.claims import claimed_by_another
from icesink.committer.done_actions import DoneActions
from icesink.committer.earlier_tables import EarlierTables
from icesink.committer.group_cut import group_cut, held_by_failed_audit
from icesink.committer.main_moves import publish_moves
from icesink.committer.publish_messages import (
    diverged_message,
    failure_message,
    missing_checks_message,
    replaced_table_message,
)
from icesink.errors import AuditFailedError, CommitConflictError, TableNotFoundError, TableReplacedError
from icesink.failpoints import failpoint
from icesink.table_ref import TableRef

if TYPE_CHECKING:
    from pyiceberg.catalog.sql import SqlCatalog

    from icesink.catalog.config import CatalogConfig
    from icesink.catalog.ledger import Ledger

log = logging.getLogger("icesink.committer")

MAX_PUBLISH_CONFLICTS = 10
DONE_ONLY = PublishPolicy.PARTITION_DONE  # publishes only as far as a snapshot that made a partition done


@dataclass
class PublishReport:
    """What one pass did: main moved (table → snapshot), audits that failed, and why main could not move."""

    published: dict[str, int] = field(default_factory=dict)
    failed: list[AuditEntry] = field(default_factory=list)
    held: list[str] = field(default_factory=list)
    audited: list[AuditEntry] = field(default_factory=list)  # every audit made, passed or not
    unaudited: dict[str, str] = field(default_factory=dict)  # table -> why its branch could not be audited
    replaced: list[str] = field(default_factory=list)  # tables created again since they were declared (daemon)


class Publisher:
    """Audits and publishes the branches of one stream, after each of its commits."""

    def __init__(
        self,
        catalog: SqlCatalog,
        config: CatalogConfig,
        ledger: Ledger,
        branches: Sequence[AuditedBranch],
        settings: PublishSettings,
        atomic: bool,
        forget: Callable[[str], None],
        on_partition_done: Callable[[dict[str, object]], None] | None = None,
        scope: Collection[str] = (),
        token: int | None = None,
        by_daemon: bool = False,
        unpublished: Collection[str] = (),
    ) -> None:
        """``forget`` drops a table from the committer's cache of tables once main moved (its metadata changed);
        ``atomic``: the tables are one stream's, committed together, and publish together (by ``settings``; apart,
        each by its branch's own settings, ``settings`` where it has none). ``scope``: the only tables whose main
        this publisher may move (a committer daemon's ``--table``; empty: any); ``token``: the stream of this
        driver it publishes for (:mod:`icesink.committer.claims`); ``by_daemon``: the committer daemon's, which
        publishes only what the stream declared for it; ``unpublished``: tables the stream met and neither audits
        nor publishes (kept up to date by the stream), never of the group."""
        self._catalog = catalog
        self._config = config
        self._ledger = ledger
        self._branches = {b.ref.identifier: b for b in branches}
        self._settings = settings
        self._atomic = atomic
        self._forget = forget
        self._record = AuditRecord(config)
        self._done_actions = DoneActions(config, on_partition_done)
        self.actions_waiting: set[str] = set()  # tables whose done actions failed after main moved
        self._scope = frozenset(scope)
        self._unpublished = unpublished
        self._token = token
        self._by_daemon = by_daemon
        self._taken_told: set[TableRef] = set()  # branches another stream took over, logged once
        self._scope_told = False  # a group reaching outside the scope is logged once
        self._last_publish: dict[str, float] = {}  # table -> when its main last moved (monotonic)
        self._held_back: dict[str, float] = {}  # table -> when the interval that held its snapshots back ends
        self._held_by_audit = False  # the last pass found main held behind a failed audit
        self._earlier = EarlierTables(catalog, config, ledger)  # tables of the group not met in this run

    def take_actions_waiting(self) -> set[str]:
        """The tables whose done actions failed after main moved, since the last call."""
        waiting, self.actions_waiting = self.actions_waiting, set()
        return waiting

    def take_timing(self, before: Publisher) -> None:
        """Go on with the publish intervals of the publisher this one replaces (made again, same job)."""
        self._last_publish = dict(before._last_publish)

    def add(self, branch: AuditedBranch) -> None:
        """A table's branch to audit and publish from now on (a stream meets its tables as rows come)."""
        self._branches[branch.ref.identifier] = branch

    def _known(self, job_id: str) -> dict[str, AuditedBranch]:
        """The branches to look at: those the stream met in this run and, for an atomic stream, every other table
        the job committed to a branch it publishes (met in an earlier run: one that gets no rows now still moves
        with the others)."""
        met = dict(self._branches)  # a copy: the stream meets tables while a publish timer's pass may run
        if not self._atomic or not met:
            return self._still_its_own(job_id, met)
        return self._still_its_own(job_id, {**met, **self._earlier.of_job(job_id, met, self._unpublished)})

    def _still_its_own(self, job_id: str, branches: dict[str, AuditedBranch]) -> dict[str, AuditedBranch]:
        """The branches no other stream took over since (one that met a branch later publishes it, or says
        nobody does); for the daemon, only those the stream declared for it to publish."""
        owners = PublishingRecord(self._config).owners([b.ref for b in branches.values()])
        kept = {}
        for name, branch in branches.items():
            owner = owners.get(branch.ref)
            taken = owner is not None and owner.job_id != job_id
            if taken or claimed_by_another(self._token, self._config.name, branch.ref):
                if branch.ref not in self._taken_told:
                    self._taken_told.add(branch.ref)
                    log.warning(
                        "table=%s: a stream that started later (job %s) writes branch %s now, and publishes it; "
                        "job %s no longer does",
                        name,
                        owner.job_id if owner is not None else job_id,
                        branch.ref.branch,
                        job_id,
                    )
                continue
            if self._by_daemon and owner is not None and owner.policy == NOT_PUBLISHED:
                continue  # its stream publishes it inline now, or nobody does
            kept[name] = branch
        return kept

    def after_commit(self, job_id: str, touched: Sequence[str] | None = None) -> PublishReport:
        """Audit what is new on the branches (of ``touched`` tables, default all), then publish as the policy
        says. Raises :class:`AuditFailedError` for a failure when told to stop (after publishing what passed)."""
        report = PublishReport()
        known = self._in_scope(job_id, self._known(job_id), report)
        self._held_back = {name: ends for name, ends in self._held_back.items() if name in known}
        names = sorted(known) if touched is None or self._atomic else sorted(set(touched) & set(known))
        chains: list[Chain] = []
        for attempt in range(MAX_PUBLISH_CONFLICTS + 1):
            chains = self._chains(known, names, report)
            for name in names:  # held back again below if still not due
                self._held_back.pop(name, None)
            moves = self._due(self._moves(job_id, chains, known), known)
            if not moves:
                break
            try:
                self._publish(moves, report)
                break
            except CommitFailedException as e:
                for name in names:
                    self._forget(name)
                if attempt == MAX_PUBLISH_CONFLICTS:
                    raise CommitConflictError(
                        f"tables {', '.join(names)}: main moved {attempt + 1} times while publishing their branches "
                        f"({e}); another writer commits too often, retry later"
                    ) from e
        self._held_by_audit = any(held_by_failed_audit(chain) for chain in chains)
        stopping = [e for e in report.failed if self._settings_of(known, e.identifier).on_failure == AuditFailure.STOP]
        if stopping:
            first = stopping[0]
            chain_main = next((c.line.main_id for c in chains if c.identifier == first.identifier), None)
            raise AuditFailedError(
                failure_message(first, chain_main, stopped=True),
                table=first.identifier,
                checkpoint_id=first.checkpoint_id,
                job_id=first.job_id,
                snapshot_id=first.snapshot_id,
                problems={k: list(v) for k, v in first.problems.items()},
            )
        return report

    def seconds_until_due(self) -> float | None:
        """How long until the snapshots a publish interval held back in the last pass may be published (None:
        it held none back). A stream may have no commit to publish them after for hours."""
        if not self._held_back:
            return None
        return max(0.0, min(self._held_back.values()) - time.monotonic())

    def held_by_audit(self) -> bool:
        """Whether a failed audit held main back in the last pass: a fix on the branch, by another tool, would
        publish without waiting for the stream's next commit."""
        return self._held_by_audit

    def _settings_of(self, known: dict[str, AuditedBranch], identifier: str) -> PublishSettings:
        """How a table publishes: a group together, by the stream's settings; a table alone, by its own."""
        branch = known.get(identifier)
        if self._atomic or branch is None or branch.settings is None:
            return self._settings
        return branch.settings

    def _in_scope(
        self, job_id: str, known: dict[str, AuditedBranch], report: PublishReport
    ) -> dict[str, AuditedBranch]:
        """The branches whose main this publisher may move: those of its scope. A group that reaches outside it
        publishes together or not at all, so not here."""
        outside = sorted(set(known) - self._scope) if self._scope else []
        if not outside:
            return known
        if not self._atomic:
            return {name: branch for name, branch in known.items() if name in self._scope}
        message = (
            f"tables {', '.join(sorted(known))} of job {job_id} publish together, and this committer's --table "
            f"leaves out {', '.join(outside)}: it moves main of none of them. Run a committer whose --table names "
            "them all (or no --table)"
        )
        report.held.append(message)
        if not self._scope_told:
            self._scope_told = True
            log.warning("%s", message)
        return {}

    def _chains(self, known: dict[str, AuditedBranch], names: Sequence[str], report: PublishReport) -> list[Chain]:
        """Each table's chain, audited; a table dropped or renamed since its stream met it has none, and holds
        no other table back."""
        chains = []
        for name in names:
            try:
                chains.append(self._audited(known[name], report))
            except (TableNotFoundError, TableReplacedError) as e:
                log.warning("table=%s: not published: %s", name, e)
                report.held.append(str(e))
                self._earlier.forget(known[name].ref)  # looked up again, and left out, on the next pass
                if isinstance(e, TableReplacedError):
                    report.replaced.append(name)
        return chains

    def _audited(self, branch: AuditedBranch, report: PublishReport) -> Chain:
        """The branch's chain with every snapshot after main audited (and recorded)."""
        identifier = branch.ref.identifier
        # From the catalog, not a cache: another tool's fix on the branch counts even when the stream did not commit
        # to this table (a table of an atomic stream that gets no rows now).
        table = load_table(self._catalog, self._config, identifier)
        now = str(table.metadata.table_uuid)
        if branch.table_uuid is not None and now != branch.table_uuid:
            raise TableReplacedError(replaced_table_message(branch.ref, branch.table_uuid, now), table=identifier)
        chain = read_chain(table, identifier, branch.ref.branch, self._record)
        if branch.missing:  # not audited, so not recorded: audited once the checks can be made
            message = missing_checks_message(identifier, branch.missing)
            log.warning("%s", message)
            report.unaudited[identifier] = message
            return chain
        if branch.waiting is not None:
            if any(link.entry is None and not link.maintenance for link in chain.links):
                log.info("%s", branch.waiting)
                report.held.append(branch.waiting)
            return chain
        if chain.line.diverged:
            message = diverged_message(identifier, branch.ref.branch, chain)
            log.warning("%s", message)
            report.held.append(message)
            return chain
        for index, link in enumerate(chain.links):
            if link.entry is not None or link.maintenance:
                continue
            entry = audit_link(chain, index, branch.checks, self._ledger)
            failpoint("audit.before-record")  # the snapshot is on the branch; its audit is not recorded
            self._record.record(entry)
            report.audited.append(entry)
            if not entry.passed:
                report.failed.append(entry)
                log.warning("%s", failure_message(entry, chain.line.main_id))
            chain = read_chain(table, identifier, branch.ref.branch, self._record)
        return chain

    def _moves(self, job_id: str, chains: Sequence[Chain], known: dict[str, AuditedBranch]) -> list[tuple[Chain, Link]]:
        """Where each table's main may go now: every table alone, or, for an atomic group, one cut of the job's
        checkpoints that every table can publish (a diverged table holds the whole group). With the policy
        ``partition-done``, only as far as the newest snapshot that made a partition done."""
        if not self._atomic:
            found = [
                (chain, chain.newest_publishable(self._settings_of(known, chain.identifier).policy == DONE_ONLY))
                for chain in chains
                if not chain.line.diverged
            ]
            return [(chain, link) for chain, link in found if link is not None]
        if any(chain.line.diverged for chain in chains):
            return []
        return group_cut(job_id, chains, self._settings.policy == DONE_ONLY)

    def _due(self, moves: list[tuple[Chain, Link]], known: dict[str, AuditedBranch]) -> list[tuple[Chain, Link]]:
        """The moves the publish policies allow now (a group's all or none); notes what an interval holds back."""
        now = time.monotonic()
        groups = [moves] if self._atomic and moves else [[move] for move in moves]
        due: list[tuple[Chain, Link]] = []
        for group in groups:
            names = [chain.identifier for chain, _ in group]
            settings = self._settings_of(known, names[0])
            if settings.policy == PublishPolicy.MANUAL:
                continue
            if settings.policy == PublishPolicy.INTERVAL:
                ends = max(self._last_publish.get(name, float("-inf")) for name in names) + settings.interval_seconds
                if now < ends:
                    self._held_back.update(dict.fromkeys(names, ends))
                    continue
            due.extend(group)
        return due

    def _publish(self, moves: Sequence[tuple[Chain, Link]], report: PublishReport) -> None:
        published = publish_moves(self._catalog, self._config, moves, "committer")
        moved_at = time.monotonic()
        for (chain, link), table in zip(moves, published, strict=True):
            self._last_publish[chain.identifier] = moved_at
            self._forget(chain.identifier)
            report.published[chain.identifier] = link.snapshot_id
            log.info(
                "table=%s: main moved from %s to snapshot %d of branch %s (checkpoint %s)",
                chain.identifier,
                chain.line.main_id,
                link.snapshot_id,
                chain.branch,
                link.checkpoint_id,
            )
            if not self._done_actions.run(table, chain.identifier, MAIN_BRANCH):
                self.actions_waiting.add(chain.identifier)
