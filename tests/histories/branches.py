"""Histories into a branch: every checkpoint commits to ``BRANCH``, is audited, and ``main`` follows it.

A ``poison`` step writes a checkpoint its audit must refuse (its snapshot says ``hist.poison``); a ``cure`` step
one that says ``hist.cure``. The check, :func:`no_poison_left`, fails a snapshot whose rows since its base hold
a poison not followed by a cure. The model of ``main`` is simple: it takes the branch's rows after every
checkpoint, except while a poison is not cured yet, when it keeps the rows it had.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from icesink.audit.inputs import AuditInput

BRANCH = "audit ✓"
POISON, CURE = "hist.poison", "hist.cure"


def no_poison_left(audit: AuditInput) -> list[str]:
    """A snapshot since the base says poison, and no later one (up to the audited one) says cure."""
    metadata = audit.table.metadata
    flags: list[str] = []
    snapshot = metadata.snapshot_by_id(audit.snapshot_id)
    while snapshot is not None and snapshot.snapshot_id != audit.base_snapshot_id:
        summary = snapshot.summary.additional_properties if snapshot.summary else {}
        flags += [flag for flag in (CURE, POISON) if summary.get(flag)]
        parent = snapshot.parent_snapshot_id
        snapshot = metadata.snapshot_by_id(parent) if parent is not None else None
    # Newest first: a cure seen before any poison cures what came before it.
    for flag in flags:
        if flag == CURE:
            return []
        return [f"snapshot {audit.snapshot_id}: a poisoned checkpoint since {audit.base_snapshot_id}, not cured"]
    return []
