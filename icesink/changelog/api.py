"""``icesink.changes``: the changes between two snapshots of a table, as one Arrow table."""

from __future__ import annotations

import operator
import re
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, SupportsIndex

from icesink.changelog.modes import check_mode
from icesink.errors import ConfigError

if TYPE_CHECKING:
    import pyarrow as pa
    from pyiceberg.table import Table

    from icesink.catalog.config import CatalogConfig


def changes(
    table: str | Table,
    start_snapshot: int | None,
    end_snapshot: int | None = None,
    mode: str = "changelog",
    *,
    net_changes: bool = False,
    catalog: str | CatalogConfig | Mapping[str, str] | None = None,
    progress: Callable[[int, int], None] | None = None,
    branch: str | None = None,
    with_watermark: bool = False,
) -> pa.Table:
    """The changes committed to ``main`` (or ``branch``) after ``start_snapshot`` up to ``end_snapshot`` (its head).

    Args:
        table: ``namespace.table`` (looked up in ``catalog``) or a pyiceberg ``Table``.
        start_snapshot: the snapshot the changes come after (exclusive); None starts before the oldest
            snapshot kept (its rows as inserts when older history has expired).
        end_snapshot: the last snapshot whose changes are included. ``branch``: the changes along that branch.
        mode: ``"changelog"`` (every change, with ``_change_type``, ``_change_ordinal`` (the commit's
            sequence number), ``_commit_snapshot_id`` and ``_commit_timestamp``) or ``"append"`` (the
            rows each snapshot added, table columns only).
        net_changes: collapse each key's changes to its net change (needs the table's identifier fields).
        progress: called with (steps done, steps): one step per snapshot planned, one for reading the files.
        with_watermark: add ``_commit_watermark``, the watermark as of each change's commit (None: none recorded).
    """
    from icesink.catalog.config import resolve_catalog
    from icesink.catalog.loader import load_table, open_catalog
    from icesink.changelog.compute import compute_changes
    from icesink.changelog.plan import Planner
    from icesink.errors import SnapshotNotFoundError

    if isinstance(table, str):
        config = resolve_catalog(catalog)
        table = load_table(open_catalog(config), config, table)
    identifier = ".".join(table.name())
    check_mode(identifier, mode, net_changes, table)
    metadata = table.metadata
    start_snapshot = _snapshot_id(identifier, "start_snapshot", start_snapshot)
    end_snapshot = _snapshot_id(identifier, "end_snapshot", end_snapshot)
    for name, snapshot_id in (("start", start_snapshot), ("end", end_snapshot)):
        if snapshot_id is not None and metadata.snapshot_by_id(snapshot_id) is None:
            raise SnapshotNotFoundError(
                f"table {identifier} has no snapshot {snapshot_id} ({name} of the range); "
                f"`icesink snapshots list {identifier}` lists them"
            )
    end = end_snapshot if end_snapshot is not None else _head_id(table, identifier, branch)
    schema = table.schema()
    planner = Planner(table)
    parts = []
    snapshots = planner.snapshots(start_snapshot, end) if end is not None and end != start_snapshot else []
    report = progress or (lambda done, total: None)
    for done, snapshot in enumerate(snapshots):
        report(done, len(snapshots) + 1)
        opening = start_snapshot is None and done == 0  # from the oldest snapshot kept: its rows, as inserts
        parts += planner.state(snapshot) if opening else planner.changes(snapshot)
    report(len(snapshots), len(snapshots) + 1)  # the last step: reading the files the plan names
    changed = compute_changes(table, schema, parts, mode, net_changes, with_watermark)
    report(len(snapshots) + 1, len(snapshots) + 1)
    return changed


def _snapshot_id(identifier: str, name: str, value: object) -> int | None:
    """A snapshot id as given: an int, or its digits as text (as ``read_stream``'s ``starting`` takes them)."""
    if value is None:
        return None
    if isinstance(value, str) and re.fullmatch(r"-?[0-9]+", value.strip()):
        return int(value)
    if isinstance(value, SupportsIndex) and not isinstance(value, bool):
        return operator.index(value)  # an int, numpy's included (a value of a changelog's column)
    raise ConfigError(
        f"table {identifier}: {name}={value!r} is not a snapshot id (an int; `icesink snapshots list {identifier}` "
        "lists them)"
    )


def _head_id(table: Table, identifier: str, branch: str | None) -> int | None:
    """The head of ``branch`` (main's current snapshot without one); a clear error for a branch the table lacks."""
    metadata = table.metadata
    head = metadata.current_snapshot() if branch is None else metadata.snapshot_by_name(branch)
    if branch is not None and (head is None or branch not in metadata.refs):
        refs = ", ".join(sorted(metadata.refs)) or "none"
        raise ConfigError(f"table {identifier} has no branch or tag {branch!r} (it has: {refs})", table=identifier)
    return head.snapshot_id if head is not None else None
