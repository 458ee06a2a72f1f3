"""Which table field each DataFrame column of a checkpoint was written to.

A column renamed in the table by another tool keeps its field id; a stream
restarted after the rename must send its (unchanged) DataFrame column to the
same field. The schema id alone cannot say so (it names fields by their names
at that time, not by the DataFrame's), so each checkpoint records the mapping.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-23
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("icesink_checkpoints") as batch:
        batch.add_column(sa.Column("column_ids", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("icesink_checkpoints") as batch:
        batch.drop_column("column_ids")
