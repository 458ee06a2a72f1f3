"""The branches a stream writes, declared as its own (``icesink_publishing``) once its job is known.

A stream meets its tables as rows come. The first micro-batch after it meets a table on a branch declares the
branch as this stream's: how the committer daemon publishes it, or that the daemon publishes none of it (the
inline committer does, or nobody does). A table dropped and created again while the stream runs is another
table, and the stream writes the new one from then on: it is declared again, for the new table; so is one whose
declaration the daemon forgot while its name was missing (renamed away and back).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING

from icesink.catalog.publishing_record import PublishingRecord
from icesink.committer.declared_publishing import declare_publishing

if TYPE_CHECKING:
    from icesink.audit.publish_policy import PublishSettings
    from icesink.catalog.config import CatalogConfig
    from icesink.committer.audited_branch import AuditedBranch
    from icesink.table_ref import TableRef

log = logging.getLogger("icesink.stream")


class BranchDeclarations:
    """What one stream declared of its branches, and what it is still to declare."""

    def __init__(self, config: CatalogConfig, default: PublishSettings, atomic: bool) -> None:
        """``default``: how the daemon publishes a branch without settings of its own."""
        self._config = config
        self._default = default
        self._atomic = atomic
        self._refs: dict[str, TableRef] = {}  # table -> the branch the stream writes
        self._by_daemon: dict[str, AuditedBranch] = {}  # table -> how the daemon audits and publishes it
        self._declared: dict[str, str | None] = {}  # table -> the uuid of the table declared
        self._due: set[str] = set()  # met since the last declaration

    def met(self, ref: TableRef, by_daemon: AuditedBranch | None) -> None:
        """A table met on a branch; ``by_daemon``: how the committer daemon publishes it (None: it does not)."""
        self._refs[ref.identifier] = ref
        if by_daemon is not None:
            self._by_daemon[ref.identifier] = by_daemon
        self._due.add(ref.identifier)

    def take_over(self, job_id: str, table_uuids: Mapping[str, str]) -> None:
        """Declare the branches met since the last call, and those whose table is another one now (``table_uuids``:
        the micro-batch's tables, by identifier), as the stream of ``job_id``'s."""
        again = {t for t, uuid in table_uuids.items() if t in self._declared and self._declared[t] != uuid}
        same = [self._refs[t] for t in table_uuids if t in self._declared and t not in again | self._due]
        if same:  # the daemon forgets what was declared of a table whose name it found missing for a moment
            owners = PublishingRecord(self._config).owners(same)  # (renamed away and back, registered again)
            again |= {ref.identifier for ref in same if ref not in owners}
        due = sorted(self._due | again)
        if not due:
            return
        superseded = declare_publishing(
            self._config,
            job_id,
            [self._by_daemon[t] for t in due if t in self._by_daemon],
            self._default,
            self._atomic,
            others=[self._refs[t] for t in due],
            table_uuids=table_uuids,
        )
        for table in due:
            self._declared[table] = table_uuids.get(table)
        self._due = set()
        for old in superseded:
            log.warning(
                "table=%s: this stream (job %s) takes branch %s over from job %s, which no longer publishes it: "
                "a branch is published by the stream that met it last",
                old.identifier,
                job_id,
                old.branch,
                old.job_id,
            )
