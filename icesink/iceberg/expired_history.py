"""Whether a branch's oldest kept snapshot had ancestors that expiry removed.

pyiceberg's expiry clears the parent id of the oldest snapshot it keeps, so a walk down a branch ends at a
snapshot without a parent either way: the table's first, or one whose history is gone (what it changed, and any
marker or watermark recorded below it, cannot be told any more). A sequence number above 1 says which (format 2
and up). Where there is none to tell by (format 1, or the first snapshot after an upgrade to format 2, numbered
1), the snapshot's summary does: the table's first snapshot found it empty.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyiceberg.table.snapshots import Snapshot

# A snapshot's totals, and what it added and removed of each (Iceberg's summary keys).
_TOTALS = (
    ("total-data-files", "added-data-files", "deleted-data-files"),
    ("total-delete-files", "added-delete-files", "removed-delete-files"),
    ("total-records", "added-records", "deleted-records"),
)


def history_cut(oldest: Snapshot | None) -> bool:
    """Whether ``oldest``, a snapshot without a parent, had ancestors that expiry removed."""
    if oldest is None:
        return False
    return (oldest.sequence_number or 0) > 1 or _held_something_before(oldest)


def _held_something_before(snapshot: Snapshot) -> bool:
    """Whether the summary says the table held files or rows before ``snapshot`` (a total missing, or with counts
    that are not numbers, says nothing)."""
    summary = snapshot.summary.additional_properties if snapshot.summary is not None else {}
    for total, added, removed in _TOTALS:
        try:
            if total in summary and int(summary[total]) - int(summary.get(added, 0)) + int(summary.get(removed, 0)) > 0:
                return True
        except ValueError:
            continue
    return False
