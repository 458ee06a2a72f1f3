"""What each stream into a branch asks of publishing, for the committer daemon: its policy and its checks.

A stream with ``committer="daemon"`` records, per table and job, the branch it writes, how main follows it and the
checks (built-ins by their arguments, functions by where to import them); the daemon audits and publishes after
its commits as the inline committer would.

Revision ID: 0014
Revises: 0013
Create Date: 2026-11-27
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "icesink_publishing",
        sa.Column("catalog_name", sa.String(255), primary_key=True),
        sa.Column("table_identifier", sa.String(511), primary_key=True),
        sa.Column("job_id", sa.String(255), primary_key=True),
        sa.Column("branch", sa.String(255), nullable=False),
        sa.Column("atomic", sa.Boolean(), nullable=False),
        sa.Column("policy", sa.String(32), nullable=False),
        sa.Column("interval_seconds", sa.Float(), nullable=False),
        sa.Column("checks", sa.Text(), nullable=False),
        sa.Column("declared_at", sa.DateTime(timezone=True), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("icesink_publishing")
