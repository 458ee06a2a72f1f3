"""The branch of the table a checkpoint commits to.

A stream may commit to a branch other than ``main`` (to audit what it wrote before readers of ``main`` see
it). The branch is the checkpoint's, staged with it, so that whichever committer commits it moves that
branch and looks for the job's marker along that branch's history. Rows staged before hold ``main``.

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-26
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None

_checkpoints = sa.table(
    "icesink_checkpoints",
    sa.column("table_identifier", sa.String()),
    sa.column("job_id", sa.String()),
    sa.column("checkpoint_id", sa.BigInteger()),
    sa.column("state", sa.String()),
    sa.column("branch", sa.String()),
)


def upgrade() -> None:
    with op.batch_alter_table("icesink_checkpoints") as batch:
        batch.add_column(sa.Column("branch", sa.String(255), nullable=False, server_default="main"))


def downgrade() -> None:
    # An earlier release would commit a staged checkpoint of another branch to main: refused while one waits.
    c = _checkpoints.c
    waiting = (
        op.get_bind()
        .execute(
            sa.select(c.table_identifier, c.job_id, c.checkpoint_id, c.branch)
            .where(c.state == "staged", c.branch != "main")
            .limit(1)
        )
        .first()
    )
    if waiting is not None:
        from icesink.errors import LedgerFormatError

        raise LedgerFormatError(
            f"checkpoint {waiting.checkpoint_id} of job {waiting.job_id!r} for table {waiting.table_identifier!r} "
            f"is staged for branch {waiting.branch!r}, which an earlier release would commit to main: commit it "
            "first (`icesink committer run --once`), or discard it"
        )
    with op.batch_alter_table("icesink_checkpoints") as batch:
        batch.drop_column("branch")
