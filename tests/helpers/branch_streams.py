"""A stream into branches of its tables, with audits and publishing, as the driver runs it, without Spark: write
tasks write files, the driver stages them, the committer commits them to the branches, the publisher audits and
publishes (write-audit-publish tests; a script of it runs as a process that crash tests kill)."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from icesink.audit.publish_policy import PublishSettings
from icesink.catalog.config import CatalogConfig
from icesink.catalog.ledger import Ledger
from icesink.catalog.loader import open_catalog
from icesink.committer.audited_branch import AuditedBranch
from icesink.committer.commit import TableCommitter
from icesink.committer.publisher import Publisher, PublishReport
from icesink.committer.staging import TableResults, stage_tables
from icesink.table_ref import TableRef
from tests.helpers.support import create_orders_table, orders, write_files

BRANCH = "audit ✓"


@dataclass
class BranchStream:
    """One job writing ``tables`` into ``branch``, committed and published after every micro-batch."""

    config: CatalogConfig
    tables: Sequence[str]
    checks: Sequence[Callable[..., list[str]]] = ()
    branch: str = BRANCH
    job: str = "job"
    atomic: bool = True
    publish: str | None = None
    on_audit_failure: str = "continue"
    checkpoint: int = 0
    expire_snapshots: bool = False
    reports: list[PublishReport] = field(default_factory=list)
    publisher: Publisher = field(init=False)
    committer: TableCommitter = field(init=False)

    def __post_init__(self) -> None:
        self.restart()

    def restart(self) -> None:
        """A new driver: a committer and publisher of its own, knowing only what the catalog holds."""
        catalog = open_catalog(self.config, pending_tables=True)
        ledger = Ledger(self.config)
        self.committer = TableCommitter(catalog, self.config, ledger, expire_snapshots=self.expire_snapshots)
        settings = PublishSettings.of(self.publish, bool(self.checks), self.on_audit_failure, ",".join(self.tables))
        self.publisher = Publisher(
            catalog,
            self.config,
            ledger,
            [AuditedBranch(TableRef(t, self.branch), tuple(self.checks)) for t in self.tables],
            settings,
            self.atomic,
            self.committer.forget,
        )

    def batch(self, rows: dict[str, pa.Table | None], commit: bool = True) -> PublishReport:
        """One micro-batch: each table's rows written, staged in one ledger transaction, committed, published
        (unless ``commit`` is False: a stream whose committer is the daemon only stages)."""
        catalog = open_catalog(self.config, pending_tables=True)
        written = []
        for identifier, table_rows in rows.items():
            table = catalog.load_table(identifier)
            results = (
                [write_files(table, identifier, self.job, self.checkpoint, table_rows)]
                if table_rows is not None
                else []
            )
            written.append(TableResults(table, identifier, results, branch=self.branch))
        assert stage_tables(Ledger(self.config), self.job, self.checkpoint, written, atomic=self.atomic)
        self.checkpoint += 1
        return self.commit() if commit else PublishReport()

    def commit(self) -> PublishReport:
        if self.atomic:
            self.committer.commit_atomic(self.job)
        else:
            for identifier in self.tables:
                self.committer.commit_pending(identifier, self.job)
        report = self.publisher.after_commit(self.job)
        self.reports.append(report)
        return report


def ids_at(config: CatalogConfig, identifier: str, ref: str = "main") -> list[int]:
    """The ids a reader of ``ref`` sees (pyiceberg), sorted."""
    table = open_catalog(config).load_table(identifier)
    snapshot = table.metadata.snapshot_by_name(ref)
    if snapshot is None:
        return []
    rows = table.scan(snapshot_id=snapshot.snapshot_id, selected_fields=("id",)).to_arrow()
    return sorted(rows.column("id").to_pylist())


def main_snapshot(config: CatalogConfig, identifier: str) -> int | None:
    snapshot = open_catalog(config).load_table(identifier).metadata.snapshot_by_name("main")
    return snapshot.snapshot_id if snapshot is not None else None


def _script() -> None:
    """A driver as a process: ``python -m tests.helpers.branch_streams CONFIG_JSON PLAN_JSON``.

    The plan lists micro-batches of (table, first id, count, bad); a bad one has negative amounts. It writes those
    after the last checkpoint the ledger has, up to ``until``. Crash tests run it with failpoints set, so it dies
    for real mid-way, and again to go on.
    """
    from icesink import checks
    from tests.helpers.support import orders

    config = CatalogConfig(**json.loads(sys.argv[1]))
    plan: dict[str, Any] = json.loads(sys.argv[2])
    stream = BranchStream(
        config,
        plan["tables"],
        checks=[checks.not_null("id"), checks.in_range("amount", min=0), checks.rows_written()],
        job=plan.get("job", "job"),
        atomic=plan.get("atomic", True),
    )
    # A restart goes on after the last checkpoint it staged, finishing what an earlier run left first.
    last = Ledger(config).last_checkpoint(stream.job)
    stream.checkpoint = 0 if last is None else last + 1
    stream.commit()
    for batch in plan["batches"][stream.checkpoint : plan.get("until")]:
        rows = {}
        for identifier, first, count, bad in batch:
            table_rows = orders(first, count)
            if bad:
                table_rows = table_rows.set_column(2, "amount", pa.array([-1.0] * count))
            rows[identifier] = table_rows
        stream.batch(rows)


if __name__ == "__main__":
    _script()


def another_tools_table(config: CatalogConfig, identifier: str) -> str:
    """A table another tool creates under a free name, with the order 100 on main and 101 on a branch of the
    streams' branch name that nobody audited; its uuid."""
    create_orders_table(config, identifier).append(orders(100, 1))
    catalog = open_catalog(config)
    table = catalog.load_table(identifier)
    table.manage_snapshots().create_branch(table.metadata.current_snapshot().snapshot_id, BRANCH).commit()
    catalog.load_table(identifier).append(orders(101, 1), branch=BRANCH)
    return str(catalog.load_table(identifier).metadata.table_uuid)
