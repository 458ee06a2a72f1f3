"""What operators do with a stream's branch: see how far main is behind, audit the branch again, publish it.

Behind ``icesink branches``, ``icesink audit`` and ``icesink publish``.
"""

from __future__ import annotations

import datetime
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from pyiceberg.exceptions import CommitFailedException
from pyiceberg.table.refs import MAIN_BRANCH, SnapshotRefType

from icesink.audit.auditing import audit_link
from icesink.audit.chain import Chain, Link, read_chain
from icesink.catalog.audit_record import AuditEntry, AuditRecord
from icesink.catalog.loader import load_table
from icesink.commands import icesink_command
from icesink.committer.main_moves import publish_moves
from icesink.committer.publish_messages import diverged_message
from icesink.committer.recorded_checks import recorded_checks
from icesink.errors import CommitConflictError, ConfigError, PublishError

if TYPE_CHECKING:
    from pyiceberg.catalog.sql import SqlCatalog
    from pyiceberg.table import Table

    from icesink.catalog.config import CatalogConfig
    from icesink.catalog.ledger import Ledger


@dataclass(frozen=True)
class BranchReport:
    """One branch as ``icesink branches`` shows it."""

    identifier: str
    branch: str
    main_id: int | None
    head_id: int | None
    fork_id: int | None  # the newest snapshot both main and the branch descend from
    diverged: bool
    unpublished: tuple[Link, ...]

    def as_json(self) -> dict[str, object]:
        return {
            "table": self.identifier,
            "branch": self.branch,
            "main_snapshot_id": self.main_id,
            "head_snapshot_id": self.head_id,
            "fork_snapshot_id": self.fork_id,
            "diverged": self.diverged,
            "behind": len(self.unpublished),
            "unpublished": [link_json(link) for link in self.unpublished],
        }


def link_json(link: Link) -> dict[str, object]:
    summary = link.snapshot.summary
    return {
        "snapshot_id": link.snapshot_id,
        "committed_at": datetime.datetime.fromtimestamp(link.snapshot.timestamp_ms / 1000, datetime.UTC).isoformat(),
        "job_id": link.job_id,
        "checkpoint_id": link.checkpoint_id,
        "added_rows": int(summary.get("added-records") or 0) if summary is not None else 0,
        "audit": audit_state(link),
        "publishable": link.publishable,
        "maintenance": link.maintenance,
        "audited_against": link.entry.base_snapshot_id if link.entry else None,
        "problems": {k: list(v) for k, v in link.entry.problems.items()} if link.entry else {},
    }


def audit_state(link: Link) -> str:
    if link.maintenance:
        return "maintenance, rows unchanged"
    if link.entry is None:
        return "not audited"
    if not link.entry.passed:
        return "failed"
    return "passed" if link.publishable else "passed, after a failure"


def _ancestors(table: Table, snapshot_id: int | None) -> list[int]:
    found = []
    snapshot = table.metadata.snapshot_by_id(snapshot_id) if snapshot_id is not None else None
    while snapshot is not None:
        found.append(snapshot.snapshot_id)
        parent = snapshot.parent_snapshot_id
        snapshot = table.metadata.snapshot_by_id(parent) if parent is not None else None
    return found


def branches_of(table: Table, identifier: str, config: CatalogConfig, branch: str | None = None) -> list[BranchReport]:
    """Every branch of the table but main (or the one named), with what main has not published of it."""
    names = [
        name
        for name, ref in sorted(table.metadata.refs.items())
        if name != MAIN_BRANCH and ref.snapshot_ref_type == SnapshotRefType.BRANCH
    ]
    if branch is not None:
        if branch not in names:
            shown = ", ".join(names) or "none but main"
            raise ConfigError(f"table {identifier} has no branch {branch!r} (its branches: {shown})", table=identifier)
        names = [branch]
    record = AuditRecord(config)
    reports = []
    for name in names:
        chain = read_chain(table, identifier, name, record)
        main_line = set(_ancestors(table, chain.line.main_id))
        fork = next((s for s in _ancestors(table, chain.line.head_id) if s in main_line), None)
        reports.append(
            BranchReport(
                identifier, name, chain.line.main_id, chain.line.head_id, fork, chain.line.diverged, chain.links
            )
        )
    return reports


def _chain(table: Table, identifier: str, branch: str, config: CatalogConfig) -> Chain:
    ref = table.metadata.refs.get(branch)
    if branch == MAIN_BRANCH or ref is None or ref.snapshot_ref_type != SnapshotRefType.BRANCH:
        what = (
            "main is what publishing moves; name the branch a stream writes"
            if branch == MAIN_BRANCH
            else f"{branch!r} is a tag, not a branch"
            if ref is not None
            else f"it has no branch {branch!r}"
        )
        raise ConfigError(
            f"table {identifier}: {what}; `{icesink_command('branches', identifier)}` lists its branches",
            table=identifier,
        )
    return read_chain(table, identifier, branch, AuditRecord(config))


def audit_again(table: Table, identifier: str, branch: str, config: CatalogConfig, ledger: Ledger) -> AuditEntry | None:
    """Run the branch's recorded checks on everything its head adds over main, and record the outcome; None when
    main is at the branch's head already."""

    chain = _chain(table, identifier, branch, config)
    checks = recorded_checks(identifier, branch, config, table_uuid=str(table.metadata.table_uuid))
    if chain.line.diverged:
        raise PublishError(diverged_message(identifier, branch, chain), table=identifier)
    if not chain.links:
        return None  # main is at the branch's head: nothing to audit
    net = Chain(chain.identifier, chain.branch, chain.table, chain.line, tuple(_unpassed(chain.links)))
    entry = audit_link(net, len(net.links) - 1, checks, ledger)
    AuditRecord(config).record(entry)
    return entry


def _unpassed(links: Sequence[Link]) -> list[Link]:
    """The links with none publishable, so that the head's base is main: audited on everything since main."""
    return [replace(link, publishable=False) for link in links]


def publish_branch(
    catalog: SqlCatalog,
    config: CatalogConfig,
    identifier: str,
    branch: str,
    by: str,
    snapshot_id: int | None = None,
    force: bool = False,
) -> tuple[int | None, int]:
    """Move main to a snapshot of the branch: the given one or the newest that passed its audit (with ``force``,
    the given one or the head, whatever its audit). Returns (main before, main after)."""
    for _ in range(10):
        table = load_table(catalog, config, identifier)
        chain = _chain(table, identifier, branch, config)
        if chain.line.diverged:
            raise PublishError(diverged_message(identifier, branch, chain), table=identifier)
        target = _target(chain, snapshot_id, force, config)
        try:
            publish_moves(catalog, config, [(chain, target)], by)
        except CommitFailedException:
            continue  # the table moved meanwhile: look again
        return chain.line.main_id, target.snapshot_id
    raise CommitConflictError(f"table {identifier}: it changed ten times while publishing; try again", table=identifier)


def _refuse_failed_elsewhere(chain: Chain, config: CatalogConfig, upto: Link | None = None) -> None:
    """A branch no stream audits may share snapshots with one that does (one branch made from another): a snapshot
    whose audit failed there is not published from here without --force."""
    links = chain.links[: chain.links.index(upto) + 1] if upto is not None else chain.links
    entries = AuditRecord(config).of_snapshots(chain.identifier, [link.snapshot_id for link in links])
    failed = sorted({(e.snapshot_id, e.branch) for e in entries if not e.passed})
    if failed:
        snapshot, other = failed[0]
        raise PublishError(
            f"table {chain.identifier}: snapshot {snapshot} on branch {chain.branch} failed its audit on branch "
            f"{other}; publish it anyway with --force",
            table=chain.identifier,
        )


def _audited(chain: Chain, config: CatalogConfig) -> bool:
    """Whether an audit of the branch is recorded, of this table (not of one of the name dropped since)."""
    uuid = str(chain.table.metadata.table_uuid)
    return bool(AuditRecord(config).of_branch(chain.identifier, chain.branch, uuid))


def _target(chain: Chain, snapshot_id: int | None, force: bool, config: CatalogConfig) -> Link:
    identifier, branch = chain.identifier, chain.branch
    if not chain.links:
        raise ConfigError(f"table {identifier}: main is at branch {branch}'s head already; nothing to publish")
    if snapshot_id is not None:
        link = next((link for link in chain.links if link.snapshot_id == snapshot_id), None)
        if link is None:
            where = (
                "is main's head or older" if snapshot_id == chain.line.main_id else "is not on the branch after main"
            )
            raise PublishError(
                f"table {identifier}: snapshot {snapshot_id} {where}: main moves only forward, to a snapshot of branch "
                f"{branch} that descends from main's head {chain.line.main_id}; "
                f"`{icesink_command('branches', identifier)}` lists them",
                table=identifier,
            )
    elif force:
        link = chain.links[-1]
    else:
        audited = _audited(chain, config)
        if not audited:
            _refuse_failed_elsewhere(chain, config)
        link = chain.newest_publishable() if audited else chain.links[-1]
        if link is None:
            first = chain.links[0]
            audit = icesink_command("audit", identifier, options=("--branch", branch))
            raise PublishError(
                f"table {identifier}: no snapshot of branch {branch} after main has passed its audit (snapshot "
                f"{first.snapshot_id}: {audit_state(first)}); `{icesink_command('branches', identifier)}` shows "
                f"why. Fix the rows on the branch and `{audit}`, "
                "or publish anyway with --force",
                table=identifier,
            )
        return link
    if not force and not _audited(chain, config):
        _refuse_failed_elsewhere(chain, config, link)
    elif not force and not link.publishable:
        raise PublishError(
            f"table {identifier}: snapshot {link.snapshot_id} of branch {branch} has not passed its audit "
            f"({audit_state(link)}); publish it anyway with --force",
            table=identifier,
        )
    return link
