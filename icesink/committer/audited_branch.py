"""A table's branch that a stream writes and its publisher audits."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from icesink.audit.publish_policy import PublishSettings
    from icesink.audit.running import Check
    from icesink.table_ref import TableRef


@dataclass(frozen=True)
class AuditedBranch:
    """A table's branch that a stream writes, and the checks its snapshots must pass."""

    ref: TableRef
    checks: tuple[Check, ...] = ()
    settings: PublishSettings | None = None  # its own publish policy (None: the stream's)
    missing: tuple[str, ...] = ()  # checks the committer could not make again: nothing is audited until it can
    waiting: str | None = None  # why its checks are not known here: not audited until its stream meets it
    table_uuid: str | None = None  # the table the stream wrote or declared it for (None: whichever has the name)
