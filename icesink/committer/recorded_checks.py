"""The checks a branch is audited by when its stream is not there to give them: those its stream declared for the
committer daemon, or those its last audit ran, made again (``icesink audit``; a table of an atomic group its
stream has not met in this run)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from icesink.audit.running import Check, import_check
from icesink.catalog.audit_record import AuditRecord
from icesink.catalog.publishing_record import NOT_PUBLISHED, PublishingRecord
from icesink.errors import ConfigError
from icesink.table_ref import TableRef

if TYPE_CHECKING:
    from icesink.catalog.config import CatalogConfig


def recorded_checks(
    identifier: str, branch: str, config: CatalogConfig, job_id: str | None = None, table_uuid: str | None = None
) -> list[Check]:
    """The checks of the stream that writes the branch now, as it declared them for the committer daemon, or
    else those the branch's last audit ran, made again (built-ins from their arguments, functions imported); a
    :class:`ConfigError` naming the ones that cannot be. With ``job_id``, only what that job declared or ran;
    with ``table_uuid``, only what was declared for or audited of that table (not of one of the name dropped
    since)."""
    ref = TableRef(identifier, branch)
    owner = PublishingRecord(config).owners([ref]).get(ref)
    described_checks: Sequence[Mapping[str, object]]
    if owner is not None and (
        owner.policy == NOT_PUBLISHED
        or job_id not in (None, owner.job_id)
        or (table_uuid is not None and owner.of_another_table(table_uuid))  # an earlier table's, dropped since
    ):
        owner = None
    if owner is not None:
        described_checks = owner.checks  # a stream that took it over may check more than the last audit did
    else:
        audits = AuditRecord(config).of_branch(identifier, branch, table_uuid)
        entries = [e for e in audits.values() if job_id in (None, e.job_id)]
        if not entries:
            by = f" by job {job_id}" if job_id is not None else ""
            earlier = table_uuid is not None and bool(AuditRecord(config).of_branch(identifier, branch))
            earlier_table = "an earlier table of the name, dropped or renamed away since"
            of = f" of this table (those recorded are of {earlier_table})" if earlier else ""
            raise ConfigError(
                f"table {identifier}: no audit of branch {branch}{by}{of} is recorded, so there are no checks to run "
                "again; a stream with audit=[...] records them with its first audit",
                table=identifier,
            )
        described_checks = max(entries, key=lambda e: (e.audited_at, e.snapshot_id)).checks
    checks: list[Check] = []
    lost: list[str] = []
    for described in described_checks:
        check = import_check(dict(described))
        if check is None:
            lost.append(str(described.get("name") or described.get("check")))
        else:
            checks.append(check)
    if lost:
        raise ConfigError(
            f"table {identifier}: the checks {', '.join(lost)} of branch {branch} cannot be run outside their "
            "stream (a lambda, or a function no module can import): define them at the top level of an importable "
            f"module to audit from here, or fix the rows and let the stream audit them. Nothing was audited",
            table=identifier,
        )
    return checks
