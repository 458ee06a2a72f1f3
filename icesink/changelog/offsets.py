"""A change stream's offsets, as the reading query's checkpoint keeps them: a snapshot of the table, versioned.

An offset names the snapshot whose changes were the last delivered; offsets written before versions existed
(``{"snapshot_id": N}``) are version 1, and a version this release does not know is refused, not guessed at.
"""

from __future__ import annotations

from typing import Any

from icesink.errors import ConfigError

OFFSET_VERSION = 1  # of the offsets kept in a reading query's checkpoint; those written without one are 1


def offset(snapshot_id: int) -> dict[str, Any]:
    """The offset after ``snapshot_id``'s changes, as the reading query's checkpoint keeps it."""
    return {"version": OFFSET_VERSION, "snapshot_id": snapshot_id}


def offset_snapshot(table: str, kept: dict[str, Any]) -> int:
    """The snapshot of an offset from a checkpoint (written by this release or an earlier one)."""
    version = kept.get("version", 1)
    if version != OFFSET_VERSION or not isinstance(kept.get("snapshot_id"), int):
        raise ConfigError(
            f"table {table}: the reading query's checkpoint holds an offset this release cannot read ({kept}, "
            f"version {version}; this release reads version {OFFSET_VERSION}): it was written by a later icesink. "
            "Read on with that release, or start the query anew with a new checkpoint location"
        )
    return int(kept["snapshot_id"])
