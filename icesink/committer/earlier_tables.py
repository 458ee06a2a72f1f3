"""The tables of an atomic job met in an earlier run only: which are still the job's, and by which checks.

A restarted stream meets its tables as their rows come (a Debezium stream may not see a table for hours), and
the tables it committed to in an earlier run still publish with the others, each audited by the checks this job
recorded for it. A table dropped, renamed away or created again under its name since is not the job's any more:
it holds no other table back, and the table of the name now is neither audited with the old one's checks nor
published with the group.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from pyiceberg.table.refs import MAIN_BRANCH

from icesink.catalog.loader import load_table
from icesink.committer.audited_branch import AuditedBranch
from icesink.committer.recorded_checks import recorded_checks
from icesink.errors import ConfigError, TableNotFoundError
from icesink.properties import JOB_ID_PROPERTY
from icesink.table_ref import TableRef

if TYPE_CHECKING:
    from collections.abc import Collection, Mapping

    from pyiceberg.catalog.sql import SqlCatalog
    from pyiceberg.table import Table

    from icesink.catalog.config import CatalogConfig
    from icesink.catalog.ledger import Ledger

log = logging.getLogger("icesink.committer")


class EarlierTables:
    """One publisher's view of its job's tables met in earlier runs (what it found is kept between passes)."""

    def __init__(self, catalog: SqlCatalog, config: CatalogConfig, ledger: Ledger) -> None:
        self._catalog = catalog
        self._config = config
        self._ledger = ledger
        self._found: dict[TableRef, AuditedBranch] = {}
        self._told: set[tuple[TableRef, str | None]] = set()  # tables found not the job's, logged once each

    def of_job(
        self, job_id: str, met: Mapping[str, AuditedBranch], unpublished: Collection[str]
    ) -> dict[str, AuditedBranch]:
        """The job's tables on a branch besides those ``met`` in this run and those it does not publish
        (``unpublished``), on the branches ``met`` use, or any branch where their checks are known."""
        branches = {b.ref.branch for b in met.values()}
        found: dict[str, AuditedBranch] = {}
        for identifier, written in self._ledger.tables_of_job(job_id).items():
            if identifier in met or written.branch == MAIN_BRANCH or identifier in unpublished:
                continue
            ref = TableRef(identifier, written.branch)
            earlier = self._found.get(ref)
            if earlier is None or written.table_uuid not in (None, earlier.table_uuid):
                earlier = self._look_up(job_id, ref, written.table_uuid)
            if earlier is not None and (earlier.waiting is None or written.branch in branches):
                found[identifier] = earlier  # one never audited on another branch: one the job does not publish
        return found

    def forget(self, ref: TableRef) -> None:
        """Look the table up again next time (its audit found it gone, or another table)."""
        self._found.pop(ref, None)

    def _look_up(self, job_id: str, ref: TableRef, table_uuid: str | None) -> AuditedBranch | None:
        """The table's branch with the checks this job recorded for it (``table_uuid``: the table the job wrote
        last; None: not recorded, before the ledger did), None when the table of the name is not the job's. None
        recorded (the driver died before its first audit) or one that cannot be made again, it is not audited,
        so the group holds until the stream meets it: publishing the others alone would show a checkpoint in
        some tables' main and not in its partner's."""
        try:
            table = load_table(self._catalog, self._config, ref.identifier)
        except TableNotFoundError:
            self._not_the_jobs(job_id, ref, None)
            return None
        now = str(table.metadata.table_uuid)
        if now != table_uuid if table_uuid is not None else not _written_by(table, job_id):
            self._not_the_jobs(job_id, ref, now)
            return None
        try:
            checks = recorded_checks(ref.identifier, ref.branch, self._config, job_id, now)
        except ConfigError as e:  # looked up again on the next pass: the module may be installed by then
            waiting = f"{e}. The tables of job {job_id} publish together, so none does until this stream meets it again"
            return AuditedBranch(ref, waiting=waiting)
        # Kept with the table it was of: should another table take the name, its audit refuses it.
        self._found[ref] = AuditedBranch(ref, tuple(checks), table_uuid=now)
        return self._found[ref]

    def _not_the_jobs(self, job_id: str, ref: TableRef, now: str | None) -> None:
        """Say once per table of the name that it is left out (``now``: its uuid; None: none has the name)."""
        if (ref, now) not in self._told:
            self._told.add((ref, now))
            gone = "dropped or renamed away" if now is None else f"dropped and created again (uuid {now} now)"
            log.warning(
                "table=%s: job %s wrote it, but it was %s since: it is no longer published with the job's other "
                "tables, and holds none of them back",
                ref,
                job_id,
                gone,
            )


def _written_by(table: Table, job_id: str) -> bool:
    """Whether the table holds a snapshot of the job (for a job whose ledger did not record the table's uuid)."""
    return any(s.summary is not None and s.summary.get(JOB_ID_PROPERTY) == job_id for s in table.metadata.snapshots)
