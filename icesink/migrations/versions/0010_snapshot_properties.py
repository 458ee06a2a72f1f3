"""Values a checkpoint carries into its snapshot's summary.

A checkpoint may carry summary properties of its own (an event-time watermark, the outcome of a check) that
must reach the table in the same snapshot as its rows. They are staged with the checkpoint, in its ledger row,
so that whichever committer commits it (the stream's, a daemon, one started after a crash) writes them.

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-26
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("icesink_checkpoints") as batch:
        batch.add_column(sa.Column("snapshot_properties", sa.Text(), nullable=True))


_checkpoints = sa.table(
    "icesink_checkpoints",
    sa.column("table_identifier", sa.String()),
    sa.column("job_id", sa.String()),
    sa.column("checkpoint_id", sa.BigInteger()),
    sa.column("state", sa.String()),
    sa.column("snapshot_properties", sa.Text()),
)


def downgrade() -> None:
    # An earlier release would commit a staged checkpoint without the values it carries: refused while one waits.
    c = _checkpoints.c
    waiting = (
        op.get_bind()
        .execute(
            sa.select(c.table_identifier, c.job_id, c.checkpoint_id)
            .where(c.state == "staged", c.snapshot_properties.is_not(None))
            .limit(1)
        )
        .first()
    )
    if waiting is not None:
        from icesink.errors import LedgerFormatError

        raise LedgerFormatError(
            f"checkpoint {waiting.checkpoint_id} of job {waiting.job_id!r} for table {waiting.table_identifier!r} "
            "is staged with snapshot properties an earlier release would not commit: commit it first "
            "(`icesink committer run --once`), or discard it"
        )
    with op.batch_alter_table("icesink_checkpoints") as batch:
        batch.drop_column("snapshot_properties")
