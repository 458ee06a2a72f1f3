"""A checkpoint's files in its ledger row.

Staging no longer writes delta manifest files: each table's row holds its checkpoint's data and delete files in
``staged_files`` (versioned JSON) until the checkpoint is committed or discarded, and its ``delta_manifests``
value (version 2) says so, with how many files and rows they are. Rows staged before keep version 1 and commit as
they always did.

Downgrade: a staged row holding files in ``staged_files`` holds what no earlier release can find, so the
downgrade is refused while there is one (commit or discard it first). The other version-2 values become version
1: each part in the row is named by a placeholder path, its counts kept, and the row marked as cleaned, so that
the earlier release neither looks for nor deletes a file there.

Revision ID: 0018
Revises: 0017
Create Date: 2026-12-07
"""

from __future__ import annotations

import json
from typing import Any

import sqlalchemy as sa
from alembic import op

from icesink.errors import LedgerFormatError

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None

_checkpoints = sa.table(
    "icesink_checkpoints",
    sa.column("id", sa.BigInteger()),
    sa.column("delta_manifests", sa.Text()),
    sa.column("staged_files", sa.Text()),
    sa.column("manifests_deleted", sa.Boolean()),
    sa.column("state", sa.String()),
    sa.column("table_identifier", sa.String()),
    sa.column("job_id", sa.String()),
    sa.column("checkpoint_id", sa.BigInteger()),
)
IN_THE_ROW = "(staged in the ledger row)"  # a path no file has: the earlier release only shows it


def upgrade() -> None:
    with op.batch_alter_table("icesink_checkpoints") as batch:
        batch.add_column(sa.Column("staged_files", sa.Text()))


def downgrade() -> None:
    c = _checkpoints.c
    bind = op.get_bind()
    held = bind.execute(
        sa.select(c.table_identifier, c.job_id, c.checkpoint_id)
        .where(c.state == "staged", c.staged_files.is_not(None))
        .order_by(c.table_identifier, c.job_id, c.checkpoint_id)
        .limit(1)
    ).first()
    if held is not None:
        raise LedgerFormatError(
            f"checkpoint {held.checkpoint_id} of job {held.job_id!r} for table {held.table_identifier!r} is staged "
            "with its files in its ledger row, which releases before revision 0018 cannot read; commit it "
            "(`icesink committer run --once`) or discard it with this release before downgrading"
        )
    rows = bind.execute(sa.select(c.id, c.delta_manifests).where(c.delta_manifests.like('{"version":2,%')))
    back = [{"row_id": r.id, "value": _version_1(r.delta_manifests)} for r in rows]
    if back:
        update = (
            _checkpoints.update()
            .where(c.id == sa.bindparam("row_id"))
            .values(delta_manifests=sa.bindparam("value"), manifests_deleted=True)
        )
        bind.execute(update, back)
    with op.batch_alter_table("icesink_checkpoints") as batch:
        batch.drop_column("staged_files")


def _version_1(value: str) -> str:
    body: Any = json.loads(value)
    manifests = [
        m if "path" in m else {"content": m["content"], "path": IN_THE_ROW, "length": 0, **_counts(m)}
        for m in body["manifests"]
    ]
    return json.dumps({"version": 1, "manifests": manifests}, separators=(",", ":"))


def _counts(part: dict[str, Any]) -> dict[str, int]:
    return {"files": int(part["files"]), "records": int(part["records"])}
