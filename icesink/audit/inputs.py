"""What a check is given: the rows a branch snapshot added, and where they are."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pyarrow as pa
    from pyiceberg.table import Table


@dataclass(frozen=True)
class AuditInput:
    """The one argument of every check (``audit=[check, ...]``).

    Attributes:
        added: the rows the snapshot added over ``base_snapshot_id``, as the snapshot has them (appended rows and
            the new images of updated rows; rows deleted again are not there), as a ``pyarrow.Table``.
        table: the pyiceberg ``Table`` as committed; ``snapshot_id`` is on its branch.
        snapshot_id: the branch snapshot being audited.
        checkpoint_id: the stream's checkpoint it holds (None: another tool's snapshot on the branch).
        identifier: the table's ``namespace.table``.
        branch: the branch the snapshot is on.
        base_snapshot_id: what ``added`` is compared with: the snapshot's parent, or, after an earlier snapshot
            since ``main`` failed, ``main``'s head (so a fix is audited with what it fixes).
        written_rows: rows the stream's tasks wrote for the checkpoints since the base (None where unknown).
        committed_rows: rows the snapshots since the base added to the table, by their summaries (the same
            checkpoints as ``written_rows``).
    """

    added: pa.Table
    table: Table
    snapshot_id: int
    checkpoint_id: int | None
    identifier: str = ""
    branch: str = "main"
    base_snapshot_id: int | None = None
    written_rows: int | None = None
    committed_rows: int | None = None
