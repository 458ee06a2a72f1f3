"""Which staged checkpoints go into which snapshot."""

from __future__ import annotations

from collections.abc import Sequence

from icesink.catalog.checkpoints import CheckpointRow


def plan_snapshots(rows: Sequence[CheckpointRow]) -> list[list[CheckpointRow]]:
    """Group one job's pending checkpoints (in order) into snapshots.

    Appends commute, so any number of append-only checkpoints become one
    snapshot. Equality deletes apply only to data with a strictly lower
    sequence number, so a checkpoint carrying deletes must be a snapshot of
    its own, committed after every earlier checkpoint and before every later one.
    A snapshot moves one branch: a job restarted onto another branch starts another snapshot.
    """
    if any(row.has_deletes for row in rows):
        return [[row] for row in rows]
    plans: list[list[CheckpointRow]] = []
    for row in rows:
        if plans and plans[-1][-1].branch == row.branch:
            plans[-1].append(row)
        else:
            plans.append([row])
    return plans
