"""When a checkpoint failed, and who discarded one, when and why.

``failed_at`` goes with the error a commit stopped on. An operator can
discard a checkpoint that can never commit (``icesink checkpoints discard``):
it stays in the ledger as ``discarded`` with who, when and why, and the next
snapshot of its job names it in ``icesink.discarded-checkpoints``.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-24
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("icesink_checkpoints") as batch:
        batch.add_column(sa.Column("failed_at", sa.DateTime(timezone=True), nullable=True))
        batch.add_column(sa.Column("discarded_at", sa.DateTime(timezone=True), nullable=True))
        batch.add_column(sa.Column("discarded_by", sa.String(255), nullable=True))
        batch.add_column(sa.Column("discard_reason", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("icesink_checkpoints") as batch:
        for column in ("discard_reason", "discarded_by", "discarded_at", "failed_at"):
            batch.drop_column(column)
