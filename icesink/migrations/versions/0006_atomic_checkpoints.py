"""Checkpoints committed atomically across tables.

A stream writing several tables stages one row per table of a checkpoint, in
one transaction, marked ``atomic``: the committer then moves every table the
checkpoint touches to its new snapshot in one transaction of the catalog
database, or none. ``commit_id`` is the id those snapshots share (also in
their summaries, ``icesink.commit-id``).

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-24
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("icesink_checkpoints") as batch:
        batch.add_column(sa.Column("atomic", sa.Boolean(), nullable=False, server_default=sa.false()))
        batch.add_column(sa.Column("commit_id", sa.String(64), nullable=True))
    op.create_index("ix_icesink_checkpoints_job", "icesink_checkpoints", ["catalog_name", "job_id", "checkpoint_id"])


def downgrade() -> None:
    op.drop_index("ix_icesink_checkpoints_job", table_name="icesink_checkpoints")
    with op.batch_alter_table("icesink_checkpoints") as batch:
        batch.drop_column("commit_id")
        batch.drop_column("atomic")
